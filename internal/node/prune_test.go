package node

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hyp-project/hyp/internal/cache"
)

// Retention's protocol end to end in one process: rows max_age removes before the sink
// exported them become one final gap naming exactly them, a dry run records and deletes
// nothing, and the metrics count what went.
func TestPruneTurnsForcedLossesIntoGaps(t *testing.T) {
	ctx := context.Background()
	n := openNode(t, fmt.Sprintf("cache:\n  retention:\n    default: 1h\n    max_age: 1s\nsinks:\n  files:\n    type: blob\n    format: jsonl\n    destination: {type: local-fs, path: %q}\n    schedule: \"@every 1h\"\n", t.TempDir()))
	in, err := n.Ingest("logs", "web", []byte(`{"a":1}`+"\n"+`{"a":2}`+"\n"+`{"a":3}`+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // every row is past max_age; the sink exported none
	want := []cache.PruneResult{{Dataset: "logs", Partition: "source=web", ThroughSeq: in.LastSeq, DeletedRows: 3, ForcedRows: 3,
		Losses: []cache.Loss{{Consumer: "files", First: in.FirstSeq, Last: in.LastSeq, Rows: 3}}}}
	same := func(got []cache.PruneResult) bool {
		return slices.EqualFunc(got, want, func(a, b cache.PruneResult) bool {
			return a.Dataset == b.Dataset && a.Partition == b.Partition && a.ThroughSeq == b.ThroughSeq && a.DeletedRows == b.DeletedRows &&
				a.ForcedRows == b.ForcedRows && a.HeldRows == b.HeldRows && slices.Equal(a.Losses, b.Losses)
		})
	}
	gaps := func() int {
		t.Helper()
		st, err := n.SinkStatus(ctx, "files")
		if err != nil || len(st) != 1 || len(st[0].Partitions) != 1 {
			t.Fatalf("sink status %+v %v", st, err)
		}
		g := st[0].Partitions[0].Gaps
		for _, x := range g {
			if x.Pending || x.From != in.FirstSeq || x.To != in.LastSeq || x.Rows != 3 {
				t.Fatalf("gap %+v, want final seqs %d-%d", x, in.FirstSeq, in.LastSeq)
			}
		}
		return len(g)
	}

	res, err := n.Prune(ctx, true)
	if err != nil || !same(res) {
		t.Fatalf("dry run %+v %v, want %+v", res, err, want)
	}
	if st := n.Cache.Status(); st[0].Rows != 3 || gaps() != 0 {
		t.Fatalf("the dry run changed something: %+v", st)
	}
	res, err = n.Prune(ctx, false)
	if err != nil || !same(res) {
		t.Fatalf("prune %+v %v, want %+v", res, err, want)
	}
	if st := n.Cache.Status(); st[0].Rows != 0 || st[0].PrunedThrough != in.LastSeq || gaps() != 1 {
		t.Fatalf("after the prune %+v", st)
	}
	if v := counted(t, n.unexportedRows.WithLabelValues("files", "logs")); v != 3 {
		t.Fatalf("unexported deleted rows %v, want 3", v)
	}
	if v := counted(t, n.retentionRows.WithLabelValues("logs")); v != 3 {
		t.Fatalf("deleted rows %v, want 3", v)
	}
	if res, err := n.Prune(ctx, false); err != nil || len(res) != 0 || gaps() != 1 {
		t.Fatalf("a second prune %+v %v", res, err)
	}
}

func counted(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
