package cache

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/hyp-project/hyp/internal/bounds"
	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/fsutil"
	"github.com/hyp-project/hyp/internal/parquetw"
)

// The cache writes its data files itself, with parquetw (the blob export's writer), and
// adds them to a transaction as iceberg-go's AddFiles would: iceberg-go's own writer
// (tx.Append) cost about a third of an ingesting daemon's CPU. Every file, new or linked in
// by compaction, is described with internal/bounds, whose bounds hold every value of the
// file (iceberg-go's miss the row groups whose chunks have no statistics, and drop dotted
// names and the empty string). A file is written, synced and
// named in its synced directory before the transaction that adds it can commit, so a
// committed table never names a file a crash can take back. A file the write gave up on
// before its footer is removed; a complete one that no commit names is left for recovery
// (recover.go), as iceberg-go's were.

// fileWriter writes one generation's new data files. It is made under the partition lock
// and copies what it needs of the table then, so it can run without it.
type fileWriter struct {
	dir    tableDir      // the generation; files go to its data directory
	target int64         // bytes after which a file is closed and the next started
	sc     *arrow.Schema // the table's Arrow schema, with its field ids
	schema *iceberg.Schema
	spec   iceberg.PartitionSpec
	props  iceberg.Properties
	fio    icebergio.IO
}

func (g *generation) fileWriter(ctx context.Context) (*fileWriter, error) {
	sc, err := table.SchemaToArrowSchema(g.tbl.Schema(), nil, true, false)
	if err != nil {
		return nil, err
	}
	fio, err := g.tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	return &fileWriter{dir: tableDir(g.dir), target: targetFileBytes, sc: sc, schema: g.tbl.Schema(), spec: g.tbl.Spec(), props: g.tbl.Properties(), fio: fio}, nil
}

// append writes rdr's records, which have w.sc's columns, into new data files and adds them
// to tx, whose table w was made from, returning what it added. Every file is new, so the
// duplicate check (a read of every manifest) is skipped; files carry their field ids, so no
// name mapping is needed.
func (w *fileWriter) append(ctx context.Context, tx *table.Transaction, rdr array.RecordReader) ([]FileInfo, error) {
	paths, err := w.write(rdr)
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, nil
	}
	uris := make([]string, len(paths))
	for i, p := range paths {
		uris[i] = fileURI(p)
	}
	// The DataFiles' counts and bounds come from the footers just written.
	dfs, err := describe(ctx, w.fio, uris, w.schema, w.spec, w.props)
	if err != nil {
		return nil, err
	}
	if err := tx.AddDataFiles(ctx, dfs, nil, table.WithoutAutoNameMapping(), table.WithoutDuplicateCheck()); err != nil {
		return nil, err
	}
	added := make([]FileInfo, len(dfs))
	for i, df := range dfs {
		added[i] = fileInfo(df)
	}
	return added, nil
}

// describe returns the DataFiles of the data files at uris, of a table with schema sc,
// spec and props.
func describe(ctx context.Context, fio icebergio.IO, uris []string, sc *iceberg.Schema, spec iceberg.PartitionSpec, props iceberg.Properties) ([]iceberg.DataFile, error) {
	dfs := make([]iceberg.DataFile, len(uris))
	for i, u := range uris {
		var err error
		if dfs[i], err = bounds.Describe(ctx, fio, u, sc, spec, props); err != nil {
			return nil, fmt.Errorf("describe %s: %w", u, err)
		}
	}
	return dfs, nil
}

// entriesByName returns the live DataFiles of g's current snapshot, as its manifests hold
// them, by file name: a file keeps its name when compaction links it into the next
// generation. It returns none for a moved generation.
func (g *generation) entriesByName(ctx context.Context) (map[string]iceberg.DataFile, error) {
	snap := g.tbl.CurrentSnapshot()
	if snap == nil || g.moved != "" {
		// A moved generation's manifests name another directory (relocate.go): its
		// files are linked and described all the same, just not counted.
		return nil, nil
	}
	fio, err := g.tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	dfs, err := g.readEntries(fio, snap)
	if err != nil {
		return nil, err
	}
	out := make(map[string]iceberg.DataFile, len(dfs))
	for _, df := range dfs {
		out[filepath.Base(localPath(df.FilePath()))] = df
	}
	return out, nil
}

