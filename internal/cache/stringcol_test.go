package cache

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"pgregory.net/rapid"
)

// TestStringColMatchesArrow holds stringCol to arrow's own builder over any sequence of
// values and null runs, across the chunks of one column.
func TestStringColMatchesArrow(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var s stringCol
		for range rapid.IntRange(1, 3).Draw(t, "chunks") {
			ref := array.NewStringBuilder(memory.DefaultAllocator)
			s.Reserve(rapid.IntRange(0, 40).Draw(t, "reserve"))
			s.ReserveData(rapid.IntRange(0, 400).Draw(t, "reserveData"))
			for range rapid.IntRange(0, 60).Draw(t, "ops") {
				if n := rapid.IntRange(0, 12).Draw(t, "nulls"); n > 0 && rapid.Bool().Draw(t, "null") {
					s.AppendNulls(n)
					ref.AppendNulls(n)
					continue
				}
				v := rapid.String().Draw(t, "v")
				s.Append([]byte(v))
				ref.Append(v)
			}
			if s.Len() != ref.Len() {
				t.Fatalf("Len %d, arrow's %d", s.Len(), ref.Len())
			}
			got, want := s.NewArray(), ref.NewArray()
			if err := got.(*array.String).ValidateFull(); err != nil {
				t.Fatalf("invalid array: %v", err)
			}
			if !array.Equal(got, want) || got.NullN() != want.NullN() {
				t.Fatalf("built %v, arrow built %v", got, want)
			}
			got.Release()
			want.Release()
			ref.Release()
		}
	})
}
