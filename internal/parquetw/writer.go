// Package parquetw owns encoding Arrow records of scalar columns into Parquet files fast:
// which columns get a dictionary (sampled from a file's first record), the codec and its
// level, row groups, statistics, and the parallel encoding of a row group's columns. Blob
// exports and the cache's Iceberg data files both write through it.
//
// It never touches storage decisions: it writes to an io.Writer it never closes, syncs or
// names, so where a file goes, when it is durable and who may see it stay the caller's. It
// writes the schema it is given as it is (field ids included): what a file must or must not
// claim to be is the caller's too.
package parquetw

import (
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
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
	cols   *columnsWriter // started by the first record, which decides the encodings
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
	if e.cols == nil {
		if err := e.start(rec); err != nil {
			return err
		}
	}
	return e.cols.write(rec)
}

// Close writes what is buffered and the file's footer.
func (e *Writer) Close() error {
	if e.cols == nil {
		if err := e.start(nil); err != nil {
			return err
		}
	}
	if err := e.cols.close(); err != nil {
		return fmt.Errorf("parquet footer: %w", err)
	}
	return nil
}

func (e *Writer) start(sample arrow.RecordBatch) error {
	// Every timestamp becomes microseconds: the cache's own unit, and the one unit every
	// Parquet reader (Spark included) maps to its native timestamp type.
	arrowProps := pqarrow.NewArrowWriterProperties(
		pqarrow.WithCoerceTimestamps(arrow.Microsecond),
		pqarrow.WithTruncatedTimestamps(true),
	)
	// The Parquet writer closes a sink that is an io.Closer; hiding Close keeps w the caller's.
	cw, err := newColumnsWriter(struct{ io.Writer }{e.w}, e.schema, e.props(sample), arrowProps)
	if err != nil {
		return fmt.Errorf("parquet writer: %w", err)
	}
	e.cols = cw
	return nil
}

// props are the writer settings of the file; sample, its first record (nil for an empty
// file), decides which columns are dictionary encoded.
func (e *Writer) props(sample arrow.RecordBatch) *parquet.WriterProperties {
	opts := []parquet.WriterProperty{
		parquet.WithCompression(compress.Codecs.Zstd),
		// zstd's fastest level: on log rows it compresses as well as the default level (the
		// pages are already dictionary or plain runs of similar values) at a third less CPU,
		// and every zstd reader reads it.
		parquet.WithCompressionLevel(1),
		parquet.WithMaxRowGroupLength(e.opts.RowGroupRows),
		// Min, max and null counts of every column chunk: readers prune row groups on them
		// and Iceberg takes a data file's bounds from them.
		parquet.WithStats(true),
	}
	for _, name := range e.opts.Plain {
		opts = append(opts, parquet.WithDictionaryFor(name, false))
	}
	if sample != nil {
		for i, f := range e.schema.Fields() {
			if mostlyDistinct(sample.Column(i)) {
				opts = append(opts, parquet.WithDictionaryFor(f.Name, false))
			}
		}
	}
	return parquet.NewWriterProperties(opts...)
}
