package promreg

import (
	"cmp"
	"slices"
)

// A metric labelled by partition gives every partition a series, and on `hyp server` every
// gateway's sources are partitions (gateway=<id>/source=<s>): a token holder sending as
// thousands of gateways made /metrics megabytes, unauthenticated, listing every gateway.
// Such metrics keep series for a bounded top of each group and fold the rest into one.
const (
	// MaxPartitionSeries is how many partitions of one group (a dataset, or a dataset of a
	// sink) keep series of their own.
	MaxPartitionSeries = 20
	// OtherPartition is the partition label of the series the rest of a group is folded
	// into. No partition is named so: partition names are key=value paths.
	OtherPartition = "_other"
)

// Keep says which members of a collector keep series of their own: member i belongs to
// group[i] (a group's members need not be adjacent) and has rank[i]. A group of at most
// MaxPartitionSeries members keeps every one; a larger one the MaxPartitionSeries of highest
// rank, an earlier member before a later one of the same rank, so that the choice does not
// change from scrape to scrape while the ranks do not.
func Keep(group []string, rank []float64) []bool {
	members := map[string][]int{}
	for i, g := range group {
		members[g] = append(members[g], i)
	}
	keep := make([]bool, len(group))
	for _, m := range members {
		if len(m) > MaxPartitionSeries {
			slices.SortStableFunc(m, func(a, b int) int { return cmp.Compare(rank[b], rank[a]) })
			m = m[:MaxPartitionSeries]
		}
		for _, i := range m {
			keep[i] = true
		}
	}
	return keep
}
