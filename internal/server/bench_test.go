package server

import (
	"context"
	"fmt"
	"testing"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/cluster"
)

// forwardBody is a chunk of n rows as a forward sink sends them: the bench's log rows with
// the sender's seq and ingest time.
func forwardBody(n int) []byte {
	var b []byte
	for i := 1; i <= n; i++ {
		b = fmt.Appendf(b, `{"ts":"2026-11-30T09:00:00.%06dZ","level":"info","service":"checkout","msg":"request handled","path":"/api/v1/items/%d","status":200,"duration_ms":%d,"id":%d,"_hyp_ingest_seq":%d,"_hyp_ingested_at":"2026-11-30T09:00:01.%06dZ"}`+"\n",
			i%1000000, i%5000, i%977, i, i, i%1000000)
	}
	return b
}

const benchRows = 10_000

// BenchmarkParseRows parses a forward unit whole and in the pieces parseRows cuts it into
// on this machine; ns/row is wall time, so pieces trade a little CPU for a shorter wait.
func BenchmarkParseRows(b *testing.B) {
	body := forwardBody(benchRows)
	for _, bc := range []struct {
		name  string
		parts int
	}{{"whole", 1}, {"pieces", parseParts(len(body))}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				ch, rerr := parseRowsIn(body, 1, benchRows, cacheRows, "", bc.parts)
				if rerr != nil {
					b.Fatal(rerr.Msg)
				}
				ch.release() // as the handler does once the chunk is kept
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchRows), "ns/row")
		})
	}
}

// encodingCluster does the CPU work of cluster.Store that depends on the rows' form: every
// row through a cache.Encoder.
type encodingCluster struct{}

func (encodingCluster) Store(_ context.Context, ch cluster.Chunk) (cluster.Stored, error) {
	enc := cache.NewEncoder()
	defer enc.Release()
	for i, row := range ch.Rows {
		if err := enc.Add(row, ch.Seqs[i], ch.IngestedAt[i]); err != nil {
			return cluster.Stored{}, err
		}
	}
	rec, err := enc.Record()
	if err != nil {
		return cluster.Stored{}, err
	}
	rec.Release()
	return cluster.Stored{Accepted: len(ch.Rows)}, nil
}

// BenchmarkClusterKeep is a cluster replica's CPU for one chunk up to staging: parse into
// JSON objects of the user fields, encode.
func BenchmarkClusterKeep(b *testing.B) {
	body := forwardBody(benchRows)
	b.SetBytes(int64(len(body)))
	k := clusterKeeper{c: encodingCluster{}}
	fw := forward{gateway: testGateway, source: testSource, first: 1, last: benchRows}
	for b.Loop() {
		ch, rerr := parseRows(body, 1, benchRows, userJSON, "")
		if rerr != nil {
			b.Fatal(rerr.Msg)
		}
		if _, err := k.keep(context.Background(), "logs", fw, ch); err != nil {
			b.Fatal(err)
		}
		ch.release()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchRows), "ns/row")
}
