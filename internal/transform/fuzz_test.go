package transform

import (
	"context"
	"errors"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// FuzzCheck: Check never panics, and whatever it accepts, Apply over a small fixed unit
// either returns a result that keeps the output rules and has only the cache's types, or a
// *Error: never another error, never a panic.
//
//	go test -run '^$' -fuzz FuzzCheck -fuzztime 5m ./internal/transform/
func FuzzCheck(f *testing.F) {
	for _, c := range refusedCases {
		f.Add(c.sql)
	}
	for _, sql := range allowedCases {
		f.Add(sql)
	}
	r := newTestRunner(f)
	in := fiveRows()
	f.Cleanup(func() { releaseAll(in) })
	var inSeqs []*array.Int64
	for _, rec := range in {
		inSeqs = append(inSeqs, rec.Column(0).(*array.Int64))
	}
	names := map[string]bool{}
	for _, fl := range testSchema().Fields() {
		names[fl.Name] = true
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, sql string) {
		var te *Error
		if err := r.check(ctx, sql); err != nil {
			if !errors.As(err, &te) {
				t.Fatalf("Check(%q): %v (%T), want nil or a *Error", sql, err, err)
			}
			return
		}
		res, err := r.Apply(ctx, sql, testSchema(), in)
		if err != nil {
			if !errors.As(err, &te) {
				t.Fatalf("Apply(%q): %v (%T), want nil or a *Error", sql, err, err)
			}
			return
		}
		defer res.Release()
		if err := checkOutput(res.Schema, res.Recs, &seqs{cols: inSeqs}, names); err != nil {
			t.Fatalf("Apply(%q) returned a result that breaks the rules: %v", sql, err)
		}
		for _, fl := range res.Schema.Fields() {
			if !arrow.TypeEqual(outType(fl.Type), fl.Type) || fl.HasMetadata() {
				t.Fatalf("Apply(%q): column %q is %s, not one of the cache's types", sql, fl.Name, fl.Type)
			}
		}
		for _, rec := range res.Recs {
			if !rec.Schema().Equal(res.Schema) {
				t.Fatalf("Apply(%q): a record's schema differs from the result's", sql)
			}
		}
	})
}
