package blob

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/arrow-go/v18/parquet/schema"
	"github.com/klauspost/compress/gzip"

	"github.com/hyp-project/hyp/internal/rowjson"
)

func TestParseFormat(t *testing.T) {
	cases := []struct {
		in      string
		want    Format
		ext     string
		wantErr bool
	}{
		{"parquet", Parquet, "parquet", false},
		{"jsonl", JSONL, "jsonl.gz", false},
		{"", "", "", true},
		{"Parquet", "", "", true},
		{"csv", "", "", true},
	}
	for _, c := range cases {
		got, err := ParseFormat(c.in)
		if (err != nil) != c.wantErr || got != c.want {
			t.Errorf("ParseFormat(%q) = %q, %v", c.in, got, err)
			continue
		}
		if err == nil && got.Ext() != c.ext {
			t.Errorf("%q.Ext() = %q, want %q", got, got.Ext(), c.ext)
		}
	}
}

func fieldID(id int) arrow.Metadata {
	return arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{fmt.Sprint(id)})
}

// cacheSchema looks like what an Iceberg scan of the cache hands back: field ids in the
// metadata, required internal columns, and (to cover every label the encoder must handle)
// a nanosecond zone-less timestamp, a zoned one and a large_string.
func cacheSchema() *arrow.Schema {
	return arrow.NewSchema([]arrow.Field{
		{Name: "_hyp_ingest_seq", Type: arrow.PrimitiveTypes.Int64, Metadata: fieldID(1)},
		{Name: "_hyp_ingested_at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Metadata: fieldID(2)},
		{Name: "msg", Type: arrow.BinaryTypes.String, Nullable: true, Metadata: fieldID(3)},
		{Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true, Metadata: fieldID(4)},
		{Name: "dur", Type: arrow.PrimitiveTypes.Float64, Nullable: true, Metadata: fieldID(5)},
		{Name: "ok", Type: arrow.FixedWidthTypes.Boolean, Nullable: true, Metadata: fieldID(6)},
		{Name: "at_ns", Type: &arrow.TimestampType{Unit: arrow.Nanosecond}, Nullable: true, Metadata: fieldID(7)},
		{Name: "at_ny", Type: &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "America/New_York"}, Nullable: true, Metadata: fieldID(8)},
		{Name: "big", Type: arrow.BinaryTypes.LargeString, Nullable: true, Metadata: fieldID(9)},
	}, nil)
}

// cacheRecords makes total rows split into batches of the given sizes (cycled), with nulls
// and awkward strings sprinkled in.
func cacheRecords(t testing.TB, total int, sizes ...int) []arrow.RecordBatch {
	t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, cacheSchema())
	defer b.Release()
	var recs []arrow.RecordBatch
	row := 0
	for k := 0; row < total; k++ {
		n := min(sizes[k%len(sizes)], total-row)
		for range n {
			b.Field(0).(*array.Int64Builder).Append(int64(row + 1))
			b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(1796031000000000 + int64(row)))
			if row%7 == 0 {
				b.Field(2).AppendNull()
			} else {
				b.Field(2).(*array.StringBuilder).Append(fmt.Sprintf("row %d \"q\" \n é", row))
			}
			b.Field(3).(*array.Int64Builder).AppendValues([]int64{int64(row) * -3}, []bool{row%5 != 0})
			dur := float64(row) / 8
			if row == 3 {
				dur = math.NaN()
			}
			b.Field(4).(*array.Float64Builder).Append(dur)
			b.Field(5).(*array.BooleanBuilder).AppendValues([]bool{row%2 == 0}, []bool{row%3 != 0})
			// Whole microseconds, so the coercion to us loses nothing this test can see.
			b.Field(6).(*array.TimestampBuilder).Append(arrow.Timestamp(int64(row) * 1000))
			b.Field(7).(*array.TimestampBuilder).Append(arrow.Timestamp(1796031000000 + int64(row)))
			b.Field(8).(*array.LargeStringBuilder).Append(strings.Repeat("x", row%4))
			row++
		}
		rec := b.NewRecordBatch()
		t.Cleanup(rec.Release)
		recs = append(recs, rec)
	}
	return recs
}

