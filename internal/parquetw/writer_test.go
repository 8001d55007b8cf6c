package parquetw

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"pgregory.net/rapid"

	"github.com/hyp-project/hyp/internal/truncate"
)

// fataler is what the checks need of *testing.T and *rapid.T.
type fataler interface {
	Helper()
	Fatal(...any)
	Fatalf(string, ...any)
}

// value is one cell as the model holds it; null when !ok.
type value struct {
	ok bool
	s  string
	i  int64
	f  float64
	b  bool
}

var modelTypes = []arrow.DataType{
	arrow.BinaryTypes.String,
	arrow.PrimitiveTypes.Int64,
	arrow.PrimitiveTypes.Float64,
	arrow.FixedWidthTypes.Boolean,
	&arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"},
}

func genValue(t *rapid.T, typ arrow.DataType, label string, nulls int) value {
	if rapid.IntRange(0, 99).Draw(t, label+"null") < nulls {
		return value{}
	}
	v := value{ok: true}
	switch typ.ID() {
	case arrow.STRING:
		switch rapid.IntRange(0, 3).Draw(t, label+"kind") {
		case 0: // few distinct values, so runs and a dictionary
			v.s = rapid.SampledFrom([]string{"", "a", "info", "error", "\x00\xff"}).Draw(t, label)
		case 1:
			v.s = rapid.String().Draw(t, label)
		case 2:
			// Long values, over maxStatBytes: their bounds are truncated, never split a
			// character, and a prefix of the greatest character has no upper bound.
			ch := rapid.SampledFrom([]string{"x", "é", "€", "\U0010ffff"}).Draw(t, label+"char")
			v.s = strings.Repeat(ch, rapid.IntRange(0, 5000).Draw(t, label)/len(ch)) + rapid.SampledFrom([]string{"", "a", "\xff"}).Draw(t, label+"tail")
		default:
			v.s = fmt.Sprint("id-", rapid.Int64().Draw(t, label))
		}
	case arrow.INT64, arrow.TIMESTAMP:
		v.i = rapid.OneOf(rapid.Int64Range(-3, 3), rapid.Int64()).Draw(t, label)
	case arrow.FLOAT64:
		v.f = rapid.OneOf(rapid.SampledFrom([]float64{0, math.Copysign(0, -1), math.NaN(), math.Inf(1), -1.5}), rapid.Float64()).Draw(t, label)
	case arrow.BOOL:
		v.b = rapid.Bool().Draw(t, label)
	}
	return v
}

func buildRecord(schema *arrow.Schema, rows [][]value) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for _, row := range rows {
		for c, v := range row {
			fb := b.Field(c)
			if !v.ok {
				fb.AppendNull()
				continue
			}
			switch fb := fb.(type) {
			case *array.StringBuilder:
				fb.Append(v.s)
			case *array.Int64Builder:
				fb.Append(v.i)
			case *array.TimestampBuilder:
				fb.Append(arrow.Timestamp(v.i))
			case *array.Float64Builder:
				fb.Append(v.f)
			case *array.BooleanBuilder:
				fb.Append(v.b)
			}
		}
	}
	return b.NewRecordBatch()
}

