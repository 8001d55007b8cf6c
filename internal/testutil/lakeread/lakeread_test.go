package lakeread

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"github.com/apache/iceberg-go/table"

	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/lake"
	"github.com/hyp-project/hyp/internal/testutil/miniotest"
	"github.com/hyp-project/hyp/internal/testutil/pgtest"
)

// The tables read here are written by internal/lake, the writer this package is the
// independent check of; iceberg-go itself only plays a faulty writer (a file added twice).

// unitBatch is a unit of n rows with ids (and seqs) first..first+n-1, shaped like a cache scan.
func unitBatch(t *testing.T, source string, first int64, n int) lake.Batch {
	t.Helper()
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "msg", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: columns.SeqColumn, Type: arrow.PrimitiveTypes.Int64},
		{Name: columns.IngestedAtColumn, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for i := range int64(n) {
		b.Field(0).(*array.Int64Builder).Append(first + i)
		b.Field(1).(*array.StringBuilder).Append("m")
		b.Field(2).(*array.Int64Builder).Append(first + i)
		b.Field(3).(*array.TimestampBuilder).Append(arrow.Timestamp(at.UnixMicro()))
	}
	rec := b.NewRecordBatch()
	t.Cleanup(rec.Release)
	return lake.Batch{Unit: lake.Unit{Dataset: "logs", Partition: "source=" + source, First: first, Last: first + int64(n) - 1, Rows: int64(n)},
		Source: source, Records: []arrow.RecordBatch{rec}}
}

func commit(t *testing.T, l *lake.Lake, gw string, bs ...lake.Batch) {
	t.Helper()
	units := make([]lake.Unit, len(bs))
	for i, b := range bs {
		units[i] = b.Unit
	}
	if _, err := l.Commit(context.Background(), lake.Commit{Dataset: "logs", ID: lake.CommitID(gw, "", units), Batches: bs}); err != nil {
		t.Fatal(err)
	}
}

func ids(t *testing.T, tbl *Table) []int64 {
	t.Helper()
	rows, err := tbl.Rows(context.Background(), "id", "_hyp_gateway")
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, r := range rows {
		if r[1] != "gw-a" {
			t.Errorf("row %v: _hyp_gateway is not gw-a", r)
		}
		out = append(out, r[0].(int64))
	}
	slices.Sort(out)
	return out
}

func seq(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

type setup struct {
	lake lake.Options
	read Options
}

func TestReadTablesWrittenByLake(t *testing.T) {
	cases := map[string]func(t *testing.T) setup{
		"sqlite catalog, local warehouse": func(t *testing.T) setup {
			dir := t.TempDir()
			uri := "sqlite://" + filepath.Join(dir, "cat.db")
			return setup{lake.Options{Catalog: "sql", URI: uri, Warehouse: filepath.Join(dir, "wh")}, Options{Catalog: uri}}
		},
		"hadoop catalog, local warehouse": func(t *testing.T) setup {
			wh := filepath.Join(t.TempDir(), "wh")
			return setup{lake.Options{Catalog: "hadoop", Warehouse: wh}, Options{Warehouse: wh}}
		},
		"postgres catalog, MinIO warehouse": func(t *testing.T) setup {
			m := miniotest.Start(t)
			m.CreateBucket(t, "lake")
			m.SetEnv(t)
			uri := pgtest.Start(t).URI()
			return setup{lake.Options{Catalog: "sql", URI: uri, Warehouse: "s3://lake/wh", Region: m.Region(), Endpoint: m.Endpoint(), PathStyle: true},
				Options{Catalog: uri, S3: m.Client()}}
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := mk(t)
			s.lake.Namespace, s.lake.PartitionBy, s.lake.Gateway = "hyp", "day", "gw-a"
			s.read.Namespace = "hyp"
			l, err := lake.Open(ctx, s.lake)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()

			commit(t, l, "gw-a", unitBatch(t, "web", 1, 5), unitBatch(t, "db", 6, 3))
			tbl, err := Read(ctx, s.read, "logs")
			if err != nil {
				t.Fatal(err)
			}
			if len(tbl.Snapshots) != 1 || tbl.Current == nil || len(tbl.Files) != 2 || len(tbl.Duplicates) != 0 {
				t.Fatalf("after one commit of two units: %d snapshots, %d files, duplicates %v", len(tbl.Snapshots), len(tbl.Files), tbl.Duplicates)
			}
			sum := tbl.Current.Summary
			if sum[lake.PropGateway] != "gw-a" || sum[lake.PropCommitID] == "" || !strings.Contains(sum[lake.PropUnits], `"source=web"`) || tbl.Current.SummaryInt("added-records") != 8 {
				t.Fatalf("summary %v", sum)
			}
			for _, f := range tbl.Files {
				if f.Status != StatusAdded || f.Content != ContentData || !strings.EqualFold(f.Format, "parquet") || f.Records == 0 || f.Size == 0 {
					t.Fatalf("data file %+v", f)
				}
			}
			if got := ids(t, tbl); !slices.Equal(got, seq(1, 8)) {
				t.Fatalf("ids %v", got)
			}

			commit(t, l, "gw-a", unitBatch(t, "web", 9, 4))
			tbl, err = Read(ctx, s.read, "logs")
			if err != nil {
				t.Fatal(err)
			}
			if len(tbl.Snapshots) != 2 || len(tbl.Files) != 3 || len(tbl.Duplicates) != 0 || tbl.Current.Parent != tbl.Snapshots[0].ID {
				t.Fatalf("after a second commit: %d snapshots, %d files, duplicates %v", len(tbl.Snapshots), len(tbl.Files), tbl.Duplicates)
			}
			if got := ids(t, tbl); !slices.Equal(got, seq(1, 12)) {
				t.Fatalf("ids %v", got)
			}
		})
	}
}

