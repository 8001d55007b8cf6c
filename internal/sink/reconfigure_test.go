package sink

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyp-project/hyp/internal/config"
)

// loadedLake is an iceberg sink as loading hyp.yaml leaves it: the maintain defaults filled in.
func loadedLake(dir string) config.Sink {
	s := icebergSink(dir)
	s.Maintain = config.Maintain{ExpireOlderThan: config.Duration(7 * 24 * time.Hour), RetainLast: 10}
	return s
}

// TestReconfigureMaintain: a change to an iceberg sink's maintain block is applied to the
// running driver and reported key by key: the maintain loop, started with no schedule,
// follows a new one at once, and upkeep (scheduled or asked for) uses the new
// compact, expire_older_than and retain_last.
func TestReconfigureMaintain(t *testing.T) {
	home, dir := t.TempDir(), t.TempDir()
	cfg := loadedLake(dir)
	c := openCache(t, filepath.Join(home, "cache"), newTestClock())
	t.Cleanup(func() { c.Close(context.Background()) })
	l := newLedger()
	for range 3 {
		l.ingest(t, c, "web", 5)
	}
	d, err := New(context.Background(), Options{Home: home, Sinks: map[string]config.Sink{"lake": cfg}, Cache: c, Registerer: prometheus.NewRegistry(), UnitRows: 5})
	if err != nil {
		t.Fatal(err)
	}
	runNow(t, d, "lake") // three commits: three snapshots
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// expire_older_than and retain_last reach upkeep asked for on demand.
	next := cfg
	next.Maintain.ExpireOlderThan, next.Maintain.RetainLast = 0, 1
	applied, restart := d.Reconfigure(map[string]config.Sink{"lake": next})
	want := []string{"sink lake: maintain.expire_older_than 7d -> 0s", "sink lake: maintain.retain_last 10 -> 1"}
	if !slices.Equal(applied, want) || len(restart) != 0 {
		t.Fatalf("applied %q, needs restart %q; want %q applied", applied, restart, want)
	}
	if r := maintainNow(t, d, MaintainRequest{Instance: "lake"}); len(r.Tables) != 1 || r.Tables[0].SnapshotsAfter != 1 || r.Tables[0].FilesAfter != 3 {
		t.Fatalf("maintain after the change = %+v, want one snapshot kept and no compaction", r)
	}

	// A schedule given to a sink that had none, and compact, reach the running loop.
	cfg = next
	next.Maintain.Schedule, next.Maintain.Compact = "@every 50ms", true
	applied, restart = d.Reconfigure(map[string]config.Sink{"lake": next})
	want = []string{`sink lake: maintain.schedule "" -> "@every 50ms"`, "sink lake: maintain.compact false -> true"}
	if !slices.Equal(applied, want) || len(restart) != 0 {
		t.Fatalf("applied %q, needs restart %q; want %q applied", applied, restart, want)
	}
	waitMaintainRuns(t, d, 2, done)
	if n := metricValue(t, d.inst(t, "lake").metrics.maintain.dataFiles.WithLabelValues("lake", "hyp."+testDataset)); n != 1 {
		t.Errorf("hyp_lake_data_files = %v, want 1 after the scheduled compaction", n)
	}
	checkLake(t, "after scheduled maintenance", l, readLake(t, dir))

	// Nothing changed: nothing reported.
	if applied, restart := d.Reconfigure(map[string]config.Sink{"lake": next}); len(applied)+len(restart) != 0 {
		t.Fatalf("no change reported %q %q", applied, restart)
	}
}

// TestReconfigureMaintainScheduleChange: a running maintain loop waiting on an hour-long
// schedule follows a shorter one at once instead of after its current wait.
func TestReconfigureMaintainScheduleChange(t *testing.T) {
	home, dir := t.TempDir(), t.TempDir()
	cfg := loadedLake(dir)
	cfg.Maintain.Schedule = "@every 1h"
	c := openCache(t, filepath.Join(home, "cache"), newTestClock())
	t.Cleanup(func() { c.Close(context.Background()) })
	newLedger().ingest(t, c, "web", 5)
	d, err := New(context.Background(), Options{Home: home, Sinks: map[string]config.Sink{"lake": cfg}, Cache: c, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	runNow(t, d, "lake")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	next := cfg
	next.Maintain.Schedule = "@every 50ms"
	applied, restart := d.Reconfigure(map[string]config.Sink{"lake": next})
	if want := []string{`sink lake: maintain.schedule "@every 1h" -> "@every 50ms"`}; !slices.Equal(applied, want) || len(restart) != 0 {
		t.Fatalf("applied %q, needs restart %q; want %q applied", applied, restart, want)
	}
	waitMaintainRuns(t, d, 1, done)
}

// TestReconfigureNamesWhatNeedsARestart: a change the driver cannot apply is reported by
// the keys that changed, and the instance keeps every setting until the restart, its
// maintain block included.
func TestReconfigureNamesWhatNeedsARestart(t *testing.T) {
	home, dir := t.TempDir(), t.TempDir()
	cfg := loadedLake(dir)
	c := openCache(t, filepath.Join(home, "cache"), newTestClock())
	t.Cleanup(func() { c.Close(context.Background()) })
	d, err := New(context.Background(), Options{Home: home, Sinks: map[string]config.Sink{"lake": cfg}, Cache: c})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		change func(*config.Sink)
		want   string
	}{
		{"warehouse", func(s *config.Sink) { s.Warehouse = filepath.Join(dir, "elsewhere") }, "sink lake: warehouse changed"},
		{"catalog and namespace", func(s *config.Sink) { s.Catalog.URI += "2"; s.Namespace = "other" }, "sink lake: catalog, namespace changed"},
		{"partition_by with maintain", func(s *config.Sink) { s.PartitionBy = "hour"; s.Maintain.RetainLast = 1 }, "sink lake: partition_by changed"},
		{"bad maintain.schedule", func(s *config.Sink) { s.Maintain.Schedule = "never" }, "sink lake: maintain.schedule: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := cfg
			tt.change(&next)
			applied, restart := d.Reconfigure(map[string]config.Sink{"lake": next})
			if len(applied) != 0 || len(restart) != 1 || len(restart[0]) < len(tt.want) || restart[0][:len(tt.want)] != tt.want {
				t.Fatalf("applied %q, needs restart %q; want %q", applied, restart, tt.want)
			}
			if got := d.inst(t, "lake").live.Load().maintain; got != cfg.Maintain {
				t.Errorf("maintain changed live to %+v", got)
			}
		})
	}
}
