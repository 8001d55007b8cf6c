package node

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/partition"
	"github.com/hyp-project/hyp/internal/promreg"
)

// The cache's per-partition gauges name every partition of a dataset up to the bound; past
// it the partitions holding the fewest rows are one partition="_other" series, their rows
// summed and their head seq the highest, so the dataset's total is still the sum.
func TestCacheMetricsFoldTheSmallest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		parts  int
		folded int // how many of the smallest are folded
	}{
		{"at the bound", promreg.MaxPartitionSeries, 0},
		{"past it", promreg.MaxPartitionSeries + 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			n := openNode(t, "sinks: {}\n")
			var total, foldedRows, foldedHead int64
			// Source i holds i+1 rows, ingested from the largest down, so the smallest (the
			// folded ones) hold the highest seqs.
			for i := tc.parts - 1; i >= 0; i-- {
				res, err := n.Ingest("logs", fmt.Sprintf("s%02d", i), []byte(strings.Repeat("{\"a\":1}\n", i+1)))
				if err != nil {
					t.Fatal(err)
				}
				total += int64(i + 1)
				if i < tc.folded {
					foldedRows += int64(i + 1)
					foldedHead = max(foldedHead, res.LastSeq)
				}
			}
			if err := n.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			mfs, err := n.Reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			rows, heads := map[string]float64{}, map[string]float64{}
			for _, mf := range mfs {
				for _, m := range mf.Metric {
					var part string
					for _, lp := range m.Label {
						if lp.GetName() == "partition" {
							part = lp.GetValue()
						}
					}
					switch mf.GetName() {
					case "hyp_cache_rows":
						rows[part] = m.GetGauge().GetValue()
					case "hyp_cache_head_seq":
						heads[part] = m.GetGauge().GetValue()
					}
				}
			}
			var sum float64
			for _, v := range rows {
				sum += v
			}
			named := min(tc.parts, promreg.MaxPartitionSeries)
			if sum != float64(total) || len(heads) != len(rows) {
				t.Errorf("rows sum to %v over %d series (%d head series), want %d", sum, len(rows), len(heads), total)
			}
			if _, ok := rows[partition.Name(fmt.Sprintf("s%02d", tc.parts-1))]; !ok {
				t.Errorf("the largest partition has no series: %v", rows)
			}
			if tc.folded == 0 {
				if len(rows) != named || rows[promreg.OtherPartition] != 0 || rows[partition.Name("s00")] != 1 {
					t.Errorf("series %v, want every partition under its own name", rows)
				}
				return
			}
			if len(rows) != named+1 || rows[promreg.OtherPartition] != float64(foldedRows) || heads[promreg.OtherPartition] != float64(foldedHead) {
				t.Errorf("series %v, heads %v: want %d named and _other with %d rows, head %d", rows, heads, named, foldedRows, foldedHead)
			}
			if _, ok := rows[partition.Name("s00")]; ok {
				t.Errorf("the smallest partition kept its own series: %v", rows)
			}
		})
	}
}

// openNode opens a Node on a new home with yaml as its config; the test closes it.
func openNode(t *testing.T, yaml string) *Node {
	t.Helper()
	home := t.TempDir()
	cfg, err := config.Parse(home, []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	n, err := Open(context.Background(), home, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	return n
}
