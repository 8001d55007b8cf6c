// Package blob owns export-unit files and where they go: their formats (Parquet, gzipped
// NDJSON), their object keys, and the destinations (a local directory, an S3 bucket) that
// make a finished file durable exactly once. It never chooses which rows form a unit, never
// tracks watermarks, and never leaves a partial file where a reader can see it.
package blob

import (
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/klauspost/compress/gzip"

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
	for i, rec := range recs {
		if err := sameShape(schema, rec.Schema()); err != nil {
			return fmt.Errorf("record %d: %w", i, err)
		}
	}
	switch f {
	case Parquet:
		return encodeParquet(w, schema, recs)
	case JSONL:
		return encodeJSONL(w, schema, recs)
	}
	return fmt.Errorf("encode: unknown blob format %q", f)
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

func encodeParquet(w io.Writer, schema *arrow.Schema, recs []arrow.RecordBatch) error {
	out := parquetSchema(schema)
	props := parquet.NewWriterProperties(
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithMaxRowGroupLength(MaxRowGroupRows),
		// The internal columns (SPEC 6) are unique per row, so a dictionary never pays off
		// and building one until it overflows costs most of the encode time.
		parquet.WithDictionaryFor("_hyp_ingest_seq", false),
		parquet.WithDictionaryFor("_hyp_ingested_at", false),
	)
	// Every timestamp becomes microseconds: the cache's own unit, and the one unit every
	// Parquet reader (Spark included) maps to its native timestamp type.
	arrowProps := pqarrow.NewArrowWriterProperties(
		pqarrow.WithCoerceTimestamps(arrow.Microsecond),
		pqarrow.WithTruncatedTimestamps(true),
	)
	// The Parquet writer closes a sink that is an io.Closer; hiding Close keeps w the caller's.
	fw, err := pqarrow.NewFileWriter(out, struct{ io.Writer }{w}, props, arrowProps)
	if err != nil {
		return fmt.Errorf("parquet writer: %w", err)
	}
	for i, rec := range recs {
		if err := writeRelabelled(fw, out, rec); err != nil {
			return fmt.Errorf("parquet record %d: %w", i, err)
		}
	}
	if err := fw.Close(); err != nil {
		return fmt.Errorf("parquet footer: %w", err)
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

// writeRelabelled writes rec under schema out, sharing rec's buffers: only type labels
// differ between the two, never the stored values.
func writeRelabelled(fw *pqarrow.FileWriter, out *arrow.Schema, rec arrow.RecordBatch) error {
	cols := make([]arrow.Array, rec.NumCols())
	for i, col := range rec.Columns() {
		if arrow.TypeEqual(col.DataType(), out.Field(i).Type) {
			col.Retain()
			cols[i] = col
			continue
		}
		d := col.Data()
		nd := array.NewData(out.Field(i).Type, d.Len(), d.Buffers(), nil, d.NullN(), d.Offset())
		cols[i] = array.MakeFromData(nd)
		nd.Release()
	}
	relabelled := array.NewRecordBatch(out, cols, rec.NumRows())
	for _, c := range cols {
		c.Release()
	}
	defer relabelled.Release()
	// WriteBuffered fills row groups across records, so a unit read back in many small
	// batches still gets row groups of MaxRowGroupRows rather than one per batch.
	return fw.WriteBuffered(relabelled)
}

// jsonlFlush is how much NDJSON collects before it goes to the compressor, so gzip sees
// large writes rather than one per row.
const jsonlFlush = 256 << 10

func encodeJSONL(w io.Writer, schema *arrow.Schema, recs []arrow.RecordBatch) error {
	enc, err := rowjson.NewEncoder(schema)
	if err != nil {
		return fmt.Errorf("jsonl: %w", err)
	}
	zw := gzip.NewWriter(w)
	buf := make([]byte, 0, jsonlFlush+4096)
	for _, rec := range recs {
		for i := range int(rec.NumRows()) {
			buf = append(enc.AppendRow(buf, rec, i), '\n')
			if len(buf) >= jsonlFlush {
				if _, err := zw.Write(buf); err != nil {
					return fmt.Errorf("jsonl: compress: %w", err)
				}
				buf = buf[:0]
			}
		}
	}
	if _, err := zw.Write(buf); err != nil {
		return fmt.Errorf("jsonl: compress: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("jsonl: finish gzip: %w", err)
	}
	return nil
}
