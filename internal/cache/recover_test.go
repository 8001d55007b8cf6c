package cache

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// newestMetadata is the path of the highest metadata version of p's current generation.
func newestMetadata(t *testing.T, p *Partition) string {
	t.Helper()
	td := tableDir(p.gen.dir)
	vs, err := td.metadataVersions()
	if err != nil || len(vs) == 0 {
		t.Fatalf("metadata versions in %s: %v %v", td.metadata(), vs, err)
	}
	return td.metadataFile(vs[0])
}

// TestLostNewestMetadataLosesNothing: three flushes are committed and their log released;
// then the newest metadata file of the partition's table is deleted or garbled (also after
// a compaction, whose new generation has just one commit with files). The next open puts
// the files that commit added back: every row is there once with its seq, no loss is
// recorded, the version hint names a version that exists, and the partition takes new rows
// and reopens with them.
func TestLostNewestMetadataLosesNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		compact bool
		harm    func(newest string) error
	}{
		{"newest metadata deleted", false, os.Remove},
		{"newest metadata garbled", false, func(p string) error { return os.WriteFile(p, []byte("{not json"), 0o600) }},
		{"newest metadata of a compacted generation deleted", true, os.Remove},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			c := openTest(t, dir)
			for i := range 3 {
				ingestN(t, c, "web", i*10, 10)
				if err := c.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			ingestN(t, c, "db", 1000, 5)
			if tc.compact {
				if res, err := c.Compact(ctx, true, nil); err != nil || len(res) == 0 {
					t.Fatalf("compact: %+v %v", res, err)
				}
			}
			before, _, _ := collect(t, c, "logs", "source=web", 0, 1<<62)
			p := c.tables.lookup("logs", "source=web")
			newest := newestMetadata(t, p)
			hint := tableDir(p.gen.dir).versionHint()
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if err := tc.harm(newest); err != nil {
				t.Fatal(err)
			}

			c = openTest(t, dir)
			after := assertIDs(t, c, "web", 30)
			if !slices.Equal(before, after) {
				t.Fatalf("seqs %v, want %v", after, before)
			}
			assertIDs(t, c, "db", 5)
			if lost, err := c.Losses(); err != nil || len(lost) != 0 {
				t.Fatalf("losses %+v %v", lost, err)
			}
			b, err := os.ReadFile(hint)
			if err != nil {
				t.Fatal(err)
			}
			if v, _ := strconv.Atoi(strings.TrimSpace(string(b))); v == 0 || !fileExists(tableDir(filepath.Dir(filepath.Dir(hint))).metadataFile(v)) {
				t.Errorf("version hint %q names no metadata file", b)
			}
			if c.tables.lookup("logs", "source=web").HeadSeq() != before[len(before)-1] {
				t.Errorf("head seq %d, want %d", c.tables.lookup("logs", "source=web").HeadSeq(), before[len(before)-1])
			}
			ingestN(t, c, "web", 100, 7)
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			c = openTest(t, dir)
			defer c.Close(ctx)
			assertIDs(t, c, "web", 37)
		})
	}
}

// TestLostMetadataWithUnreadableFile: the newest metadata file is lost and the data file
// its commit added cannot be read either: the rows of the other commits are all there, the
// unreadable file's seq range (from the lost commit's manifest) is recorded as a loss, and
// its bytes are kept under cache/_lost.
func TestLostMetadataWithUnreadableFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := openTest(t, dir)
	var last Result
	for i := range 3 {
		last = ingestN(t, c, "web", i*10, 10)
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	p := c.tables.lookup("logs", "source=web")
	victim := p.gen.files[len(p.gen.files)-1]
	newest := newestMetadata(t, p)
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(newest); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(victim.Path, 100); err != nil {
		t.Fatal(err)
	}
	c = openTest(t, dir)
	defer c.Close(ctx)
	assertIDs(t, c, "web", 20)
	lost, err := c.Losses()
	if err != nil || len(lost) != 1 {
		t.Fatalf("losses %+v %v", lost, err)
	}
	x := lost[0]
	if x.Partition != "source=web" || x.FromSeq != last.FirstSeq || x.ToSeq != last.LastSeq || x.Rows != 10 || !strings.Contains(x.Reason, victim.Path) {
		t.Errorf("loss %+v, want seqs %d..%d naming %s", x, last.FirstSeq, last.LastSeq, victim.Path)
	}
	if st, err := os.Stat(x.KeptAt); err != nil || st.Size() != 100 {
		t.Errorf("unreadable file not kept at %s: %v", x.KeptAt, err)
	}
	if c.LostRows() != 10 {
		t.Errorf("lost rows %d", c.LostRows())
	}
}

