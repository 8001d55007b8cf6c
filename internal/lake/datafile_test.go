package lake

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"

	"github.com/hyp-project/hyp/internal/testutil/lakeread"
	"github.com/hyp-project/hyp/internal/testutil/miniotest"
)

// partitionValue is what a data file of a table partitioned by `by` must carry for rows
// ingested at ts.
func partitionValue(by string, ts time.Time) any {
	switch by {
	case "day":
		return iceberg.Date(ts.Unix() / 86400)
	case "hour":
		return int32(ts.Unix() / 3600)
	}
	return nil
}

// ingestedAt is the ingest time cacheRecord gives seq.
func ingestedAt(seq int64) time.Time {
	return time.Date(2026, 12, 1, 23, 59, 58, 0, time.UTC).Add(time.Duration(seq) * time.Second)
}

// TestDataFilesNamedAsIcebergGoNamedThem: a run of one partition gets the object keys
// iceberg-go's writer gave it for the same write uuid (so a commit retried across the
// upgrade from it overwrites its first attempt's files), with the same rows, counts and
// partition.
func TestDataFilesNamedAsIcebergGoNamedThem(t *testing.T) {
	for _, by := range []string{"day", "hour", "none"} {
		t.Run(by, func(t *testing.T) {
			ctx := context.Background()
			l, _ := openLake(t, "sql", by, "g")
			// Seqs 10..29 are all ingested on 2026-12-02 in hour 00.
			b := batch(t, "source=web", 10, 20, arrow.PrimitiveTypes.Int64)
			tbl, err := l.prepare(ctx, "logs", []Batch{b})
			if err != nil {
				t.Fatal(err)
			}
			id := uuid.New()
			recs, err := l.project(tbl.Schema(), b)
			if err != nil {
				t.Fatal(err)
			}
			ours, err := writeRun(ctx, tbl, recs, id)
			if err != nil {
				t.Fatal(err)
			}
			if recs, err = l.project(tbl.Schema(), b); err != nil {
				t.Fatal(err)
			}
			theirs := icebergGoWrite(t, tbl, recs, id)
			if len(ours) != 1 || len(theirs) != 1 {
				t.Fatalf("%d files, iceberg-go wrote %d", len(ours), len(theirs))
			}
			o, g := ours[0], theirs[0]
			if o.FilePath() != g.FilePath() {
				t.Errorf("file %s, iceberg-go named it %s", o.FilePath(), g.FilePath())
			}
			if want := fmt.Sprintf("/00000-0-%s-00001.parquet", id); !strings.HasSuffix(o.FilePath(), want) {
				t.Errorf("file %s is not named %s", o.FilePath(), want)
			}
			if o.Count() != 20 || o.Count() != g.Count() {
				t.Errorf("%d rows, iceberg-go wrote %d", o.Count(), g.Count())
			}
			want := map[int]any{}
			if v := partitionValue(by, ingestedAt(10)); v != nil {
				want[1000] = v
			}
			if fmt.Sprint(o.Partition()) != fmt.Sprint(want) || fmt.Sprint(g.Partition()) != fmt.Sprint(want) {
				t.Errorf("partition %v, iceberg-go's %v, want %v", o.Partition(), g.Partition(), want)
			}
			if o.SpecID() != g.SpecID() {
				t.Errorf("spec %d, iceberg-go's %d", o.SpecID(), g.SpecID())
			}
		})
	}
}

// icebergGoWrite writes recs as the lake did before it wrote its own files.
func icebergGoWrite(t *testing.T, tbl *table.Table, recs []arrow.RecordBatch, id uuid.UUID) []iceberg.DataFile {
	t.Helper()
	it := func(yield func(arrow.RecordBatch, error) bool) {
		for _, r := range recs {
			if !yield(r, nil) {
				return
			}
		}
	}
	var out []iceberg.DataFile
	for df, err := range table.WriteRecords(context.Background(), tbl, recs[0].Schema(), it, table.WithWriteUUID(id), table.WithMaxWriteWorkers(1)) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, df)
	}
	return out
}

