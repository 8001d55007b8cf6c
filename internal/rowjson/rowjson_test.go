package rowjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// build makes a one-column record from values; a nil value is a null.
func build(t testing.TB, typ arrow.DataType, values ...any) arrow.RecordBatch {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{{Name: "v", Type: typ, Nullable: true}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	t.Cleanup(b.Release)
	for _, v := range values {
		if v == nil {
			b.Field(0).AppendNull()
			continue
		}
		switch fb := b.Field(0).(type) {
		case *array.StringBuilder:
			fb.Append(v.(string))
		case *array.LargeStringBuilder:
			fb.Append(v.(string))
		case *array.Int64Builder:
			fb.Append(v.(int64))
		case *array.Float64Builder:
			fb.Append(v.(float64))
		case *array.BooleanBuilder:
			fb.Append(v.(bool))
		case *array.TimestampBuilder:
			fb.Append(arrow.Timestamp(v.(int64)))
		default:
			t.Fatalf("no builder for %T", fb)
		}
	}
	rec := b.NewRecordBatch()
	t.Cleanup(rec.Release)
	return rec
}

func rows(t testing.TB, rec arrow.RecordBatch) []string {
	t.Helper()
	enc, err := NewEncoder(rec.Schema())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := range int(rec.NumRows()) {
		out = append(out, string(enc.AppendRow(nil, rec, i)))
	}
	return out
}

func TestTypes(t *testing.T) {
	cases := []struct {
		name string
		typ  arrow.DataType
		in   []any
		want []string
	}{
		{"string", arrow.BinaryTypes.String, []any{"a", "", nil, "é"},
			[]string{`{"v":"a"}`, `{"v":""}`, `{}`, `{"v":"é"}`}},
		{"large_string", arrow.BinaryTypes.LargeString, []any{"x", nil},
			[]string{`{"v":"x"}`, `{}`}},
		{"int64", arrow.PrimitiveTypes.Int64, []any{int64(0), int64(-1), int64(math.MaxInt64), int64(math.MinInt64), nil},
			[]string{`{"v":0}`, `{"v":-1}`, `{"v":9223372036854775807}`, `{"v":-9223372036854775808}`, `{}`}},
		{"float64", arrow.PrimitiveTypes.Float64, []any{1.5, 0.0, math.Copysign(0, -1), 1e21, 1e-7, 123456789.0, nil},
			[]string{`{"v":1.5}`, `{"v":0.0}`, `{"v":-0.0}`, `{"v":1e+21}`, `{"v":1e-7}`, `{"v":123456789.0}`, `{}`}},
		{"float64 non-finite", arrow.PrimitiveTypes.Float64, []any{math.NaN(), math.Inf(1), math.Inf(-1)},
			[]string{`{"v":null}`, `{"v":null}`, `{"v":null}`}},
		{"bool", arrow.FixedWidthTypes.Boolean, []any{true, false, nil},
			[]string{`{"v":true}`, `{"v":false}`, `{}`}},
		{"timestamp us UTC", &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"},
			[]any{int64(1796031000123456), int64(1796031000000000), int64(0), int64(-1), nil},
			[]string{`{"v":"2026-11-30T09:30:00.123456Z"}`, `{"v":"2026-11-30T09:30:00Z"}`,
				`{"v":"1970-01-01T00:00:00Z"}`, `{"v":"1969-12-31T23:59:59.999999Z"}`, `{}`}},
		{"timestamp ns naive", &arrow.TimestampType{Unit: arrow.Nanosecond},
			[]any{int64(1796031000123456789)}, []string{`{"v":"2026-11-30T09:30:00.123456789Z"}`}},
		{"timestamp ms zoned", &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "America/New_York"},
			[]any{int64(1796031000120)}, []string{`{"v":"2026-11-30T09:30:00.12Z"}`}},
		{"timestamp s", &arrow.TimestampType{Unit: arrow.Second, TimeZone: "+05:00"},
			[]any{int64(1796031000), int64(-86401)}, []string{`{"v":"2026-11-30T09:30:00Z"}`, `{"v":"1969-12-30T23:59:59Z"}`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := rows(t, build(t, c.typ, c.in...))
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
			for _, line := range got {
				if !json.Valid([]byte(line)) {
					t.Fatalf("invalid JSON %s", line)
				}
			}
		})
	}
}

