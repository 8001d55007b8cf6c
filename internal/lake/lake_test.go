package lake

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/testutil/miniotest"
)

// cacheRecord builds a record shaped like a cache scan: seqs first..first+n-1, a string
// column msg, a column n of the given type, and a dotted column.
func cacheRecord(t testing.TB, first int64, n int, nType arrow.DataType) arrow.RecordBatch {
	t.Helper()
	ts := &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "msg", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "n", Type: nType, Nullable: true},
		{Name: "service.name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: columns.SeqColumn, Type: arrow.PrimitiveTypes.Int64},
		{Name: columns.IngestedAtColumn, Type: ts},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	day := time.Date(2026, 12, 1, 23, 59, 58, 0, time.UTC) // units straddle midnight: two partitions
	for i := range n {
		seq := first + int64(i)
		b.Field(0).(*array.StringBuilder).Append("row")
		switch nb := b.Field(1).(type) {
		case *array.Int64Builder:
			nb.Append(seq)
		case *array.Float64Builder:
			nb.Append(float64(seq) / 2)
		case *array.StringBuilder:
			nb.Append("text")
		}
		b.Field(2).(*array.StringBuilder).Append("svc")
		b.Field(3).(*array.Int64Builder).Append(seq)
		b.Field(4).(*array.TimestampBuilder).Append(arrow.Timestamp(day.Add(time.Duration(seq) * time.Second).UnixMicro()))
	}
	return b.NewRecordBatch()
}

func openLake(t *testing.T, catalogType, partitionBy, gateway string) (*Lake, Options) {
	t.Helper()
	dir := t.TempDir()
	o := Options{Catalog: catalogType, Warehouse: filepath.Join(dir, "warehouse"), Namespace: "hyp", PartitionBy: partitionBy, Gateway: gateway}
	if catalogType == "sql" {
		o.URI = "sqlite://" + filepath.Join(dir, "catalog", "cat.db")
	}
	l, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, o
}