// boundsChanged counts the files of dfs whose entry in was (by name) has other bounds: an
// entry described before internal/bounds, whose bounds may leave out values.
func boundsChanged(was map[string]iceberg.DataFile, dfs []iceberg.DataFile) int {
	n := 0
	for _, df := range dfs {
		if old, ok := was[filepath.Base(localPath(df.FilePath()))]; ok && !bounds.Same(old, df) {
			n++
		}
	}
	return n
}

// wrongBounds counts g's live files whose entries' bounds are not their footers'.
func (g *generation) wrongBounds(ctx context.Context) (int, error) {
	was, err := g.entriesByName(ctx)
	if err != nil || len(was) == 0 {
		return 0, err
	}
	fio, err := g.tbl.FS(ctx)
	if err != nil {
		return 0, err
	}
	var uris []string
	for _, df := range was {
		uris = append(uris, df.FilePath())
	}
	dfs, err := describe(ctx, fio, uris, g.tbl.Schema(), g.tbl.Spec(), g.tbl.Properties())
	if err != nil {
		return 0, err
	}
	return boundsChanged(was, dfs), nil
}

// addFiles adds data files already on disk (uris: linked in, or put back) to tx, a
// transaction on g's table, as tx.AddFiles would, described by describe.
func (g *generation) addFiles(ctx context.Context, tx *table.Transaction, uris []string) ([]iceberg.DataFile, error) {
	fio, err := g.tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	dfs, err := describe(ctx, fio, uris, g.tbl.Schema(), g.tbl.Spec(), g.tbl.Properties())
	if err != nil {
		return nil, err
	}
	return dfs, tx.AddDataFiles(ctx, dfs, nil)
}

// write encodes rdr into files of about w.target bytes at most and returns their paths,
// each synced and named in the synced directory.
func (w *fileWriter) write(rdr array.RecordReader) ([]string, error) {
	if err := fsutil.MkdirAllSync(w.dir.data()); err != nil {
		return nil, err
	}
	var done []string
	var cur *dataFile
	for rdr.Next() {
		if cur == nil {
			var err error
			if cur, err = w.create(); err != nil {
				return nil, err
			}
		}
		if err := cur.pw.Write(rdr.RecordBatch()); err != nil {
			cur.discard()
			return nil, fmt.Errorf("write %s: %w", cur.path, err)
		}
		if cur.pw.Size() >= w.target {
			if err := cur.finish(); err != nil {
				return nil, err
			}
			done, cur = append(done, cur.path), nil
		}
	}
	if err := rdr.Err(); err != nil {
		if cur != nil {
			cur.discard()
		}
		return nil, err
	}
	if cur != nil {
		if err := cur.finish(); err != nil {
			return nil, err
		}
		done = append(done, cur.path)
	}
	if len(done) > 0 {
		if err := fsutil.SyncDir(w.dir.data()); err != nil {
			return nil, err
		}
	}
	return done, nil
}

// dataFile is a data file being written.
type dataFile struct {
	path string
	f    *os.File
	bw   *bufio.Writer
	pw   *parquetw.Writer
}

// create starts a new data file (tableDir.newDataFile), never one that exists.
func (w *fileWriter) create() (*dataFile, error) {
	path := w.dir.newDataFile()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	// Page headers are small writes; the buffer is small because up to flushLimits.streams
	// files are open at once.
	d := &dataFile{path: path, f: f, bw: bufio.NewWriterSize(f, 64<<10)}
	d.pw = parquetw.NewWriter(d.bw, w.sc, dataFileOptions)
	return d, nil
}

// dataFileOptions are how the cache encodes its Parquet files.
var dataFileOptions = parquetw.Options{
	RowGroupRows: rowGroupRows,
	// Unique per row, so a dictionary never pays off.
	Plain: []string{columns.SeqColumn, columns.IngestedAtColumn},
}

// finish writes the footer and syncs the file; on failure the file is removed.
func (d *dataFile) finish() error {
	err := d.pw.Close()
	if err == nil {
		err = d.bw.Flush()
	}
	if err == nil {
		err = d.f.Sync()
	}
	if cerr := d.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errors.Join(fmt.Errorf("write %s: %w", d.path, err), os.Remove(d.path))
	}
	return nil
}

// discard removes a file the write gave up on: it has no footer, and nothing names it.
func (d *dataFile) discard() {
	_ = d.f.Close()
	_ = os.Remove(d.path)
}
