package sink

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/partition"
	"github.com/hyp-project/hyp/internal/promreg"
	"github.com/hyp-project/hyp/internal/watermark"
)

// threeBatches ingests 4, 5 and 6 rows into source a an hour apart, starting at the
// returned time, and exports them all.
func threeBatches(t *testing.T, e *env) (start time.Time, ids [][]int64) {
	t.Helper()
	start = e.clk.Now()
	for i, n := range []int{4, 5, 6} {
		if i > 0 {
			e.clk.Advance(time.Hour)
		}
		ids = append(ids, e.l.ingest(t, e.c, "a", n))
	}
	if res := runNow(t, e.d, "s1"); res.Status != "ok" || res.Rows != 15 {
		t.Fatalf("run: %+v", res)
	}
	return start, ids
}

func ptr[T any](v T) *T { return &v }

func TestRewindTargets(t *testing.T) {
	e := newEnv(t, 100)
	start, ids := threeBatches(t, e)
	seq := func(id int64) int64 { return e.l.rows[id].seq }
	head := seq(ids[2][5])
	cases := []struct {
		name     string
		target   Target
		to       int64
		toExport int64
		toSkip   int64
	}{
		{"seq inside the second batch", Target{Seq: ptr(seq(ids[1][2]))}, seq(ids[1][2]), 8, 0},
		{"seq above the head", Target{Seq: ptr(head + 1000)}, head, 0, 0},
		{"seq zero", Target{Seq: ptr(int64(0))}, 0, 15, 0},
		{"time before everything", Target{Time: ptr(start.Add(-time.Minute))}, 0, 15, 0},
		{"time at the second batch", Target{Time: ptr(start.Add(time.Hour))}, seq(ids[0][3]), 11, 0},
		{"time between batches", Target{Time: ptr(start.Add(90 * time.Minute))}, seq(ids[1][4]), 6, 0},
		{"earliest", Target{Earliest: true}, 0, 15, 0},
		{"latest", Target{Latest: true}, head, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := e.d.Rewind(e.ctx, RewindRequest{Instance: "s1", Target: tc.target, DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			want := []RewindChange{{Dataset: testDataset, Partition: "source=a", FromSeq: head, ToSeq: tc.to, RowsToExport: tc.toExport, RowsToSkip: tc.toSkip}}
			if !res.DryRun || !slices.Equal(res.Changes, want) {
				t.Fatalf("dry run %+v, want %+v", res.Changes, want)
			}
			if st := getWM(t, e.d, key("s1", "a")); st.Seq != head || st.LastRewind != nil {
				t.Fatalf("dry run changed the watermark: %+v", st)
			}
		})
	}

	// Applied: the watermark moves, the move is recorded, and the next run ships exactly
	// the rows above it. A forward move from there reports the rows it skips.
	to := seq(ids[1][2])
	res, err := e.d.Rewind(e.ctx, RewindRequest{Instance: "s1", Partition: "a", Target: Target{Seq: &to}, By: "tester"})
	if err != nil || len(res.Changes) != 1 || res.Changes[0].RowsToExport != 8 {
		t.Fatalf("rewind: %+v %v", res, err)
	}
	st := getWM(t, e.d, key("s1", "a"))
	if st.Seq != to || st.LastRewind == nil || st.LastRewind.By != "tester" || st.LastRewind.From != head || st.LastRewind.To != to || st.LastRewind.Target != fmt.Sprintf("seq %d", to) {
		t.Fatalf("after rewind: %+v (last rewind %+v)", st, st.LastRewind)
	}
	e.fakes["s1"].reset()
	runNow(t, e.d, "s1")
	var got []int64
	for _, c := range e.fakes["s1"].all() {
		got = append(got, c.IDs...)
	}
	if want := append(slices.Clone(ids[1][3:]), ids[2]...); !slices.Equal(got, want) {
		t.Fatalf("re-exported %v, want %v", got, want)
	}
	res, err = e.d.Rewind(e.ctx, RewindRequest{Instance: "s1", Target: Target{Seq: &to}})
	if err != nil {
		t.Fatal(err)
	}
	res, err = e.d.Rewind(e.ctx, RewindRequest{Instance: "s1", Target: Target{Latest: true}})
	if err != nil || res.Changes[0].RowsToSkip != 8 || res.Changes[0].RowsToExport != 0 || res.Changes[0].ToSeq != head {
		t.Fatalf("forward move: %+v %v", res, err)
	}
}

func TestRewindRequestErrors(t *testing.T) {
	home := t.TempDir()
	logsOnly := blobSink(home, "s1")
	logsOnly.Datasets = []string{testDataset}
	e := newEnv(t, 100, logsOnly)
	e.l.ingest(t, e.c, "a", 3)
	if _, err := e.c.Ingest("traces", "a", []byte(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	runNow(t, e.d, "s1")
	zero := int64(0)
	cases := []struct {
		name string
		req  RewindRequest
		want error
		msg  string
	}{
		{"no target", RewindRequest{Instance: "s1"}, ErrBadRewind, "exactly one"},
		{"two targets", RewindRequest{Instance: "s1", Target: Target{Seq: &zero, Latest: true}}, ErrBadRewind, "exactly one"},
		{"negative seq", RewindRequest{Instance: "s1", Target: Target{Seq: ptr(int64(-1))}}, ErrBadRewind, "negative"},
		{"no instance", RewindRequest{Target: Target{Latest: true}}, ErrBadRewind, "instance"},
		{"unknown instance", RewindRequest{Instance: "nope", Target: Target{Latest: true}}, ErrUnknownSink, "nope"},
		{"dataset not exported", RewindRequest{Instance: "s1", Dataset: "traces", Target: Target{Latest: true}}, ErrBadRewind, "does not export"},
		{"dataset not cached", RewindRequest{Instance: "s1", Dataset: "metrics", Target: Target{Latest: true}}, ErrBadRewind, "metrics"},
		{"partition not cached", RewindRequest{Instance: "s1", Partition: "source=zz", Target: Target{Latest: true}}, ErrBadRewind, "source=zz"},
		{"bad partition", RewindRequest{Instance: "s1", Partition: "gateway=/x", Target: Target{Latest: true}}, ErrBadRewind, "partition"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.d.Rewind(e.ctx, tc.req)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err %v, want %v mentioning %q", err, tc.want, tc.msg)
			}
		})
	}
	if st := getWM(t, e.d, key("s1", "a")); st.LastRewind != nil {
		t.Fatalf("a refused request changed the watermark: %+v", st)
	}
	// A bare value is a source, even one with '=' in it.
	e.l.ingest(t, e.c, "k=v", 2)
	runNow(t, e.d, "s1")
	for _, p := range []string{"k=v", "source=k=v"} {
		res, err := e.d.Rewind(e.ctx, RewindRequest{Instance: "s1", Partition: p, Target: Target{Earliest: true}, DryRun: true})
		if err != nil || len(res.Changes) != 1 || res.Changes[0].Partition != "source=k=v" || res.Changes[0].RowsToExport != 2 {
			t.Fatalf("--partition %s: %+v %v", p, res, err)
		}
	}
}

// max_age deletes rows a sink has not exported: each sink gets a gap with exactly the rows
// it lost, status shows it, and a rewind that would need them is refused unless allowed.
func TestForcedLossIsAGapAndRewindBelowItIsRefused(t *testing.T) {
	home := t.TempDir()
	e := newEnv(t, 100, blobSink(home, "s1"), blobSink(home, "s2"))
	old := e.l.ingest(t, e.c, "a", 6)
	e.clk.Advance(48 * time.Hour)
	fresh := e.l.ingest(t, e.c, "a", 4)
	seq := func(id int64) int64 { return e.l.rows[id].seq }
	if err := e.c.Flush(e.ctx); err != nil {
		t.Fatal(err)
	}
	// s1 exported two of the old rows before stalling; s2 nothing.
	s1at := seq(old[1])
	if _, err := e.d.Rewind(e.ctx, RewindRequest{Instance: "s1", Target: Target{Seq: &s1at}}); err != nil {
		t.Fatal(err)
	}
	policy := cache.PrunePolicy{
		Retention:    func(string) time.Duration { return time.Hour },
		HoldForSinks: true,
		MaxAge:       24 * time.Hour,
	}
	// A crash after the losses are recorded but before the delete: they stay pending, and
	// settling against the unchanged pruned mark drops them (nothing was deleted).
	plan, err := pruneCache(e.ctx, e.c, e.d, policy, "max_age", true)
	if err != nil || len(plan) != 1 || len(plan[0].Losses) != 2 {
		t.Fatalf("dry prune %+v %v", plan, err)
	}
	if err := e.d.RecordLosses(testDataset, "source=a", plan[0].Losses, "max_age"); err != nil {
		t.Fatal(err)
	}
	if err := e.d.SettleGaps(testDataset, "source=a", 0); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"s1", "s2"} {
		if st, _ := e.d.Store().Get(watermark.Key{Instance: name, Dataset: testDataset, Partition: "source=a"}); len(st.Gaps) != 0 {
			t.Fatalf("%s keeps gaps of a delete that never happened: %+v", name, st.Gaps)
		}
	}
	// A pending gap left by an earlier attempt is replaced, not doubled.
	if err := e.d.RecordLosses(testDataset, "source=a", plan[0].Losses, "max_age"); err != nil {
		t.Fatal(err)
	}
	res, err := pruneCache(e.ctx, e.c, e.d, policy, "max_age", false)
	if err != nil || len(res) != 1 {
		t.Fatalf("prune %+v %v", res, err)
	}
	st, err := e.d.Status(e.ctx, "")
	if err != nil || len(st) != 2 {
		t.Fatalf("status %+v %v", st, err)
	}
	wantGaps := map[string]watermark.Gap{
		"s1": {From: seq(old[2]), To: seq(old[5]), Rows: 4, Reason: "max_age"},
		"s2": {From: seq(old[0]), To: seq(old[5]), Rows: 6, Reason: "max_age"},
	}
	for _, is := range st {
		p := is.Partitions[0]
		if len(p.Gaps) != 1 {
			t.Fatalf("%s gaps %+v", is.Instance, p.Gaps)
		}
		g := p.Gaps[0]
		g.At = time.Time{}
		if g != wantGaps[is.Instance] || p.LagRows != 4 {
			t.Fatalf("%s: gap %+v lag %d, want %+v and 4", is.Instance, g, p.LagRows, wantGaps[is.Instance])
		}
	}
	// Everything below the fresh rows is gone: --to-seq 0 asks for it.
	zero := int64(0)
	plan2, err := e.d.Rewind(e.ctx, RewindRequest{Instance: "s2", Target: Target{Latest: true}})
	if err != nil || plan2.Changes[0].ToSeq != seq(fresh[3]) {
		t.Fatalf("skip to latest: %+v %v", plan2, err)
	}
	plan2, err = e.d.Rewind(e.ctx, RewindRequest{Instance: "s2", Target: Target{Seq: &zero}})
	if !errors.Is(err, ErrRewindGap) || !strings.Contains(err.Error(), fmt.Sprintf("seq 1..%d", seq(old[5]))) {
		t.Fatalf("rewind below the pruned rows: %v", err)
	}
	if m := plan2.Changes[0].Missing; m == nil || m.First != 1 || m.Last != seq(old[5]) || plan2.Changes[0].RowsToExport != 4 {
		t.Fatalf("refused plan %+v", plan2.Changes[0])
	}
	if w := getWM(t, e.d, key("s2", "a")); w.Seq != seq(fresh[3]) {
		t.Fatalf("a refused rewind moved the watermark to %d", w.Seq)
	}
	// Earliest is what is still cached, so it is never refused.
	if _, err := e.d.Rewind(e.ctx, RewindRequest{Instance: "s2", Target: Target{Earliest: true}, DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.Rewind(e.ctx, RewindRequest{Instance: "s2", Target: Target{Seq: &zero}, AllowGap: true}); err != nil {
		t.Fatal(err)
	}
	if w := getWM(t, e.d, key("s2", "a")); w.Seq != 0 {
		t.Fatalf("allowed rewind left the watermark at %d", w.Seq)
	}
}

// A rewind through the verb while a unit is in flight wins: the unit's completion finds
// the watermark moved and the export continues from the rewind.
func TestRewindVerbDuringShipWins(t *testing.T) {
	e := newEnv(t, 3)
	ids := e.l.ingest(t, e.c, "a", 12)
	seqs := e.l.seqs(ids)
	x := e.d.inst(t, "s1")
	to := seqs[2]
	rewound := false
	x.hooks.afterShip = func(_ watermark.Key, u watermark.Unit) {
		if rewound || u.First != seqs[6] {
			return
		}
		rewound = true
		if _, err := e.d.Rewind(e.ctx, RewindRequest{Instance: "s1", Target: Target{Seq: &to}}); err != nil {
			t.Errorf("rewind: %v", err)
		}
	}
	runNow(t, e.d, "s1")
	var froms []int64
	for _, c := range e.fakes["s1"].all() {
		froms = append(froms, c.Unit.From)
	}
	if want := []int64{0, seqs[2], seqs[5], seqs[2], seqs[5], seqs[8]}; !rewound || !slices.Equal(froms, want) {
		t.Fatalf("units start at %v, want %v", froms, want)
	}
}

func TestStatusAndPositionMetrics(t *testing.T) {
	home := t.TempDir()
	withheld := blobSink(home, "s2")
	withheld.WithholdSources = []string{"b*"}
	e := newEnv(t, 100, blobSink(home, "s1"), withheld)
	e.d.now = e.clk.Now
	reg := prometheus.NewRegistry()
	reg.MustRegister(positionCollector{e.d})
	e.l.ingest(t, e.c, "a", 5)
	e.l.ingest(t, e.c, "b", 2)
	runNow(t, e.d, "s1")
	runNow(t, e.d, "s2")
	e.clk.Advance(time.Hour)
	newer := e.l.ingest(t, e.c, "a", 3)
	if err := e.c.Flush(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(90 * time.Second)
	st, err := e.d.Status(e.ctx, "s1")
	if err != nil || len(st) != 1 || st[0].Instance != "s1" || st[0].Type != "blob" || len(st[0].Partitions) != 2 {
		t.Fatalf("status %+v %v", st, err)
	}
	a := st[0].Partitions[0]
	if a.Partition != "source=a" || a.LagRows != 3 || a.HeadSeq != e.l.rows[newer[2]].seq || a.WatermarkSeq != e.l.rows[e.l.byPart["source=a"][4]].seq || a.ExportedRows != 5 || a.LastExportAt == nil {
		t.Fatalf("partition a %+v", a)
	}
	if a.OldestUnexportedAgeSeconds < 90 || a.OldestUnexportedAgeSeconds > 91 {
		t.Fatalf("oldest unexported age %v, want about 90 s", a.OldestUnexportedAgeSeconds)
	}
	st2, _ := e.d.Status(e.ctx, "s2")
	if b := st2[0].Partitions[1]; b.Partition != "source=b" || !b.Withheld || b.WithheldRows != 2 || b.LagRows != 0 {
		t.Fatalf("withheld partition %+v", b)
	}
	if _, err := e.d.Status(e.ctx, "nope"); !errors.Is(err, ErrUnknownSink) {
		t.Fatalf("unknown sink: %v", err)
	}
	got := gauges(t, reg)
	for name, want := range map[string]float64{
		"hyp_sink_lag_rows/s1/source=a":                      3,
		"hyp_sink_lag_rows/s2/source=a":                      3,
		"hyp_sink_lag_rows/s1/source=b":                      0,
		"hyp_sink_watermark_seq/s1/source=a":                 float64(a.WatermarkSeq),
		"hyp_sink_watermark_seq/s2/source=b":                 float64(e.l.rows[e.l.byPart[partition.Name("b")][1]].seq),
		"hyp_sink_oldest_unexported_age_seconds/s1/source=b": 0,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
	if age := got["hyp_sink_oldest_unexported_age_seconds/s1/source=a"]; age < 90 {
		t.Errorf("age gauge %v", age)
	}
	// Once exported, lag and age drop to zero.
	runNow(t, e.d, "s1")
	got = gauges(t, reg)
	if got["hyp_sink_lag_rows/s1/source=a"] != 0 || got["hyp_sink_oldest_unexported_age_seconds/s1/source=a"] != 0 {
		t.Fatalf("after export: %v", got)
	}
}

// A sink over more partitions than get series of their own shows the most lagging ones and
// folds the rest into partition="_other": the lowest watermark, the summed lag, the oldest
// age, so a sum or an alert over the partitions still sees every row.
func TestPositionMetricsFoldTheLeastLagging(t *testing.T) {
	const parts = promreg.MaxPartitionSeries + 3
	e := newEnv(t, 1000, blobSink(t.TempDir(), "s1"))
	e.d.now = e.clk.Now
	reg := prometheus.NewRegistry()
	reg.MustRegister(positionCollector{e.d})
	src := func(i int) string { return fmt.Sprintf("s%02d", i) }
	var firstSeq int64
	for i := range parts {
		ids := e.l.ingest(t, e.c, src(i), 1)
		if i == 0 {
			firstSeq = e.l.rows[ids[0]].seq
		}
	}
	runNow(t, e.d, "s1") // every watermark at its partition's one row
	for i := 1; i < parts; i++ {
		e.l.ingest(t, e.c, src(i), i) // source i lags i rows; s00 none
		if i == 1 {
			e.clk.Advance(time.Minute) // s01's row waits the longest
		}
	}
	if err := e.c.Flush(e.ctx); err != nil {
		t.Fatal(err)
	}
	got := gauges(t, reg)
	series := 0
	for name := range got {
		if strings.HasPrefix(name, "hyp_sink_lag_rows/") {
			series++
		}
	}
	if series != promreg.MaxPartitionSeries+1 {
		t.Errorf("%d lag series, want %d and _other", series, promreg.MaxPartitionSeries)
	}
	// The three least lagging, s00 to s02, are folded.
	for name, want := range map[string]float64{
		"hyp_sink_lag_rows/s1/" + partition.Name(src(parts-1)): parts - 1,
		"hyp_sink_lag_rows/s1/" + partition.Name(src(3)):       3,
		"hyp_sink_lag_rows/s1/_other":                          0 + 1 + 2,
		"hyp_sink_watermark_seq/s1/_other":                     float64(firstSeq),
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
	// The rows were stamped by the wall clock, the age is taken on the test's.
	if age := got["hyp_sink_oldest_unexported_age_seconds/s1/_other"]; age < 60 || age >= 61 {
		t.Errorf("folded age %v, want s01's, about 60 s", age)
	}
	if _, ok := got["hyp_sink_lag_rows/s1/"+partition.Name(src(2))]; ok {
		t.Errorf("s02 has a series of its own: %v", got)
	}
}

// gauges flattens a registry's gauges to name/sink/partition → value.
func gauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			labels := map[string]string{}
			for _, lp := range m.Label {
				labels[lp.GetName()] = lp.GetValue()
			}
			out[mf.GetName()+"/"+labels["sink"]+"/"+labels["partition"]] = gaugeValue(m)
		}
	}
	return out
}

func gaugeValue(m *dto.Metric) float64 { return m.GetGauge().GetValue() }

func TestReconfigureAppliesLiveSettingsOnly(t *testing.T) {
	home := t.TempDir()
	e := newEnv(t, 100, blobSink(home, "s1"), blobSink(home, "s2"))
	e.l.ingest(t, e.c, "a", 3)
	runNow(t, e.d, "s1")

	s1, s2 := blobSink(home, "s1"), blobSink(home, "s2")
	s1.WithholdSources, s1.Schedule = []string{"a"}, "@every 5m"
	s2.Destination.Path = filepath.Join(home, "elsewhere")
	applied, restart := e.d.Reconfigure(map[string]config.Sink{"s1": s1, "s2": s2, "s3": blobSink(home, "s3")})
	wantApplied := []string{`sink s1: schedule "@every 1h" -> "@every 5m"`, "sink s1: withhold_sources [] -> [a]"}
	wantRestart := []string{"sink s2: destination changed", "sink s3 added"}
	if !slices.Equal(applied, wantApplied) || !slices.Equal(restart, wantRestart) {
		t.Fatalf("applied %q, needs restart %q; want %q and %q", applied, restart, wantApplied, wantRestart)
	}
	// The next rows of a are withheld by s1 at once, and s2 still exports to where it did.
	e.l.ingest(t, e.c, "a", 2)
	e.fakes["s1"].reset()
	if res := runNow(t, e.d, "s1"); res.Rows != 0 || len(e.fakes["s1"].all()) != 0 {
		t.Fatalf("s1 exported %+v after withholding a", res)
	}
	if st := getWM(t, e.d, key("s1", "a")); st.WithheldRows != 2 || st.Seq != headOf(t, e.c, "a") {
		t.Fatalf("s1 watermark %+v", st)
	}
	if got := e.d.inst(t, "s2").cfg.Destination.Path; got != blobSink(home, "s2").Destination.Path {
		t.Fatalf("s2 destination changed live to %s", got)
	}
	if _, restart := e.d.Reconfigure(map[string]config.Sink{"s2": blobSink(home, "s2")}); !slices.Equal(restart, []string{"sink s1 removed"}) {
		t.Fatalf("removing s1: %q", restart)
	}
	// Nothing changed: nothing reported.
	if applied, restart := e.d.Reconfigure(map[string]config.Sink{"s1": s1, "s2": blobSink(home, "s2")}); len(applied)+len(restart) != 0 {
		t.Fatalf("no change reported %q %q", applied, restart)
	}
}

// TestWatermarkAboveHeadIsClamped: a watermark edited above every committed row would skip
// the next rows silently; the tick clamps it to the last row ingested before the edit and
// exports the rows that came after it, once.
func TestWatermarkAboveHeadIsClamped(t *testing.T) {
	e := newEnv(t, 100)
	first := e.l.ingest(t, e.c, "a", 5)
	if res := runNow(t, e.d, "s1"); res.Status != "ok" || res.Rows != 5 {
		t.Fatalf("first run %+v", res)
	}
	k := key("s1", "a")
	cur := getWM(t, e.d, k)
	head := e.l.rows[first[4]].seq
	if _, err := e.d.Store().Update(k, cur.Generation, func(s *watermark.State) error {
		s.Seq = head + 1_000_000
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// The edit happens between the two ingests on the cache's (test) clock.
	e.clk.Advance(time.Second)
	path, _ := e.d.Store().Path(k)
	if at := e.clk.Now(); os.Chtimes(path, at, at) != nil {
		t.Fatal("chtimes")
	}
	e.clk.Advance(time.Second)
	e.l.ingest(t, e.c, "a", 3)
	if res := runNow(t, e.d, "s1"); res.Status != "ok" || res.Rows != 3 {
		t.Fatalf("after the edit: %+v, want the 3 new rows exported", res)
	}
	exactlyOnce(t, e.l, e.fakes["s1"].all(), "a")
}
