package transform

import (
	"errors"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/float16"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestConvertColumn covers the conversions DuckDB does not produce itself but an Arrow
// result may hold: large and view strings, float16, date64, time32, dense unions, maps with
// non-string keys, dictionaries of non-strings, run-end encoding, and uint64 out of range.
func TestConvertColumn(t *testing.T) {
	mem := memory.DefaultAllocator
	build := func(typ arrow.DataType, fill func(b array.Builder)) arrow.Array {
		b := array.NewBuilder(mem, typ)
		defer b.Release()
		fill(b)
		return b.NewArray()
	}
	cases := []struct {
		name string
		arr  arrow.Array
		typ  string
		vals string // the converted column's String()
	}{
		{"large_utf8", build(arrow.BinaryTypes.LargeString, func(b array.Builder) {
			b.(*array.LargeStringBuilder).Append("a")
			b.AppendNull()
		}), "utf8", `["a" (null)]`},
		{"string_view", build(arrow.BinaryTypes.StringView, func(b array.Builder) {
			b.(*array.StringViewBuilder).Append("a long string beyond twelve bytes")
		}), "utf8", `["a long string beyond twelve bytes"]`},
		{"float16", build(arrow.FixedWidthTypes.Float16, func(b array.Builder) {
			b.(*array.Float16Builder).Append(float16.New(1.5))
		}), "float64", `[1.5]`},
		{"date64", build(arrow.FixedWidthTypes.Date64, func(b array.Builder) {
			b.(*array.Date64Builder).Append(86400000)
		}), "timestamp[us, tz=UTC]", `[86400000000]`},
		{"timestamp ns before 1970", build(&arrow.TimestampType{Unit: arrow.Nanosecond}, func(b array.Builder) {
			b.(*array.TimestampBuilder).Append(-1500)
		}), "timestamp[us, tz=UTC]", `[-2]`},
		{"timestamp us in another zone", build(&arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "Europe/Paris"}, func(b array.Builder) {
			b.(*array.TimestampBuilder).Append(7)
			b.AppendNull()
		}), "timestamp[us, tz=UTC]", `[7 (null)]`},
		{"time32", build(arrow.FixedWidthTypes.Time32ms, func(b array.Builder) {
			b.(*array.Time32Builder).Append(3723004)
		}), "utf8", `["01:02:03.004"]`},
		{"binary", build(arrow.BinaryTypes.Binary, func(b array.Builder) {
			b.(*array.BinaryBuilder).Append([]byte{0, 1, 2})
		}), "utf8", `["AAEC"]`},
		{"map with int keys", build(arrow.MapOf(arrow.PrimitiveTypes.Int32, arrow.BinaryTypes.String), func(b array.Builder) {
			mb := b.(*array.MapBuilder)
			mb.Append(true)
			mb.KeyBuilder().(*array.Int32Builder).Append(1)
			mb.ItemBuilder().(*array.StringBuilder).Append("one")
			mb.KeyBuilder().(*array.Int32Builder).Append(2)
			mb.ItemBuilder().AppendNull()
		}), "utf8", `["{\"1\":\"one\",\"2\":null}"]`},
		{"dictionary of ints", func() arrow.Array {
			b := array.NewDictionaryBuilder(mem, &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.PrimitiveTypes.Int32})
			defer b.Release()
			b.(*array.Int32DictionaryBuilder).Append(5)
			b.AppendNull()
			b.(*array.Int32DictionaryBuilder).Append(5)
			return b.NewArray()
		}(), "int64", `[5 (null) 5]`},
		{"run-end encoded", func() arrow.Array {
			b := array.NewRunEndEncodedBuilder(mem, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int8)
			defer b.Release()
			b.Append(2)
			b.ValueBuilder().(*array.Int8Builder).Append(4)
			return b.NewArray()
		}(), "utf8", `["4" "4"]`},
		{"dense union", func() arrow.Array {
			typ := arrow.DenseUnionOf([]arrow.Field{{Name: "i", Type: arrow.PrimitiveTypes.Int64}, {Name: "s", Type: arrow.BinaryTypes.String}}, []arrow.UnionTypeCode{0, 1})
			b := array.NewDenseUnionBuilder(mem, typ)
			defer b.Release()
			b.Append(1)
			b.Child(1).(*array.StringBuilder).Append("x")
			b.Append(0)
			b.Child(0).(*array.Int64Builder).Append(3)
			return b.NewArray()
		}(), "utf8", `["\"x\"" "3"]`},
		{"null", array.NewNull(2), "utf8", `[(null) (null)]`},
	}
	for _, tc := range cases {
		f := arrow.Field{Name: tc.name, Type: tc.arr.DataType()}
		out, err := convertColumn(f, outType(f.Type), tc.arr)
		tc.arr.Release()
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if out.DataType().String() != tc.typ || out.String() != tc.vals {
			t.Errorf("%s: %s %s, want %s %s", tc.name, out.DataType(), out, tc.typ, tc.vals)
		}
		out.Release()
	}
}

func TestConvertUint64OutOfRange(t *testing.T) {
	b := array.NewUint64Builder(memory.DefaultAllocator)
	b.AppendValues([]uint64{1, 1 << 63}, nil)
	arr := b.NewArray()
	b.Release()
	defer arr.Release()
	_, err := convertColumn(arrow.Field{Name: "u", Type: arr.DataType()}, int64Type, arr)
	var te *Error
	if !errors.As(err, &te) {
		t.Fatalf("got %v, want a *Error", err)
	}
}

func TestBignumText(t *testing.T) {
	cases := []struct {
		b    []byte
		want string
		ok   bool
	}{
		{[]byte{0x80, 0, 1, 1}, "1", true},
		{[]byte{0x80, 0, 1, 0}, "0", true},
		{[]byte{0x7f, 0xff, 0xfe, 0xfe}, "-1", true},
		{[]byte{0x80, 0, 2, 1, 0}, "256", true},
		{[]byte{0x80, 0, 3, 1, 0}, "", false}, // the header says 3 bytes, 2 follow
		{[]byte{0x80, 0}, "", false},
	}
	for _, tc := range cases {
		got, ok := bignumText(tc.b)
		if got != tc.want || ok != tc.ok {
			t.Errorf("% x: (%q, %v), want (%q, %v)", tc.b, got, ok, tc.want, tc.ok)
		}
	}
}

func TestAppendTime(t *testing.T) {
	cases := []struct {
		v    int64
		unit arrow.TimeUnit
		want string
	}{
		{0, arrow.Second, "00:00:00"},
		{86399, arrow.Second, "23:59:59"},
		{3723500, arrow.Millisecond, "01:02:03.5"},
		{3723000001, arrow.Microsecond, "01:02:03.000001"},
		{3723000000010, arrow.Nanosecond, "01:02:03.00000001"},
	}
	for _, tc := range cases {
		if got := string(appendTime(nil, tc.v, tc.unit)); got != tc.want {
			t.Errorf("%d %s: %q, want %q", tc.v, tc.unit, got, tc.want)
		}
	}
}
