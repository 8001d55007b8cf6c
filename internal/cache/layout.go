package cache

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go/table"
)

// The names the cache gives the files and directories under its root (a home's `cache/`,
// docs/ON-DISK.md): every one is joined here, and TestLayoutPaths pins them all for a
// sample root. They are a format, not a choice to revisit: a cache written by an earlier
// hyp is opened under these names, and another process (a read-only opening, `hyp query`)
// finds the locks under them. The only names that are not joined here are the hadoop
// catalog's inside a generation (catalogfiles.go) and the log's segments, which internal/wal
// names inside wal().

// layout is the cache's root directory.
type layout string

// lock is the writer's lock file: Open holds it exclusively for the writer's life, so that
// a second writer on the same home fails with ErrLocked.
func (l layout) lock() string { return filepath.Join(string(l), "LOCK") }

// viewsLock is the lock a whole-cache view (PinView) shares for as long as it is open, one
// lock however many partitions it pins; retiring a generation (collect) takes it exclusively
// too. The first view or retirement creates it.
func (l layout) viewsLock() string { return filepath.Join(string(l), "views.lock") }

// seqState is the seq allocator's file (seqState): the reservation below which seqs may
// have been issued, and a copy of the incarnation. The writer rewrites it atomically,
// once per reserved block (Cache.reserve).
func (l layout) seqState() string { return filepath.Join(string(l), "seq.json") }

// incarnation names the cache's seq space (incarnation.go). The writer writes it atomically
// at open when it is missing or a new space begins, before any seq of the space is issued
// (Cache.loadIncarnation).
func (l layout) incarnation() string { return filepath.Join(string(l), "incarnation") }

// wal is the write-ahead log's directory; internal/wal names the segments in it. `_wal` is
// not a legal dataset name, so it never collides with a dataset's directory.
func (l layout) wal() string { return filepath.Join(string(l), "_wal") }

// lost keeps what the cache could not store (SPEC 9.6, losses.go): the bytes themselves,
// never deleted by hyp, and the loss log. Like wal it is not a legal dataset name. The
// writer creates it with the first thing it keeps there.
func (l layout) lost() string { return filepath.Join(string(l), "_lost") }

// lossLog is the loss log, one Lost per line, appended durably by the writer
// (losses.add) and read by `cache status` and for the lost-rows metric.
func (l layout) lossLog() string { return filepath.Join(l.lost(), "losses.jsonl") }

// lostRows is the file a flush keeps the rows of dataset with seqs first..last in when it
// could not store them (losses.setAside), one line per row.
func (l layout) lostRows(dataset string, first, last int64) string {
	return filepath.Join(l.lost(), fmt.Sprintf("%s-seq%020d-%020d.ndjson", dataset, first, last))
}

// lostSegment is the byte copy the writer keeps of the damaged log segment at segment
// (losses.keepSegment) before the log releases it.
func (l layout) lostSegment(segment string) string {
	return filepath.Join(l.lost(), "wal-"+filepath.Base(segment)+".damaged")
}

// lostFiles is the directory where the writer keeps the files it took out of a table of
// the partition with path segment seg of dataset: unreadable data files (`cache repair`,
// recover.go) and garbled newest metadata files (setAsideBadMetadata).
func (l layout) lostFiles(dataset, seg string) string {
	return filepath.Join(l.lost(), "files", dataset, seg)
}

// lostFile is where the file at path, taken out of generation gen, is kept in
// lostFiles(dataset, seg): named after the generation, since each generation has its own
// file names.
func (l layout) lostFile(dataset, seg, gen, path string) string {
	return filepath.Join(l.lostFiles(dataset, seg), gen+"-"+filepath.Base(path))
}

// dataset is a dataset's directory, the hadoop catalog's first namespace level: the writer
// creates it with the dataset's first partition.
func (l layout) dataset(name string) string { return filepath.Join(string(l), name) }

// partition is the directory of the partition with path segment seg (partition.PathSegment)
// of dataset, the catalog's second namespace level; the writer creates it when a flush
// first meets the partition in the log (tableSet.partition).
func (l layout) partition(dataset, seg string) partitionDir {
	return partitionDir(filepath.Join(l.dataset(dataset), seg))
}

// table is where the hadoop catalog, whose namespaces are directories, keeps table ident:
// for a generation's identifier [dataset, seg, gen-N] it is partition(dataset,
// seg).generation(gen-N), which TestLayoutPaths checks.
func (l layout) table(ident table.Identifier) tableDir {
	return tableDir(filepath.Join(append([]string{string(l)}, ident...)...))
}

// partitionDir is one partition's directory (`<dataset>/<seg>`): its record, its pointer to
// the live generation, and its generations, live, retired or set aside.
type partitionDir string

// record is the partition's record (partitionRecord), which gives its unescaped name. The
// writer writes it atomically before the partition's first table (createFirstGeneration);
// a directory without one holds no data.
func (d partitionDir) record() string { return filepath.Join(string(d), "partition.json") }

// current is the pointer to the live generation (its name and a newline), rewritten
// atomically by the writer at every switch of generation (setCurrent) and emptied when the
// live one is set aside (setAsideGeneration).
func (d partitionDir) current() string { return filepath.Join(string(d), currentFile) }

// currentFile is current's name, as the notes of a repaired partition give it.
const currentFile = "CURRENT"

// generation is the directory of the partition's generation name, one Iceberg table
// created by the writer (createGeneration) in the hadoop catalog.
func (d partitionDir) generation(name string) tableDir {
	return tableDir(filepath.Join(string(d), name))
}

// generationDirs lists every entry whose name starts like a generation's, complete or not:
// the writer clears the claims a crash left in any of them (clearClaims).
func (d partitionDir) generationDirs() ([]tableDir, error) {
	paths, err := filepath.Glob(filepath.Join(string(d), "gen-*"))
	gens := make([]tableDir, len(paths))
	for i, p := range paths {
		gens[i] = tableDir(p)
	}
	return gens, err
}

// trash is where the writer renames retired generation gen just before it deletes it
// (collect), so that a deletion cut short never leaves a partial generation under a
// generation's name.
func (d partitionDir) trash(gen string) string { return filepath.Join(string(d), ".trash-"+gen) }

// trashLeft lists the trash a crash during a deletion left behind, for collect to delete.
func (d partitionDir) trashLeft() []string {
	ents, err := os.ReadDir(string(d))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".trash-") {
			out = append(out, filepath.Join(string(d), e.Name()))
		}
	}
	return out
}

// damaged is where the writer sets aside generation gen, whose table it could not read at
// open, at time at (setAsideGeneration): kept for the operator, never deleted.
func (d partitionDir) damaged(gen string, at time.Time) string {
	return filepath.Join(string(d), fmt.Sprintf(".damaged-%s-%d", gen, at.UnixNano()))
}

// readersLock is the cache's own file in a generation, beside the catalog's
// (catalogfiles.go): readers share-lock it while they load the table or read its files, and
// the writer takes it exclusively to sweep manifests (sweep) or to retire the generation
// (collect).
func (d tableDir) readersLock() string { return filepath.Join(string(d), "readers.lock") }

// genName is the name of generation n, the directory partitionDir.generation takes.
func genName(n int) string { return fmt.Sprintf("gen-%08d", n) }

// genNumber is the number of the generation named name, if it is a generation's name.
func genNumber(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "gen-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}
