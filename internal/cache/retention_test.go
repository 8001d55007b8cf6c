package cache

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"
)

// pruneAll prunes every partition as node's protocol does, with the consumers standing
// where consumers says (nil: none) and the test standing in for whoever records losses.
func pruneAll(ctx context.Context, c *Cache, pol PrunePolicy, consumers func(dataset, partition string) []Consumer, dryRun bool) ([]PruneResult, error) {
	if pol.Now.IsZero() {
		pol.Now = c.Now()
	}
	var out []PruneResult
	for _, st := range c.Status() {
		r, err := func() (PruneResult, error) {
			pr, err := c.StartPrune(st.Dataset, st.Partition)
			if err != nil {
				return PruneResult{}, err
			}
			defer pr.Close()
			var cs []Consumer
			if consumers != nil && !pr.Empty() {
				cs = consumers(st.Dataset, st.Partition)
			}
			res, err := pr.Plan(ctx, pol, cs)
			if err != nil || dryRun || res.ThroughSeq == 0 {
				return res, err
			}
			pr.Recorded()
			_, err = pr.Delete(ctx)
			return res, err
		}()
		if err != nil {
			return out, err
		}
		if r.ThroughSeq > 0 || r.HeldRows > 0 {
			out = append(out, r)
		}
	}
	return out, nil
}

// rowList is a partition's rows in seq order, held in memory for plan.
type rowList []RowPos

func (r rowList) lastSeqBefore(_ context.Context, t int64) (int64, error) {
	var last int64
	for _, p := range r {
		if p.IngestedAt < t {
			last = p.Seq
		}
	}
	return last, nil
}

func (r rowList) rowsBetween(_ context.Context, since, until int64) (int64, error) {
	var n int64
	for _, p := range r {
		if p.Seq > since && p.Seq <= until {
			n++
		}
	}
	return n, nil
}

func (r rowList) firstAfter(_ context.Context, seq int64) (RowPos, bool, error) {
	i := sort.Search(len(r), func(i int) bool { return r[i].Seq > seq })
	if i == len(r) {
		return RowPos{}, false, nil
	}
	return r[i], true, nil
}

func (r rowList) lastThrough(_ context.Context, cut int64) (RowPos, bool, error) {
	i := sort.Search(len(r), func(i int) bool { return r[i].Seq > cut }) - 1
	if i < 0 {
		return RowPos{}, false, nil
	}
	return r[i], true, nil
}

// The plan alone: which cut retention, the consumers' floor and max_age make together, what
// it holds back and for whom, and exactly which rows each consumer loses.
func TestPlanDecidesTheCut(t *testing.T) {
	now := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	// Seqs 1-10 are 5 days old, 11-20 two days, 21-30 fresh; seq 15 is missing (a gap in
	// the seqs the partition was given).
	var rows rowList
	for s := int64(1); s <= 30; s++ {
		at := now
		switch {
		case s == 15:
			continue
		case s <= 10:
			at = now.Add(-5 * day)
		case s <= 20:
			at = now.Add(-2 * day)
		}
		rows = append(rows, RowPos{Seq: s, IngestedAt: at.UnixMicro()})
	}
	keep := func(d time.Duration) func(string) time.Duration { return func(string) time.Duration { return d } }
	three := []Consumer{{"central", 4}, {"archive", 7}, {"fresh", 20}}
	for _, tc := range []struct {
		name      string
		pol       PrunePolicy
		consumers []Consumer
		want      PruneResult
		wantAt    time.Time // the last deleted row's ingest time
	}{
		{name: "kept forever", pol: PrunePolicy{Retention: keep(0)}, consumers: three},
		{name: "retention alone", pol: PrunePolicy{Retention: keep(day)},
			want: PruneResult{ThroughSeq: 20, DeletedRows: 19}, wantAt: now.Add(-2 * day)},
		{name: "held at the lowest consumer", pol: PrunePolicy{Retention: keep(day), HoldForSinks: true}, consumers: three,
			want: PruneResult{ThroughSeq: 4, DeletedRows: 4, HeldRows: 15, HeldFor: []string{"archive", "central"}}, wantAt: now.Add(-5 * day)},
		{name: "a consumer with no position holds everything", pol: PrunePolicy{Retention: keep(day), HoldForSinks: true}, consumers: []Consumer{{"new", 0}},
			want: PruneResult{HeldRows: 19, HeldFor: []string{"new"}}},
		{name: "consumers past the cut hold nothing", pol: PrunePolicy{Retention: keep(day), HoldForSinks: true}, consumers: []Consumer{{"a", 25}, {"b", 20}},
			want: PruneResult{ThroughSeq: 20, DeletedRows: 19}, wantAt: now.Add(-2 * day)},
		{name: "not holding: the consumers lose what they had not read", pol: PrunePolicy{Retention: keep(day)}, consumers: three,
			want: PruneResult{ThroughSeq: 20, DeletedRows: 19, ForcedRows: 15, Losses: []Loss{{"central", 5, 20, 15}, {"archive", 8, 20, 12}}}, wantAt: now.Add(-2 * day)},
		{name: "max_age forces part of what is held", pol: PrunePolicy{Retention: keep(day), HoldForSinks: true, MaxAge: 3 * day}, consumers: three,
			want: PruneResult{ThroughSeq: 10, DeletedRows: 10, HeldRows: 9, HeldFor: []string{"archive", "central"}, ForcedRows: 6, Losses: []Loss{{"central", 5, 10, 6}, {"archive", 8, 10, 3}}}, wantAt: now.Add(-5 * day)},
		{name: "max_age overrides every holder", pol: PrunePolicy{Retention: keep(day), HoldForSinks: true, MaxAge: day}, consumers: three,
			want: PruneResult{ThroughSeq: 20, DeletedRows: 19, ForcedRows: 15, Losses: []Loss{{"central", 5, 20, 15}, {"archive", 8, 20, 12}}}, wantAt: now.Add(-2 * day)},
		{name: "max_age without retention", pol: PrunePolicy{Retention: keep(0), HoldForSinks: true, MaxAge: 3 * day}, consumers: []Consumer{{"s", 0}},
			want: PruneResult{ThroughSeq: 10, DeletedRows: 10, ForcedRows: 10, Losses: []Loss{{"s", 1, 10, 10}}}, wantAt: now.Add(-5 * day)},
		{name: "a loss starts at the first row there is", pol: PrunePolicy{Retention: keep(day), MaxAge: day}, consumers: []Consumer{{"s", 14}},
			want: PruneResult{ThroughSeq: 20, DeletedRows: 19, ForcedRows: 5, Losses: []Loss{{"s", 16, 20, 5}}}, wantAt: now.Add(-2 * day)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, last, err := plan(context.Background(), rows, "logs", tc.pol, tc.consumers, now)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("plan %+v, want %+v", got, tc.want)
			}
			if got.ThroughSeq > 0 && (last.Seq != min(got.ThroughSeq, rows[len(rows)-1].Seq) || !last.Time().Equal(tc.wantAt)) {
				t.Fatalf("last deleted row %+v, want seq %d at %v", last, got.ThroughSeq, tc.wantAt)
			}
		})
	}
}

