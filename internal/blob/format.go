// Package blob owns export-unit files and where they go: their formats (Parquet, gzipped
// NDJSON), their object keys, and the destinations (a local directory, an S3 bucket) that
// make a finished file durable exactly once. It never chooses which rows form a unit, never
// tracks watermarks, and never leaves a partial file where a reader can see it.
package blob

import (
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/klauspost/compress/gzip"

	"github.com/hyp-project/hyp/internal/parquetw"
	"github.com/hyp-project/hyp/internal/rowjson"
)

// Format is the file format of an export unit.
type Format string

const (
	Parquet Format = "parquet"
	JSONL   Format = "jsonl"
)

// ParseFormat reads a format name as written in the config.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case Parquet, JSONL:
		return f, nil
	}
	return "", fmt.Errorf("unknown blob format %q (want %q or %q)", s, Parquet, JSONL)
}

// Ext is the file name extension, without the dot.
func (f Format) Ext() string {
	if f == JSONL {
		return "jsonl.gz"
	}
	return string(f)
}

// MaxRowGroupRows bounds Parquet row groups so readers can prune and parallelise within one
// file while each group stays large enough to compress well.
const MaxRowGroupRows = 64 * 1024

// Encode writes recs, which all have schema, to w as one complete file in format f. It never
// closes w, so the caller can still size, sync or rename it.
func Encode(w io.Writer, f Format, schema *arrow.Schema, recs []arrow.RecordBatch) error {
	e, err := NewWriter(w, f, schema)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if err := e.Write(rec); err != nil {
			return err
		}
	}
	return e.Close()
}

// Writer encodes one file record by record, so a unit never has to be held whole: a Parquet
// file keeps at most one row group buffered, a JSONL file one compressor flush.
type Writer struct {
	w      io.Writer
	f      Format
	schema *arrow.Schema
	n      int // records written
	pq     *parquetw.Writer
	jl     *jsonlWriter
}

// NewWriter starts a file in format f of records with schema. Close finishes it; it never
// closes w, so the caller can still size, sync or rename it.
func NewWriter(w io.Writer, f Format, schema *arrow.Schema) (*Writer, error) {
	e := &Writer{w: w, f: f, schema: schema}
	switch f {
	case Parquet:
		e.pq = parquetw.NewWriter(w, parquetSchema(schema), parquetw.Options{
			RowGroupRows: MaxRowGroupRows,
			// The internal columns (SPEC 6) are unique per row.
			Plain: []string{"_hyp_ingest_seq", "_hyp_ingested_at"},
		})
	case JSONL:
		jl, err := newJSONLWriter(w, schema)
		if err != nil {
			return nil, err
		}
		e.jl = jl
	default:
		return nil, fmt.Errorf("encode: unknown blob format %q", f)
	}
	return e, nil
}

// Write adds rec's rows to the file. rec must have the Writer's schema; Write does not
// retain it.
func (e *Writer) Write(rec arrow.RecordBatch) error {
	if err := sameShape(e.schema, rec.Schema()); err != nil {
		return fmt.Errorf("record %d: %w", e.n, err)
	}
	e.n++
	if e.jl != nil {
		return e.jl.write(rec)
	}
	if err := e.pq.Write(rec); err != nil {
		return fmt.Errorf("parquet record %d: %w", e.n-1, err)
	}
	return nil
}

// Close writes what is buffered and the file's footer.
func (e *Writer) Close() error {
	if e.jl != nil {
		return e.jl.close()
	}
	return e.pq.Close()
}

// sameShape compares column names and types only: records read back from the cache carry
// Iceberg field metadata the caller's schema may not, and that difference is harmless.
func sameShape(want, got *arrow.Schema) error {
	if want.NumFields() != got.NumFields() {
		return fmt.Errorf("has %d columns, schema has %d", got.NumFields(), want.NumFields())
	}
	for i, wf := range want.Fields() {
		gf := got.Field(i)
		if gf.Name != wf.Name || !arrow.TypeEqual(gf.Type, wf.Type) {
			return fmt.Errorf("column %d is %s %s, schema has %s %s", i, gf.Name, gf.Type, wf.Name, wf.Type)
		}
	}
	return nil
}

// parquetSchema is schema as a standard file should describe it: no Iceberg field ids or
// other metadata (a plain Parquet reader must not mistake the file for an Iceberg data
// file), and timestamps labelled UTC so they are written with isAdjustedToUTC: cached
// timestamps are instants, whatever zone label they carry.
func parquetSchema(schema *arrow.Schema) *arrow.Schema {
	fields := make([]arrow.Field, schema.NumFields())
	for i, f := range schema.Fields() {
		t := f.Type
		if ts, ok := t.(*arrow.TimestampType); ok {
			t = &arrow.TimestampType{Unit: ts.Unit, TimeZone: "UTC"}
		}
		fields[i] = arrow.Field{Name: f.Name, Type: t, Nullable: f.Nullable}
	}
	return arrow.NewSchema(fields, nil)
}

// jsonlFlush is how much NDJSON collects before it goes to the compressor, so gzip sees
// large writes rather than one per row.
const jsonlFlush = 256 << 10

type jsonlWriter struct {
	enc *rowjson.Encoder
	zw  *gzip.Writer
	buf []byte
}

func newJSONLWriter(w io.Writer, schema *arrow.Schema) (*jsonlWriter, error) {
	enc, err := rowjson.NewEncoder(schema)
	if err != nil {
		return nil, fmt.Errorf("jsonl: %w", err)
	}
	return &jsonlWriter{enc: enc, zw: gzip.NewWriter(w), buf: make([]byte, 0, jsonlFlush+4096)}, nil
}

func (j *jsonlWriter) write(rec arrow.RecordBatch) error {
	for i := range int(rec.NumRows()) {
		j.buf = append(j.enc.AppendRow(j.buf, rec, i), '\n')
		if len(j.buf) >= jsonlFlush {
			if _, err := j.zw.Write(j.buf); err != nil {
				return fmt.Errorf("jsonl: compress: %w", err)
			}
			j.buf = j.buf[:0]
		}
	}
	return nil
}

func (j *jsonlWriter) close() error {
	if _, err := j.zw.Write(j.buf); err != nil {
		return fmt.Errorf("jsonl: compress: %w", err)
	}
	if err := j.zw.Close(); err != nil {
		return fmt.Errorf("jsonl: finish gzip: %w", err)
	}
	return nil
}
