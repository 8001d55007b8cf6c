package cache

import (
	"context"
	"testing"
	"time"
)

// TestPositions answers every position question across file and row-group boundaries, and
// after retention removed the front of the partition, from the pruned mark.
func TestPositions(t *testing.T) {
	ctx := context.Background()
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clock := base
	c := openAt(t, &clock)
	defer c.Close(ctx)
	// Three flushes of 100 rows, an hour apart: three files.
	var batches []Result
	for i := range 3 {
		clock = base.Add(time.Duration(i) * time.Hour)
		batches = append(batches, ingestN(t, c, "a", i*100, 100))
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	first, last := batches[0].FirstSeq, batches[2].LastSeq
	ps, err := c.Positions("logs", "source=a")
	if err != nil {
		t.Fatal(err)
	}
	if ps.Head != last || ps.PrunedThrough != 0 {
		t.Fatalf("head %d pruned %d", ps.Head, ps.PrunedThrough)
	}
	for _, tc := range []struct {
		since, until, want int64
	}{
		{0, last, 300},
		{first - 1, last, 300},
		{first + 49, last, 250},        // inside the first file
		{first + 49, first + 149, 100}, // across a file boundary
		{batches[1].LastSeq, last, 100},
		{last, last + 10, 0},
		{first + 10, first + 10, 0},
	} {
		got, err := ps.Rows(ctx, tc.since, tc.until)
		if err != nil || got != tc.want {
			t.Errorf("Rows(%d, %d) = %d, %v; want %d", tc.since, tc.until, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		after   int64
		want    int64
		wantAt  time.Time
		present bool
	}{
		{0, first, base, true},
		{first + 49, first + 50, base, true},
		{batches[0].LastSeq, batches[1].FirstSeq, base.Add(time.Hour), true},
		{batches[1].FirstSeq + 3, batches[1].FirstSeq + 4, base.Add(time.Hour), true},
		{last, 0, time.Time{}, false},
	} {
		pos, ok, err := ps.FirstAfter(ctx, tc.after)
		if err != nil || ok != tc.present || (ok && (pos.Seq != tc.want || !pos.Time().Equal(tc.wantAt))) {
			t.Errorf("FirstAfter(%d) = %+v %v %v; want %d at %v", tc.after, pos, ok, err, tc.want, tc.wantAt)
		}
	}
	for _, tc := range []struct {
		at   time.Time
		want int64
	}{
		{base, 0},
		{base.Add(time.Minute), batches[0].LastSeq},
		{base.Add(time.Hour), batches[0].LastSeq},
		{base.Add(90 * time.Minute), batches[1].LastSeq},
		{base.Add(24 * time.Hour), last},
	} {
		got, err := ps.SeqBefore(ctx, tc.at)
		if err != nil || got != tc.want {
			t.Errorf("SeqBefore(%v) = %d, %v; want %d", tc.at, got, err, tc.want)
		}
	}
	ps.Release()

	// max_age removes the first file although a consumer still needs it.
	clock = base.Add(3 * time.Hour)
	if _, err := pruneAll(ctx, c, PrunePolicy{
		Retention: func(string) time.Duration { return 0 },
		MaxAge:    2 * time.Hour, // everything ingested before base+1h
	}, func(string, string) []Consumer { return []Consumer{{"s", 0}} }, false); err != nil {
		t.Fatal(err)
	}
	ps, err = c.Positions("logs", "source=a")
	if err != nil {
		t.Fatal(err)
	}
	if ps.PrunedThrough != batches[0].LastSeq || !ps.PrunedAt.Equal(base) {
		t.Fatalf("pruned mark %d at %v", ps.PrunedThrough, ps.PrunedAt)
	}
	// Before the pruned rows' time the answer is unknown and lies below the mark; after
	// it, the mark itself answers when no cached row is earlier.
	for _, tc := range []struct {
		at   time.Time
		want int64
	}{
		{base, 0},
		{base.Add(time.Minute), batches[0].LastSeq},
		{base.Add(90 * time.Minute), batches[1].LastSeq},
	} {
		got, err := ps.SeqBefore(ctx, tc.at)
		if err != nil || got != tc.want {
			t.Errorf("after prune SeqBefore(%v) = %d, %v; want %d", tc.at, got, err, tc.want)
		}
	}
	if n, _ := ps.Rows(ctx, 0, last); n != 200 {
		t.Errorf("rows after prune %d", n)
	}
	ps.Release()
	// Compaction carries the mark into the new generation.
	if _, err := c.Compact(ctx, true, nil); err != nil {
		t.Fatal(err)
	}
	ps, err = c.Positions("logs", "source=a")
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Release()
	if ps.PrunedThrough != batches[0].LastSeq || !ps.PrunedAt.Equal(base) || ps.Head != last {
		t.Fatalf("after compaction: pruned %d at %v head %d", ps.PrunedThrough, ps.PrunedAt, ps.Head)
	}
	if _, err := c.Positions("logs", "source=nope"); err == nil {
		t.Fatal("positions of a missing partition")
	}
}

// TestPositionsAcrossRowGroups checks every answer at and around row-group boundaries of
// one file holding three row groups, against what the rows are known to be.
func TestPositionsAcrossRowGroups(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Hour)
	clock := t0
	c := openAt(t, &clock)
	defer c.Close(ctx)
	const firstBatch, total = 70_000, 150_000
	ingestN(t, c, "a", 0, firstBatch)
	clock = t1
	ingestN(t, c, "a", firstBatch, total-firstBatch)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ps, err := c.Positions("logs", "source=a")
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Release()
	if len(ps.files) != 1 || ps.Head != total {
		t.Fatalf("want one file up to seq %d, got %d files, head %d", total, len(ps.files), ps.Head)
	}
	if err := withInternal(ps.files[0].Path, func(fi *internalFile) error {
		if len(fi.groups) != 3 || !fi.groups[1].known {
			t.Fatalf("want three row groups with statistics, got %+v", fi.groups)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	timeOf := func(seq int64) time.Time {
		if seq <= firstBatch {
			return t0
		}
		return t1
	}
	probes := []int64{0, 1, rowGroupRows - 1, rowGroupRows, rowGroupRows + 1, firstBatch, 2*rowGroupRows - 1, 2 * rowGroupRows, 140_000, total - 1, total}
	for _, since := range probes {
		for _, until := range probes {
			want := max(min(until, total)-since, 0)
			if got, err := ps.Rows(ctx, since, until); err != nil || got != want {
				t.Errorf("Rows(%d, %d) = %d, %v; want %d", since, until, got, err, want)
			}
		}
		pos, ok, err := ps.FirstAfter(ctx, since)
		if since == total {
			if ok || err != nil {
				t.Errorf("FirstAfter(head) = %+v %v %v", pos, ok, err)
			}
		} else if err != nil || !ok || pos.Seq != since+1 || !pos.Time().Equal(timeOf(since+1)) {
			t.Errorf("FirstAfter(%d) = %+v %v %v", since, pos, ok, err)
		}
		if since > 0 {
			pos, ok, err := lastThrough(ctx, ps.files, since)
			if err != nil || !ok || pos.Seq != since || !pos.Time().Equal(timeOf(since)) {
				t.Errorf("lastThrough(%d) = %+v %v %v", since, pos, ok, err)
			}
		}
	}
	for _, tc := range []struct {
		at   time.Time
		want int64
	}{
		{t0, 0},
		{t0.Add(time.Microsecond), firstBatch},
		{t1, firstBatch},
		{t1.Add(time.Microsecond), total},
		{t1.Add(time.Nanosecond), total}, // a row stamped at t1 is before t1+1ns
		{t1.Add(-time.Nanosecond), firstBatch},
	} {
		if got, err := ps.SeqBefore(ctx, tc.at); err != nil || got != tc.want {
			t.Errorf("SeqBefore(%v) = %d, %v; want %d", tc.at, got, err, tc.want)
		}
	}
}