// A Pruning deletes only what it planned, and only once its caller said the plan's losses
// are recorded; meanwhile it keeps compaction and repair out so the plan stays true.
func TestPruningDeletesOnlyARecordedPlan(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC)
	clock := now.Add(-5 * 24 * time.Hour)
	c := openAt(t, &clock)
	defer c.Close(ctx)
	old := ingestN(t, c, "a", 0, 10)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	clock = now
	ingestN(t, c, "a", 10, 10)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	pol := PrunePolicy{Retention: func(string) time.Duration { return 0 }, HoldForSinks: true, MaxAge: 24 * time.Hour}
	consumers := []Consumer{{"s", old.FirstSeq + 2}}

	pr, err := c.StartPrune("logs", "source=a")
	if err != nil {
		t.Fatal(err)
	}
	if pr.p.rewrite.TryLock() {
		t.Fatal("a pruning leaves the partition open to compaction")
	}
	if _, err := pr.Delete(ctx); err == nil {
		t.Fatal("deleted without a plan")
	}
	plan, err := pr.Plan(ctx, pol, consumers)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Loss{{"s", old.FirstSeq + 3, old.LastSeq, 7}}; plan.ThroughSeq != old.LastSeq || !slices.Equal(plan.Losses, want) {
		t.Fatalf("plan %+v, want through %d losing %+v", plan, old.LastSeq, want)
	}
	if _, err := pr.Delete(ctx); !errors.Is(err, ErrLossesNotRecorded) {
		t.Fatalf("delete of unrecorded losses: %v", err)
	}
	assertIDs(t, c, "a", 20)
	// Recording belongs to the plan it was for: planning again asks for it again.
	pr.Recorded()
	if _, err := pr.Plan(ctx, pol, consumers); err != nil {
		t.Fatal(err)
	}
	if _, err := pr.Delete(ctx); !errors.Is(err, ErrLossesNotRecorded) {
		t.Fatalf("delete of a new plan's unrecorded losses: %v", err)
	}
	assertIDs(t, c, "a", 20)
	pr.Recorded()
	through, err := pr.Delete(ctx)
	if err != nil || through != old.LastSeq {
		t.Fatalf("delete: pruned through %d, %v; want %d", through, err, old.LastSeq)
	}
	assertIDs(t, c, "a", 10)
	if _, err := pr.Delete(ctx); err == nil {
		t.Fatal("deleted twice")
	}
	if _, err := pr.Plan(ctx, pol, consumers); err == nil {
		t.Fatal("planned after the delete")
	}
	pr.Close()
	pr.Close()
	if st := c.Status()[0]; st.PrunedThrough != old.LastSeq {
		t.Fatalf("status pruned through %d, want %d", st.PrunedThrough, old.LastSeq)
	}
	// Closed, the partition is compaction's again.
	if res, err := c.Compact(ctx, true, nil); err != nil || len(res) != 1 {
		t.Fatalf("compaction after the pruning: %+v %v", res, err)
	}
	if _, err := c.StartPrune("logs", "source=none"); !errors.Is(err, ErrNoPartition) {
		t.Fatalf("pruning a partition the cache does not hold: %v", err)
	}
}
