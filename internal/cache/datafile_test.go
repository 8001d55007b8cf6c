package cache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/iceberg-go"

	"github.com/hyp-project/hyp/internal/testutil/lakeread"
)

// TestDataFiles checks what the cache's own writer puts into a table, by both of the
// flush's paths (a batch committed whole, and a stream): every Parquet column carries its
// table field id, the manifests' bounds and null counts are the rows', and the data
// directory holds exactly the files the table names.
func TestDataFiles(t *testing.T) {
	cases := []struct {
		name   string
		limits flushLimits
	}{
		{"commit", defaultFlushLimits},
		{"stream", flushLimits{chunkRows: 100, chunkBytes: 1 << 30, chunkCells: 1 << 30, budget: 1 << 30, streams: 64, commits: 4}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := openTest(t, t.TempDir())
			defer c.Close(ctx)
			c.limits = tc.limits
			var sb strings.Builder
			const rows = 1000
			for i := range rows {
				// service.name needs escaping; note is null in every third row.
				if i%3 == 0 {
					fmt.Fprintf(&sb, `{"id":%d,"service.name":"svc%d"}`+"\n", i, i%4)
				} else {
					fmt.Fprintf(&sb, `{"id":%d,"service.name":"svc%d","note":"n%d"}`+"\n", i, i%4, i)
				}
			}
			if _, err := c.Ingest("logs", "a", []byte(sb.String())); err != nil {
				t.Fatal(err)
			}
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			p := c.tables.lookup("logs", "source=a")
			g := p.gen
			if len(g.files) == 0 {
				t.Fatal("no data files")
			}
			ids := map[string]int{}
			for _, f := range g.tbl.Schema().Fields() {
				ids[f.Name] = f.ID
			}
			var n int64
			for _, f := range g.files {
				n += f.Rows
				pf, err := file.OpenParquetFile(f.Path, false)
				if err != nil {
					t.Fatal(err)
				}
				sc := pf.MetaData().Schema
				for i := range sc.NumColumns() {
					col := sc.Column(i)
					if want, ok := ids[col.Name()]; !ok || int(col.SchemaNode().FieldID()) != want {
						t.Errorf("%s: column %s has field id %d, table has %d", f.Path, col.Name(), col.SchemaNode().FieldID(), want)
					}
				}
				pf.Close()
				if got, err := footerInfo(f.Path); err != nil || got.MinSeq != f.MinSeq || got.MaxSeq != f.MaxSeq || got.Rows != f.Rows {
					t.Errorf("%s: footer %+v (%v), manifest %+v", f.Path, got, err, f)
				}
			}
			if n != rows || g.files[0].MinSeq != 1 || g.files[len(g.files)-1].MaxSeq != rows {
				t.Errorf("files %+v, want seqs 1..%d", g.files, rows)
			}
			if g.files[0].MinIngestedAt == 0 || g.files[0].MaxIngestedAt < g.files[0].MinIngestedAt {
				t.Errorf("ingest-time bounds %+v", g.files[0])
			}
			var nulls int64
			entries := manifestEntries(t, g)
			for _, df := range entries {
				nulls += df.NullValueCounts()[ids["note"]]
				if df.ValueCounts()[ids["id"]] != df.Count() {
					t.Errorf("%s: %d values of id, %d rows", df.FilePath(), df.ValueCounts()[ids["id"]], df.Count())
				}
			}
			if want := int64((rows + 2) / 3); nulls != want {
				t.Errorf("note has %d nulls in the manifests, want %d", nulls, want)
			}
			if _, ok := g.tbl.Properties()["schema.name-mapping.default"]; ok {
				t.Error("the table got a name mapping")
			}
			onDisk, _ := filepath.Glob(filepath.Join(tableDir(g.dir).data(), "*.parquet"))
			if len(onDisk) != len(g.files) {
				t.Errorf("%d files on disk, table names %d", len(onDisk), len(g.files))
			}
		})
	}
}

