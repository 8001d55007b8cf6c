package sink

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"github.com/apache/iceberg-go/table"

	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/lake"
	"github.com/hyp-project/hyp/internal/watermark"
)

func icebergSink(dir string) config.Sink {
	return config.Sink{
		Type: "iceberg", Schedule: "@every 1h", Namespace: "hyp", PartitionBy: "day",
		Catalog:   config.Catalog{Type: "sql", URI: "sqlite://" + filepath.Join(dir, "catalog.db")},
		Warehouse: filepath.Join(dir, "warehouse"),
	}
}

// lakeTable is what an outside reader finds in the sink's table: every row's id (with
// repeats), how often each data file is referenced, and the snapshots.
type lakeTable struct {
	ids       map[int64]int
	files     map[string]int
	snapshots []table.Snapshot
}

func readLake(t *testing.T, dir string) lakeTable {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "catalog.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cat, err := sqlcat.NewCatalog(lake.CatalogName, db, sqlcat.SQLite, iceberg.Properties{"warehouse": lake.FileURI(filepath.Join(dir, "warehouse"))})
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := cat.LoadTable(ctx, table.Identifier{"hyp", testDataset})
	if err != nil {
		t.Fatalf("load table: %v", err)
	}
	out := lakeTable{ids: map[int64]int{}, files: map[string]int{}, snapshots: tbl.Metadata().Snapshots()}
	tasks, err := tbl.Scan().PlanFiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		out.files[task.File.FilePath()]++
	}
	_, recs, err := tbl.Scan(table.WithSelectedFields("id", columns.SeqColumn, lake.GatewayColumn, lake.SourceColumn)).ToArrowRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for rec, err := range recs {
		if err != nil {
			t.Fatal(err)
		}
		ids := rec.Column(rec.Schema().FieldIndices("id")[0]).(*array.Int64)
		gw := rec.Column(rec.Schema().FieldIndices(lake.GatewayColumn)[0]).(*array.String)
		for i := 0; i < ids.Len(); i++ {
			out.ids[ids.Value(i)]++
			if gw.Value(i) == "" {
				t.Errorf("row %d has no %s", ids.Value(i), lake.GatewayColumn)
			}
		}
		rec.Release()
	}
	return out
}

// checkLake asserts every ingested row is in the table exactly once and no data file is
// referenced twice.
func checkLake(t *testing.T, where string, l *ledger, got lakeTable) {
	t.Helper()
	for id := range l.rows {
		if n := got.ids[id]; n != 1 {
			t.Errorf("%s: row id %d is in the table %d times", where, id, n)
		}
	}
	for id := range got.ids {
		if _, ok := l.rows[id]; !ok {
			t.Errorf("%s: table holds id %d that was never ingested", where, id)
		}
	}
	for f, n := range got.files {
		if n != 1 {
			t.Errorf("%s: data file %s referenced %d times", where, f, n)
		}
	}
}

func newLakeEnv(t *testing.T, unitRows int64) (*env, string) {
	t.Helper()
	home := t.TempDir()
	lakeDir := t.TempDir()
	e := &env{ctx: context.Background(), home: home, clk: newTestClock(), l: newLedger()}
	e.c = openCache(t, filepath.Join(home, "cache"), e.clk)
	t.Cleanup(func() { e.c.Close(context.Background()) })
	e.cc = &countingCache{Cache: e.c}
	e.restartLake(t, lakeDir, unitRows)
	return e, lakeDir
}

func (e *env) restartLake(t *testing.T, lakeDir string, unitRows int64) {
	t.Helper()
	d, err := New(e.ctx, Options{Home: e.home, Sinks: map[string]config.Sink{"lake": icebergSink(lakeDir)}, Cache: e.cc, UnitRows: unitRows})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Err(); err != nil {
		t.Fatal(err)
	}
	e.d = d
}

func TestIcebergSinkExportsOnceAndIncrementally(t *testing.T) {
	e, dir := newLakeEnv(t, 0)
	e.l.ingest(t, e.c, "web", 50)
	e.l.ingest(t, e.c, "db", 30)
	res := runNow(t, e.d, "lake")
	if res.Status != "ok" || res.Rows != 80 || res.Units != 2 {
		t.Fatalf("first run = %+v", res)
	}
	got := readLake(t, dir)
	checkLake(t, "first run", e.l, got)
	if len(got.snapshots) != 1 {
		t.Fatalf("one tick made %d snapshots, want 1 holding both partitions' units", len(got.snapshots))
	}
	props := got.snapshots[0].Summary.Properties
	if props[lake.PropGateway] == "" || props[lake.PropCommitID] == "" || props[lake.PropUnits] == "" {
		t.Errorf("snapshot summary lacks hyp markers: %v", props)
	}

	// No new rows: no commit, no file opened.
	e.cc.reset()
	if res := runNow(t, e.d, "lake"); res.Rows != 0 || res.Units != 0 || res.Status != "ok" {
		t.Fatalf("idle run = %+v", res)
	}
	if scans, st := e.cc.snapshot(); st.FilesOpened != 0 {
		t.Errorf("idle run opened %d cache files in %d scans", st.FilesOpened, scans)
	}
	if got := readLake(t, dir); len(got.snapshots) != 1 {
		t.Errorf("idle run committed: %d snapshots", len(got.snapshots))
	}

	e.l.ingest(t, e.c, "web", 7)
	if res := runNow(t, e.d, "lake"); res.Rows != 7 || res.Units != 1 {
		t.Fatalf("run after 7 rows = %+v", res)
	}
	got = readLake(t, dir)
	checkLake(t, "after 7 more", e.l, got)
	if len(got.snapshots) != 2 {
		t.Errorf("%d snapshots, want 2", len(got.snapshots))
	}

	st, err := e.d.Status(e.ctx, "lake")
	if err != nil || len(st) != 1 || len(st[0].Tables) != 1 || st[0].Tables[0].LastCommitID == "" || st[0].Tables[0].LastCommitAt == nil {
		t.Fatalf("status = %+v, %v", st, err)
	}
	if want := got.snapshots[1].Summary.Properties[lake.PropCommitID]; st[0].Tables[0].LastCommitID != want {
		t.Errorf("status last commit %s, want %s", st[0].Tables[0].LastCommitID, want)
	}
}

