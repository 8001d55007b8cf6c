package transform

import (
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// outCol is one column of a result built by hand: values are int64, *int64 (nil is null),
// int32, string or arrow.Timestamp, all of one kind.
type outCol struct {
	name string
	vals []any
}

func outRecord(t *testing.T, cols ...outCol) arrow.RecordBatch {
	t.Helper()
	var fields []arrow.Field
	var arrs []arrow.Array
	n := -1
	for _, c := range cols {
		var b array.Builder
		switch c.vals[0].(type) {
		case int64, *int64:
			b = array.NewInt64Builder(memory.DefaultAllocator)
		case int32:
			b = array.NewInt32Builder(memory.DefaultAllocator)
		case string:
			b = array.NewStringBuilder(memory.DefaultAllocator)
		case arrow.Timestamp, nil:
			b = array.NewTimestampBuilder(memory.DefaultAllocator, timestampUTC)
		}
		for _, v := range c.vals {
			switch v := v.(type) {
			case int64:
				b.(*array.Int64Builder).Append(v)
			case *int64:
				b.AppendNull()
			case int32:
				b.(*array.Int32Builder).Append(v)
			case string:
				b.(*array.StringBuilder).Append(v)
			case arrow.Timestamp:
				b.(*array.TimestampBuilder).Append(v)
			case nil:
				b.AppendNull()
			}
		}
		arr := b.NewArray()
		b.Release()
		fields = append(fields, arrow.Field{Name: c.name, Type: arr.DataType(), Nullable: true})
		arrs = append(arrs, arr)
		n = arr.Len()
	}
	rec := array.NewRecordBatch(arrow.NewSchema(fields, nil), arrs, int64(n))
	for _, a := range arrs {
		a.Release()
	}
	return rec
}

func int64Col(vals ...int64) arrow.Array {
	b := array.NewInt64Builder(memory.DefaultAllocator)
	defer b.Release()
	b.AppendValues(vals, nil)
	return b.NewArray()
}

// TestCheckOutput holds hand-made results to the output rules, the ones no SQL that Check
// accepts can break among them.
func TestCheckOutput(t *testing.T) {
	ts := func(n int) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = arrow.Timestamp(1)
		}
		return out
	}
	seq := func(v ...any) outCol { return outCol{"_hyp_ingest_seq", v} }
	at := func(n int) outCol { return outCol{"_hyp_ingested_at", ts(n)} }
	cases := []struct {
		name    string
		cols    []outCol
		overflw bool // the input has _hyp_overflow
		msg     string
	}{
		{"ok", []outCol{seq(int64(2), int64(5)), at(2), {"msg", []any{"a", "b"}}}, false, ""},
		{"ok subset of input", []outCol{seq(int64(1), int64(7)), at(2)}, false, ""},
		{"overflow from the input", []outCol{seq(int64(1)), at(1), {"_hyp_overflow", []any{"{}"}}}, true, ""},
		{"overflow not in the input", []outCol{seq(int64(1)), at(1), {"_hyp_overflow", []any{"{}"}}}, false, `transform: output column "_hyp_overflow": names starting with _hyp_ (in any letter case) are hyp's own`},
		{"no seq", []outCol{at(1), {"msg", []any{"a"}}}, false, "transform: the select list must keep _hyp_ingest_seq (select * or the column itself)"},
		{"no ingested_at", []outCol{seq(int64(1))}, false, "transform: the select list must keep _hyp_ingested_at (select * or the column itself)"},
		{"seq twice", []outCol{seq(int64(1)), at(1), seq(int64(1))}, false, `transform: output column "_hyp_ingest_seq" appears twice: give the columns distinct names`},
		{"seq int32", []outCol{seq(int32(1)), at(1)}, false, "transform: _hyp_ingest_seq comes out as int32, not int64: it must pass through unchanged"},
		{"seq null", []outCol{seq(int64(1), (*int64)(nil)), at(2)}, false, "transform: _hyp_ingest_seq is null in a row: it must pass through unchanged"},
		{"seq descending", []outCol{seq(int64(5), int64(2)), at(2)}, false, "transform: output rows are out of _hyp_ingest_seq order or repeat one (2 after 5): a transform keeps each input row at most once, in order"},
		{"seq repeated", []outCol{seq(int64(2), int64(2)), at(2)}, false, "transform: output rows are out of _hyp_ingest_seq order or repeat one (2 after 2): a transform keeps each input row at most once, in order"},
		{"seq invented", []outCol{seq(int64(2), int64(3)), at(2)}, false, "transform: output row with _hyp_ingest_seq 3 is none of the input's: a transform may not invent rows or change _hyp_ingest_seq"},
		{"seq past the input", []outCol{seq(int64(8)), at(1)}, false, "transform: output row with _hyp_ingest_seq 8 is none of the input's: a transform may not invent rows or change _hyp_ingest_seq"},
		{"ingested_at a string", []outCol{seq(int64(1)), {"_hyp_ingested_at", []any{"x"}}}, false, "transform: _hyp_ingested_at comes out as utf8, not a timestamp: it must pass through unchanged"},
		{"ingested_at null", []outCol{seq(int64(1)), {"_hyp_ingested_at", []any{nil}}}, false, "transform: _hyp_ingested_at is null in a row: it must pass through unchanged"},
		{"empty name", []outCol{seq(int64(1)), at(1), {"", []any{"a"}}}, false, "transform: output column 3 has an empty name"},
		{"invalid UTF-8", []outCol{seq(int64(1)), at(1), {"a\xffb", []any{"a"}}}, false, `transform: output column "a\xffb": its name is not valid UTF-8`},
		{"control character", []outCol{seq(int64(1)), at(1), {"a\u0085b", []any{"a"}}}, false, `transform: output column "a\u0085b": its name has a control character`},
		{"internal prefix", []outCol{seq(int64(1)), at(1), {"_Hyp_x", []any{"a"}}}, false, `transform: output column "_Hyp_x": names starting with _hyp_ (in any letter case) are hyp's own`},
		{"case twins are distinct", []outCol{seq(int64(1)), at(1), {"a", []any{"a"}}, {"A", []any{"b"}}}, false, ""},
	}
	// The input's seqs, over two records: 1 2 5 | 7.
	in1, in2 := int64Col(1, 2, 5), int64Col(7)
	defer in1.Release()
	defer in2.Release()
	for _, tc := range cases {
		rec := outRecord(t, tc.cols...)
		names := map[string]bool{seqColumn: true, ingestedColumn: true}
		if tc.overflw {
			names[overflowColumn] = true
		}
		in := &seqs{cols: []*array.Int64{in1.(*array.Int64), in2.(*array.Int64)}}
		err := checkOutput(rec.Schema(), []arrow.RecordBatch{rec}, in, names)
		rec.Release()
		switch {
		case tc.msg == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.msg != "":
			var te *Error
			if !errors.As(err, &te) || te.Msg != tc.msg {
				t.Errorf("%s:\n got  %v\n want %s", tc.name, err, tc.msg)
			}
		}
	}
}

