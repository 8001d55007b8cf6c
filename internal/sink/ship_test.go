package sink

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

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
		rows, err := x.read(ctx, p, st.since, st.last, limits{rows: 1 << 62})
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
