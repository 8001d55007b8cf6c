package cluster

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

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

// TestSliceRows: rows [i, j) of records taken one after another, as slices that never
// cross a record's end.
func TestSliceRows(t *testing.T) {
	b := array.NewInt64Builder(memory.DefaultAllocator)
	defer b.Release()
	var recs []arrow.RecordBatch
	sc := arrow.NewSchema([]arrow.Field{{Name: "v", Type: arrow.PrimitiveTypes.Int64}}, nil)
	v := int64(0)
	for _, n := range []int{3, 1, 4} { // rows 0-2, 3, 4-7
		for range n {
			b.Append(v)
			v++
		}
		col := b.NewArray()
		recs = append(recs, array.NewRecordBatch(sc, []arrow.Array{col}, int64(n)))
		col.Release()
	}
	defer releaseAll(recs)
	for _, tc := range []struct {
		i, j  int
		parts [][]int64
	}{
		{0, 8, [][]int64{{0, 1, 2}, {3}, {4, 5, 6, 7}}},
		{1, 2, [][]int64{{1}}},
		{2, 5, [][]int64{{2}, {3}, {4}}},
		{3, 4, [][]int64{{3}}},
		{5, 8, [][]int64{{5, 6, 7}}},
		{4, 4, nil},
	} {
		got := sliceRows(recs, tc.i, tc.j)
		var parts [][]int64
		for _, r := range got {
			parts = append(parts, slices.Clone(r.Column(0).(*array.Int64).Int64Values()))
		}
		releaseAll(got)
		if !slices.EqualFunc(parts, tc.parts, slices.Equal) {
			t.Errorf("rows [%d, %d): %v, want %v", tc.i, tc.j, parts, tc.parts)
		}
	}
}