// openAs opens another writer of o's catalog and warehouse, as gateway gw.
func openAs(t *testing.T, o Options, gw string) *Lake {
	t.Helper()
	o.Gateway = gw
	l, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func batch(t *testing.T, part string, first int64, n int, nType arrow.DataType) Batch {
	rec := cacheRecord(t, first, n, nType)
	t.Cleanup(rec.Release)
	return Batch{Unit: Unit{Dataset: "logs", Partition: part, First: first, Last: first + int64(n) - 1, Rows: int64(n)},
		Source: strings.TrimPrefix(part, "source="), Records: []arrow.RecordBatch{rec}}
}

func commitOf(gw string, bs ...Batch) Commit {
	units := make([]Unit, len(bs))
	for i, b := range bs {
		units[i] = b.Unit
	}
	return Commit{Dataset: "logs", ID: CommitID(gw, "", units), Batches: bs}
}

// liveFiles lists the table's data files with how many times the current snapshot
// references each.
func liveFiles(t *testing.T, l *Lake) (map[string]int, int64) {
	t.Helper()
	tbl, err := l.load(context.Background(), "logs")
	if err != nil || tbl == nil {
		t.Fatalf("load: %v %v", tbl, err)
	}
	scan := tbl.Scan()
	tasks, err := scan.PlanFiles(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	var rows int64
	for _, task := range tasks {
		out[task.File.FilePath()]++
		rows += task.File.Count()
	}
	return out, rows
}

func TestCommitAndRecover(t *testing.T) {
	for _, cat := range []string{"sql", "hadoop"} {
		for _, part := range []string{"day", "hour", "none"} {
			t.Run(cat+"/"+part, func(t *testing.T) {
				ctx := context.Background()
				l, _ := openLake(t, cat, part, "gw-a")
				c := commitOf("gw-a", batch(t, "source=web", 1, 5, arrow.PrimitiveTypes.Int64), batch(t, "source=db", 1, 3, arrow.PrimitiveTypes.Int64))
				if ok, err := l.Committed(ctx, "logs", c.ID, 0); err != nil || ok {
					t.Fatalf("Committed before any commit = %v, %v", ok, err)
				}
				res, err := l.Commit(ctx, c)
				if err != nil {
					t.Fatal(err)
				}
				if res.Rows != 8 || res.Already || res.Snapshot == 0 {
					t.Fatalf("commit = %+v", res)
				}
				if ok, err := l.Committed(ctx, "logs", c.ID, 0); err != nil || !ok {
					t.Fatalf("Committed after commit = %v, %v", ok, err)
				}
				// A crash after the commit: committing again finds its id and adds nothing.
				res, err = l.Commit(ctx, c)
				if err != nil || !res.Already {
					t.Fatalf("recovering commit = %+v, %v; want Already", res, err)
				}
				files, rows := liveFiles(t, l)
				if rows != 8 {
					t.Errorf("table holds %d rows, want 8", rows)
				}
				for f, n := range files {
					if n != 1 {
						t.Errorf("%s referenced %d times", f, n)
					}
				}
				tbl, _ := l.load(ctx, "logs")
				s := tbl.CurrentSnapshot()
				var units []Unit
				if err := json.Unmarshal([]byte(s.Summary.Properties[PropUnits]), &units); err != nil || len(units) != 2 {
					t.Errorf("hyp.units %q: %v", s.Summary.Properties[PropUnits], err)
				}
				if s.Summary.Properties[PropGateway] != "gw-a" || s.Summary.Properties[PropCommitID] != c.ID {
					t.Errorf("summary %v", s.Summary.Properties)
				}
				if tbl.Properties()[table.CommitNumRetriesKey] == "" {
					t.Errorf("table has no commit retries set: %v", tbl.Properties())
				}
				for _, col := range []string{"msg", "n", "service.name", columns.SeqColumn, columns.IngestedAtColumn, SourceColumn, GatewayColumn} {
					if _, ok := tbl.Schema().FindFieldByName(col); !ok {
						t.Errorf("table has no column %q: %s", col, tbl.Schema())
					}
				}
				id, at, ok, err := l.LastCommit(ctx, "logs")
				if err != nil || !ok || id != c.ID || time.Since(at) > time.Hour {
					t.Errorf("LastCommit = %q %v %v %v", id, at, ok, err)
				}
			})
		}
	}
}

func TestRecoverCommitsWhatDidNotLand(t *testing.T) {
	ctx := context.Background()
	l, _ := openLake(t, "sql", "day", "gw-a")
	first := commitOf("gw-a", batch(t, "source=web", 1, 5, arrow.PrimitiveTypes.Int64))
	if _, err := l.Commit(ctx, first); err != nil {
		t.Fatal(err)
	}
	base, err := l.Head(ctx, "logs")
	if err != nil {
		t.Fatal(err)
	}
	// Decided at base, then the process died before committing: the data files may even
	// have been written already.
	c := commitOf("gw-a", batch(t, "source=web", 6, 4, arrow.PrimitiveTypes.Int64))
	c.Base = base
	tbl, _ := l.load(ctx, "logs")
	if _, err := l.write(ctx, tbl, c); err != nil {
		t.Fatal(err)
	}
	res, err := l.Commit(ctx, c)
	if err != nil || res.Already || res.Rows != 4 {
		t.Fatalf("recovering commit = %+v, %v", res, err)
	}
	// The same seqs again after a rewind: a new commit on a newer base, new file names.
	again := commitOf("gw-a", batch(t, "source=web", 6, 4, arrow.PrimitiveTypes.Int64))
	if again.ID != c.ID {
		t.Fatalf("commit id depends on more than gateway and units")
	}
	if again.Base, err = l.Head(ctx, "logs"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Commit(ctx, again); err != nil {
		t.Fatal(err)
	}
	files, rows := liveFiles(t, l)
	if rows != 13 {
		t.Errorf("rows = %d, want 13 (5 + 4 + 4 re-exported)", rows)
	}
	for f, n := range files {
		if n != 1 {
			t.Errorf("%s referenced %d times", f, n)
		}
	}
}

func TestSchemaGrowsAndConflictsGoToSiblings(t *testing.T) {
	ctx := context.Background()
	l, _ := openLake(t, "sql", "none", "gw-a")
	if _, err := l.Commit(ctx, commitOf("gw-a", batch(t, "source=web", 1, 2, arrow.PrimitiveTypes.Int64))); err != nil {
		t.Fatal(err)
	}
	// Another machine's cache holds n as string: its values go to n__string.
	if _, err := l.Commit(ctx, commitOf("gw-a", batch(t, "source=db", 1, 2, arrow.BinaryTypes.String))); err != nil {
		t.Fatal(err)
	}
	// and a double n goes to n__double; later longs into a double column are widened.
	if _, err := l.Commit(ctx, commitOf("gw-a", batch(t, "source=x", 1, 2, arrow.PrimitiveTypes.Float64))); err != nil {
		t.Fatal(err)
	}
	tbl, _ := l.load(ctx, "logs")
	want := map[string]iceberg.Type{"n": iceberg.PrimitiveTypes.Int64, "n__string": iceberg.PrimitiveTypes.String, "n__double": iceberg.PrimitiveTypes.Float64}
	for name, typ := range want {
		f, ok := tbl.Schema().FindFieldByName(name)
		if !ok || !f.Type.Equals(typ) {
			t.Errorf("column %s = %v (%v), want %v", name, f.Type, ok, typ)
		}
	}
	if _, rows := liveFiles(t, l); rows != 6 {
		t.Errorf("rows = %d, want 6", rows)
	}
}

func TestHadoopOnS3Refused(t *testing.T) {
	_, err := Open(context.Background(), Options{Catalog: "hadoop", Warehouse: "s3://bucket/p", Namespace: "hyp", PartitionBy: "day"})
	if err == nil || !strings.Contains(err.Error(), "hadoop catalog cannot be used with an s3:// warehouse") {
		t.Fatalf("Open = %v", err)
	}
}

func TestCommitIDDependsOnUnitsOnly(t *testing.T) {
	u := []Unit{{Dataset: "logs", Partition: "source=a", First: 1, Last: 9, Rows: 9}}
	if CommitID("g", "", u) != CommitID("g", "", []Unit{{Dataset: "logs", Partition: "source=a", First: 1, Last: 9, Rows: 7}}) {
		t.Error("row count changed the commit id")
	}
	for _, other := range []struct {
		gw string
		u  Unit
	}{{"h", u[0]}, {"g", Unit{Dataset: "logs", Partition: "source=b", First: 1, Last: 9}}, {"g", Unit{Dataset: "logs", Partition: "source=a", First: 2, Last: 9}}} {
		if CommitID(other.gw, "", []Unit{other.u}) == CommitID("g", "", u) {
			t.Errorf("%+v has the same commit id", other)
		}
	} // A reinstalled machine's first commit holds the same seqs as its earlier life's.
	if CommitID("g", "0123abcd", u) == CommitID("g", "", u) || CommitID("g", "0123abcd", u) == CommitID("g", "4567ef01", u) {
		t.Error("the incarnation does not change the commit id")
	}
	// A cache made before incarnations keeps the ids it had (pinned; the value is the SHA-256
	// of the documented encoding, computed apart).
	if got := CommitID("g", "", u); got != "148eab2f7d58b6718151bdd18d09039e" {
		t.Errorf("CommitID changed for the incarnation \"\": %s", got)
	}
}

// commitConcurrently has a and b commit to one table at once, each to its own partition,
// commits units of rowsPer rows (each twice when repeat: the second must find it Already),
// and checks that every row landed once and no data file is referenced twice.
func commitConcurrently(t *testing.T, a, b *Lake, commits, rowsPer int, repeat bool) {
	t.Helper()
	ctx := context.Background()
	errs := make(chan error, 2)
	for i, l := range []*Lake{a, b} {
		go func() {
			part := fmt.Sprintf("source=m%d", i)
			for j := range commits {
				c := commitOf(l.gw, batch(t, part, int64(j*rowsPer+1), rowsPer, arrow.PrimitiveTypes.Int64))
				if _, err := l.Commit(ctx, c); err != nil {
					errs <- fmt.Errorf("%s commit %d: %w", l.gw, j, err)
					return
				}
				if !repeat {
					continue
				}
				// Committing the same units again (a retry after a crash) adds nothing.
				if r, err := l.Commit(ctx, c); err != nil || !r.Already {
					errs <- fmt.Errorf("%s repeated commit %d = %+v, %v; want Already", l.gw, j, r, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	files, rows := liveFiles(t, a)
	if want := int64(2 * commits * rowsPer); rows != want {
		t.Errorf("rows = %d, want %d", rows, want)
	}
	for f, n := range files {
		if n != 1 {
			t.Errorf("%s referenced %d times", f, n)
		}
	}
}

// TestConcurrentWritersNeverDuplicate has two machines commit to one table at once: the
// conflicting commits retry onto the new head, and every row lands once.
func TestConcurrentWritersNeverDuplicate(t *testing.T) {
	ctx := context.Background()
	a, o := openLake(t, "sql", "day", "gw-a")
	b := openAs(t, o, "gw-b")
	const commits, rowsPer = 8, 5
	commitConcurrently(t, a, b, commits, rowsPer, false)
	tbl, _ := a.load(ctx, "logs")
	if n := len(tbl.Metadata().Snapshots()); n != 2*commits {
		t.Errorf("%d snapshots, want %d", n, 2*commits)
	}
}

// TestNamesParquetCannotHoldTogether: iceberg-go writes `a.b` to Parquet as `a_x2Eb`, so a
// literal `a_x2Eb` beside it, or an empty field name, must not fail every commit.
func TestNamesParquetCannotHoldTogether(t *testing.T) {
	ts := &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "a.b", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "a_x2Eb", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: columns.SeqColumn, Type: arrow.PrimitiveTypes.Int64},
		{Name: columns.IngestedAtColumn, Type: ts},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	b.Field(0).(*array.StringBuilder).Append("dotted")
	b.Field(1).(*array.StringBuilder).Append("literal")
	b.Field(2).(*array.Int64Builder).Append(7)
	b.Field(3).(*array.Int64Builder).Append(1)
	b.Field(4).(*array.TimestampBuilder).Append(arrow.Timestamp(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixMicro()))
	rec := b.NewRecordBatch()
	defer rec.Release()
	l, _ := openLake(t, "sql", "day", "g")
	bt := Batch{Unit: Unit{Dataset: "logs", Partition: "source=a", First: 1, Last: 1, Rows: 1}, Source: "a", Records: []arrow.RecordBatch{rec}}
	for range 2 { // the second commit meets the columns already in the table
		if _, err := l.Commit(context.Background(), commitOf("g", bt)); err != nil {
			t.Fatal(err)
		}
		bt.Unit.First, bt.Unit.Last = 2, 2
	}
	tbl, _ := l.load(context.Background(), "logs")
	for _, col := range []string{"a.b", "a_x2Eb__string", "__long"} {
		if _, ok := tbl.Schema().FindFieldByName(col); ok {
			continue
		}
		t.Errorf("table has no column %q: %s", col, tbl.Schema())
	}
	if _, rows := liveFiles(t, l); rows != 2 {
		t.Errorf("rows = %d, want 2", rows)
	}
}

// TestS3Warehouse writes a table into MinIO with an sqlite catalog, and commits the same
// units again across a MinIO restart.
func TestS3Warehouse(t *testing.T) {
	ctx := context.Background()
	m := miniotest.Start(t)
	m.SetEnv(t)
	m.CreateBucket(t, "lake")
	dir := t.TempDir()
	l, err := Open(ctx, Options{Catalog: "sql", URI: "sqlite://" + filepath.Join(dir, "cat.db"), Warehouse: "s3://lake/tables",
		Namespace: "hyp", PartitionBy: "day", Region: m.Region(), Endpoint: m.Endpoint(), PathStyle: true, Gateway: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c := commitOf("g", batch(t, "source=web", 1, 5, arrow.PrimitiveTypes.Int64), batch(t, "source=db", 1, 3, arrow.PrimitiveTypes.Int64))
	if r, err := l.Commit(ctx, c); err != nil || r.Rows != 8 {
		t.Fatalf("commit = %+v, %v", r, err)
	}
	m.Restart(t)
	if r, err := l.Commit(ctx, c); err != nil || !r.Already {
		t.Fatalf("repeated commit = %+v, %v; want Already", r, err)
	}
	files, rows := liveFiles(t, l)
	if rows != 8 || len(files) == 0 {
		t.Fatalf("rows %d files %v", rows, files)
	}
	for f := range files {
		if !strings.HasPrefix(f, "s3://lake/tables/") {
			t.Errorf("data file %s is not in the warehouse", f)
		}
	}
	if keys := m.List(t, "lake", "tables/"); len(keys) == 0 {
		t.Errorf("nothing in the bucket")
	}
	// A query over the table reads local copies of its S3 files.
	scratch := t.TempDir()
	tfs, err := l.Tables(ctx, scratch)
	if err != nil || len(tfs) != 1 || tfs[0].Dataset != "logs" || len(tfs[0].Files) != len(files) {
		t.Fatalf("Tables = %+v, %v; want logs with %d files", tfs, err, len(files))
	}
	for _, f := range tfs[0].Files {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 || !strings.HasPrefix(f, scratch) {
			t.Errorf("local copy %s: %v", f, err)
		}
	}
	if _, ok := tfs[0].FieldIDs["_hyp_ingest_seq"]; !ok {
		t.Errorf("no field id for _hyp_ingest_seq: %v", tfs[0].FieldIDs)
	}
}