// TestDuplicatesAndDeletes has iceberg-go add a file the table already holds, which the
// reader must report, and then rewrite a file away, whose DELETED entry it must skip.
func TestDuplicatesAndDeletes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	uri := "sqlite://" + filepath.Join(dir, "cat.db")
	wh := filepath.Join(dir, "wh")
	l, err := lake.Open(ctx, lake.Options{Catalog: "sql", URI: uri, Warehouse: wh, Namespace: "hyp", PartitionBy: "none", Gateway: "gw-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	commit(t, l, "gw-a", unitBatch(t, "web", 1, 5))
	commit(t, l, "gw-a", unitBatch(t, "web", 6, 5))
	o := Options{Catalog: uri, Namespace: "hyp"}
	before, err := Read(ctx, o, "logs")
	if err != nil {
		t.Fatal(err)
	}
	first := before.Files[0].Path

	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "cat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cat, err := sqlcat.NewCatalog(lake.CatalogName, db, sqlcat.SQLite, iceberg.Properties{"warehouse": lake.FileURI(wh)})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := cat.LoadTable(ctx, table.Identifier{"hyp", "logs"})
	if err != nil {
		t.Fatal(err)
	}
	tx := tb.NewTransaction()
	if err := tx.AddFiles(ctx, []string{first}, nil, true); err != nil {
		t.Fatal(err)
	}
	if tb, err = tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	dup, err := Read(ctx, o, "logs")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dup.Duplicates, []string{first}) || len(dup.Files) != 3 {
		t.Fatalf("after adding %s again: duplicates %v, %d live entries", first, dup.Duplicates, len(dup.Files))
	}
	if got := ids(t, dup); len(got) != 15 {
		t.Fatalf("%d rows, want the duplicated file's 5 twice among 15", len(got))
	}

	// Replace the other file with a copy: its entry stays in a manifest, marked DELETED.
	other := before.Files[1].Path
	copyPath := strings.TrimSuffix(other, ".parquet") + "-copy.parquet"
	b, err := os.ReadFile(strings.TrimPrefix(other, "file://"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(strings.TrimPrefix(copyPath, "file://"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	tx = tb.NewTransaction()
	if err := tx.ReplaceDataFiles(ctx, []string{other}, []string{copyPath}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := Read(ctx, o, "logs")
	if err != nil {
		t.Fatal(err)
	}
	var live []string
	for _, f := range after.Files {
		live = append(live, f.Path)
	}
	if slices.Contains(live, other) || !slices.Contains(live, copyPath) || len(after.Snapshots) != 4 {
		t.Fatalf("after replacing %s: live %v, %d snapshots", other, live, len(after.Snapshots))
	}
}