// TestDataFilesRoll writes a partition's rows anew with a tiny target size: one file per
// row group, in seq order, disjoint, every row once.
func TestDataFilesRoll(t *testing.T) {
	ctx := context.Background()
	const rows = 3*rowGroupRows + 10
	p, w := flushedWriter(t, rows)
	w.target = 1
	w.dir = tableDir(t.TempDir())
	rdr := newScanReader(ctx, p.gen.files, p.gen, w.sc)
	paths, err := w.write(rdr)
	rdr.Release()
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 4 {
		t.Fatalf("%d files, want 4", len(paths))
	}
	var next int64 = 1
	for _, path := range paths {
		fi, err := footerInfo(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.MinSeq != next || fi.MaxSeq-fi.MinSeq+1 != fi.Rows {
			t.Fatalf("%s: %+v, want seqs from %d", path, fi, next)
		}
		next = fi.MaxSeq + 1
	}
	if next != rows+1 {
		t.Fatalf("files end at seq %d, want %d", next-1, rows)
	}
}

// TestDataFileWriteFails: a write that fails leaves no file behind.
func TestDataFileWriteFails(t *testing.T) {
	_, w := flushedWriter(t, 10)
	w.dir = tableDir(t.TempDir())
	// A record whose columns are not the table's.
	other := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.BinaryTypes.String}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, other)
	defer b.Release()
	b.Field(0).(*array.StringBuilder).Append("x")
	rec := b.NewRecordBatch()
	defer rec.Release()
	rdr, err := array.NewRecordReader(other, []arrow.RecordBatch{rec})
	if err != nil {
		t.Fatal(err)
	}
	defer rdr.Release()
	if _, err := w.write(rdr); err == nil {
		t.Fatal("a record of other columns was written")
	}
	if ents, _ := os.ReadDir(w.dir.data()); len(ents) != 0 {
		t.Fatalf("left %d files behind", len(ents))
	}
}

func manifestEntries(t *testing.T, g *generation) []iceberg.DataFile {
	t.Helper()
	fio, err := g.tbl.FS(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mfs, err := g.tbl.CurrentSnapshot().Manifests(fio)
	if err != nil {
		t.Fatal(err)
	}
	var out []iceberg.DataFile
	for _, mf := range mfs {
		entries, err := mf.FetchEntries(fio, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			out = append(out, e.DataFile())
		}
	}
	return out
}

// flushedWriter flushes rows rows into partition source=a of a new cache and returns the
// partition and a data-file writer of its generation.
func flushedWriter(t *testing.T, rows int) (*Partition, *fileWriter) {
	t.Helper()
	ctx := context.Background()
	c := openTest(t, t.TempDir())
	t.Cleanup(func() { c.Close(ctx) })
	for from := 0; from < rows; from += 10000 {
		if _, err := c.Ingest("logs", "a", body(from, min(10000, rows-from), "")); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p := c.tables.lookup("logs", "source=a")
	w, err := p.gen.fileWriter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return p, w
}

// The 70,001-row case through the cache: one flush, more rows than a row group, a
// value over 4 KiB in the first row group only, a dotted name and an empty-string minimum.
// Every bound of every manifest entry (read with iceberg-go's manifest reader) holds every
// value of its column (read with arrow-go), every column has bounds, and a forced
// compaction finds no entry to fix.
func TestBoundsHoldEveryValue(t *testing.T) {
	ctx := context.Background()
	c := openTest(t, t.TempDir())
	defer c.Close(ctx)
	var sb strings.Builder
	const rows = 70_001
	for i := range rows {
		lo := fmt.Sprintf("m%07d", i)
		if i == 10 {
			lo = strings.Repeat("A", 5000)
		}
		empty := fmt.Sprintf("e%d", i)
		if i == 3 {
			empty = ""
		}
		fmt.Fprintf(&sb, `{"lo":%q,"service.name":"svc%d","empty":%q,"u":"ü%d","n":%d}`+"\n", lo, i%7, empty, i, i-35_000)
	}
	if _, err := c.Ingest("logs", "a", []byte(sb.String())); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	g := c.tables.lookup("logs", "source=a").gen
	types, ids := map[int]string{}, map[string]int{}
	for _, f := range g.tbl.Schema().Fields() {
		types[f.ID], ids[f.Name] = f.Type.String(), f.ID
	}
	entries := manifestEntries(t, g)
	if len(entries) == 0 {
		t.Fatal("no data files")
	}
	for _, df := range entries {
		lacking, err := lakeread.BoundsHold(localPath(df.FilePath()), df.LowerBoundValues(), df.UpperBoundValues(), types)
		if err != nil {
			t.Errorf("%s: %v", df.FilePath(), err)
		}
		if len(lacking) > 0 {
			t.Errorf("%s: columns %v have values and lack a bound", df.FilePath(), lacking)
		}
		if lo, ok := df.LowerBoundValues()[ids["empty"]]; !ok || len(lo) != 0 {
			t.Errorf("%s: empty's lower bound is %q (present %v), want the empty string", df.FilePath(), lo, ok)
		}
	}
	res, err := c.Compact(ctx, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.BoundsFixed != 0 {
			t.Errorf("compaction fixed the bounds of %d files hyp just wrote: %+v", r.BoundsFixed, r)
		}
	}
}
