package server

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/hyp-project/hyp/internal/ledger"
	"github.com/hyp-project/hyp/internal/partition"
)

func withIncarnation(id string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set(headerIncarnation, id) }
}

// A reinstalled machine starts its seqs at 1 again under a new incarnation: its rows are new
// rows, never duplicates of its earlier life's, and each incarnation still dedupes its own.
func TestIncarnationsAreSeparateSeqSpaces(t *testing.T) {
	e := newEnv(t, nil)
	e.send(1, 3, seqRange(1, 3), 3, 0) // an older sender: incarnation ""
	for _, inc := range []string{"aaaa", "bbbb"} {
		for _, want := range []struct{ accepted, duplicates int }{{3, 0}, {0, 3}} {
			rp := e.do(request(1, 3, rows(1, 2, 3), withIncarnation(inc)))
			if rp.code != http.StatusOK || rp.Accepted != want.accepted || rp.Duplicates != want.duplicates {
				t.Fatalf("incarnation %s: %d accepted=%d duplicates=%d %s; want accepted=%d duplicates=%d",
					inc, rp.code, rp.Accepted, rp.Duplicates, rp.Message, want.accepted, want.duplicates)
			}
		}
	}
	e.send(1, 3, seqRange(1, 3), 0, 3) // "" still remembers its own
	// Each incarnation's rows are stored once, and carry it (the "" ones carry nothing).
	got := map[string][]string{}
	for _, r := range stored(t, e.cache) {
		got[r[originIncarnationColumn]] = append(got[r[originIncarnationColumn]], r[originSeqColumn])
	}
	want := []string{"1", "2", "3"}
	if len(got) != 3 || !slices.Equal(got[""], want) || !slices.Equal(got[`"aaaa"`], want) || !slices.Equal(got[`"bbbb"`], want) {
		t.Fatalf("origin seqs by incarnation column %v, want %v for each of \"\", aaaa and bbbb", got, want)
	}
	incs, err := e.led.Incarnations()
	if err != nil {
		t.Fatal(err)
	}
	if len(incs) != 3 {
		t.Fatalf("incarnations %+v, want 3", incs)
	}
	for _, inc := range incs {
		if inc.Gateway != testGateway || inc.Rows != 3 || inc.FirstSeen.IsZero() || inc.LastSeen.Before(inc.FirstSeen) {
			t.Fatalf("incarnation %+v", inc)
		}
	}
}

func TestIncarnationHeaderIsValidated(t *testing.T) {
	e := newEnv(t, nil)
	for _, bad := range []string{"", "has space", "-lead", string(make([]byte, 200))} {
		rp := e.do(request(1, 1, rows(1), withIncarnation(bad)))
		if rp.code != http.StatusBadRequest || rp.Error != "bad_header" {
			t.Fatalf("incarnation %q: %d %s", bad, rp.code, rp.Error)
		}
	}
	rp := e.do(request(1, 1, rows(1), func(r *http.Request) {
		r.Header.Add(headerIncarnation, "a")
		r.Header.Add(headerIncarnation, "b")
	}))
	if rp.code != http.StatusBadRequest || rp.Error != "bad_header" {
		t.Fatalf("two incarnation headers: %d %s", rp.code, rp.Error)
	}
	if got := originSeqs(t, e.cache); len(got) != 0 {
		t.Fatalf("stored %v", got)
	}
}

// A crash between the cache append and the ledger Record is repaired under each row's own
// incarnation, read back from the rows.
func TestRecoverKeepsIncarnations(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	name := partition.GatewayName(testGateway, testSource)
	for _, inc := range []string{"", "cafe01"} {
		ch, rerr := parseRows(rows(seqRange(1, 4)...), 1, 4, cacheRows, inc)
		if rerr != nil {
			t.Fatal(rerr.Msg)
		}
		if _, err := e.cache.IngestPartitionRows("logs", name, ch.rows, len(ch.seqs)); err != nil {
			t.Fatal(err)
		}
	}
	if err := Recover(ctx, e.cache, e.led); err != nil {
		t.Fatal(err)
	}
	for _, inc := range []string{"", "cafe01"} {
		k := ledger.Key{Gateway: testGateway, Incarnation: inc, Dataset: "logs", Partition: partition.Name(testSource)}
		held, err := e.led.Held(k, seqRange(1, 5))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(held, []bool{true, true, true, true, false}) {
			t.Fatalf("incarnation %q holds %v after Recover", inc, held)
		}
	}
	// Another incarnation's seqs 1-4 are still new.
	rp := e.do(request(1, 4, rows(seqRange(1, 4)...), withIncarnation("beef02")))
	if rp.code != http.StatusOK || rp.Accepted != 4 {
		t.Fatalf("a third incarnation: %d accepted=%d", rp.code, rp.Accepted)
	}
	rp = e.do(request(1, 4, rows(seqRange(1, 4)...), withIncarnation("cafe01")))
	if rp.code != http.StatusOK || rp.Duplicates != 4 {
		t.Fatalf("a recovered incarnation's re-send: %d duplicates=%d", rp.code, rp.Duplicates)
	}
}

func TestIncarnationWatch(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := newIncarnationWatch(func() time.Time { return now })
	see := func(id string, concurrent bool) bool {
		return w.note(ledger.Sighting{Incarnation: ledger.Incarnation{Gateway: "gw", ID: id}, Concurrent: concurrent})
	}
	if see("a", false) || see("b", false) {
		t.Fatal("a plain sighting was reported as newly concurrent")
	}
	if !see("a", true) {
		t.Fatal("the first concurrent sighting was not reported")
	}
	now = now.Add(time.Minute)
	if see("a", true) {
		t.Fatal("a repeated concurrent sighting within the window was reported again")
	}
	if active, concurrent := w.counts(); active != 2 || concurrent != 1 {
		t.Fatalf("active %d concurrent %d, want 2 and 1", active, concurrent)
	}
	now = now.Add(2 * time.Hour)
	if active, concurrent := w.counts(); active != 0 || concurrent != 0 {
		t.Fatalf("after the window: active %d concurrent %d", active, concurrent)
	}
}
