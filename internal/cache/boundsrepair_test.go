package cache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/hyp-project/hyp/internal/testutil/lakeread"
)

// A cache written before internal/bounds described its files with iceberg-go's
// FileToDataFile, whose bounds come from the row groups that have statistics and leave out
// the empty string: over a file whose first row group has no statistics for lo (its long
// value is over arrow-go's 4 KiB statistics limit, as it was over parquetw's), lo's lower
// bound excludes that value, and e, whose minimum is "", has no lower bound. A forced
// compaction finds such an entry and describes the file again from its footer, when the
// file is alone in its partition (nothing else to gain) as when it is linked in beside
// another; it counts it in BoundsFixed, every bound then holds every value, every row is
// kept, and a second compaction finds nothing to fix.
func TestCompactionFixesOldBounds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		beside bool // a second, correctly described file in the partition
	}{{"alone", false}, {"beside another file", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := openTest(t, t.TempDir())
			defer c.Close(ctx)
			const rows = 3000
			var sb strings.Builder
			for i := range rows {
				e := fmt.Sprintf("e%d", i)
				if i == 2000 {
					e = ""
				}
				switch {
				case i == 10:
					fmt.Fprintf(&sb, `{"lo":%q,"e":%q,"n":%d}`+"\n", strings.Repeat("A", 5000), e, i)
				case i < 1000: // so the first row group's lo has no statistics at all
					fmt.Fprintf(&sb, `{"e":%q,"n":%d}`+"\n", e, i)
				default:
					fmt.Fprintf(&sb, `{"lo":"m%07d","e":%q,"n":%d}`+"\n", i, e, i)
				}
			}
			if _, err := c.Ingest("logs", "a", []byte(sb.String())); err != nil {
				t.Fatal(err)
			}
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			old := describeTheOldWay(t, c.tables.lookup("logs", "source=a").gen, 1000)
			if _, err := lakeread.BoundsHold(localPath(old.FilePath()), old.LowerBoundValues(), old.UpperBoundValues(), typesOf(c)); err == nil {
				t.Fatal("iceberg-go's bounds of the rewritten file hold every value: the case no longer reproduces")
			}
			want := int64(rows)
			if tc.beside {
				if _, err := c.Ingest("logs", "a", body(0, 500, "")); err != nil {
					t.Fatal(err)
				}
				if err := c.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				c.settledRows = 1 // both files are kept as they are: linked in, not rewritten
				want += 500
			}
			for _, round := range []struct {
				name  string
				fixed int
			}{{"first compaction", 1}, {"second compaction", 0}} {
				res, err := c.Compact(ctx, true, nil)
				if err != nil {
					t.Fatalf("%s: %v", round.name, err)
				}
				fixed := 0
				for _, r := range res {
					fixed += r.BoundsFixed
				}
				if fixed != round.fixed {
					t.Errorf("%s fixed the bounds of %d files, want %d: %+v", round.name, fixed, round.fixed, res)
				}
			}
			g := c.tables.lookup("logs", "source=a").gen
			if got := g.rows(); got != want {
				t.Errorf("the partition holds %d rows after compaction, want %d", got, want)
			}
			lo := slices.IndexFunc(g.tbl.Schema().Fields(), func(f iceberg.NestedField) bool { return g.logical(f.Name) == "lo" })
			for _, df := range manifestEntries(t, g) {
				lacking, err := lakeread.BoundsHold(localPath(df.FilePath()), df.LowerBoundValues(), df.UpperBoundValues(), typesOf(c))
				if err != nil {
					t.Errorf("%s: %v", df.FilePath(), err)
				}
				// The old file's footer has no statistics for lo's first row group: no
				// bound holds for certain, so lo has none.
				var want []int
				if filepath.Base(df.FilePath()) == "old.parquet" {
					want = []int{g.tbl.Schema().Field(lo).ID}
				}
				if !slices.Equal(lacking, want) {
					t.Errorf("%s: columns %v have values and lack a bound, want %v", df.FilePath(), lacking, want)
				}
			}
		})
	}
}

// typesOf is the current schema's types of c's partition source=a, by field id.
func typesOf(c *Cache) map[int]string {
	types := map[int]string{}
	for _, f := range c.tables.lookup("logs", "source=a").gen.tbl.Schema().Fields() {
		types[f.ID] = f.Type.String()
	}
	return types
}

// describeTheOldWay replaces g's only data file by a copy of its rows in row groups of
// groupRows rows, written by arrow-go with its default 4 KiB statistics limit and added as
// the cache added files before internal/bounds: described by iceberg-go's FileToDataFile.
// The original file is removed, so the generation holds no dead file. It returns the
// copy's entry.
func describeTheOldWay(t *testing.T, g *generation, groupRows int64) iceberg.DataFile {
	t.Helper()
	ctx := context.Background()
	entries := manifestEntries(t, g)
	if len(entries) != 1 {
		t.Fatalf("%d data files, want 1", len(entries))
	}
	src := localPath(entries[0].FilePath())
	pf, err := file.OpenParquetFile(src, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	dst := filepath.Join(tableDir(g.dir).data(), "old.parquet")
	f, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	// The Arrow schema read back carries the field ids, which the writer keeps.
	props := parquet.NewWriterProperties(parquet.WithMaxRowGroupLength(groupRows), parquet.WithMaxStatsSize(4096))
	pw, err := pqarrow.NewFileWriter(tbl.Schema(), f, props, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := pw.WriteTable(tbl, groupRows); err != nil {
		t.Fatal(err)
	}
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	fio, err := g.tbl.FS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old, err := table.FileToDataFile(ctx, fio, fileURI(dst), g.tbl.Schema(), g.tbl.Spec(), 0, g.tbl.Properties())
	if err != nil {
		t.Fatal(err)
	}
	tx := g.tbl.NewTransaction()
	if err := tx.ReplaceDataFilesWithDataFiles(ctx, entries, []iceberg.DataFile{old}, nil); err != nil {
		t.Fatal(err)
	}
	if err := g.commit(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := g.reload(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(src); err != nil {
		t.Fatal(err)
	}
	return old
}
