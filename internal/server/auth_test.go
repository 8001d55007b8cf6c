package server

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/ledger"
)

// An unbound token sends as at most MaxGatewaysPerToken gateways, the ones the store held
// rows of at start included; beyond that a new gateway is 429 too_many_gateways, while a
// gateway already counted, another token and a token bound to globs go on as before.
func TestMaxGatewaysPerToken(t *testing.T) {
	const bound = "bound-token"
	e := newEnv(t, func(o *Options) {
		o.Tokens = append(o.Tokens, Token{Secret: bound, Gateways: []string{"web-*"}})
		o.MaxGatewaysPerToken = 3
		o.KnownGateways = []string{"old-1"}
	})
	steps := []struct {
		name, token, gateway string
		code                 int
		kind                 string
	}{
		{"a gateway the store knew", testToken, "old-1", 200, ""},
		{"second", testToken, "gw-a", 200, ""},
		{"third, at the cap", testToken, "gw-b", 200, ""},
		{"fourth", testToken, "gw-c", 429, "too_many_gateways"},
		{"one already counted", testToken, "gw-a", 200, ""},
		{"the refused one again", testToken, "gw-c", 429, "too_many_gateways"},
		{"a bad id is the header's 400, not the cap's", testToken, "-bad", 400, "bad_header"},
		{"another token counts its own", "other-token", "gw-x", 200, ""},
		{"and has the known ones too", "other-token", "gw-y", 200, ""},
		{"until its cap", "other-token", "gw-z", 429, "too_many_gateways"},
		{"a bound token is held to its globs only", bound, "web-1", 200, ""},
		{"however many", bound, "web-2", 200, ""},
		{"more", bound, "web-3", 200, ""},
		{"than the cap", bound, "web-4", 200, ""},
	}
	for i, st := range steps {
		seq := int64(i + 1)
		rp := e.do(request(seq, seq, rows(seq), func(r *http.Request) {
			r.Header.Set("Authorization", "Bearer "+st.token)
			r.Header.Set(headerGateway, st.gateway)
		}))
		if rp.code != st.code || rp.Error != st.kind {
			t.Fatalf("%s: got %d %q (%s), want %d %q", st.name, rp.code, rp.Error, rp.Message, st.code, st.kind)
		}
		if st.code == 429 {
			if ra := rp.header.Get("Retry-After"); ra != "300" {
				t.Errorf("%s: Retry-After %q, want 300", st.name, ra)
			}
			if !strings.Contains(rp.Message, st.gateway) || !strings.Contains(rp.Message, "max_gateways_per_token") {
				t.Errorf("%s: the refusal names neither the gateway nor the setting: %s", st.name, rp.Message)
			}
			held, err := e.led.Held(ledger.Key{Gateway: st.gateway, Dataset: "logs", Partition: "source=" + testSource}, []int64{seq})
			if err != nil || held[0] {
				t.Fatalf("%s: a refused chunk reached the ledger: %v %v", st.name, held, err)
			}
		}
	}
	if got := gather(t, e.reg)[`hyp_server_rejected_total{reason="too_many_gateways"}`]; got != 3 {
		t.Errorf("too_many_gateways counted %v times, want 3", got)
	}
}

// With no cap, an unbound token sends as any number of gateways.
func TestNoGatewayCap(t *testing.T) {
	e := newEnv(t, nil)
	for i := range 5 {
		seq := int64(i + 1)
		if rp := e.do(request(seq, seq, rows(seq), func(r *http.Request) { r.Header.Set(headerGateway, "gw-"+string(rune('a'+i))) })); rp.code != 200 {
			t.Fatalf("gateway %d: %d %s", i, rp.code, rp.Message)
		}
	}
}

// KnownGateways reads the gateways off a server cache's partitions, each once; a local
// partition names none.
func TestKnownGateways(t *testing.T) {
	got := KnownGateways([]cache.PartitionStatus{
		{Dataset: "logs", Partition: "gateway=gw-1/source=web"},
		{Dataset: "logs", Partition: "gateway=gw-1/source=db"},
		{Dataset: "metrics", Partition: "gateway=gw-2/source=web"},
		{Dataset: "logs", Partition: "source=local"},
	})
	if !slices.Equal(got, []string{"gw-1", "gw-2"}) {
		t.Fatalf("got %v", got)
	}
}