// jsonRows renders records as NDJSON lines, the common ground for comparing what went in
// with what came back.
func jsonRows(t testing.TB, recs []arrow.RecordBatch) []string {
	t.Helper()
	var out []string
	for _, rec := range recs {
		enc, err := rowjson.NewEncoder(rec.Schema())
		if err != nil {
			t.Fatal(err)
		}
		for i := range int(rec.NumRows()) {
			out = append(out, string(enc.AppendRow(nil, rec, i)))
		}
	}
	return out
}

func equalLines(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("row %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}

func TestParquetRoundTrip(t *testing.T) {
	const total = 150_000
	s := cacheSchema()
	// Batch sizes that straddle row-group boundaries, including tiny batches.
	recs := cacheRecords(t, total, 40_000, 1, 7, 30_000, 65_536, 3)
	var buf bytes.Buffer
	if err := Encode(&buf, Parquet, s, recs); err != nil {
		t.Fatal(err)
	}

	pf, err := file.NewParquetReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	md := pf.MetaData()
	if md.NumRows != total {
		t.Fatalf("file has %d rows, want %d", md.NumRows, total)
	}
	if got, want := pf.NumRowGroups(), (total+MaxRowGroupRows-1)/MaxRowGroupRows; got != want {
		t.Errorf("%d row groups, want %d", got, want)
	}
	for g := range pf.NumRowGroups() {
		rg := md.RowGroup(g)
		if rg.NumRows() > MaxRowGroupRows {
			t.Errorf("row group %d has %d rows, more than %d", g, rg.NumRows(), MaxRowGroupRows)
		}
		for c := range rg.NumColumns() {
			cc, err := rg.ColumnChunk(c)
			if err != nil {
				t.Fatal(err)
			}
			if cc.Compression() != compress.Codecs.Zstd {
				t.Errorf("row group %d column %d compressed with %v, want ZSTD", g, c, cc.Compression())
			}
		}
	}
	for _, kv := range md.KeyValueMetadata() {
		t.Errorf("unexpected file metadata %s", kv.Key)
	}
	ps := md.Schema
	timestamps := 0
	for i := range ps.NumColumns() {
		col := ps.Column(i)
		if id := col.SchemaNode().FieldID(); id >= 0 {
			t.Errorf("column %s carries field id %d", col.Name(), id)
		}
		if col.PhysicalType() != parquet.Types.Int64 {
			continue
		}
		if ts, ok := col.LogicalType().(schema.TimestampLogicalType); ok {
			timestamps++
			if !ts.IsAdjustedToUTC() || ts.TimeUnit() != schema.TimeUnitMicros {
				t.Errorf("column %s is %s, want TIMESTAMP(us, isAdjustedToUTC)", col.Name(), ts)
			}
		}
	}

	if timestamps != 3 {
		t.Errorf("%d timestamp columns in the file, want 3", timestamps)
	}

	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 10_000}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	for i, f := range tbl.Schema().Fields() {
		if ts, ok := f.Type.(*arrow.TimestampType); ok && (ts.Unit != arrow.Microsecond || ts.TimeZone != "UTC") {
			t.Errorf("column %d %s reads back as %s", i, f.Name, ts)
		}
	}
	tr := array.NewTableReader(tbl, 10_000)
	defer tr.Release()
	var back []arrow.RecordBatch
	for tr.Next() {
		rec := tr.RecordBatch()
		rec.Retain()
		t.Cleanup(rec.Release)
		back = append(back, rec)
	}
	equalLines(t, jsonRows(t, back), jsonRows(t, recs))
}

func TestJSONLRoundTrip(t *testing.T) {
	s := cacheSchema()
	recs := cacheRecords(t, 20_000, 3_000, 1, 9_999)
	var buf bytes.Buffer
	if err := Encode(&buf, JSONL, s, recs); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var obj map[string]any
		if err := json.Unmarshal(sc.Bytes(), &obj); err != nil {
			t.Fatalf("line %d is not a JSON object: %v: %s", len(got)+1, err, sc.Bytes())
		}
		if len(got) == 0 {
			if _, ok := obj["msg"]; ok {
				t.Errorf("null msg of row 0 was written: %v", obj)
			}
			if obj["_hyp_ingest_seq"] != 1.0 || obj["_hyp_ingested_at"] != "2026-11-30T09:30:00Z" {
				t.Errorf("internal columns of row 0: %v", obj)
			}
		}
		got = append(got, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, zr); err != nil {
		t.Fatalf("gzip trailer: %v", err)
	}
	equalLines(t, got, jsonRows(t, recs))
}

// closeTracker is a writer that notices being closed.
type closeTracker struct {
	bytes.Buffer
	closed bool
}

func (c *closeTracker) Close() error { c.closed = true; return nil }

func TestEncodeLeavesWriterOpen(t *testing.T) {
	for _, f := range []Format{Parquet, JSONL} {
		var w closeTracker
		if err := Encode(&w, f, cacheSchema(), cacheRecords(t, 10, 10)); err != nil {
			t.Fatal(err)
		}
		if w.closed || w.Len() == 0 {
			t.Errorf("%s: closed=%v, %d bytes written", f, w.closed, w.Len())
		}
	}
}

func TestEncodeRejects(t *testing.T) {
	s := cacheSchema()
	other := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, other)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).Append(1)
	rec := b.NewRecordBatch()
	defer rec.Release()
	recs := []arrow.RecordBatch{rec}
	cases := []struct {
		name   string
		f      Format
		schema *arrow.Schema
		recs   []arrow.RecordBatch
		want   string
	}{
		{"record of another schema", Parquet, s, recs, "record 0"},
		{"unknown format", Format("csv"), other, recs, "csv"},
		{"jsonl of a type without JSON form", JSONL,
			arrow.NewSchema([]arrow.Field{{Name: "i", Type: arrow.PrimitiveTypes.Int32}}, nil), nil, `"i"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Encode(io.Discard, c.f, c.schema, c.recs)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an error mentioning %s, got %v", c.want, err)
			}
		})
	}
}

func BenchmarkEncodeParquet(b *testing.B) {
	s := cacheSchema()
	recs := cacheRecords(b, 200_000, 8192)
	b.ReportAllocs()
	for b.Loop() {
		if err := Encode(io.Discard, Parquet, s, recs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(200_000*b.N)/b.Elapsed().Seconds(), "rows/s")
}

func BenchmarkEncodeJSONL(b *testing.B) {
	s := cacheSchema()
	recs := cacheRecords(b, 200_000, 8192)
	b.ReportAllocs()
	for b.Loop() {
		if err := Encode(io.Discard, JSONL, s, recs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(200_000*b.N)/b.Elapsed().Seconds(), "rows/s")
}

// Columns whose values are nearly all distinct are written without a dictionary (building
// one only to overflow it is most of the encode time and makes the file larger); columns of
// few values keep theirs.
func TestParquetDictionaryOnlyWhereItPays(t *testing.T) {
	recs := cacheRecords(t, 100_000, 30_000)
	var buf bytes.Buffer
	if err := Encode(&buf, Parquet, cacheSchema(), recs); err != nil {
		t.Fatal(err)
	}
	pf, err := file.NewParquetReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	want := map[string]bool{
		"_hyp_ingest_seq": false, "_hyp_ingested_at": false,
		"msg": false, "n": false, "dur": false, "at_ns": false, "at_ny": false, // unique per row
		"big": true, // four values
	}
	md := pf.MetaData()
	for g := range md.NumRowGroups() {
		rg := md.RowGroup(g)
		for c := range rg.NumColumns() {
			cc, err := rg.ColumnChunk(c)
			if err != nil {
				t.Fatal(err)
			}
			name := cc.PathInSchema().String()
			w, ok := want[name]
			if !ok {
				continue
			}
			if got := cc.HasDictionaryPage(); got != w {
				t.Errorf("row group %d column %s: dictionary %v, want %v", g, name, got, w)
			}
		}
	}
}