// TestCutShortWriteIsNoLoss: an unreadable data file no commit names is what a write cut
// short by a crash leaves; its rows were never committed, so nothing is recorded as lost,
// nothing is put back, and the file is left where it is.
func TestCutShortWriteIsNoLoss(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := openTest(t, dir)
	ingestN(t, c, "web", 0, 10)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p := c.tables.lookup("logs", "source=web")
	b, err := os.ReadFile(p.gen.files[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	torn := filepath.Join(filepath.Dir(p.gen.files[0].Path), "00000-0-torn.parquet")
	if err := os.WriteFile(torn, b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	ingestN(t, c, "web", 10, 10)
	crash(c)
	c = openTest(t, dir)
	defer c.Close(ctx)
	assertIDs(t, c, "web", 20)
	if lost, _ := c.Losses(); len(lost) != 0 {
		t.Fatalf("losses %+v", lost)
	}
	if !fileExists(torn) {
		t.Error("the cut-short file was removed")
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestReaderToleratesOneUnreadableTable: a read-only opening, which may not set anything
// aside, reads every other partition when one partition's table cannot be read; status
// shows that partition with an error naming the file, and a view hands the error on for
// that partition's reads.
func TestReaderToleratesOneUnreadableTable(t *testing.T) {
	for _, tc := range []struct {
		name string
		harm func(t *testing.T, p *Partition) string // returns the file the error must name
	}{
		{"newest metadata garbled", func(t *testing.T, p *Partition) string {
			m := newestMetadata(t, p)
			if err := os.WriteFile(m, []byte("{not json"), 0o600); err != nil {
				t.Fatal(err)
			}
			return m
		}},
		{"manifest list deleted", func(t *testing.T, p *Partition) string {
			l := localPath(p.gen.tbl.CurrentSnapshot().ManifestList)
			if err := os.Remove(l); err != nil {
				t.Fatal(err)
			}
			return l
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			c := openTest(t, dir)
			defer c.Close(ctx)
			ingestN(t, c, "web", 0, 10)
			ingestN(t, c, "db", 100, 5)
			ingestN(t, c, "zz", 200, 3)
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			file := tc.harm(t, c.tables.lookup("logs", "source=web"))

			r, err := OpenReader(ctx, dir)
			if err != nil {
				t.Fatalf("reader: %v", err)
			}
			st := r.Status()
			if len(st) != 3 {
				t.Fatalf("status %+v", st)
			}
			for _, s := range st {
				switch s.Partition {
				case "source=web":
					if s.Err == nil || !strings.Contains(s.Err.Error(), file) {
						t.Errorf("web: %v, want an error naming %s", s.Err, file)
					}
				default:
					if s.Err != nil || s.Rows == 0 {
						t.Errorf("%s: %+v", s.Partition, s)
					}
				}
			}
			v, err := r.View()
			if err != nil {
				t.Fatal(err)
			}
			defer v.Release()
			if len(v.Tables) != 1 || len(v.Tables[0].Partitions) != 3 {
				t.Fatalf("view %+v", v.Tables)
			}
			for _, p := range v.Tables[0].Partitions {
				if bad := p.Partition == "source=web"; bad != (p.Err != nil) || bad == (len(p.Files) > 0) {
					t.Errorf("view partition %+v", p)
				}
			}
		})
	}
}