// TestIcebergSinkCrashAtEveryStep kills the export (a panic standing for kill -9) at every
// step of a table commit, with new rows arriving before the restart, and checks the table
// holds every row once.
func TestIcebergSinkCrashAtEveryStep(t *testing.T) {
	for _, step := range []string{"after-intent", "after-ship", "after-watermark"} {
		for _, n := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s:%d", step, n), func(t *testing.T) {
				e, dir := newLakeEnv(t, 20) // several commits per tick
				e.l.ingest(t, e.c, "web", 45)
				e.l.ingest(t, e.c, "db", 25)
				hits := 0
				crash := func(watermark.Key, watermark.Unit) {
					if hits++; hits == n {
						panic(crashPanic{step})
					}
				}
				x := e.d.inst(t, "lake")
				switch step {
				case "after-intent":
					x.hooks.afterIntent = crash
				case "after-ship":
					x.hooks.afterShip = crash
				case "after-watermark":
					x.hooks.afterWatermark = crash
				}
				if _, crashed := runCrashing(t, e.d, "lake"); !crashed {
					t.Fatalf("the run did not reach %s %d times", step, n)
				}
				e.l.ingest(t, e.c, "web", 11)
				e.l.ingest(t, e.c, "api", 4)
				e.restartLake(t, dir, 20)
				if res := runNow(t, e.d, "lake"); res.Status != "ok" {
					t.Fatalf("run after the crash = %+v", res)
				}
				got := readLake(t, dir)
				checkLake(t, "after the crash", e.l, got)
				for _, src := range []string{"web", "db", "api"} {
					if st := getWM(t, e.d, key("lake", src)); st.Intent != nil || st.Seq != headOf(t, e.c, src) {
						t.Errorf("%s: watermark %+v, want at head %d with no intent", src, st, headOf(t, e.c, src))
					}
				}
				before := len(got.snapshots)
				if res := runNow(t, e.d, "lake"); res.Units != 0 {
					t.Errorf("run after recovery = %+v, want nothing to do", res)
				}
				if got := readLake(t, dir); len(got.snapshots) != before {
					t.Errorf("an idle run committed")
				}
			})
		}
	}
}

func TestIcebergSinkRewindReexportsWithNewFiles(t *testing.T) {
	e, dir := newLakeEnv(t, 0)
	e.l.ingest(t, e.c, "web", 10)
	runNow(t, e.d, "lake")
	k := key("lake", "web")
	st := getWM(t, e.d, k)
	if _, err := e.d.Store().Update(k, st.Generation, func(s *watermark.State) error { s.Seq = 0; return nil }); err != nil {
		t.Fatal(err)
	}
	if res := runNow(t, e.d, "lake"); res.Rows != 10 {
		t.Fatalf("run after rewind = %+v", res)
	}
	got := readLake(t, dir)
	for id := range e.l.rows {
		if got.ids[id] != 2 {
			t.Errorf("id %d in the table %d times after a rewind to 0, want 2", id, got.ids[id])
		}
	}
	for f, n := range got.files {
		if n != 1 {
			t.Errorf("data file %s referenced %d times", f, n)
		}
	}
}

// TestIcebergSinkFailureBeforeCommitShowsInPartitions: a tick that cannot read the table's
// head (its metadata gone, as when the catalog's storage is unreachable) fails, and every
// partition with rows to export says why; once the table is back the rows go, once.
func TestIcebergSinkFailureBeforeCommitShowsInPartitions(t *testing.T) {
	e, dir := newLakeEnv(t, 0)
	e.l.ingest(t, e.c, "web", 5)
	if res := runNow(t, e.d, "lake"); res.Status != "ok" {
		t.Fatalf("first run = %+v", res)
	}
	meta := filepath.Join(dir, "warehouse", "hyp.db", testDataset, "metadata")
	if err := os.Rename(meta, meta+".away"); err != nil {
		t.Fatal(err)
	}
	e.l.ingest(t, e.c, "web", 3)
	e.l.ingest(t, e.c, "db", 4)
	if res := runNow(t, e.d, "lake"); res.Status != "failed" || len(res.Errors) == 0 {
		t.Fatalf("run without the table's metadata = %+v", res)
	}
	st, err := e.d.Status(e.ctx, "lake")
	if err != nil || len(st) != 1 || len(st[0].Partitions) != 2 {
		t.Fatalf("status = %+v, %v", st, err)
	}
	for _, p := range st[0].Partitions {
		if p.LastError == "" {
			t.Errorf("partition %s has rows to export and shows no error", p.Partition)
		}
	}
	if err := os.Rename(meta+".away", meta); err != nil {
		t.Fatal(err)
	}
	if res := runNow(t, e.d, "lake"); res.Status != "ok" || res.Rows != 7 {
		t.Fatalf("run with the table back = %+v", res)
	}
	checkLake(t, "table back", e.l, readLake(t, dir))
}