// TestWriterRoundTrip checks the writer against arrow-go's reader, which shares none of its
// encoding code: every value back in order, row groups of the asked size, and statistics
// that match the values of each row group.
func TestWriterRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ncols := rapid.IntRange(1, 5).Draw(t, "ncols")
		fields := make([]arrow.Field, ncols)
		for c := range fields {
			typ := rapid.SampledFrom(modelTypes).Draw(t, "type")
			nullable := rapid.Bool().Draw(t, "nullable")
			fields[c] = arrow.Field{Name: fmt.Sprintf("c%d", c), Type: typ, Nullable: nullable,
				Metadata: arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{fmt.Sprint(c + 10)})}
		}
		schema := arrow.NewSchema(fields, nil)
		var all [][]value
		var recs []arrow.RecordBatch
		for r := range rapid.IntRange(0, 4).Draw(t, "records") {
			n := rapid.IntRange(0, 700).Draw(t, "rows")
			// The share of nulls varies by record, so pages see records with and without.
			nulls := make([]int, ncols)
			for c, f := range fields {
				if f.Nullable {
					nulls[c] = rapid.SampledFrom([]int{0, 0, 1, 5, 50, 100}).Draw(t, "nulls")
				}
			}
			rows := make([][]value, n)
			for i := range rows {
				rows[i] = make([]value, ncols)
				// Repeat the previous row's value often, so the encodings see long runs.
				for c := range rows[i] {
					if i > 0 && rapid.IntRange(0, 2).Draw(t, "repeat") == 0 {
						rows[i][c] = rows[i-1][c]
					} else {
						rows[i][c] = genValue(t, fields[c].Type, fmt.Sprintf("r%dc%d", r, c), nulls[c])
					}
				}
			}
			all = append(all, rows...)
			recs = append(recs, buildRecord(schema, rows))
		}
		rgRows := rapid.Int64Range(1, 1000).Draw(t, "rowGroupRows")
		// Records this small always sample as worth a dictionary; Plain takes the others.
		var plain []string
		for _, f := range fields {
			if rapid.Bool().Draw(t, "plain") {
				plain = append(plain, f.Name)
			}
		}
		var buf bytes.Buffer
		w := NewWriter(&buf, schema, Options{RowGroupRows: rgRows, Plain: plain})
		for _, rec := range recs {
			if err := w.Write(rec); err != nil {
				t.Fatal(err)
			}
			rec.Release()
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		checkFile(t, buf.Bytes(), schema, all, rgRows)
	})
}

