package lake

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/testutil/lakeread"
)

// boundsRows is the case: more rows than one row group holds, a string over 4 KiB
// in one row group only (row 10 of lo, long unicode in the last row group of u), a dotted
// name, an empty-string minimum, a column whose greatest value has no upper bound of 16
// characters (top), NaN and -0 in a double.
const boundsRows = 70_001

func boundsRecord(t testing.TB, first int64) arrow.RecordBatch {
	t.Helper()
	ts := &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
	str := func(name string) arrow.Field {
		return arrow.Field{Name: name, Type: arrow.BinaryTypes.String, Nullable: true}
	}
	sc := arrow.NewSchema([]arrow.Field{
		str("lo"), str("service.name"), str("empty"), str("u"), str("top"),
		{Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "f", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "ok", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: columns.SeqColumn, Type: arrow.PrimitiveTypes.Int64},
		{Name: columns.IngestedAtColumn, Type: ts},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	day := time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC)
	for i := range boundsRows {
		s := func(c int) *array.StringBuilder { return b.Field(c).(*array.StringBuilder) }
		if i == 10 {
			s(0).Append(strings.Repeat("A", 5000))
		} else {
			s(0).Append(fmt.Sprintf("m%07d", i))
		}
		s(1).Append(fmt.Sprintf("svc-%d", i%7))
		switch {
		case i%5 == 0:
			s(2).AppendNull()
		case i == 3:
			s(2).Append("")
		default:
			s(2).Append(fmt.Sprintf("e%d", i))
		}
		if i == boundsRows-1 {
			s(3).Append(strings.Repeat("é", 3000) + "z")
		} else {
			s(3).Append(fmt.Sprintf("ü%d", i))
		}
		if i == 5 {
			s(4).Append(strings.Repeat("\U0010ffff", 20))
		} else {
			s(4).Append("t")
		}
		b.Field(5).(*array.Int64Builder).Append(int64(i) - 35_000)
		fb := b.Field(6).(*array.Float64Builder)
		switch i {
		case 7:
			fb.Append(math.NaN())
		case 8:
			fb.Append(math.Copysign(0, -1))
		default:
			fb.Append(float64(i) / 4)
		}
		b.Field(7).(*array.BooleanBuilder).Append(i%3 == 0)
		b.Field(8).(*array.Int64Builder).Append(first + int64(i))
		b.Field(9).(*array.TimestampBuilder).Append(arrow.Timestamp(day.Add(time.Duration(i) * time.Millisecond).UnixMicro()))
	}
	return b.NewRecordBatch()
}

func boundsBatch(t testing.TB) Batch {
	rec := boundsRecord(t, 1)
	t.Cleanup(rec.Release)
	return Batch{Unit: Unit{Dataset: "logs", Partition: "source=a", First: 1, Last: boundsRows, Rows: boundsRows}, Source: "a", Records: []arrow.RecordBatch{rec}}
}

// checkLakeBounds reads the table with lakeread (its own Avro decoder) and each live file
// with arrow-go: every bound holds every value, and only top, whose greatest value has no
// upper bound of 16 characters, lacks one; in files hyp wrote (not named in foreign), lo's
// lower bound is the long value's prefix. It returns the number of live files.
func checkLakeBounds(t *testing.T, l *Lake, o Options, foreign ...string) int {
	t.Helper()
	ctx := context.Background()
	tbl, err := l.load(ctx, "logs")
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int{}
	for _, f := range tbl.Schema().Fields() {
		ids[f.Name] = f.ID
	}
	got, err := lakeread.Read(ctx, lakeread.Options{Catalog: o.URI, Warehouse: o.Warehouse, Namespace: "hyp"}, "logs")
	if err != nil {
		t.Fatal(err)
	}
	for _, df := range got.Files {
		p := df.Path
		if u, err := url.Parse(p); err == nil && u.Scheme == "file" {
			p = u.Path
		}
		lacking, err := lakeread.BoundsHold(p, df.Lower, df.Upper, got.Types)
		if err != nil {
			t.Errorf("%s: %v", df.Path, err)
		}
		if want := []int{ids["top"]}; !slices.Equal(lacking, want) {
			t.Errorf("%s: columns %v have values and lack a bound, want only top %v", df.Path, lacking, want)
		}
		if lo, ok := df.Lower[ids["empty"]]; !ok || len(lo) != 0 {
			t.Errorf("%s: empty's lower bound is %q (present %v), want the empty string", df.Path, lo, ok)
		}
		if lo, ok := df.Lower[ids["lo"]]; !slices.Contains(foreign, path.Base(p)) && (!ok || string(lo) != strings.Repeat("A", 16)) {
			t.Errorf("%s: lo's lower bound is %q, want 16 A's", df.Path, lo)
		}
	}
	return len(got.Files)
}

// The 70,001-row case through an iceberg sink commit: the bounds of every column
// hold every value, dotted names and the empty string included.
func TestBoundsHoldEveryValue(t *testing.T) {
	l, o := openLake(t, "sql", "day", "g")
	if _, err := l.Commit(context.Background(), commitOf("g", boundsBatch(t))); err != nil {
		t.Fatal(err)
	}
	if n := checkLakeBounds(t, l, o); n != 1 {
		t.Errorf("%d live files, want 1", n)
	}
}

// A file described as iceberg-go describes it (written by arrow-go's writer: no bounds for
// the dotted name, the empty string, the long values) is found by Maintain, as one whose
// bounds left out values would be, and replaced by a described copy: bounds_fixed counts
// it, a dry run changes nothing, a second run finds nothing, and expiring the old
// snapshots keeps every row.
func TestMaintainFixesBounds(t *testing.T) {
	ctx := context.Background()
	l, o := openLake(t, "sql", "day", "g")
	if _, err := l.Commit(ctx, commitOf("g", boundsBatch(t))); err != nil { // creates the table
		t.Fatal(err)
	}
	tbl, err := l.load(ctx, "logs")
	if err != nil {
		t.Fatal(err)
	}
	rec := boundsRecord(t, boundsRows+1)
	defer rec.Release()
	recs, err := l.project(tbl.Schema(), Batch{Unit: Unit{Dataset: "logs", Partition: "source=a", First: boundsRows + 1, Last: 2 * boundsRows, Rows: boundsRows}, Source: "a", Records: []arrow.RecordBatch{rec}})
	if err != nil {
		t.Fatal(err)
	}
	loc, err := url.Parse(tbl.Location())
	if err != nil {
		t.Fatal(err)
	}
	path := loc.JoinPath("data", "old.parquet").Path
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	fsc := fileSchema(recs[0].Schema())
	pw, err := pqarrow.NewFileWriter(fsc, f, parquet.NewWriterProperties(parquet.WithMaxRowGroupLength(64<<10), parquet.WithMaxStatsSize(4096)), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		named := array.NewRecordBatch(fsc, r.Columns(), r.NumRows())
		if err := pw.Write(named); err != nil {
			t.Fatal(err)
		}
		named.Release()
		r.Release()
	}
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	fsys, err := tbl.FS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old, err := table.FileToDataFile(ctx, fsys, path, tbl.Schema(), tbl.Spec(), 0, tbl.Properties())
	if err != nil {
		t.Fatal(err)
	}
	svc := slices.IndexFunc(tbl.Schema().Fields(), func(f iceberg.NestedField) bool { return f.Name == "service.name" })
	if lo, ok := old.LowerBoundValues()[tbl.Schema().Field(svc).ID]; ok {
		t.Fatalf("iceberg-go gives service.name the lower bound %q: the case no longer reproduces", lo)
	}
	tx := tbl.NewTransaction()
	if err := tx.AddDataFiles(ctx, []iceberg.DataFile{old}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	keep := MaintainOptions{RetainLast: 100, ExpireOlderThan: time.Hour, OrphanOlderThan: time.Hour}
	dry := keep
	dry.DryRun = true
	for _, tc := range []struct {
		name string
		o    MaintainOptions
		want int
	}{{"dry run", dry, 1}, {"run", keep, 1}, {"again", keep, 0}} {
		rep, err := l.Maintain(ctx, tc.o)
		if err != nil || len(rep) != 1 || rep[0].BoundsFixed != tc.want {
			t.Fatalf("%s: %+v, %v; want %d bounds fixed", tc.name, rep, err, tc.want)
		}
	}
	// Every snapshot but the last expires: the file goes, its copy stays.
	if _, err := l.Maintain(ctx, MaintainOptions{RetainLast: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(copyName(path)); err != nil {
		t.Fatalf("the fixed file's copy is gone: %v", err)
	}
	if n := checkLakeBounds(t, l, o, "old-bounds.parquet"); n != 2 {
		t.Errorf("%d live files, want 2", n)
	}
	if _, rows := liveFiles(t, l); rows != 2*boundsRows {
		t.Errorf("%d rows, want %d", rows, 2*boundsRows)
	}
}
