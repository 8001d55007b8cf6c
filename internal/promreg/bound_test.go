package promreg

import (
	"slices"
	"testing"
)

func TestKeep(t *testing.T) {
	many := make([]float64, MaxPartitionSeries+5)
	for i := range many {
		many[i] = float64(i % 7) // ranks 0..6 repeating: ties everywhere
	}
	for _, tc := range []struct {
		name string
		rank []float64
		want []int // indices kept
	}{
		{"none", nil, nil},
		{"at the bound, all", make([]float64, MaxPartitionSeries), seq(0, MaxPartitionSeries)},
		{"one above, the lowest goes", append(slices.Repeat([]float64{5}, MaxPartitionSeries), 1), seq(0, MaxPartitionSeries)},
		{"one above, the lowest goes wherever it is", append([]float64{1}, slices.Repeat([]float64{5}, MaxPartitionSeries)...), seq(1, MaxPartitionSeries+1)},
		// 25 members ranked i%7: ranks 6 to 2 (three of each of 6, 5 and 4, four of 3 and
		// of 2) make 17, then the first three of rank 1 (1, 8, 15; not 22).
		{"ties go to the earlier", many, []int{1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 15, 16, 17, 18, 19, 20, 23, 24}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keep := Keep(make([]string, len(tc.rank)), tc.rank)
			var got []int
			for i, k := range keep {
				if k {
					got = append(got, i)
				}
			}
			if len(keep) != len(tc.rank) || !slices.Equal(got, tc.want) {
				t.Fatalf("kept %v, want %v", got, tc.want)
			}
		})
	}
}

// Groups are bounded each on its own, wherever their members lie.
func TestKeepPerGroup(t *testing.T) {
	var group []string
	var rank []float64
	for i := range 2 * (MaxPartitionSeries + 1) {
		group = append(group, []string{"a", "b"}[i%2])
		rank = append(rank, float64(i))
	}
	group, rank = append(group, "c"), append(rank, 0)
	keep := Keep(group, rank)
	kept := map[string]int{}
	for i, k := range keep {
		if k {
			kept[group[i]]++
		}
	}
	// Each of a and b loses its lowest-ranked member, its first; c keeps its only one.
	if kept["a"] != MaxPartitionSeries || kept["b"] != MaxPartitionSeries || kept["c"] != 1 || keep[0] || keep[1] || !keep[2] {
		t.Fatalf("kept per group %v; first members %v", kept, keep[:3])
	}
}

func seq(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}
