package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// LoadTokens reads the bearer tokens a server accepts: one per line, blank lines and lines
// starting with '#' ignored. It fails when the file holds no token. Errors name the file and
// line, never a token.
func LoadTokens(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	var tokens []string
	for i, line := range strings.Split(string(data), "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if err := checkToken(t); err != nil {
			return nil, fmt.Errorf("tokens file %s line %d: %w", path, i+1, err)
		}
		tokens = append(tokens, t)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("tokens file %s holds no token", path)
	}
	return tokens, nil
}

// checkToken refuses tokens that no Authorization header could carry intact, so a typo in
// the tokens file fails at startup instead of as 401s from every gateway.
func checkToken(t string) error {
	if t == "" {
		return errors.New("empty token")
	}
	for i := 0; i < len(t); i++ {
		if t[i] <= ' ' || t[i] == 0x7f {
			return errors.New("a token may not contain whitespace or control characters")
		}
	}
	return nil
}

// hashTokens keeps only digests of the tokens. Comparing fixed-size digests in constant time
// hides the tokens' lengths too, which subtle.ConstantTimeCompare on the raw strings would
// leak.
func hashTokens(tokens []string) ([][sha256.Size]byte, error) {
	if len(tokens) == 0 {
		return nil, errors.New("no bearer token configured")
	}
	out := make([][sha256.Size]byte, len(tokens))
	for i, t := range tokens {
		if err := checkToken(t); err != nil {
			return nil, fmt.Errorf("token %d: %w", i+1, err)
		}
		out[i] = sha256.Sum256([]byte(t))
	}
	return out, nil
}

// bearer extracts the token of an `Authorization: Bearer <token>` header (scheme
// case-insensitive, RFC 7235).
func bearer(h http.Header) (string, bool) {
	vs := h.Values("Authorization")
	if len(vs) != 1 {
		return "", false
	}
	scheme, token, ok := strings.Cut(vs[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// authorized compares the presented token with every configured one, without stopping at a
// match, so the time taken says nothing about which token matched or how close a guess was.
func (h *handler) authorized(hd http.Header) bool {
	token, ok := bearer(hd)
	sum := sha256.Sum256([]byte(token))
	match := 0
	for i := range h.tokens {
		match |= subtle.ConstantTimeCompare(sum[:], h.tokens[i][:])
	}
	return ok && match == 1
}