// TestRetriedCommitWritesTheSameKeys: a commit whose files were written but whose
// commit was never made (its answer lost, the daemon killed) writes the same object keys
// again when retried, and commits them: the storage holds no file the table does not
// name. Each file holds one partition, the one its rows' ingest times give, and an
// independent reader reads every row back once.
func TestRetriedCommitWritesTheSameKeys(t *testing.T) {
	for _, by := range []string{"day", "hour", "none"} {
		t.Run("local-"+by, func(t *testing.T) {
			l, o := openLake(t, "sql", by, "g")
			keys := func() []string {
				var out []string
				for _, f := range filesOnDisk(t, o.Warehouse) {
					if strings.HasSuffix(f, ".parquet") {
						out = append(out, FileURI(f))
					}
				}
				return out
			}
			checkRetriedCommit(t, l, by, keys, lakeread.Options{Catalog: o.URI, Namespace: "hyp"})
		})
	}
	t.Run("s3-hour", func(t *testing.T) {
		m := miniotest.Start(t)
		m.SetEnv(t)
		m.CreateBucket(t, "lake")
		uri := "sqlite://" + filepath.Join(t.TempDir(), "cat.db")
		l, err := Open(context.Background(), Options{Catalog: "sql", URI: uri, Warehouse: "s3://lake/tables",
			Namespace: "hyp", PartitionBy: "hour", Region: m.Region(), Endpoint: m.Endpoint(), PathStyle: true, Gateway: "g"})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		keys := func() []string {
			var out []string
			for _, k := range m.List(t, "lake", "tables/") {
				if strings.HasSuffix(k, ".parquet") {
					out = append(out, "s3://lake/"+k)
				}
			}
			return out
		}
		checkRetriedCommit(t, l, "hour", keys, lakeread.Options{Catalog: uri, Namespace: "hyp", S3: m.Client()})
	})
}

func checkRetriedCommit(t *testing.T, l *Lake, by string, keys func() []string, ro lakeread.Options) {
	t.Helper()
	ctx := context.Background()
	// Both units straddle midnight (seq 2 is the first of 2026-12-02, hour 00); the db
	// unit's second record has n as a string, so that unit is two runs of two schemas.
	web := batch(t, "source=web", 1, 6, arrow.PrimitiveTypes.Int64)
	db := batch(t, "source=db", 1, 3, arrow.PrimitiveTypes.Int64)
	db.Records = append(db.Records, cacheRecord(t, 4, 2, arrow.BinaryTypes.String))
	t.Cleanup(db.Records[1].Release)
	db.Unit.Last, db.Unit.Rows = 5, 5
	c := commitOf("g", web, db)
	tbl, err := l.prepare(ctx, "logs", c.Batches)
	if err != nil {
		t.Fatal(err)
	}
	c.Base = headOf(tbl)
	first, err := l.write(ctx, tbl, c)
	if err != nil {
		t.Fatal(err)
	}
	written := keys()
	var paths []string
	for _, f := range first {
		paths = append(paths, f.FilePath())
	}
	slices.Sort(paths)
	if !slices.Equal(paths, written) {
		t.Fatalf("write returned %v, the storage holds %v", paths, written)
	}
	wantFiles := 3 // web, db's two runs
	if by != "none" {
		wantFiles = 5 // web's and db's first run across midnight, db's second after it
	}
	if len(first) != wantFiles {
		t.Errorf("%d files, want %d: %v", len(first), wantFiles, paths)
	}

	r, err := l.Commit(ctx, c)
	if err != nil || r.Already || r.Rows != 11 || r.Files != wantFiles {
		t.Fatalf("retried commit = %+v, %v", r, err)
	}
	if got := keys(); !slices.Equal(got, written) {
		t.Errorf("the retry wrote %v, the first attempt %v", got, written)
	}
	live, rows := liveFiles(t, l)
	if rows != 11 || len(live) != len(written) {
		t.Errorf("table holds %d rows in %v", rows, live)
	}
	for _, k := range written {
		if live[k] != 1 {
			t.Errorf("%s is referenced %d times", k, live[k])
		}
	}
	checkPartitions(t, l, by)

	got, err := lakeread.Read(ctx, ro, "logs")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Files) != len(written) || len(got.Duplicates) != 0 {
		t.Errorf("lakeread finds %d files (duplicates %v), want %d", len(got.Files), got.Duplicates, len(written))
	}
	// service.name has the Parquet name iceberg-go gave it.
	vals, err := got.Rows(ctx, SourceColumn, "_hyp_ingest_seq", "msg", "n", "n__string", "service_x2Ename", "_hyp_ingested_at")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, v := range vals {
		key := fmt.Sprint(v[0], "/", v[1])
		if seen[key] {
			t.Errorf("row %s twice", key)
		}
		seen[key] = true
		seq := v[1].(int64)
		if v[2] != "row" || v[5] != "svc" {
			t.Errorf("row %s: msg %v, service.name %v", key, v[2], v[5])
		}
		if isDBString := v[0] == "db" && seq >= 4; isDBString && v[4] != "text" || !isDBString && v[3] != seq {
			t.Errorf("row %s: n %v, n__string %v", key, v[3], v[4])
		}
		if ts, ok := v[6].(time.Time); !ok || !ts.Equal(ingestedAt(seq)) {
			t.Errorf("row %s ingested at %v, want %v", key, v[6], ingestedAt(seq))
		}
	}
	if len(seen) != 11 {
		t.Errorf("lakeread reads %d rows, want 11", len(seen))
	}
}