// TestCheckOutputAcrossRecords: order and membership hold across record boundaries.
func TestCheckOutputAcrossRecords(t *testing.T) {
	in := int64Col(1, 2, 3, 4, 5, 6)
	defer in.Release()
	ts := []any{arrow.Timestamp(1), arrow.Timestamp(1)}
	a := outRecord(t, outCol{"_hyp_ingest_seq", []any{int64(2), int64(4)}}, outCol{"_hyp_ingested_at", ts})
	b := outRecord(t, outCol{"_hyp_ingest_seq", []any{int64(5), int64(6)}}, outCol{"_hyp_ingested_at", ts})
	c := outRecord(t, outCol{"_hyp_ingest_seq", []any{int64(3), int64(6)}}, outCol{"_hyp_ingested_at", ts})
	defer releaseAll([]arrow.RecordBatch{a, b, c})
	names := map[string]bool{}
	if err := checkOutput(a.Schema(), []arrow.RecordBatch{a, b}, &seqs{cols: []*array.Int64{in.(*array.Int64)}}, names); err != nil {
		t.Errorf("2 4 | 5 6: %v", err)
	}
	err := checkOutput(a.Schema(), []arrow.RecordBatch{a, c}, &seqs{cols: []*array.Int64{in.(*array.Int64)}}, names)
	if err == nil || !strings.Contains(err.Error(), "(3 after 4)") {
		t.Errorf("2 4 | 3 6: %v", err)
	}
}