func checkFile(t fataler, data []byte, schema *arrow.Schema, rows [][]value, rgRows int64) {
	t.Helper()
	pf, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	md := pf.MetaData()
	if md.NumRows != int64(len(rows)) {
		t.Fatalf("footer says %d rows, wrote %d", md.NumRows, len(rows))
	}
	if want := (int64(len(rows)) + rgRows - 1) / rgRows; int64(md.NumRowGroups()) != want {
		t.Fatalf("%d row groups, want %d", md.NumRowGroups(), want)
	}
	for c, f := range schema.Fields() {
		col := md.Schema.Column(c)
		if col.Name() != f.Name || int(col.SchemaNode().FieldID()) != c+10 {
			t.Fatalf("column %d is %s with field id %d", c, col.Name(), col.SchemaNode().FieldID())
		}
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	defer tbl.Release()
	for c := range schema.Fields() {
		if got, want := tbl.Schema().Field(c).Type, schema.Field(c).Type; !arrow.TypeEqual(got, want) {
			t.Fatalf("column %d reads back as %s, wrote %s", c, got, want)
		}
		var at int
		for _, chunk := range tbl.Column(c).Data().Chunks() {
			for i := range chunk.Len() {
				if got, want := cell(chunk, i), rows[at][c]; !sameValue(got, want) {
					t.Fatalf("row %d column %d: read %+v, wrote %+v", at, c, got, want)
				}
				at++
			}
		}
		if at != len(rows) {
			t.Fatalf("column %d: read %d rows, wrote %d", c, at, len(rows))
		}
		for g := range md.NumRowGroups() {
			lo := int64(g) * rgRows
			checkStats(t, md, g, c, schema.Field(c).Type, rows[lo:min(lo+rgRows, int64(len(rows)))])
		}
	}
}

func cell(a arrow.Array, i int) value {
	if a.IsNull(i) {
		return value{}
	}
	switch a := a.(type) {
	case *array.String:
		return value{ok: true, s: a.Value(i)}
	case *array.Int64:
		return value{ok: true, i: a.Value(i)}
	case *array.Timestamp:
		return value{ok: true, i: int64(a.Value(i))}
	case *array.Float64:
		return value{ok: true, f: a.Value(i)}
	case *array.Boolean:
		return value{ok: true, b: a.Value(i)}
	}
	panic(a.DataType().String())
}

func sameValue(a, b value) bool {
	if !a.ok || !b.ok {
		return a.ok == b.ok
	}
	if math.IsNaN(a.f) || math.IsNaN(b.f) {
		return math.IsNaN(a.f) && math.IsNaN(b.f)
	}
	return a.ok == b.ok && a.s == b.s && a.i == b.i && math.Float64bits(a.f) == math.Float64bits(b.f) && a.b == b.b
}

func checkStats(t fataler, md *metadata.FileMetaData, g, c int, typ arrow.DataType, rows [][]value) {
	t.Helper()
	cc, err := md.RowGroup(g).ColumnChunk(c)
	if err != nil {
		t.Fatal(err)
	}
	st, err := cc.Statistics()
	if err != nil || st == nil {
		t.Fatalf("row group %d column %d: no statistics (%v)", g, c, err)
	}
	var nulls int64
	var vals []value
	for _, r := range rows {
		if !r[c].ok {
			nulls++
		} else if !math.IsNaN(r[c].f) {
			vals = append(vals, r[c])
		}
	}
	if st.NullCount() != nulls || cc.NumValues() != int64(len(rows)) {
		t.Fatalf("row group %d column %d: null count %d of %d values, want %d of %d", g, c, st.NullCount(), cc.NumValues(), nulls, len(rows))
	}
	if len(vals) == 0 {
		return
	}
	switch s := st.(type) {
	case *metadata.ByteArrayStatistics:
		lo, hi := vals[0].s, vals[0].s
		for _, v := range vals {
			lo, hi = min(lo, v.s), max(hi, v.s)
		}
		lo, _ = truncate.Lower(lo, maxStatBytes, truncate.Bytes)
		hi, _, ok := truncate.Upper(hi, maxStatBytes, truncate.Bytes)
		if !ok {
			if s.HasMinMax() {
				t.Fatalf("row group %d column %d: bounds kept where no upper bound of %d bytes exists", g, c, maxStatBytes)
			}
			return
		}
		if !s.HasMinMax() || string(s.Min()) != lo || string(s.Max()) != hi {
			t.Fatalf("row group %d column %d: bounds %.20q..%.20q, want %.20q..%.20q", g, c, s.Min(), s.Max(), lo, hi)
		}
		for _, v := range vals {
			if v.s < string(s.Min()) || v.s > string(s.Max()) {
				t.Fatalf("row group %d column %d: bounds %.20q..%.20q exclude %.20q", g, c, s.Min(), s.Max(), v.s)
			}
		}
	case *metadata.Int64Statistics:
		lo, hi := vals[0].i, vals[0].i
		for _, v := range vals {
			lo, hi = min(lo, v.i), max(hi, v.i)
		}
		if !s.HasMinMax() || s.Min() != lo || s.Max() != hi {
			t.Fatalf("row group %d column %d: bounds %d..%d, want %d..%d", g, c, s.Min(), s.Max(), lo, hi)
		}
	case *metadata.Float64Statistics:
		lo, hi := vals[0].f, vals[0].f
		for _, v := range vals {
			lo, hi = math.Min(lo, v.f), math.Max(hi, v.f)
		}
		if !s.HasMinMax() || s.Min() != lo || s.Max() != hi {
			t.Fatalf("row group %d column %d: bounds %v..%v, want %v..%v", g, c, s.Min(), s.Max(), lo, hi)
		}
	case *metadata.BooleanStatistics:
		lo, hi := true, false
		for _, v := range vals {
			lo, hi = lo && v.b, hi || v.b
		}
		if !s.HasMinMax() || s.Min() != lo || s.Max() != hi {
			t.Fatalf("row group %d column %d: bounds %v..%v, want %v..%v", g, c, s.Min(), s.Max(), lo, hi)
		}
	default:
		t.Fatalf("column %d (%s): statistics %T", c, typ, st)
	}
}

// TestDictionaryFallsBack writes a string column whose first record repeats (so it gets a
// dictionary) and whose later values are distinct and long, past the dictionary's limit:
// the rest of the chunk goes plain, and everything reads back.
func TestDictionaryFallsBack(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true,
		Metadata: arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{"10"})}}, nil)
	var first, second [][]value
	for i := range 5000 {
		first = append(first, []value{{ok: i%9 != 0, s: fmt.Sprint("level-", i%4)}})
	}
	for i := range 3000 {
		second = append(second, []value{{ok: true, s: fmt.Sprintf("%04d-%s", i, strings.Repeat("y", 700))}})
	}
	var buf bytes.Buffer
	w := NewWriter(&buf, schema, Options{})
	for _, rows := range [][][]value{first, second} {
		rec := buildRecord(schema, rows)
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	all := append(first, second...)
	checkFile(t, buf.Bytes(), schema, all, 64<<10)
	pf, err := file.NewParquetReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	cc, _ := pf.MetaData().RowGroup(0).ColumnChunk(0)
	encs := cc.Encodings()
	if !cc.HasDictionaryPage() || !containsEnc(encs, parquet.Encodings.RLEDict) || !containsEnc(encs, parquet.Encodings.Plain) {
		t.Fatalf("encodings %v, dictionary page %v: want a dictionary that falls back to plain", encs, cc.HasDictionaryPage())
	}
}

