// Package parquetw owns encoding Arrow records of flat columns (strings, int64, float64,
// booleans, timestamps) into Parquet files fast: the pages, dictionaries and footer are its
// own (arrow-go's writer, which it replaced, boxed every dictionary value into an interface
// and zeroed its page buffers on every page, a third of the daemon's CPU at full ingest);
// which columns get a dictionary (sampled from a file's first record), the codec and its
// level, row groups, statistics, and the parallel encoding of a row group's columns. Blob
// exports and the cache's Iceberg data files both write through it; arrow-go reads what it
// writes, and its tests hold it to that reader.
//
// It never touches storage decisions: it writes to an io.Writer it never closes, syncs or
// names, so where a file goes, when it is durable and who may see it stay the caller's. It
// writes the schema it is given as it is (field ids included): what a file must or must not
// claim to be is the caller's too.
package parquetw

import (
	"fmt"
	"io"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
)

// Options are the settings of one file that differ between callers.
type Options struct {
	// RowGroupRows bounds a row group; each fills before the next starts, so a file read in
	// many small records still gets full row groups.
	// Zero means 64 Ki rows.
	RowGroupRows int64
	// Plain names columns that never get a dictionary: their values are unique per row by
	// construction (seqs, ingest times), so building one until it overflows only costs.
	Plain []string
}

// Writer encodes one file record by record; it holds at most one row group buffered.
type Writer struct {
	w      io.Writer
	schema *arrow.Schema
	opts   Options
	fw     *fileWriter // started by the first record, which decides the encodings
}

// NewWriter starts a file of records with schema on w. Close finishes it; w is never
// closed.
func NewWriter(w io.Writer, schema *arrow.Schema, opts Options) *Writer {
	if opts.RowGroupRows <= 0 {
		opts.RowGroupRows = 64 << 10
	}
	return &Writer{w: w, schema: schema, opts: opts}
}

// Write adds rec's rows. rec must have the schema's columns in its order; names, metadata
// and timestamp zones are the schema's, whatever rec's say. Write does not retain it.
func (e *Writer) Write(rec arrow.RecordBatch) error {
	if rec.NumCols() != int64(e.schema.NumFields()) {
		return fmt.Errorf("record has %d columns, schema has %d", rec.NumCols(), e.schema.NumFields())
	}
	for i, f := range e.schema.Fields() {
		if t := rec.Column(i).DataType(); t.ID() != f.Type.ID() {
			return fmt.Errorf("column %d (%s) is %s, schema has %s", i, f.Name, t, f.Type)
		}
	}
	if e.fw == nil {
		if err := e.start(rec); err != nil {
			return err
		}
	}
	return e.fw.add(rec)
}

// Size is the number of bytes written to w so far: a row group reaches w when it closes,
// so callers rolling files at a target size see the file grow by row groups.
func (e *Writer) Size() int64 {
	if e.fw == nil {
		return 0
	}
	return e.fw.off
}

// Close writes what is buffered and the file's footer.
func (e *Writer) Close() error {
	if e.fw == nil {
		if err := e.start(nil); err != nil {
			return err
		}
	}
	if err := e.fw.close(); err != nil {
		return fmt.Errorf("parquet footer: %w", err)
	}
	return nil
}

// start decides the file's columns; sample, its first record (nil for an empty file),
// decides which strings are dictionary encoded.
func (e *Writer) start(sample arrow.RecordBatch) error {
	cols, err := columnsOf(e.schema, func(i int) bool {
		return !slices.Contains(e.opts.Plain, e.schema.Field(i).Name) && (sample == nil || !mostlyDistinct(sample.Column(i)))
	})
	if err != nil {
		return fmt.Errorf("parquet writer: %w", err)
	}
	fw, err := newFileWriter(e.w, cols, e.opts.RowGroupRows)
	if err != nil {
		return fmt.Errorf("parquet writer: %w", err)
	}
	e.fw = fw
	return nil
}
