package lake

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/table"

	"github.com/hyp-project/hyp/internal/columns"
)

// rowsOf reads the table's rows back through a scan: how many times each (source, seq)
// is in it.
func rowsOf(t *testing.T, l *Lake) map[string]int {
	t.Helper()
	tbl, err := l.load(context.Background(), "logs")
	if err != nil || tbl == nil {
		t.Fatalf("load: %v %v", tbl, err)
	}
	out := map[string]int{}
	if tbl.CurrentSnapshot() == nil {
		return out
	}
	at, err := tbl.Scan(table.WithSelectedFields(SourceColumn, columns.SeqColumn)).ToArrowTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer at.Release()
	rd := array.NewTableReader(at, 1024)
	defer rd.Release()
	for rd.Next() {
		rec := rd.RecordBatch()
		src := rec.Column(rec.Schema().FieldIndices(SourceColumn)[0]).(*array.String)
		seq := rec.Column(rec.Schema().FieldIndices(columns.SeqColumn)[0]).(*array.Int64)
		for i := range int(rec.NumRows()) {
			out[fmt.Sprintf("%s/%d", src.Value(i), seq.Value(i))]++
		}
	}
	return out
}

// commitMany makes n commits of rowsPer rows each to partition part.
func commitMany(t *testing.T, l *Lake, part string, from, n, rowsPer int) {
	t.Helper()
	for i := range n {
		c := commitOf(l.gw, batch(t, part, int64(from+i*rowsPer), rowsPer, arrow.PrimitiveTypes.Int64))
		if _, err := l.Commit(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
}

func snapshotCount(t *testing.T, l *Lake) int {
	t.Helper()
	tbl, err := l.load(context.Background(), "logs")
	if err != nil || tbl == nil {
		t.Fatalf("load: %v %v", tbl, err)
	}
	return len(tbl.Metadata().Snapshots())
}

// filesOnDisk lists every file under dir.
func filesOnDisk(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// ageAll makes every file under dir look a day old, as if all of it were written long ago.
func ageAll(t *testing.T, dir string) {
	t.Helper()
	old := time.Now().Add(-24 * time.Hour)
	for _, f := range filesOnDisk(t, dir) {
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	}
}

func checkNoDuplicates(t *testing.T, rows map[string]int) {
	t.Helper()
	for k, n := range rows {
		if n != 1 {
			t.Errorf("row %s is in the table %d times", k, n)
		}
	}
}

func TestMaintain(t *testing.T) {
	cases := []struct {
		name                   string
		opts                   MaintainOptions
		wantExpired, wantSnaps int
		fewerFiles             bool
	}{
		{name: "expire keeps retain_last", opts: MaintainOptions{RetainLast: 3}, wantExpired: 9, wantSnaps: 3},
		{name: "nothing old enough", opts: MaintainOptions{RetainLast: 3, ExpireOlderThan: time.Hour}, wantExpired: 0, wantSnaps: 12},
		// The compaction snapshot is the 13th: the newest 3 before it stay too.
		{name: "compact", opts: MaintainOptions{RetainLast: 3, Compact: true}, wantExpired: 9, wantSnaps: 4, fewerFiles: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			l, o := openLake(t, "sql", "day", "gw-a")
			commitMany(t, l, "source=web", 1, 12, 4) // 12 commits, each into both days
			rows := rowsOf(t, l)
			files, _ := liveFiles(t, l)
			onDisk := filesOnDisk(t, o.Warehouse)
			lastTbl, _ := l.load(ctx, "logs")
			lastCommit := lastTbl.CurrentSnapshot().Summary.Properties[PropCommitID]

			dry := tc.opts
			dry.DryRun = true
			dryRep, err := l.Maintain(ctx, dry)
			if err != nil || len(dryRep) != 1 {
				t.Fatalf("dry run = %+v, %v", dryRep, err)
			}
			if got := filesOnDisk(t, o.Warehouse); !slices.Equal(got, onDisk) {
				t.Fatalf("a dry run changed the warehouse: %d files before, %d after", len(onDisk), len(got))
			}
			if n := snapshotCount(t, l); n != 12 {
				t.Fatalf("a dry run changed the snapshots: %d", n)
			}

			rep, err := l.Maintain(ctx, tc.opts)
			if err != nil || len(rep) != 1 {
				t.Fatalf("maintain = %+v, %v", rep, err)
			}
			r := rep[0]
			if r.Table != "hyp.logs" || r.SnapshotsExpired != tc.wantExpired || r.SnapshotsAfter != tc.wantSnaps || r.FilesBefore != len(files) {
				t.Errorf("report %+v; want %d expired, %d snapshots, %d files before", r, tc.wantExpired, tc.wantSnaps, len(files))
			}
			if n := snapshotCount(t, l); n != tc.wantSnaps {
				t.Errorf("%d snapshots, want %d", n, tc.wantSnaps)
			}
			after, _ := liveFiles(t, l)
			if r.FilesAfter != len(after) {
				t.Errorf("files_after %d, table has %d", r.FilesAfter, len(after))
			}
			if tc.fewerFiles != (len(after) < len(files)) {
				t.Errorf("%d files before, %d after (compact %v)", len(files), len(after), tc.opts.Compact)
			}
			if tc.opts.Compact {
				// The compaction's replace snapshot carries the markers of the head it replaced.
				tbl, _ := l.load(ctx, "logs")
				head := tbl.CurrentSnapshot()
				props := head.Summary.Properties
				if head.Summary.Operation != table.OpReplace || props[PropCarried+"commit-id"] != lastCommit || props[PropCarried+"gateway"] != "gw-a" || props[PropCommitID] != "" {
					t.Errorf("compaction snapshot %s %v, want a replace carrying commit %s under %s only", head.Summary.Operation, props, lastCommit, PropCarried)
				}
			}
			dryRep[0].SnapshotsAfter = r.SnapshotsAfter // the dry run cannot see the compaction's own snapshot
			if dryRep[0] != r {
				t.Errorf("dry run reported %+v, the run %+v", dryRep[0], r)
			}
			if got := rowsOf(t, l); !maps.Equal(got, rows) {
				t.Errorf("maintain changed the rows: %d before, %d after", len(rows), len(got))
			}
			checkNoDuplicates(t, rowsOf(t, l))
		})
	}
}

// TestCompactionWithConcurrentAppend: another machine commits while a compaction is
// written; the compaction is committed on the new head and every row is in the table once.
func TestCompactionWithConcurrentAppend(t *testing.T) {
	ctx := context.Background()
	a, o := openLake(t, "sql", "day", "gw-a")
	b := openAs(t, o, "gw-b")
	commitMany(t, a, "source=web", 1, 6, 3)
	before, _ := liveFiles(t, a)
	opts := MaintainOptions{Compact: true, RetainLast: 100, ExpireOlderThan: time.Hour}
	opts.beforeCompactCommit = func() { commitMany(t, b, "source=db", 1, 2, 3) }
	rep, err := a.Maintain(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	rows := rowsOf(t, a)
	if len(rows) != 6*3+2*3 {
		t.Errorf("%d rows, want %d", len(rows), 6*3+2*3)
	}
	checkNoDuplicates(t, rows)
	after, _ := liveFiles(t, a)
	// b's two commits add up to four files (two days each); the six commits' twelve are two.
	if len(after) >= len(before) || rep[0].FilesAfter != len(after) {
		t.Errorf("files %d before, %d after, report %+v", len(before), len(after), rep[0])
	}
	for f, n := range after {
		if n != 1 {
			t.Errorf("%s referenced %d times", f, n)
		}
	}
}

// TestMaintainOrphans: only orphans older than the threshold go, never a young one nor a
// file of a pending commit, and nothing a snapshot references even when every file is old
// (in a warehouse whose path needs escaping).
func TestMaintainOrphans(t *testing.T) {
	for _, cat := range []string{"sql", "hadoop"} {
		t.Run(cat, func(t *testing.T) { maintainOrphans(t, cat) })
	}
}

func maintainOrphans(t *testing.T, catalogType string) {
	ctx := context.Background()
	dir := t.TempDir()
	o := Options{Catalog: catalogType, Warehouse: filepath.Join(dir, "warehouse"), Namespace: "hyp", PartitionBy: "day", Gateway: "gw-a"}
	if catalogType == "sql" {
		// The hadoop catalog refuses such a warehouse (icebergpath.CheckHadoopWarehouse): only
		// the sql one is tried.
		o.URI, o.Warehouse = "sqlite://"+filepath.Join(dir, "cat.db"), filepath.Join(dir, "ware house %41")
	}
	l, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	commitMany(t, l, "source=web", 1, 3, 4)
	tbl, _ := l.load(ctx, "logs")
	// A commit decided and written, not committed: its intent is unresolved.
	pending := commitOf("gw-a", batch(t, "source=web", 100, 4, arrow.PrimitiveTypes.Int64))
	pending.Base = headOf(tbl)
	written, err := l.write(ctx, tbl, pending)
	if err != nil || len(written) == 0 {
		t.Fatalf("write = %v, %v", written, err)
	}
	dataDir := filepath.Join(localKey(tbl.Location()), "data")
	stray := filepath.Join(dataDir, "stray-old.parquet")
	if err := os.WriteFile(stray, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	ageAll(t, o.Warehouse)
	young := filepath.Join(dataDir, "stray-young.parquet")
	if err := os.WriteFile(young, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	rows := rowsOf(t, l)
	opts := MaintainOptions{RetainLast: 100, ExpireOlderThan: 24 * time.Hour * 365, OrphanOlderThan: time.Hour,
		Protect: []Pending{{Dataset: "logs", ID: pending.ID, Base: pending.Base, Units: []Unit{pending.Batches[0].Unit}}}}
	dry := opts
	dry.DryRun = true
	onDisk := filesOnDisk(t, o.Warehouse)
	if rep, err := l.Maintain(ctx, dry); err != nil || rep[0].OrphansRemoved != 1 {
		t.Fatalf("dry run = %+v, %v; want 1 orphan", rep, err)
	}
	if got := filesOnDisk(t, o.Warehouse); !slices.Equal(got, onDisk) {
		t.Fatalf("a dry run removed files")
	}
	rep, err := l.Maintain(ctx, opts)
	if err != nil || rep[0].OrphansRemoved != 1 {
		t.Fatalf("maintain = %+v, %v; want 1 orphan removed", rep, err)
	}
	if _, err := os.Stat(stray); !os.IsNotExist(err) {
		t.Errorf("old orphan kept: %v", err)
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("young orphan removed: %v", err)
	}
	for _, f := range written {
		if _, err := os.Stat(localKey(f.FilePath())); err != nil {
			t.Errorf("a pending commit's file was removed: %v", err)
		}
	}
	if got := rowsOf(t, l); !maps.Equal(got, rows) {
		t.Errorf("rows changed: %d before, %d after", len(rows), len(got))
	}
	// Without the protection the pending commit's files are orphans too; its recovering
	// commit writes them again.
	opts.Protect = nil
	if rep, err := l.Maintain(ctx, opts); err != nil || rep[0].OrphansRemoved != len(written) {
		t.Fatalf("maintain = %+v, %v; want %d orphans removed", rep, err, len(written))
	}
	if res, err := l.Commit(ctx, pending); err != nil || res.Already || res.Rows != 4 {
		t.Fatalf("recovering commit = %+v, %v", res, err)
	}
	if got := rowsOf(t, l); len(got) != len(rows)+4 {
		t.Errorf("%d rows after the recovering commit, want %d", len(got), len(rows)+4)
	}
}

// TestRecoveryAfterExpiry: the snapshot holding a commit's markers has been expired; the
// commit is still found landed (through the writer's property) and not made again, and a
// commit that did not land is still made.
func TestRecoveryAfterExpiry(t *testing.T) {
	ctx := context.Background()
	a, o := openLake(t, "sql", "day", "gw-a")
	b := openAs(t, o, "gw-b")
	landed := commitOf("gw-a", batch(t, "source=web", 1, 4, arrow.PrimitiveTypes.Int64))
	if _, err := a.Commit(ctx, landed); err != nil {
		t.Fatal(err)
	}
	base, _ := a.Head(ctx, "logs")
	lost := commitOf("gw-a", batch(t, "source=web", 5, 4, arrow.PrimitiveTypes.Int64))
	lost.Base = base // decided, then the process died before committing
	commitMany(t, b, "source=db", 1, 3, 2)
	if _, err := a.Maintain(ctx, MaintainOptions{RetainLast: 1}); err != nil {
		t.Fatal(err)
	}
	tbl, _ := a.load(ctx, "logs")
	if committedIn(tbl.Metadata(), landed.ID, 0) || tbl.Metadata().SnapshotByID(base) != nil {
		t.Fatalf("the landed commit's snapshot was not expired: %d snapshots", len(tbl.Metadata().Snapshots()))
	}
	if ok, err := a.Committed(ctx, "logs", landed.ID, 0); err != nil || !ok {
		t.Errorf("Committed(landed) after expiry = %v, %v", ok, err)
	}
	// Status still names a's newest commit, whose snapshot is gone.
	if id, at, ok, err := a.LastCommit(ctx, "logs"); err != nil || !ok || id != landed.ID || time.Since(at) > time.Hour {
		t.Errorf("LastCommit after expiry = %q %v %v %v, want %s", id, at, ok, err, landed.ID)
	}
	if ok, err := a.Committed(ctx, "logs", lost.ID, lost.Base); err != nil || ok {
		t.Errorf("Committed(lost) after expiry = %v, %v", ok, err)
	}
	if res, err := a.Commit(ctx, landed); err != nil || !res.Already {
		t.Errorf("recommitting the landed commit = %+v, %v; want Already", res, err)
	}
	if res, err := a.Commit(ctx, lost); err != nil || res.Already {
		t.Errorf("recovering the lost commit = %+v, %v", res, err)
	}
	rows := rowsOf(t, a)
	if len(rows) != 4+4+3*2 {
		t.Errorf("%d rows, want %d", len(rows), 4+4+3*2)
	}
	checkNoDuplicates(t, rows)
}

// TestCompactionAfterARewoundIntent: a commit decided again after a rewind (same id, the
// old commit's snapshot as its base) and not yet made must not be taken for landed because
// a compaction carried the head's markers past that base.
func TestCompactionAfterARewoundIntent(t *testing.T) {
	ctx := context.Background()
	l, _ := openLake(t, "sql", "day", "gw-a")
	commitMany(t, l, "source=web", 1, 3, 4)
	again := commitOf("gw-a", batch(t, "source=web", 1, 12, arrow.PrimitiveTypes.Int64)) // the rewound re-export
	if _, err := l.Commit(ctx, again); err != nil {
		t.Fatal(err)
	}
	base, _ := l.Head(ctx, "logs")
	again.Base = base // decided once more, on the head holding its first landing; not made
	if _, err := l.Maintain(ctx, MaintainOptions{Compact: true, RetainLast: 100, ExpireOlderThan: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if head, _ := l.Head(ctx, "logs"); head == base {
		t.Fatalf("no compaction snapshot after the base")
	}
	if ok, err := l.Committed(ctx, "logs", again.ID, again.Base); err != nil || ok {
		t.Fatalf("Committed(the rewound intent) after a compaction = %v, %v; want false", ok, err)
	}
}