// checkPartitions: every live file's rows are of the partition its entry names.
func checkPartitions(t *testing.T, l *Lake, by string) {
	t.Helper()
	tbl, err := l.load(context.Background(), "logs")
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := tbl.Scan().PlanFiles(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		f := task.File
		lo, hi := f.LowerBoundValues()[2], f.UpperBoundValues()[2]
		if len(lo) != 8 || len(hi) != 8 {
			t.Fatalf("%s: no ingest time bounds", f.FilePath())
		}
		for _, b := range [][]byte{lo, hi} {
			var micros int64
			for i := 7; i >= 0; i-- {
				micros = micros<<8 | int64(b[i])
			}
			want := map[int]any{}
			if v := partitionValue(by, time.UnixMicro(micros)); v != nil {
				want[1000] = v
			}
			if fmt.Sprint(f.Partition()) != fmt.Sprint(want) {
				t.Errorf("%s holds a row of %v, its partition is %v", f.FilePath(), want, f.Partition())
			}
		}
		if by != "none" && !strings.Contains(f.FilePath(), "/data/_hyp_ingested_at_"+by+"=") {
			t.Errorf("%s is not under its partition path", f.FilePath())
		}
	}
}

// TestRunRollsAtTheTargetSize: a run larger than the table's target file size is written
// as several files, named as iceberg-go's rolling writer named them.
func TestRunRollsAtTheTargetSize(t *testing.T) {
	ctx := context.Background()
	l, _ := openLake(t, "sql", "none", "g")
	// Three records of a row group each: a file is past a one-byte target once its first
	// row group is out.
	b := batch(t, "source=web", 1, rowGroupRows, arrow.PrimitiveTypes.Int64)
	for i := 1; i < 3; i++ {
		r := cacheRecord(t, int64(1+i*rowGroupRows), rowGroupRows, arrow.PrimitiveTypes.Int64)
		t.Cleanup(r.Release)
		b.Records = append(b.Records, r)
	}
	tbl, err := l.prepare(ctx, "logs", []Batch{b})
	if err != nil {
		t.Fatal(err)
	}
	tx := tbl.NewTransaction()
	if err := tx.SetProperties(iceberg.Properties{table.WriteTargetFileSizeBytesKey: "1"}); err != nil {
		t.Fatal(err)
	}
	if tbl, err = tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	recs, err := l.project(tbl.Schema(), b)
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.New()
	files, err := writeRun(ctx, tbl, recs, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Fatalf("%d files, want 3", len(files))
	}
	for i, f := range files {
		if want := fmt.Sprintf("/data/00000-%d-%s-%05d.parquet", i, id, i+1); !strings.HasSuffix(f.FilePath(), want) {
			t.Errorf("file %d is %s, want …%s", i, f.FilePath(), want)
		}
		if f.Count() != rowGroupRows {
			t.Errorf("file %d holds %d rows", i, f.Count())
		}
	}
}

// BenchmarkCommit exports one unit of 250k rows of one day into a local table per op.
func BenchmarkCommit(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	l, err := Open(ctx, Options{Catalog: "sql", URI: "sqlite://" + filepath.Join(dir, "cat.db"), Warehouse: filepath.Join(dir, "w"), Namespace: "hyp", PartitionBy: "day", Gateway: "g"})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	const rows = 250_000
	rec := cacheRecord(b, 100_000, rows, arrow.PrimitiveTypes.Int64)
	defer rec.Release()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		bt := Batch{Unit: Unit{Dataset: "logs", Partition: "source=web", First: int64(i) * rows, Last: int64(i+1)*rows - 1, Rows: rows}, Source: "web", Records: []arrow.RecordBatch{rec}}
		if _, err := l.Commit(ctx, commitOf("g", bt)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*rows)/b.Elapsed().Seconds(), "rows/s")
}

