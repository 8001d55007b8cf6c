package transform

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// FuzzCheck: Check never panics, and whatever it accepts, Apply over a small fixed unit
// either returns a result that keeps the output rules and has only the cache's types, or a
// *Error: never another error, never a panic; and the same result or error with
// pass-through columns switched off.
//
//	go test -run '^$' -fuzz FuzzCheck -fuzztime 5m ./internal/transform/
func FuzzCheck(f *testing.F) {
	for _, c := range refusedCases {
		f.Add(c.sql)
	}
	for _, sql := range allowedCases {
		f.Add(sql)
	}
	for _, c := range passThroughCases {
		f.Add(c.sql)
	}
	r := newTestRunner(f)
	whole := newTestRunner(f)
	whole.wholeColumns = true
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
		wres, werr := whole.Apply(ctx, sql, testSchema(), in)
		if (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() {
			t.Fatalf("Apply(%q): %v; without pass-through: %v", sql, err, werr)
		}
		if err != nil {
			if !errors.As(err, &te) {
				t.Fatalf("Apply(%q): %v (%T), want nil or a *Error", sql, err, err)
			}
			return
		}
		defer res.Release()
		defer wres.Release()
		if !res.Schema.Equal(wres.Schema) || !slices.Equal(jsonRows(t, res), jsonRows(t, wres)) {
			t.Fatalf("Apply(%q) differs without pass-through:\n%v %q\n%v %q", sql, res.Schema, jsonRows(t, res), wres.Schema, jsonRows(t, wres))
		}
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
