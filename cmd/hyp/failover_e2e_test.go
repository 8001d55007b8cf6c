package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// forwardReplicasYAML is a forward sink block whose url lists a central's replicas.
func forwardReplicasYAML(name, tokenFile string, urls ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %s:\n    type: forward\n    url:\n", name)
	for _, u := range urls {
		fmt.Fprintf(&b, "      - %q\n", u)
	}
	fmt.Fprintf(&b, "    token_file: %q\n    schedule: \"@every 1h\"\n", tokenFile)
	return b.String()
}

// killGate passes requests on to a server's proxy and, once armed, kills the server when
// a chosen request arrives, at a moment no request is in flight to it: every request
// passed on holds mu shared until its answer is written back, the kill holds it
// exclusively. So each unit either got the live server's full answer or never reached
// it (connection refused, which the proxy turns into a reset): no unit's outcome is
// unknown, and with replicas that share nothing exactly once is still exact.
type killGate struct {
	next http.Handler
	mu   sync.RWMutex

	armMu  sync.Mutex
	seen   int
	killAt int // the request (1-based, counted since the gate was made) that kills; 0: none
	kill   func()
}

// arm kills with kill when the after+1-th request from now arrives: after requests get
// through first.
func (g *killGate) arm(after int, kill func()) {
	g.armMu.Lock()
	defer g.armMu.Unlock()
	g.killAt, g.kill = g.seen+after+1, kill
}

func (g *killGate) requests() int {
	g.armMu.Lock()
	defer g.armMu.Unlock()
	return g.seen
}

func (g *killGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.armMu.Lock()
	g.seen++
	var kill func()
	if g.seen == g.killAt {
		kill, g.kill = g.kill, nil
	}
	g.armMu.Unlock()
	if kill != nil {
		g.mu.Lock()
		kill()
		g.mu.Unlock()
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	g.next.ServeHTTP(w, r)
}

// sinkReplica is the replica `sink status --json` says instance sends to next.
func sinkReplica(t *testing.T, home, instance string) string {
	t.Helper()
	r := runHyp(t, home, time.Minute, "sink", "status", instance, "--json")
	if r.code != 0 {
		t.Fatalf("sink status: %s", r)
	}
	var st struct {
		Sinks []struct {
			Replica string `json:"replica"`
		} `json:"sinks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Sinks) != 1 {
		t.Fatalf("sink status output (%v): %s", err, r)
	}
	return st.Sinks[0].Replica
}

// TestForwardFailoverBetweenReplicas runs a forward sink with `url: [A, B]` against two
// stand-alone `hyp server`s that share nothing. A is killed with SIGKILL in the middle of
// a run, between units; the sink fails over to B and stays there once A is back; when B
// stops, it fails back to A. Every acknowledged row is stored exactly once across A and
// B: the kills never leave a unit's outcome unknown (see killGate), which is what makes
// that exact without a shared ledger.
func TestForwardFailoverBetweenReplicas(t *testing.T) {
	t.Parallel()
	aHome, aAddr, tokens := newServerHome(t)
	bHome, bAddr, _ := newServerHome(t)
	a := startHypServer(t, aHome, aAddr, tokens)
	b := startHypServer(t, bHome, bAddr, tokens)
	gate := &killGate{next: &faultProxy{target: "http://" + aAddr, client: &http.Client{Timeout: 30 * time.Second}}}
	px := httptest.NewServer(gate)
	defer px.Close()
	aURL, bURL := px.URL, "http://"+bAddr

	home, addr := t.TempDir(), freePort(t)
	writeDaemonYAML(t, home, addr, "", forwardReplicasYAML("central", tokens, aURL, bURL))
	startHypDaemon(t, home, addr)
	f := newFeeder(0)
	// Six partitions: six units a run, up to four in flight at once.
	sources := []string{"s0", "s1", "s2", "s3", "s4", "s5"}
	type span struct{ lo, hi int }
	phase := func() span {
		t.Helper()
		lo := f.next
		for _, s := range sources {
			f.ingest(t, addr, "logs", s, 40)
		}
		requireRun(t, home, "central", f.take())
		return span{lo, f.next}
	}
	replicaIs := func(where, want string) {
		t.Helper()
		if got := sinkReplica(t, home, "central"); got != want {
			t.Fatalf("%s: sink status replica %q, want %q", where, got, want)
		}
	}

	healthy := phase()
	replicaIs("healthy", aURL)

	// A dies after two units of the run got its answer; the rest fail over to B.
	gate.arm(2, a.kill9)
	killed := phase()
	replicaIs("after A died", bURL)
	if n := metricSum(t, addr, "hyp_forward_failovers_total", `sink="central"`); n < 1 {
		t.Errorf("hyp_forward_failovers_total %v after a failover, want >= 1", n)
	}
	if up := metricSum(t, addr, "hyp_forward_replica_up", `url="`+aURL+`"`); up != 0 {
		t.Errorf("hyp_forward_replica_up for dead A = %v, want 0", up)
	}
	if up := metricSum(t, addr, "hyp_forward_replica_up", `url="`+bURL+`"`); up != 1 {
		t.Errorf("hyp_forward_replica_up for B = %v, want 1", up)
	}

	// A is back: the sink sticks to B, which answers.
	startHypServer(t, aHome, aAddr, tokens)
	before := gate.requests()
	sticky := phase()
	if n := gate.requests() - before; n != 0 {
		t.Errorf("%d requests went to A although B kept answering, want 0 (sticky)", n)
	}
	replicaIs("A back", bURL)

	// B stops while idle: the sink fails back to A.
	b.stop(t)
	back := phase()
	replicaIs("B stopped", aURL)

	got := serverIDs(t, aHome, []string{"logs"})["logs"]
	onA := map[int]bool{}
	for _, id := range got {
		onA[id] = true
	}
	onB := map[int]bool{}
	for _, id := range serverIDs(t, bHome, []string{"logs"})["logs"] {
		onB[id] = true
		got = append(got, id)
	}
	checkExactlyOnce(t, "A and B together", map[string][]int{"logs": got}, f.want)
	where := func(s span) (a, b int) {
		for id := s.lo; id < s.hi; id++ {
			if onA[id] {
				a++
			}
			if onB[id] {
				b++
			}
		}
		return a, b
	}
	for _, c := range []struct {
		name         string
		s            span
		wantA, wantB string // "all", "none" or "some"
	}{
		{"healthy", healthy, "all", "none"},
		{"A killed mid-run", killed, "some", "some"},
		{"A back (sticky to B)", sticky, "none", "all"},
		{"B stopped", back, "all", "none"},
	} {
		na, nb := where(c.s)
		n := c.s.hi - c.s.lo
		check := func(replica string, got int, want string) {
			ok := map[string]bool{"all": got == n, "none": got == 0, "some": got > 0 && got < n}[want]
			if !ok {
				t.Errorf("%s: %s holds %d of the phase's %d rows, want %s", c.name, replica, got, n, want)
			}
		}
		check("A", na, c.wantA)
		check("B", nb, c.wantB)
	}
}
