package parquetw

import (
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func TestMostlyDistinct(t *testing.T) {
	ints := func(n int, f func(int) (int64, bool)) arrow.Array {
		b := array.NewInt64Builder(memory.DefaultAllocator)
		defer b.Release()
		for i := range n {
			if v, ok := f(i); ok {
				b.Append(v)
			} else {
				b.AppendNull()
			}
		}
		return b.NewArray()
	}
	strs := func(n int, f func(int) string) arrow.Array {
		b := array.NewStringBuilder(memory.DefaultAllocator)
		defer b.Release()
		for i := range n {
			b.Append(f(i))
		}
		return b.NewArray()
	}
	cases := []struct {
		name string
		col  arrow.Array
		want bool
	}{
		{"unique ids", ints(65536, func(i int) (int64, bool) { return int64(i), true }), true},
		{"unique ids, every 7th null", ints(65536, func(i int) (int64, bool) { return int64(i), i%7 != 0 }), true},
		{"977 values", ints(65536, func(i int) (int64, bool) { return int64(i % 977), true }), false},
		// Consecutive rows are all distinct, yet a row group holds only 5,000 values.
		{"5,000 paths", strs(65536, func(i int) string { return fmt.Sprintf("/api/v1/items/%d", i%5000) }), false},
		{"timestamps as text", strs(65536, func(i int) string { return fmt.Sprintf("2026-11-30T09:00:00.%06dZ", i) }), true},
		{"all null", ints(65536, func(int) (int64, bool) { return 0, false }), false},
		{"a short first record", ints(2000, func(i int) (int64, bool) { return int64(i), true }), true},
		{"too few rows", ints(1000, func(i int) (int64, bool) { return int64(i), true }), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer c.col.Release()
			if got := mostlyDistinct(c.col); got != c.want {
				t.Errorf("mostlyDistinct = %v, want %v", got, c.want)
			}
		})
	}
}