// TestSplitPartitions: rows go to the partition of their ingest time, partitions in the
// order their first rows come, each partition's rows in their order, whatever the runs.
func TestSplitPartitions(t *testing.T) {
	sc := iceberg.NewSchema(0, iceberg.NestedField{ID: 2, Name: "_hyp_ingested_at", Type: iceberg.PrimitiveTypes.TimestampTz})
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(d, h int) *time.Time { v := day.AddDate(0, 0, d).Add(time.Duration(h) * time.Hour); return &v }
	tests := []struct {
		name  string
		by    iceberg.Transform
		times [][]*time.Time // per record; nil is a null ingest time
		want  map[string][]int64
		order []string
	}{
		{"day-one-run", iceberg.DayTransform{}, [][]*time.Time{{at(0, 1), at(0, 2)}, {at(0, 23)}},
			map[string][]int64{"_hyp_ingested_at_day=2026-12-01": {0, 1, 2}}, []string{"_hyp_ingested_at_day=2026-12-01"}},
		{"day-back-and-forth", iceberg.DayTransform{}, [][]*time.Time{{at(1, 0), at(0, 5), at(1, 3)}, {at(0, 6), at(2, 0)}},
			map[string][]int64{"_hyp_ingested_at_day=2026-12-02": {0, 2}, "_hyp_ingested_at_day=2026-12-01": {1, 3}, "_hyp_ingested_at_day=2026-12-03": {4}},
			[]string{"_hyp_ingested_at_day=2026-12-02", "_hyp_ingested_at_day=2026-12-01", "_hyp_ingested_at_day=2026-12-03"}},
		{"hour", iceberg.HourTransform{}, [][]*time.Time{{at(0, 23), at(1, 0), at(1, 0)}},
			map[string][]int64{"_hyp_ingested_at_hour=2026-12-01-23": {0}, "_hyp_ingested_at_hour=2026-12-02-00": {1, 2}},
			[]string{"_hyp_ingested_at_hour=2026-12-01-23", "_hyp_ingested_at_hour=2026-12-02-00"}},
		{"null", iceberg.HourTransform{}, [][]*time.Time{{nil, at(0, 0), nil}},
			map[string][]int64{"_hyp_ingested_at_hour=null": {0, 2}, "_hyp_ingested_at_hour=2026-12-01-00": {1}},
			[]string{"_hyp_ingested_at_hour=null", "_hyp_ingested_at_hour=2026-12-01-00"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := iceberg.NewPartitionSpec(iceberg.PartitionField{SourceIDs: []int{2}, FieldID: 1000, Name: "_hyp_ingested_at_" + tt.by.String(), Transform: tt.by})
			asc := arrow.NewSchema([]arrow.Field{
				{Name: "_hyp_ingested_at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
				{Name: "row", Type: arrow.PrimitiveTypes.Int64},
			}, nil)
			var recs []arrow.RecordBatch
			row := int64(0)
			for _, ts := range tt.times {
				b := array.NewRecordBuilder(memory.DefaultAllocator, asc)
				for _, v := range ts {
					if v == nil {
						b.Field(0).AppendNull()
					} else {
						b.Field(0).(*array.TimestampBuilder).Append(arrow.Timestamp(v.UnixMicro()))
					}
					b.Field(1).(*array.Int64Builder).Append(row)
					row++
				}
				recs = append(recs, b.NewRecordBatch())
				b.Release()
			}
			defer func() {
				for _, r := range recs {
					r.Release()
				}
			}()
			parts, err := splitPartitions(sc, spec, recs)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][]int64{}
			var order []string
			for _, p := range parts {
				order = append(order, p.path)
				for _, r := range p.recs {
					got[p.path] = append(got[p.path], r.Column(1).(*array.Int64).Int64Values()...)
					r.Release()
				}
			}
			if !slices.Equal(order, tt.order) || fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("partitions %v with rows %v, want %v with %v", order, got, tt.order, tt.want)
			}
		})
	}
}
