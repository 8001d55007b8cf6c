package cache

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/parquetw"
)

// A query sees every acknowledged row, flushed or not (SPEC), and must not wait for the
// flush to see them: a burst of new partitions (thousands of gateways sending to a server)
// costs the flush a table of its own each, tens of seconds in all. So the owner's listing
// carries the rows its log holds above their partitions' tables, encoded on the spot into
// Parquet files of their own, one per dataset for every partition, each row's partition in
// a column. Nothing of it is written to the cache: the files go wherever the caller puts
// them, and the flush goes on as if no query had looked.

// unflushedFileBytes is the size at which a dataset's file of unflushed rows is handed on
// and the next one started, so a listing holds about that much Parquet per dataset however
// much of the log is unflushed.
const unflushedFileBytes = 32 << 20

// unflushedPartitionColumn is the stored name of an unflushed file's partition column. No
// table column can have it: ingest refuses the internal prefix, and hyp adds no such column.
const unflushedPartitionColumn = columns.InternalPrefix + "partition"

// Listing describes the cache's current files as View does, without pinning them, and every
// row the log holds above its partition's table: in Parquet files (UnflushedFile) handed to
// put, which stores each under a name unique in the listing and returns its path. A reader
// in another process pins the files first (PinView) and then asks the cache's owner for
// this, which is how `hyp query` reads a cache whose owner is running without loading every
// partition's table itself (a millisecond or more each) nor waiting for a flush.
//
// Every row acknowledged before Listing was called is in exactly one place, because of the
// order things are taken in:
//   - the log's snapshot first (wal.Snapshot): it holds every acknowledged record not in a
//     segment the flush released, and a segment is released only once all its rows are
//     committed;
//   - then each partition's files with its head, under its lock: a row at or below the head
//     is in those files (or pruned) and is skipped in the log; a row above it was not
//     committed then, so its segment had not been released before the snapshot, which
//     therefore holds it. Compaction and retention rewrite files, never the head's meaning;
//   - then each dataset's columns, copied: every column a listed file has is among them,
//     and the rows above the heads resolve their columns on the copy as the flush will on
//     the dataset (in log order, from the same state; a flush that gave up on a partition
//     resolves its rows again when it retries), never changing what the flush decides.
//
// A row the flush will set aside because the batch refuses it is left out here too; the
// rows of a partition whose directory cannot be made (a name the filesystem refuses) are
// listed until the flush sets them aside as a loss.
func (c *Cache) Listing(ctx context.Context, put func(name string, data []byte) (string, error)) ([]TableView, error) {
	snap, err := c.wal.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("listing: %w", err)
	}
	defer snap.Close()
	tables, heads, err := c.tables.listHeads()
	if err != nil {
		return nil, err
	}
	u := &unflushed{c: c, heads: heads, put: put, sets: map[string]*unflushedSet{}}
	defer u.release()
	err = snap.Read(func(p []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return u.record(p)
	})
	if err != nil {
		return nil, fmt.Errorf("listing: unflushed rows: %w", err)
	}
	return u.merge(tables)
}

// unflushed collects the rows of a log snapshot above their partitions' heads, one
// unflushedSet per dataset.
type unflushed struct {
	c     *Cache
	heads map[partKey]int64
	put   func(name string, data []byte) (string, error)
	sets  map[string]*unflushedSet
	order []string // datasets, first seen first
}

// unflushedSet is one dataset's unflushed rows: a batch over a copy of the dataset, the
// partition of each of its rows, and the file its chunks go to.
type unflushedSet struct {
	ds    *dataset
	b     *batch
	parts *array.StringBuilder
	w     *unflushedWriter
	files []UnflushedFile
}

// unflushedWriter is an unflushed file being written, in memory.
type unflushedWriter struct {
	buf    bytes.Buffer
	pw     *parquetw.Writer
	cols   []Column      // the user columns it has
	rows   *arrow.Schema // the batch's record: internal and user columns
	sc     *arrow.Schema // rows, then the partition column
	ids    map[string]int
	partID int
}

// record adds the rows of one log record above their partitions' heads.
func (u *unflushed) record(payload []byte) error {
	if _, ok := decodeMarker(payload); ok {
		return nil
	}
	rec, err := decodeRecord(payload)
	if err != nil {
		return nil // damage: the flush records its seqs as lost
	}
	defer rec.release()
	var s *unflushedSet
	for _, g := range rec.Groups {
		head := u.heads[partKey{rec.Dataset, g.Partition}]
		if g.FirstSeq+int64(g.Rows)-1 <= head {
			continue
		}
		if s == nil {
			s = u.set(rec.Dataset)
		}
		seq := g.FirstSeq
		var werr error
		rec.eachRow(g, func(row []byte) {
			defer func() { seq++ }()
			if seq <= head || werr != nil {
				return
			}
			if s.b.add(rec.rowForm(), row, seq, rec.IngestedAt) != nil {
				return // the flush sets it aside: no table will hold it
			}
			s.parts.Append(g.Partition)
			s.b.bytes += len(row)
			if u.c.limits.full(s.b) {
				werr = s.spill(u.put)
			}
		})
		if werr != nil {
			return werr
		}
	}
	return nil
}

