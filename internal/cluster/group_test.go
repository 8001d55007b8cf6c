package cluster

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hyp-project/hyp/internal/cache"
)

func TestGroupDecide(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	l := limits{window: 250 * time.Millisecond, bytes: 1000}
	cases := []struct {
		name      string
		l         limits
		g         gathering
		now       time.Time
		wantStore bool
		wantWake  time.Time
	}{
		{name: "nothing gathered", l: l, now: t0},
		{name: "window open", l: l, g: gathering{chunks: 2, bytes: 10, opened: t0}, now: t0.Add(100 * time.Millisecond), wantWake: t0.Add(250 * time.Millisecond)},
		{name: "window over", l: l, g: gathering{chunks: 2, bytes: 10, opened: t0}, now: t0.Add(250 * time.Millisecond), wantStore: true},
		{name: "bytes reached", l: l, g: gathering{chunks: 3, bytes: 1000, opened: t0}, now: t0, wantStore: true},
		{name: "a store running waits for it", l: l, g: gathering{chunks: 3, bytes: 5000, opened: t0, storing: true}, now: t0.Add(time.Second)},
		{name: "no window stores at once", l: limits{bytes: 1000}, g: gathering{chunks: 1, bytes: 1, opened: t0}, now: t0, wantStore: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			store, wake := c.l.decide(c.g, c.now)
			if store != c.wantStore || !wake.Equal(c.wantWake) {
				t.Fatalf("decide = %v, %v; want %v, %v", store, wake, c.wantStore, c.wantWake)
			}
		})
	}
}

// TestGroupStoresChunksTogether: chunks of many gateways that reach a replica within its
// window are one stage, one file and one transaction; a resent chunk in the same group counts
// its rows as duplicates and a bad one fails alone, and the others are stored.
func TestGroupStoresChunksTogether(t *testing.T) {
	ctx := context.Background()
	c := openReplicas(t, 1, time.Second)[0]
	chunks := []Chunk{chunk("gw-a", span(1, 50)...), chunk("gw-b", span(1, 30)...), chunk("gw-c", span(1, 20)...),
		chunk("gw-a", span(1, 50)...)} // gw-a's first chunk again
	bad := chunk("gw-d", 1, 2)
	bad.Rows[1] = []byte(`{"id":`)
	var wg sync.WaitGroup
	sts := make([]Stored, len(chunks))
	errs := make([]error, len(chunks)+1)
	for i, ch := range chunks {
		wg.Go(func() { sts[i], errs[i] = c.Store(ctx, ch) })
	}
	wg.Go(func() { _, errs[len(chunks)] = c.Store(ctx, bad) })
	wg.Wait()
	var ie *cache.InputError
	if !errors.As(errs[len(chunks)], &ie) || ie.Line != 2 {
		t.Fatalf("the bad chunk: %v, want its line 2 refused", errs[len(chunks)])
	}
	accepted, dups := 0, 0
	for i, err := range errs[:len(chunks)] {
		if err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		accepted, dups = accepted+sts[i].Accepted, dups+sts[i].Duplicates
	}
	if accepted != 100 || dups != 50 {
		t.Fatalf("accepted %d, duplicates %d; want 100 and 50", accepted, dups)
	}
	var files, stages, spans int
	if err := c.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM hyp_staged), (SELECT count(DISTINCT stage) FROM hyp_staged),
		(SELECT count(*) FROM hyp_stage_spans)`).Scan(&files, &stages, &spans); err != nil {
		t.Fatal(err)
	}
	if files != 1 || stages != 1 || spans != 3 {
		t.Fatalf("%d files in %d stages with %d spans, want one file of one stage spanning the 3 gateways", files, stages, spans)
	}
	if err := c.CommitStaged(ctx); err != nil {
		t.Fatal(err)
	}
	checkTable(t, c, 100)
}
