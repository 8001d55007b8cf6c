package cache

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/hyp-project/hyp/internal/columns"
)

// TestEncoderFollowsTheCacheColumnRules: a type conflict goes to a sibling column (a string
// column keeps a later boolean as text), nested
// values stay JSON text, and a row that fails leaves the encoder as it was.
func TestEncoderFollowsTheCacheColumnRules(t *testing.T) {
	e := NewEncoder()
	defer e.Release()
	for i, line := range []string{`{"a":1,"b":"x"}`, `{"a":"one","c":{"d":[1,2]}}`, `{"b":true}`} {
		if err := e.Add([]byte(line), int64(10+i), 1_000_000); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
	}
	if err := e.Add([]byte(`{"a":`), 13, 0); err == nil {
		t.Fatal("a broken row was taken")
	}
	rec, err := e.Record()
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	if rec.NumRows() != 3 {
		t.Fatalf("rows = %d, want 3", rec.NumRows())
	}
	want := map[string]arrow.DataType{columns.SeqColumn: arrow.PrimitiveTypes.Int64, "a": arrow.PrimitiveTypes.Int64,
		"a__string": arrow.BinaryTypes.String, "b": arrow.BinaryTypes.String, "c": arrow.BinaryTypes.String}
	got := map[string]int{}
	for i, f := range rec.Schema().Fields() {
		got[f.Name] = i
	}
	for name, typ := range want {
		i, ok := got[name]
		if !ok {
			t.Fatalf("no column %q in %v", name, rec.Schema())
		}
		if !arrow.TypeEqual(rec.Column(i).DataType(), typ) {
			t.Errorf("column %q is %s, want %s", name, rec.Column(i).DataType(), typ)
		}
	}
	if v := rec.Column(got["c"]).(*array.String).Value(1); v != `{"d":[1,2]}` {
		t.Errorf("nested value = %q", v)
	}
	if v := rec.Column(got["b"]).(*array.String).Value(2); v != "true" {
		t.Errorf("boolean in a string column = %q", v)
	}
	if s := rec.Column(got[columns.SeqColumn]).(*array.Int64).Value(2); s != 12 {
		t.Errorf("last seq = %d", s)
	}
	if e.Rows() != 0 {
		t.Errorf("Record left %d rows", e.Rows())
	}
}