func containsEnc(encs []parquet.Encoding, e parquet.Encoding) bool {
	for _, x := range encs {
		if x == e {
			return true
		}
	}
	return false
}

// TestLevelsAcrossRecords builds a page from records whose nulls come and go. A page's
// levels are made only once it meets a null, and then must cover every row before it
// exactly once: here a page begins inside a record whose only null went to the page
// before (long values fill the first page in one slice), a record without nulls follows,
// then one with a null.
func TestLevelsAcrossRecords(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true,
		Metadata: arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{"10"})}}, nil)
	rows := func(n int, nullAt int) [][]value {
		out := make([][]value, n)
		for i := range out {
			out[i] = []value{{ok: i != nullAt, s: fmt.Sprintf("%05d%s", i, strings.Repeat("z", 5000))}}
		}
		return out
	}
	var all [][]value
	var buf bytes.Buffer
	w := NewWriter(&buf, schema, Options{Plain: []string{"s"}})
	for _, rs := range [][][]value{rows(600, 0), rows(10, -1), rows(10, 4)} {
		rec := buildRecord(schema, rs)
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		all = append(all, rs...)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	checkFile(t, buf.Bytes(), schema, all, 64<<10)
}

// TestWriterName: created_by parses, as hyp's, by parquet-mr's grammar (VersionParser's
// pattern, matched whole: a string it cannot parse makes parquet-mr ignore string
// statistics) and by arrow's, whatever the build recorded.
func TestWriterName(t *testing.T) {
	parquetMR := regexp.MustCompile(`^(.*?)\s+version\s*(?:([^(]*?)\s*(?:\(\s*build\s*([^)]*?)\s*\))?)?$`)
	for _, tc := range []struct {
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{nil, false, "hyp version devel"},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true, "hyp version devel"},
		{&debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}}}, true, "hyp version v1.2.3 (build 0123456789ab)"},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}}}, true, "hyp version devel (build abc)"},
	} {
		got := writerName(tc.bi, tc.ok)
		if got != tc.want {
			t.Errorf("writerName = %q, want %q", got, tc.want)
		}
		if m := parquetMR.FindStringSubmatch(got); m == nil || m[1] != "hyp" {
			t.Errorf("%q: parquet-mr's grammar reads %q", got, m)
		}
		if av := metadata.NewAppVersion(got); av.App != "hyp" {
			t.Errorf("%q: arrow reads application %q", got, av.App)
		}
	}
	if m := parquetMR.FindStringSubmatch(createdBy); m == nil || m[1] != "hyp" {
		t.Errorf("this binary's created_by %q: parquet-mr's grammar reads %q", createdBy, m)
	}
}