// set returns dataset name's set, made on first use over a copy of the dataset as it is
// then: after the heads were taken (Listing).
func (u *unflushed) set(name string) *unflushedSet {
	if s := u.sets[name]; s != nil {
		return s
	}
	ds := &dataset{name: name, types: map[string]ColType{}}
	if d := u.c.tables.lookupDataset(name); d != nil {
		d.mu.Lock()
		ds.types, ds.order, ds.capped = maps.Clone(d.types), slices.Clone(d.order), d.capped
		d.mu.Unlock()
	}
	s := &unflushedSet{ds: ds, b: newBatch(ds), parts: array.NewStringBuilder(memory.DefaultAllocator)}
	u.sets[name] = s
	u.order = append(u.order, name)
	return s
}

// spill writes the batch's rows to the set's file, starting one when there is none or when
// the rows have columns the file lacks, and hands the file on once it is large.
func (s *unflushedSet) spill(put func(string, []byte) (string, error)) error {
	if s.b.rows == 0 {
		return nil
	}
	if s.w != nil && len(s.b.newColumns(s.w.cols)) > 0 {
		// A file's columns are fixed when it starts.
		if err := s.finish(put); err != nil {
			return err
		}
	}
	if s.w == nil {
		w, err := newUnflushedWriter(s.ds.columns())
		if err != nil {
			return fmt.Errorf("dataset %s: %w", s.ds.name, err)
		}
		s.w = w
	}
	rec, err := s.b.record(s.w.rows, logicalName)
	if err != nil {
		return fmt.Errorf("dataset %s: %w", s.ds.name, err)
	}
	defer rec.Release()
	parts := s.parts.NewArray()
	defer parts.Release()
	full := array.NewRecordBatch(s.w.sc, append(rec.Columns(), parts), rec.NumRows())
	defer full.Release()
	if err := s.w.pw.Write(full); err != nil {
		return fmt.Errorf("dataset %s: %w", s.ds.name, err)
	}
	s.b.reset()
	if s.w.buf.Len() >= unflushedFileBytes {
		return s.finish(put)
	}
	return nil
}

// newUnflushedWriter starts a file with a partition table's layout for cols (internal
// columns, then cols under their stored names and field ids), then the partition column.
func newUnflushedWriter(cols []Column) (*unflushedWriter, error) {
	tsc := newTableSchema(cols)
	partID := tsc.HighestFieldID() + 1
	fields := append(tsc.Fields(), iceberg.NestedField{ID: partID, Name: unflushedPartitionColumn, Type: iceberg.PrimitiveTypes.String, Required: true})
	sc, err := table.SchemaToArrowSchema(iceberg.NewSchema(0, fields...), nil, true, false)
	if err != nil {
		return nil, err
	}
	w := &unflushedWriter{cols: cols, sc: sc, rows: arrow.NewSchema(sc.Fields()[:sc.NumFields()-1], nil), ids: map[string]int{}, partID: partID}
	for _, f := range tsc.Fields() {
		w.ids[logicalName(f.Name)] = f.ID
	}
	w.pw = parquetw.NewWriter(&w.buf, sc, dataFileOptions)
	return w, nil
}

// finish completes the set's file, if any, and hands it to put.
func (s *unflushedSet) finish(put func(string, []byte) (string, error)) error {
	w := s.w
	if w == nil {
		return nil
	}
	s.w = nil
	if err := w.pw.Close(); err != nil {
		return fmt.Errorf("dataset %s: %w", s.ds.name, err)
	}
	path, err := put(fmt.Sprintf("%s-%d.parquet", s.ds.name, len(s.files)+1), w.buf.Bytes())
	if err != nil {
		return err
	}
	s.files = append(s.files, UnflushedFile{Path: path, FieldIDs: w.ids, PartitionFieldID: w.partID})
	return nil
}

// merge completes every set's files and adds them to tables, with the columns of the
// dataset copies, which hold every column of the tables' files too.
func (u *unflushed) merge(tables []TableView) ([]TableView, error) {
	for _, name := range u.order {
		s := u.sets[name]
		if err := s.spill(u.put); err != nil {
			return nil, err
		}
		if err := s.finish(u.put); err != nil {
			return nil, err
		}
		i := slices.IndexFunc(tables, func(t TableView) bool { return t.Dataset == name })
		if i < 0 {
			tables = append(tables, TableView{Dataset: name})
			i = len(tables) - 1
		}
		tables[i].Columns, tables[i].Unflushed = s.ds.viewColumns(), s.files
	}
	slices.SortFunc(tables, func(a, b TableView) int { return strings.Compare(a.Dataset, b.Dataset) })
	return tables, nil
}

func (u *unflushed) release() {
	for _, s := range u.sets {
		s.b.release()
		s.parts.Release()
	}
}
