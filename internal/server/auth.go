package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/httpbody"
	"github.com/hyp-project/hyp/internal/partition"
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

// gatewayCap holds every token not bound to gateway globs to Options.MaxGatewaysPerToken
// distinct gateways: each gateway is partitions of its own on the server, so one token
// sending as thousands of made-up ids would otherwise make thousands of partitions. A token
// bound to globs is held to them instead.
//
// Which token sent a gateway's rows is not recorded with them, so the gateways the store
// held rows of when the server started (knownGateways) count against every unbound token:
// exact with one unbound token, and with several a token may be refused a new gateway while
// under the cap by its own count. A gateway counted is never refused.
type gatewayCap struct {
	max   int // 0: no cap
	log   *slog.Logger
	mu    sync.Mutex
	known map[string]bool
	sent  map[*token]map[string]bool // per unbound token, the gateways beyond known
	full  map[*token]bool            // tokens whose refusal was logged
}

// capRetryAfter is the Retry-After of a too_many_gateways refusal. The cap is not load: the
// chunk is refused until the operator raises the cap, so the sender keeps its rows and
// retries rarely instead of quarantining them.
const capRetryAfter = 300

func newGatewayCap(max int, known []string, log *slog.Logger) *gatewayCap {
	g := &gatewayCap{max: max, log: log, known: map[string]bool{}, sent: map[*token]map[string]bool{}, full: map[*token]bool{}}
	for _, gw := range known {
		g.known[gw] = true
	}
	return g
}

// admit counts the chunk's gateway against t, or refuses it with 429 too_many_gateways when
// t has sent as as many others as the cap allows. A missing or invalid gateway header is
// left to parseForward's 400 and counts for nothing.
func (g *gatewayCap) admit(t *token, h http.Header) *httpbody.Error {
	if g.max == 0 || t.gateways != nil {
		return nil
	}
	gw, err := single(h, headerGateway)
	if err != nil || partition.ValidateGateway(gw) != nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	sent := g.sent[t]
	if g.known[gw] || sent[gw] {
		return nil
	}
	if len(g.known)+len(sent) >= g.max {
		if !g.full[t] {
			g.full[t] = true
			g.log.Warn("server: a token reached server.max_gateways_per_token; chunks it sends as further gateways are refused with 429",
				"max_gateways_per_token", g.max, "refused_gateway", fmt.Sprintf("%.128q", gw))
		}
		return &httpbody.Error{Status: http.StatusTooManyRequests, Kind: "too_many_gateways", RetryAfter: capRetryAfter,
			Msg: fmt.Sprintf("this token already sends as %d gateways, the server's max_gateways_per_token; it refuses gateway %.128q until the cap is raised (or give the token gateway globs in the token file)", g.max, gw)}
	}
	if sent == nil {
		sent = map[string]bool{}
		g.sent[t] = sent
	}
	sent[gw] = true
	return nil
}

// KnownGateways are the gateways whose rows a server's cache holds (its partitions are
// gateway=<id>/source=<s>), for Options.KnownGateways.
func KnownGateways(st []cache.PartitionStatus) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range st {
		if gw, _, err := partition.Parse(p.Partition); err == nil && gw != "" && !seen[gw] {
			seen[gw] = true
			out = append(out, gw)
		}
	}
	return out
}
