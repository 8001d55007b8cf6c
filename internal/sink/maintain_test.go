package sink

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/lake"
	"github.com/hyp-project/hyp/internal/watermark"
)

func maintainNow(t *testing.T, d *Driver, req MaintainRequest) MaintainResult {
	t.Helper()
	res, err := d.Maintain(context.Background(), req)
	if err != nil || len(res) != 1 || res[0].Error != "" {
		t.Fatalf("maintain %+v = %+v, %v", req, res, err)
	}
	return res[0]
}

// TestMaintainThenRecoverAnInterruptedCommit: an export dies with its commit in doubt
// (landed or not), maintenance compacts the table and expires every snapshot but the
// newest, including the one holding the commit's markers, and the restarted export still
// puts every row in the table once.
func TestMaintainThenRecoverAnInterruptedCommit(t *testing.T) {
	for _, step := range []string{"after-intent", "after-ship"} {
		t.Run(step, func(t *testing.T) {
			e, dir := newLakeEnv(t, 20) // several commits per tick
			e.l.ingest(t, e.c, "web", 45)
			e.l.ingest(t, e.c, "db", 25)
			hits := 0
			crash := func(watermark.Key, watermark.Unit) {
				if hits++; hits == 3 { // the second commit: one unit per partition in each
					panic(crashPanic{step})
				}
			}
			x := e.d.inst(t, "lake")
			if step == "after-intent" {
				x.hooks.afterIntent = crash
			} else {
				x.hooks.afterShip = crash
			}
			if _, crashed := runCrashing(t, e.d, "lake"); !crashed {
				t.Fatalf("the run did not reach %s", step)
			}
			e.restartLake(t, dir, 20)
			before := readLake(t, dir)
			// The sink's config keeps one snapshot, of any age: the first run keeps the
			// compaction's parent, the second the compaction alone.
			r := maintainNow(t, e.d, MaintainRequest{Instance: "lake", Compact: true})
			if len(r.Tables) != 1 || r.Tables[0].FilesAfter >= r.Tables[0].FilesBefore {
				t.Fatalf("maintain = %+v: no compaction", r)
			}
			maintainNow(t, e.d, MaintainRequest{Instance: "lake"})
			got := readLake(t, dir)
			if len(got.snapshots) != 1 || got.snapshots[0].Summary.Properties[lake.PropCommitID] != "" {
				t.Fatalf("after maintain: %d snapshots (%v), want the compaction's alone", len(got.snapshots), got.snapshots)
			}
			for id, n := range before.ids {
				if got.ids[id] != n {
					t.Errorf("row %d: %d times before maintain, %d after", id, n, got.ids[id])
				}
			}
			e.l.ingest(t, e.c, "web", 6)
			if res := runNow(t, e.d, "lake"); res.Status != "ok" {
				t.Fatalf("run after maintain = %+v", res)
			}
			checkLake(t, "after recovery", e.l, readLake(t, dir))
		})
	}
}

func TestMaintainNamesOnlyIcebergSinks(t *testing.T) {
	home := t.TempDir()
	blob := config.Sink{Type: "blob", Format: "jsonl", Schedule: "@every 1h", Destination: config.Destination{Type: "local-fs", Path: filepath.Join(home, "out")}}
	c := openCache(t, filepath.Join(home, "cache"), newTestClock())
	t.Cleanup(func() { c.Close(context.Background()) })
	d, err := New(context.Background(), Options{Home: home, Sinks: map[string]config.Sink{"files": blob, "lake": icebergSink(t.TempDir())}, Cache: c})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Maintain(context.Background(), MaintainRequest{Instance: "files"}); !errors.Is(err, ErrNotIceberg) {
		t.Errorf("maintain of a blob sink = %v, want ErrNotIceberg", err)
	}
	if _, err := d.Maintain(context.Background(), MaintainRequest{Instance: "nosuch"}); !errors.Is(err, ErrUnknownSink) {
		t.Errorf("maintain of no sink = %v, want ErrUnknownSink", err)
	}
	res, err := d.Maintain(context.Background(), MaintainRequest{})
	if err != nil || len(res) != 1 || res[0].Instance != "lake" || res[0].Error != "" {
		t.Errorf("maintain of every sink = %+v, %v; want the iceberg one", res, err)
	}
}

// TestMaintainSchedule: a running driver maintains an iceberg sink on its maintain.schedule.
func TestMaintainSchedule(t *testing.T) {
	home, dir := t.TempDir(), t.TempDir()
	cfg := icebergSink(dir)
	cfg.Maintain = config.Maintain{Schedule: "@every 50ms", Compact: true, RetainLast: 1}
	clk := newTestClock()
	c := openCache(t, filepath.Join(home, "cache"), clk)
	t.Cleanup(func() { c.Close(context.Background()) })
	l := newLedger()
	for range 3 {
		l.ingest(t, c, "web", 5)
	}
	reg := prometheus.NewRegistry()
	d, err := New(context.Background(), Options{Home: home, Sinks: map[string]config.Sink{"lake": cfg}, Cache: c, Registerer: reg, UnitRows: 5})
	if err != nil {
		t.Fatal(err)
	}
	runNow(t, d, "lake") // three commits of one file each
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	waitMaintainRuns(t, d, 2, done)
	cancel()
	<-done
	m := d.inst(t, "lake").metrics.maintain
	if n := metricValue(t, m.dataFiles.WithLabelValues("lake", "hyp."+testDataset)); n != 1 {
		t.Errorf("hyp_lake_data_files = %v, want 1 after compaction", n)
	}
	if n := metricValue(t, m.expired.WithLabelValues("lake")); n < 3 {
		t.Errorf("hyp_lake_snapshots_expired_total = %v, want at least 3", n)
	}
	checkLake(t, "after scheduled maintenance", l, readLake(t, dir))
}

// metricValue is a counter's or a gauge's value, or how many samples a histogram holds.
func metricValue(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	switch {
	case out.Counter != nil:
		return out.Counter.GetValue()
	case out.Histogram != nil:
		return float64(out.Histogram.GetSampleCount())
	}
	return out.Gauge.GetValue()
}

// waitMaintainRuns waits until the running driver d (done closes when it stops) has
// maintained the lake sink n times successfully.
func waitMaintainRuns(t *testing.T, d *Driver, n float64, done <-chan struct{}) {
	t.Helper()
	m := d.inst(t, "lake").metrics.maintain
	for metricValue(t, m.runs.WithLabelValues("lake", "ok")) < n {
		select {
		case <-time.After(10 * time.Millisecond):
		case <-done:
			t.Fatal("the driver stopped")
		}
	}
}
