package cache

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/hyp-project/hyp/internal/columns"
)

// TestFlushBounds flushes one log of interleaved partitions, with a column that appears
// mid-log, under limits that make the flush stream chunks, spill for its budget, run out of
// streams and commit in rounds, or find a partition held by compaction. Whatever path the
// rows take, every partition must hold each of its rows once, in seq order, with its values.
func TestFlushBounds(t *testing.T) {
	cases := []struct {
		name   string
		limits flushLimits
		hold   string // a partition whose rewrite lock is held during the flush
	}{
		{name: "defaults", limits: defaultFlushLimits},
		{name: "tiny chunks", limits: flushLimits{chunkRows: 7, chunkBytes: 1 << 30, chunkCells: 1 << 30, budget: 1 << 30, streams: 64, commits: 4}},
		{name: "chunk bytes", limits: flushLimits{chunkRows: 1 << 20, chunkBytes: 300, chunkCells: 1 << 30, budget: 1 << 30, streams: 64, commits: 4}},
		{name: "chunk cells", limits: flushLimits{chunkRows: 1 << 20, chunkBytes: 1 << 30, chunkCells: 40, budget: 1 << 30, streams: 64, commits: 4}},
		{name: "budget spills", limits: flushLimits{chunkRows: 1 << 20, chunkBytes: 1 << 30, chunkCells: 1 << 30, budget: 2000, streams: 64, commits: 4}},
		{name: "out of streams", limits: flushLimits{chunkRows: 5, chunkBytes: 1 << 30, chunkCells: 1 << 30, budget: 1500, streams: 1, commits: 1}},
		{name: "partition held", limits: flushLimits{chunkRows: 7, chunkBytes: 1 << 30, chunkCells: 1 << 30, budget: 1500, streams: 64, commits: 4}, hold: "p1"},
	}
	const parts, requests, perRequest = 4, 12, 9
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			c := openTest(t, dir)
			defer func() { c.Close(ctx) }()
			c.limits = tc.limits
			// A first flush creates the tables, so a partition can be held.
			for p := range parts {
				if _, err := c.Ingest("logs", fmt.Sprintf("p%d", p), body(0, 1, "")); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			next := make([]int, parts)
			for i := range next {
				next[i] = 1
			}
			for r := range requests {
				for p := range parts {
					extra := ""
					if r >= requests/2 {
						extra = fmt.Sprintf(`,"extra":"r%d"`, r)
					}
					if _, err := c.Ingest("logs", fmt.Sprintf("p%d", p), body(next[p], perRequest, extra)); err != nil {
						t.Fatal(err)
					}
					next[p] += perRequest
				}
			}
			if tc.hold != "" {
				c.tables.lookup("logs", "source="+tc.hold).rewrite.Lock()
			}
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			for p := range parts {
				checkPartition(t, c, fmt.Sprintf("source=p%d", p), next[p], 1+requests/2*perRequest)
			}
			// What the streams committed, max seq included, is what a restart finds.
			if tc.hold != "" {
				c.tables.lookup("logs", "source="+tc.hold).rewrite.Unlock()
				tc.hold = ""
			}
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			c = openTest(t, dir)
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			for p := range parts {
				checkPartition(t, c, fmt.Sprintf("source=p%d", p), next[p], 1+requests/2*perRequest)
			}
		})
	}
}

// checkPartition checks that a partition holds ids 0..n-1 in seq order, and that the rows
// from id extraFrom on carry the extra column the test body gave them.
func checkPartition(t *testing.T, c *Cache, part string, n, extraFrom int) {
	t.Helper()
	var ids []int64
	var lastSeq int64
	_, err := c.Scan(context.Background(), "logs", part, 0, 1<<62, func(rec arrow.RecordBatch) error {
		sc := rec.Schema()
		seq := rec.Column(sc.FieldIndices(columns.SeqColumn)[0]).(*array.Int64)
		id := rec.Column(sc.FieldIndices("id")[0]).(*array.Int64)
		var extra *array.String
		if ix := sc.FieldIndices("extra"); len(ix) > 0 {
			extra = rec.Column(ix[0]).(*array.String)
		}
		for r := range int(rec.NumRows()) {
			if seq.Value(r) <= lastSeq {
				return fmt.Errorf("seq %d after %d", seq.Value(r), lastSeq)
			}
			lastSeq = seq.Value(r)
			has := extra != nil && extra.IsValid(r) && strings.HasPrefix(extra.Value(r), "r")
			if want := id.Value(r) >= int64(extraFrom); has != want {
				return fmt.Errorf("id %d: extra present %v, want %v", id.Value(r), has, want)
			}
			ids = append(ids, id.Value(r))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", part, err)
	}
	if len(ids) != n {
		t.Fatalf("%s: %d rows, want %d", part, len(ids), n)
	}
	for i, id := range ids {
		if id != int64(i) {
			t.Fatalf("%s: row %d has id %d", part, i, id)
		}
	}
}

// TestFlushRecyclesStringBuffers: a flush's streamed chunks give their string buffers back
// to the partition, which keeps them for the next round until DropSpares lets them go.
func TestFlushRecyclesStringBuffers(t *testing.T) {
	ctx := context.Background()
	c := openTest(t, t.TempDir())
	defer c.Close(ctx)
	c.limits = flushLimits{chunkRows: 10, chunkBytes: 1 << 30, chunkCells: 1 << 30, budget: 1 << 30, streams: 64, commits: 4}
	next := 0
	for round := range 2 {
		for range 5 {
			if _, err := c.Ingest("logs", "p", body(next, 20, `,"extra":"rx"`)); err != nil {
				t.Fatal(err)
			}
			next += 20
		}
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		p := c.tables.lookup("logs", "source=p")
		if sp := p.spares["extra"]; sp == nil || len(sp) == 0 {
			t.Fatalf("round %d: no spare buffers kept for column extra (%v)", round, p.spares)
		}
	}
	checkPartition(t, c, "source=p", next, 0)
	// Every row's own text survived its buffer's reuse: msg is "row <id>".
	if _, err := c.Scan(ctx, "logs", "source=p", 0, 1<<62, func(rec arrow.RecordBatch) error {
		sc := rec.Schema()
		id := rec.Column(sc.FieldIndices("id")[0]).(*array.Int64)
		msg := rec.Column(sc.FieldIndices("msg")[0]).(*array.String)
		for r := range int(rec.NumRows()) {
			if want := fmt.Sprintf("row %d", id.Value(r)); msg.Value(r) != want {
				return fmt.Errorf("id %d: msg %q, want %q", id.Value(r), msg.Value(r), want)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c.DropSpares()
	if p := c.tables.lookup("logs", "source=p"); p.spares != nil {
		t.Fatalf("DropSpares kept %v", p.spares)
	}
}
