package server

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/cluster"
	"github.com/hyp-project/hyp/internal/httpbody"
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
// row through a cache.Encoder, unless the chunk came as records.
type encodingCluster struct{}

func (encodingCluster) Store(_ context.Context, ch cluster.Chunk) (cluster.Stored, error) {
	if len(ch.Records) > 0 {
		return cluster.Stored{Accepted: len(ch.Seqs)}, nil
	}
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

// BenchmarkClusterKeepArrow is BenchmarkClusterKeep for the unit as an Arrow body: kept as it came (columnar), and, for comparison,
// written as userJSON text and encoded again, as every Arrow body was before.
func BenchmarkClusterKeepArrow(b *testing.B) {
	rows := forwardBody(benchRows)
	ch, rerr := parseRows(rows, 1, benchRows, userJSON, "")
	if rerr != nil {
		b.Fatal(rerr.Msg)
	}
	enc := cache.NewEncoder()
	for i, row := range ch.all() {
		if err := enc.Add(row, ch.seqs[i], ch.ats[i]); err != nil {
			b.Fatal(err)
		}
	}
	ch.release()
	rec, err := enc.Record()
	enc.Release()
	if err != nil {
		b.Fatal(err)
	}
	// As a forward sink writes it: buffers uncompressed, the body compressed as a whole
	// (Content-Encoding), which httpbody undoes before the handler sees it.
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(rec.Schema()))
	if err := w.Write(rec); err != nil {
		b.Fatal(err)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	body := buf.Bytes()
	rec.Release()
	sc, rerr := scanArrow(body, 64<<20)
	if rerr != nil {
		b.Fatal(rerr.Msg)
	}
	k := clusterKeeper{c: encodingCluster{}}
	fw := forward{gateway: testGateway, source: testSource, first: 1, last: benchRows}
	for _, bc := range []struct {
		name     string
		columnar bool
	}{{"columnar", true}, {"text", false}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				var ch *chunk
				if bc.columnar {
					ch, rerr = parseArrow(body, sc, 1, benchRows, userJSON, "", httpbody.Meter{})
				} else {
					ch, rerr = decodeArrow(body, sc, 1, benchRows, userJSON, "", httpbody.Meter{})
				}
				if rerr != nil {
					b.Fatal(rerr.Msg)
				}
				if bc.columnar && len(ch.recs) == 0 {
					b.Fatal("the unit was not kept in the columnar form")
				}
				if _, err := k.keep(context.Background(), "logs", fw, ch); err != nil {
					b.Fatal(err)
				}
				ch.release()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchRows), "ns/row")
		})
	}
}
