package blob

import (
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// dictSample is how many values of a column's first record decide its encoding.
const dictSample = 4096

// mostlyDistinct says whether a column's values look unique enough that a Parquet dictionary
// would not pay off: a sample spread over the record is nearly all distinct. The writer
// builds a dictionary for such a column until it overflows, hashing every value, and the
// file ends up no smaller; plain values compress about as well. A wrong guess costs size or
// time, never correctness, so columns of other types keep the writer's default.
func mostlyDistinct(col arrow.Array) bool {
	n := col.Len() - col.NullN()
	if n < dictSample/2 {
		return false // too few values to tell; a small file's encoding hardly matters
	}
	// A stride that is not a multiple of a small period keeps a value repeating every few
	// rows (a counter modulo something) from sampling as all distinct.
	stride := max(col.Len()/dictSample, 1) | 1
	switch a := col.(type) {
	case *array.String:
		return distinctRatio(a, stride, a.Value)
	case *array.LargeString:
		return distinctRatio(a, stride, a.Value)
	case *array.Binary:
		return distinctRatio(a, stride, func(i int) string { return string(a.Value(i)) })
	case *array.Int64:
		return distinctRatio(a, stride, a.Value)
	case *array.Timestamp:
		return distinctRatio(a, stride, a.Value)
	case *array.Float64:
		return distinctRatio(a, stride, func(i int) uint64 { return math.Float64bits(a.Value(i)) })
	}
	return false
}

func distinctRatio[K comparable](col arrow.Array, stride int, value func(int) K) bool {
	seen := make(map[K]struct{}, dictSample)
	sampled := 0
	for i := 0; i < col.Len() && sampled < dictSample; i += stride {
		if col.IsNull(i) {
			continue
		}
		seen[value(i)] = struct{}{}
		sampled++
	}
	return sampled > 0 && len(seen)*100 >= sampled*95
}
