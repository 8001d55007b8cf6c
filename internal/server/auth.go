package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"
)

// Token is one accepted bearer token and the gateways it may send as.
type Token struct {
	Secret string
	// Gateways are path.Match globs over gateway ids; empty means any gateway. A token
	// bound to globs is answered 403 for a chunk sent as a gateway none of them matches, so
	// holding one gateway's token is no power over another gateway's ledger.
	Gateways []string
}

// LoadTokens reads the bearer tokens a server accepts: one per line, `TOKEN` or
// `TOKEN GATEWAY-GLOB[,GLOB...]`, blank lines and lines starting with '#' ignored. It fails
// when the file holds no token, when a glob is malformed or when a token appears twice (two
// lines would leave it ambiguous which gateways it may send as). Errors name the file and
// line, never a token.
func LoadTokens(path string) ([]Token, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	var tokens []Token
	lineOf := map[string]int{}
	for i, line := range strings.Split(string(data), "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		tok, err := parseTokenLine(t)
		if err != nil {
			return nil, fmt.Errorf("tokens file %s line %d: %w", path, i+1, err)
		}
		if first, dup := lineOf[tok.Secret]; dup {
			return nil, fmt.Errorf("tokens file %s line %d: the token of line %d again", path, i+1, first)
		}
		lineOf[tok.Secret] = i + 1
		tokens = append(tokens, tok)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("tokens file %s holds no token", path)
	}
	return tokens, nil
}

// parseTokenLine parses one non-blank, non-comment line of a tokens file.
func parseTokenLine(line string) (Token, error) {
	f := strings.Fields(line)
	if len(f) > 2 {
		return Token{}, errors.New("want TOKEN or TOKEN GATEWAY-GLOB[,GLOB...] (globs separated by commas, no spaces)")
	}
	tok := Token{Secret: f[0]}
	if err := checkToken(tok.Secret); err != nil {
		return Token{}, err
	}
	if len(f) == 2 {
		tok.Gateways = strings.Split(f[1], ",")
		if err := checkGlobs(tok.Gateways); err != nil {
			return Token{}, err
		}
	}
	return tok, nil
}

// checkGlobs refuses globs path.Match cannot parse, so a typo fails at startup instead of
// as 403s from every gateway the operator meant to allow.
func checkGlobs(globs []string) error {
	for _, g := range globs {
		if g == "" {
			return errors.New("empty gateway glob (a stray comma?)")
		}
		if _, err := path.Match(g, ""); err != nil {
			return fmt.Errorf("gateway glob %q: %w", g, err)
		}
	}
	return nil
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

// token is a configured token as the handler keeps it.
type token struct {
	sum      [sha256.Size]byte
	gateways []string // nil: any gateway
}

// hashTokens keeps only digests of the tokens. Comparing fixed-size digests in constant time
// hides the tokens' lengths too, which subtle.ConstantTimeCompare on the raw strings would
// leak.
func hashTokens(tokens []Token) ([]token, error) {
	if len(tokens) == 0 {
		return nil, errors.New("no bearer token configured")
	}
	out := make([]token, len(tokens))
	for i, t := range tokens {
		if err := checkToken(t.Secret); err != nil {
			return nil, fmt.Errorf("token %d: %w", i+1, err)
		}
		if err := checkGlobs(t.Gateways); err != nil {
			return nil, fmt.Errorf("token %d: %w", i+1, err)
		}
		out[i] = token{sum: sha256.Sum256([]byte(t.Secret)), gateways: slices.Clone(t.Gateways)}
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
// It returns the matching token, or nil.
func (h *handler) authorized(hd http.Header) *token {
	presented, ok := bearer(hd)
	sum := sha256.Sum256([]byte(presented))
	match := -1
	for i := range h.tokens {
		match = subtle.ConstantTimeSelect(subtle.ConstantTimeCompare(sum[:], h.tokens[i].sum[:]), i, match)
	}
	if !ok || match < 0 {
		return nil
	}
	return &h.tokens[match]
}

// allows reports whether t may send as gateway.
func (t *token) allows(gateway string) bool {
	if t.gateways == nil {
		return true
	}
	for _, g := range t.gateways {
		if ok, _ := path.Match(g, gateway); ok { // every glob was checked at load
			return true
		}
	}
	return false
}