// TestFloatMatchesEncodingJSON holds the number form to encoding/json's, so the two never
// disagree about what a double looks like, except that an integral double keeps a decimal
// point, so that it reads back as a double and -0 as -0.
func TestFloatMatchesEncodingJSON(t *testing.T) {
	for _, f := range []float64{0, 1, -1, 0.1, 1.0 / 3, 1e20, 1e21, 1e-6, 9.99e-7, 1e-300, 5e-324, math.MaxFloat64, -2.5e-10, 12345.678, math.Copysign(0, -1)} {
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if f == math.Trunc(f) && f < 1e21 && f > -1e21 {
			want = append(want, ".0"...)
		}
		if math.Signbit(f) && f == 0 {
			want = []byte("-0.0") // encoding/json writes -0 as 0
		}
		got := AppendFloat(nil, f)
		if !bytes.Equal(got, want) {
			t.Errorf("%v: got %s, want %s", f, got, want)
		}
		var back float64
		if err := json.Unmarshal(got, &back); err != nil || math.Float64bits(back) != math.Float64bits(f) {
			t.Errorf("%v: %s reads back as %v (%v)", f, got, back, err)
		}
	}
}

func TestMultiColumnOrderAndNulls(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "_hyp_ingest_seq", Type: arrow.PrimitiveTypes.Int64},
		{Name: "_hyp_ingested_at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
		{Name: "msg", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: `we"ird\key`, Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).AppendValues([]int64{7, 8}, nil)
	b.Field(1).(*array.TimestampBuilder).AppendValues([]arrow.Timestamp{1796031000000001, 1796031000000002}, nil)
	b.Field(2).(*array.StringBuilder).AppendValues([]string{"hi", ""}, []bool{true, false})
	b.Field(3).(*array.Int64Builder).AppendValues([]int64{0, 3}, []bool{false, true})
	b.Field(4).(*array.BooleanBuilder).AppendValues([]bool{true, false}, []bool{false, false})
	rec := b.NewRecordBatch()
	defer rec.Release()

	want := []string{
		`{"_hyp_ingest_seq":7,"_hyp_ingested_at":"2026-11-30T09:30:00.000001Z","msg":"hi"}`,
		`{"_hyp_ingest_seq":8,"_hyp_ingested_at":"2026-11-30T09:30:00.000002Z","n":3}`,
	}
	got := rows(t, rec)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d: got %s, want %s", i, got[i], want[i])
		}
	}

	// A field name that needs escaping still round-trips as a key.
	b.Field(0).(*array.Int64Builder).Append(1)
	b.Field(1).(*array.TimestampBuilder).Append(0)
	b.Field(2).AppendNull()
	b.Field(3).AppendNull()
	b.Field(4).(*array.BooleanBuilder).Append(true)
	rec2 := b.NewRecordBatch()
	defer rec2.Release()
	var m map[string]any
	if err := json.Unmarshal([]byte(rows(t, rec2)[0]), &m); err != nil {
		t.Fatal(err)
	}
	if m[`we"ird\key`] != true {
		t.Fatalf("escaped key lost: %v", m)
	}
}

func TestStringEscaping(t *testing.T) {
	cases := []string{
		`plain`, `"quoted"`, `back\slash`, "nl\nand\ttab\rcr", "\x00\x01\x1f\x7f", "\b\f",
		"<html>&amp;</html>", "é中😀", "\u2028\u2029", "bad\xffbyte", "\xed\xa0\x80", "trunc\xe2\x82",
		"\ufffd", strings.Repeat("x", 1000) + "\"",
	}
	for _, s := range cases {
		got := AppendString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%q: %s is not a JSON string: %v", s, got, err)
		}
		if want := viaEncodingJSON(t, s); back != want {
			t.Errorf("%q: decoded %q, want %q", s, back, want)
		}
		if bytes.ContainsAny(got, "\n\r\u2028\u2029") {
			t.Errorf("%q: raw line separator in %q", s, got)
		}
	}
}

