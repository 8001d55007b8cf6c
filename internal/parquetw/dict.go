package parquetw

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// dictSample is how many values of a column's first record decide its encoding.
const dictSample = 4096

// mostlyDistinct says whether a column's values look unique enough that a Parquet dictionary
// would not pay off: nearly all of a sample of them are distinct. The writer builds a
// dictionary for such a column until it overflows, hashing every value, and the file ends
// up no smaller; plain values compress about as well. A column of a few thousand values
// samples well below the bar (about 70% distinct for 5,000 values), so it keeps its
// dictionary. A wrong guess costs size or time, never correctness. Only strings and
// int64s get dictionaries: floats rarely repeat, and booleans are a bit each.
func mostlyDistinct(col arrow.Array) bool {
	if col.Len()-col.NullN() < dictSample/4 {
		return false // too few values to tell
	}
	switch a := col.(type) {
	case *array.String:
		return distinctSample(a, a.Value)
	case *array.LargeString:
		return distinctSample(a, a.Value)
	case *array.Int64:
		return distinctSample(a, a.Value)
	case *array.Timestamp:
		return distinctSample(a, a.Value)
	}
	return false
}

// distinctSample visits up to dictSample rows in a scrambled order, each at most once, so neither
// a value that cycles with the row number nor nulls at a fixed period fool the count.
func distinctSample[K comparable](col arrow.Array, value func(int) K) bool {
	n := col.Len()
	step := knuthStep % n
	for gcd(step, n) != 1 {
		step++
	}
	seen := make(map[K]struct{}, dictSample)
	sampled := 0
	for k, i := 0, 0; k < min(dictSample, n); k, i = k+1, (i+step)%n {
		if col.IsNull(i) {
			continue
		}
		seen[value(i)] = struct{}{}
		sampled++
	}
	return sampled >= dictSample/4 && len(seen)*100 >= sampled*95
}

// knuthStep is 2^32 divided by the golden ratio: successive multiples of it spread evenly
// over any range.
const knuthStep = 2654435761

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
