package sink

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/watermark"
)

// concServer is a destination for ticks that export several partitions at once: a server
// that stores rows deduplicated by (partition, seq), as `hyp server`'s ledger does, and
// records every way the unit loops could misbehave under concurrency.
type concServer struct {
	mu         sync.Mutex
	inFlight   map[string]watermark.Unit // partition -> the unit being shipped
	stored     map[string]map[int64]int64
	acked      map[string][]watermark.Unit // per partition, the units acknowledged, in order
	violations []string
	overlapped chan struct{} // closed once units of two partitions were in flight together
	overlapOne sync.Once
	waited     atomic.Bool
	fail       func(call int) error // nil: every call succeeds
	calls      atomic.Int64
}

func newConcServer() *concServer {
	return &concServer{inFlight: map[string]watermark.Unit{}, stored: map[string]map[int64]int64{},
		acked: map[string][]watermark.Unit{}, overlapped: make(chan struct{})}
}

func (s *concServer) violate(format string, args ...any) {
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

func (s *concServer) ship(_ context.Context, p Part, u watermark.Unit, rows *unitRows) (int64, error) {
	seqs, ids, err := unitContents(rows)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	if prev, busy := s.inFlight[p.Partition]; busy {
		s.violate("%s: unit %d-%d shipped while unit %d-%d was in flight", p.Partition, u.First, u.Last, prev.First, prev.Last)
	}
	s.inFlight[p.Partition] = u
	if len(s.inFlight) >= 2 {
		s.overlapOne.Do(func() { close(s.overlapped) })
	}
	s.mu.Unlock()
	// The first call holds its unit until another partition's unit is in flight too, which
	// only concurrent unit loops can bring about.
	if !s.waited.Swap(true) {
		select {
		case <-s.overlapped:
		case <-time.After(10 * time.Second):
			s.mu.Lock()
			s.violate("no two partitions ever had a unit in flight together")
			s.mu.Unlock()
		}
	}
	call := int(s.calls.Add(1))
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.inFlight, p.Partition)
	if s.fail != nil {
		if err := s.fail(call); err != nil {
			return 0, err
		}
	}
	m := s.stored[p.Partition]
	if m == nil {
		m = map[int64]int64{}
		s.stored[p.Partition] = m
	}
	for i, seq := range seqs {
		if prev, ok := m[seq]; ok && prev != ids[i] {
			s.violate("%s: seq %d stored as id %d, sent again as id %d", p.Partition, seq, prev, ids[i])
		}
		m[seq] = ids[i]
	}
	if acked := s.acked[p.Partition]; len(acked) > 0 {
		if last := acked[len(acked)-1]; u.ID != last.ID && u.First <= last.Last {
			s.violate("%s: unit %d-%d shipped after unit %d-%d was acknowledged", p.Partition, u.First, u.Last, last.First, last.Last)
		}
	}
	s.acked[p.Partition] = append(s.acked[p.Partition], u)
	return int64(len(seqs)), nil
}

// concDriver builds a driver whose one sink ships to srv, four partitions at once.
func concDriver(t *testing.T, home string, c Cache, srv *concServer) *Driver {
	t.Helper()
	d, err := New(context.Background(), Options{Home: home, Cache: c, Sinks: map[string]config.Sink{"central": blobSink(home, "central")}})
	if err != nil {
		t.Fatal(err)
	}
	x := d.inst(t, "central")
	x.exp, x.lim = &unitExporter{srv}, limits{rows: 4, inFlight: 4}
	return d
}

// TestConcurrentPartitionsExactlyOnce: a tick exporting several partitions at once still
// ships each partition's units one at a time, in seq order, and every row arrives exactly
// once, across a crash in one partition's loop, a destination failure and the restarts
// after them.
func TestConcurrentPartitionsExactlyOnce(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	c := openCache(t, filepath.Join(home, "cache"), nil)
	defer c.Close(ctx)
	l := newLedger()
	const parts, rows = 8, 25
	for range 5 { // interleaved requests make each partition's seqs sparse
		for p := range parts {
			l.ingest(t, c, fmt.Sprintf("s%d", p), rows/5)
		}
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	srv := newConcServer()

	// A crash (kill -9) after the 6th unit is stored, in whichever partition's loop gets there.
	d := concDriver(t, home, c, srv)
	var shipped atomic.Int64
	d.inst(t, "central").hooks.afterShip = func(watermark.Key, watermark.Unit) {
		if shipped.Add(1) == 6 {
			panic(crashPanic{"after-ship"})
		}
	}
	if _, crashed := runCrashing(t, d, "central"); !crashed {
		t.Fatal("the crash hook never fired")
	}

	// The restarted daemon's destination goes down at its 5th call: the tick ends early.
	d = concDriver(t, home, c, srv)
	srv.mu.Lock()
	base := int(srv.calls.Load())
	srv.fail = func(call int) error {
		if call == base+5 {
			return &errDestination{errors.New("injected: central unavailable")}
		}
		return nil
	}
	srv.mu.Unlock()
	if res, _ := runCrashing(t, d, "central"); res[0].Status == "ok" {
		t.Fatalf("a tick whose destination failed reported ok: %+v", res[0])
	}
	srv.mu.Lock()
	srv.fail = nil
	srv.mu.Unlock()

	res, crashed := runCrashing(t, d, "central")
	if crashed || res[0].Status != "ok" {
		t.Fatalf("clean tick: %+v", res)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for _, v := range srv.violations {
		t.Error(v)
	}
	for p := range parts {
		part := fmt.Sprintf("source=s%d", p)
		var got []int64
		for _, id := range srv.stored[part] {
			got = append(got, id)
		}
		slices.Sort(got)
		if want := l.byPart[part]; !slices.Equal(got, want) {
			t.Errorf("%s: stored ids %v, want %v", part, got, want)
		}
	}
	for _, ps := range c.Status() {
		st, err := d.Store().Get(watermark.Key{Instance: "central", Dataset: ps.Dataset, Partition: ps.Partition})
		if err != nil || st.Seq != ps.HeadSeq || st.Intent != nil {
			t.Errorf("%s: watermark %+v (%v), want %d with no intent", ps.Partition, st, err, ps.HeadSeq)
		}
	}
}
