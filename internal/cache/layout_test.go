package cache

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"
)

// TestLayoutPaths pins every name layout.go gives a file or directory under the cache's
// root. Caches written by earlier versions are opened under these names, so a change here
// must be a deliberate change of the on-disk format (and of docs/ON-DISK.md).
func TestLayoutPaths(t *testing.T) {
	l := layout("/home/h/cache")
	p := l.partition("logs", "source=web")
	g := p.generation(genName(2))
	for _, tc := range []struct{ name, got, want string }{
		{"lock", l.lock(), "/home/h/cache/LOCK"},
		{"viewsLock", l.viewsLock(), "/home/h/cache/views.lock"},
		{"seqState", l.seqState(), "/home/h/cache/seq.json"},
		{"incarnation", l.incarnation(), "/home/h/cache/incarnation"},
		{"wal", l.wal(), "/home/h/cache/_wal"},
		{"lost", l.lost(), "/home/h/cache/_lost"},
		{"lossLog", l.lossLog(), "/home/h/cache/_lost/losses.jsonl"},
		{"lostRows", l.lostRows("logs", 7, 42), "/home/h/cache/_lost/logs-seq00000000000000000007-00000000000000000042.ndjson"},
		{"lostSegment", l.lostSegment("/home/h/cache/_wal/00000000000000000003.wal"), "/home/h/cache/_lost/wal-00000000000000000003.wal.damaged"},
		{"lostFiles", l.lostFiles("logs", "source=web"), "/home/h/cache/_lost/files/logs/source=web"},
		{"lostFile", l.lostFile("logs", "source=web", "gen-00000002", "/home/h/cache/logs/source=web/gen-00000002/data/f.parquet"), "/home/h/cache/_lost/files/logs/source=web/gen-00000002-f.parquet"},
		{"dataset", l.dataset("logs"), "/home/h/cache/logs"},
		{"partition", string(p), "/home/h/cache/logs/source=web"},
		{"table", string(l.table(table.Identifier{"logs", "source=web", "gen-00000002"})), "/home/h/cache/logs/source=web/gen-00000002"},
		{"record", p.record(), "/home/h/cache/logs/source=web/partition.json"},
		{"current", p.current(), "/home/h/cache/logs/source=web/CURRENT"},
		{"generation", string(g), "/home/h/cache/logs/source=web/gen-00000002"},
		{"trash", p.trash("gen-00000002"), "/home/h/cache/logs/source=web/.trash-gen-00000002"},
		{"damaged", p.damaged("gen-00000002", time.Unix(1, 5)), "/home/h/cache/logs/source=web/.damaged-gen-00000002-1000000005"},
		{"readersLock", g.readersLock(), "/home/h/cache/logs/source=web/gen-00000002/readers.lock"},
	} {
		if want := filepath.FromSlash(tc.want); tc.got != want {
			t.Errorf("%s: %s, want %s", tc.name, tc.got, want)
		}
	}
	if n, ok := genNumber(genName(2)); !ok || n != 2 {
		t.Errorf("genNumber(%s) = %d, %v", genName(2), n, ok)
	}
	if _, ok := genNumber("partition.json"); ok {
		t.Error("partition.json is taken for a generation")
	}

	// The listings find what a crash may leave: any gen-* entry (claims are cleared in
	// every one) and any trash.
	p = layout(t.TempDir()).partition("logs", "source=web")
	for _, d := range []string{"gen-00000001", "gen-unfinished", ".trash-gen-00000000", "other"} {
		if err := os.MkdirAll(filepath.Join(string(p), d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	gens, err := p.generationDirs()
	if err != nil || !slices.Equal(gens, []tableDir{p.generation("gen-00000001"), p.generation("gen-unfinished")}) {
		t.Errorf("generationDirs: %v, %v", gens, err)
	}
	if got := p.trashLeft(); !slices.Equal(got, []string{p.trash("gen-00000000")}) {
		t.Errorf("trashLeft: %v", got)
	}
}