// viaEncodingJSON is what s becomes after encoding/json writes and reads it: s itself when it
// is valid UTF-8, otherwise s with each invalid byte replaced by U+FFFD.
func viaEncodingJSON(t testing.TB, s string) string {
	t.Helper()
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back string
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	return back
}

func TestUnsupportedType(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int32}}, nil)
	if _, err := NewEncoder(schema); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Fatalf("want an error naming column x, got %v", err)
	}
}

func benchRecord(tb testing.TB, n int) arrow.RecordBatch {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "_hyp_ingest_seq", Type: arrow.PrimitiveTypes.Int64},
		{Name: "_hyp_ingested_at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
		{Name: "level", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "msg", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "dur", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "ok", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := range n {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(1796031000000000 + int64(i)*137))
		b.Field(2).(*array.StringBuilder).Append("INFO")
		b.Field(3).(*array.StringBuilder).Append("GET /api/v1/items?id=42 returned \"200\" in 3ms")
		b.Field(4).(*array.Float64Builder).Append(float64(i) * 0.25)
		b.Field(5).(*array.BooleanBuilder).Append(i%2 == 0)
	}
	rec := b.NewRecordBatch()
	tb.Cleanup(rec.Release)
	return rec
}

func TestAppendRowDoesNotAllocate(t *testing.T) {
	rec := benchRecord(t, 16)
	enc, err := NewEncoder(rec.Schema())
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		buf = buf[:0]
		for i := range int(rec.NumRows()) {
			buf = enc.AppendRow(buf, rec, i)
		}
	})
	if allocs != 0 {
		t.Fatalf("AppendRow allocated %v times per 16 rows", allocs)
	}
}

func BenchmarkAppendRow(b *testing.B) {
	const n = 4096
	rec := benchRecord(b, n)
	enc, err := NewEncoder(rec.Schema())
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 1<<20)
	b.ReportAllocs()
	bytesOut := 0
	for i := 0; b.Loop(); i++ {
		if i%n == 0 {
			buf = buf[:0]
		}
		before := len(buf)
		buf = enc.AppendRow(buf, rec, i%n)
		bytesOut += len(buf) - before
	}
	b.SetBytes(int64(bytesOut / max(b.N, 1)))
}

// TestPlainWords puts every byte value at every offset of plain text, so each lane of the
// word-at-a-time test sees every kind of byte.
func TestPlainWords(t *testing.T) {
	plain := func(b byte) bool { return b >= 0x20 && b < 0x80 && b != '"' && b != '\\' }
	for n := 0; n <= 26; n++ {
		for at := 0; at < n; at++ {
			for c := 0; c < 256; c++ {
				s := []byte(strings.Repeat("a", n))
				s[at] = byte(c)
				want := n / 8 * 8
				if !plain(byte(c)) {
					want = min(want, at/8*8)
				}
				if got := plainWords(string(s)); got != want {
					t.Fatalf("plainWords(%q) = %d, want %d", s, got, want)
				}
			}
		}
	}
	// A special byte after another one: the first still decides.
	if got := plainWords("abcdefgh\x00\x01\"\\xyzabcdefgh"); got != 8 {
		t.Fatalf("got %d", got)
	}
}

func BenchmarkAppendString(b *testing.B) {
	for _, s := range []string{"INFO", "GET /api/v1/items?id=42 returned 200 in 3ms", `a "quoted" \ value`, "café 中文"} {
		b.Run(fmt.Sprintf("%d", len(s)), func(b *testing.B) {
			buf := make([]byte, 0, 256)
			b.SetBytes(int64(len(s)))
			for b.Loop() {
				buf = AppendString(buf[:0], s)
			}
		})
	}
}

func BenchmarkAppendTimestamp(b *testing.B) {
	buf := make([]byte, 0, 64)
	v := int64(1796031000000000)
	for b.Loop() {
		v += 137
		buf = AppendTimestamp(buf[:0], v, 1e6)
	}
}
