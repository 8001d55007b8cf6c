package transform

import (
	"context"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// passThroughCases are transforms over testSchema's rows whose result must not depend on how
// Apply shows DuckDB the columns: with or without pass-through columns.
var passThroughCases = []struct {
	sql    string
	passed []string // the columns that pass through (nil: the scheme is off)
}{
	{specExample, nil}, // every string column is named
	{"SELECT * FROM rows", []string{"level", "msg", "secret"}},
	{"SELECT * FROM rows WHERE n <> 2", []string{"level", "msg", "secret"}},      // short runs, a null msg
	{"SELECT * FROM rows WHERE n IN (3, 4)", []string{"level", "msg", "secret"}}, // a run across records
	{"SELECT * FROM rows WHERE n = 1", []string{"level", "msg", "secret"}},       // one row: a slice
	{"SELECT * FROM rows WHERE false", []string{"level", "msg", "secret"}},
	{"SELECT *, upper(level) AS lv FROM rows WHERE x > 1", []string{"msg", "secret"}},
	{"SELECT msg AS level, * EXCLUDE (level) FROM rows", []string{"secret"}},
	{"SELECT * RENAME (msg AS message) FROM rows", []string{"level", "secret"}},
	{"SELECT * EXCLUDE (level), 'x' AS secret2 FROM rows", []string{"msg", "secret"}},
	{"SELECT * REPLACE (level AS secret) FROM rows", []string{"msg"}},
	{"SELECT * FROM rows r WHERE r.n > 1", []string{"level", "msg", "secret"}},
	{"SELECT *, list_transform([n], level -> level + 1) AS l FROM rows", []string{"msg", "secret"}},
	// The whole row, or a column by its place: nothing may pass through.
	{"SELECT *, to_json(rows) AS j FROM rows", nil},
	{"SELECT *, to_json(r) AS j FROM rows AS r", nil},
	{"SELECT *, #4 AS m FROM rows", nil},
}

func TestPassThroughMatchesWholeColumns(t *testing.T) {
	pass := newTestRunner(t)
	whole := newTestRunner(t)
	whole.wholeColumns = true
	in := fiveRows()
	defer releaseAll(in)
	ctx := context.Background()
	for _, tc := range passThroughCases {
		a := apply(t, pass, tc.sql, testSchema(), in)
		b := apply(t, whole, tc.sql, testSchema(), in)
		if !a.Schema.Equal(b.Schema) {
			t.Errorf("%s: schema\n%v\nwithout pass-through\n%v", tc.sql, a.Schema, b.Schema)
		}
		if ga, gb := jsonRows(t, a), jsonRows(t, b); !slices.Equal(ga, gb) {
			t.Errorf("%s: rows\n%q\nwithout pass-through\n%q", tc.sql, ga, gb)
		}
		for _, rec := range a.Recs {
			if !rec.Schema().Equal(a.Schema) {
				t.Errorf("%s: a record's schema differs from the result's", tc.sql)
			}
		}

		// Which columns passed through.
		s, err := pass.take(ctx)
		if err != nil {
			t.Fatal(err)
		}
		v := pass.verdict(ctx, s, tc.sql)
		pass.give(s, false)
		sin, err := newInput(testSchema(), in)
		if err != nil {
			t.Fatal(err)
		}
		sin.fill(v.referenced)
		sin.passThrough(v.opaque)
		var got []string
		for _, f := range sin.schema.Fields() {
			if _, ok := sin.passed[f.Name]; ok {
				got = append(got, f.Name)
			}
		}
		sin.release()
		if !slices.Equal(got, tc.passed) {
			t.Errorf("%s: passed %v, want %v", tc.sql, got, tc.passed)
		}
	}
}

// TestRestoreRefusesWrongPositions: a column taken for a pass-through that does not hold its
// rows' positions is not restored (Apply then runs the unit again with every column).
func TestRestoreRefusesWrongPositions(t *testing.T) {
	in, err := newInput(testSchema(), fiveRows())
	if err != nil {
		t.Fatal(err)
	}
	defer in.release()
	in.passThrough(map[string]bool{})
	pos := func(vals ...int64) *Result {
		sc := arrow.NewSchema([]arrow.Field{{Name: "msg", Type: int64Type, Nullable: true}}, nil)
		b := array.NewInt64Builder(memory.DefaultAllocator)
		defer b.Release()
		b.AppendValues(vals, nil)
		col := b.NewArray()
		defer col.Release()
		return &Result{Schema: sc, Recs: []arrow.RecordBatch{array.NewRecordBatch(sc, []arrow.Array{col}, int64(len(vals)))}, Rows: int64(len(vals))}
	}
	for _, tc := range []struct {
		vals []int64
		kept []int
		ok   bool
	}{
		{[]int64{0, 2, 3}, []int{0, 2, 3}, true},
		{[]int64{0, 2, 4}, []int{0, 2, 3}, false},
		{[]int64{1, 2, 3}, []int{0, 2, 3}, false},
	} {
		res := pos(tc.vals...)
		if ok := in.restore(res, tc.kept); ok != tc.ok {
			t.Errorf("restore(%v at %v) = %v, want %v", tc.vals, tc.kept, ok, tc.ok)
		}
		if tc.ok {
			if got := jsonRows(t, res); !slices.Equal(got, []string{`{"msg":"login tok-123 ok"}`, `{"msg":"slow tok-9 call"}`, `{"msg":"tock"}`}) {
				t.Errorf("restored %q", got)
			}
		}
		res.Release()
	}
}
