package sink

import (
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/forward"
	seqledger "github.com/hyp-project/hyp/internal/ledger"
	"github.com/hyp-project/hyp/internal/partition"
	"github.com/hyp-project/hyp/internal/server"
	"github.com/hyp-project/hyp/internal/watermark"
)

// TestForwardShipperDeclaresTheRowsSpan ships units to a real `hyp server` handler: the
// declared X-Hyp-Seq-Range is always the span of the rows sent, also for a unit whose
// recorded bounds are wider than the rows still cached, and re-sends chunked differently
// store nothing twice.
func TestForwardShipperDeclaresTheRowsSpan(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := openCache(t, filepath.Join(dir, "gw"), nil)
	defer c.Close(ctx)
	l := newLedger()
	// Interleaved sources make web's seqs sparse, as cache-global seqs are.
	web := l.ingest(t, c, "web", 4)
	l.ingest(t, c, "db", 3)
	web = append(web, l.ingest(t, c, "web", 4)...)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	seqs := l.seqs(web)

	sc := openCache(t, filepath.Join(dir, "central"), nil)
	defer sc.Close(ctx)
	led, err := seqledger.Open(filepath.Join(dir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	h, err := server.NewHandler(sc, led, server.Options{Tokens: []server.Token{{Secret: "tok"}}, MaxBodyBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var declared []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		declared = append(declared, r.Header.Get("X-Hyp-Seq-Range"))
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	client, err := forward.New(forward.Options{URLs: []string{srv.URL}, Token: "tok", Gateway: "gw-1"})
	if err != nil {
		t.Fatal(err)
	}
	f := &forwardShipper{client: client}
	x := &instance{cache: c}
	p := Part{Dataset: testDataset, Partition: partition.Name("web")}

	steps := []struct {
		name        string
		since, last int64 // the rows read: seq in (since, last]
		unit        watermark.Unit
		want        string
	}{
		{"first half", 0, seqs[3], watermark.Unit{From: 0, First: seqs[0], Last: seqs[3]}, rangeOf(seqs[0], seqs[3])},
		// An intent decided before its first rows were lost (a forced prune, a damaged
		// file): the range names the rows that are left.
		{"intent wider than its rows", seqs[1], seqs[5], watermark.Unit{From: 0, First: seqs[0], Last: seqs[5]}, rangeOf(seqs[2], seqs[5])},
		{"re-chunked re-send across both halves", seqs[2], seqs[7], watermark.Unit{From: seqs[2], First: seqs[3], Last: seqs[7]}, rangeOf(seqs[3], seqs[7])},
	}
	for _, st := range steps {
		rows, err := x.read(ctx, p, st.since, st.last, limits{rows: 1 << 62}, "")
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.ship(ctx, p, st.unit, rows)
		rows.release()
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		mu.Lock()
		got := declared[len(declared)-1]
		mu.Unlock()
		if got != st.want {
			t.Fatalf("%s: declared %s, want %s", st.name, got, st.want)
		}
	}
	if err := sc.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var stored int64
	for _, ps := range sc.Status() {
		stored += ps.Rows
	}
	if stored != int64(len(seqs)) {
		t.Fatalf("central stored %d rows, want %d", stored, len(seqs))
	}
}

func rangeOf(a, b int64) string { return strconv.FormatInt(a, 10) + "-" + strconv.FormatInt(b, 10) }

// TestForwardReplicaStatusAndMetrics: a forward sink whose first replica is down ships to
// the second, and says so in `sink status` (replica) and in its failover metrics.
func TestForwardReplicaStatusAndMetrics(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	c := openCache(t, filepath.Join(home, "cache"), nil)
	defer c.Close(ctx)
	newLedger().ingest(t, c, "web", 5)
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"accepted":5,"duplicates":0}`)
	}))
	defer live.Close()
	token := filepath.Join(home, "token")
	if err := os.WriteFile(token, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	d, err := New(ctx, Options{Home: home, Cache: c, Registerer: reg, Sinks: map[string]config.Sink{
		"central": {Type: "forward", URL: config.URLs{dead.URL, live.URL}, TokenFile: token, Schedule: "@every 1h", Compression: "none"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	replica := func() string {
		t.Helper()
		st, err := d.Status(ctx, "central")
		if err != nil || len(st) != 1 {
			t.Fatalf("Status = %+v, %v", st, err)
		}
		return st[0].Replica
	}
	if got := replica(); got != dead.URL {
		t.Errorf("replica before any unit %q, want the first url %q", got, dead.URL)
	}
	if res := runNow(t, d, "central"); res.Status != "ok" || res.Rows != 5 {
		t.Fatalf("run %+v", res)
	}
	if got := replica(); got != live.URL {
		t.Errorf("replica after failover %q, want %q", got, live.URL)
	}
	want := map[string]float64{
		"hyp_forward_failovers_total{sink=central}":                 1,
		"hyp_forward_replica_up{sink=central,url=" + dead.URL + "}": 0,
		"hyp_forward_replica_up{sink=central,url=" + live.URL + "}": 1,
	}
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "hyp_forward_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			got[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("forward metrics %v, want %v", got, want)
	}
}
