package parquetw

import (
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func TestMostlyDistinct(t *testing.T) {
	strs := func(n int, f func(int) string) arrow.Array {
		b := array.NewStringBuilder(memory.DefaultAllocator)
		defer b.Release()
		for i := range n {
			if v := f(i); v != "null" {
				b.Append(v)
			} else {
				b.AppendNull()
			}
		}
		return b.NewArray()
	}
	cases := []struct {
		name string
		col  arrow.Array
		want bool
	}{
		{"unique ids", strs(65536, func(i int) string { return fmt.Sprint(i) }), true},
		{"unique ids, every 7th null", strs(65536, func(i int) string { return nullEvery(7, i, fmt.Sprint(i)) }), true},
		{"977 values", strs(65536, func(i int) string { return fmt.Sprint(i % 977) }), false},
		// Consecutive rows are all distinct, yet a row group holds only 5,000 values.
		{"5,000 paths", strs(65536, func(i int) string { return fmt.Sprintf("/api/v1/items/%d", i%5000) }), false},
		{"timestamps as text", strs(65536, func(i int) string { return fmt.Sprintf("2026-11-30T09:00:00.%06dZ", i) }), true},
		{"all null", strs(65536, func(int) string { return "null" }), false},
		{"a short first record", strs(2000, func(i int) string { return fmt.Sprint(i) }), true},
		{"too few rows", strs(1000, func(i int) string { return fmt.Sprint(i) }), false},
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

func nullEvery(n, i int, v string) string {
	if i%n == 0 {
		return "null"
	}
	return v
}
