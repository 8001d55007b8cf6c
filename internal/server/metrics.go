package server

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyp-project/hyp/internal/promreg"
)

type metrics struct {
	rows     *prometheus.CounterVec
	requests *prometheus.CounterVec
	rejected *prometheus.CounterVec
	step     *prometheus.HistogramVec
	arrow    *prometheus.CounterVec
}

// since records how long a chunk's step took since start.
func (m *metrics) since(step string, start time.Time) {
	m.step.WithLabelValues(step).Observe(time.Since(start).Seconds())
}

// newMetrics registers on reg when it is not nil; without one the counters still count, so
// the handler needs no nil checks.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hyp_server_rows_total",
			Help: "Forwarded rows acknowledged, by dataset and whether they were stored (accepted) or already held (duplicate).",
		}, []string{"dataset", "result"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hyp_server_requests_total",
			Help: "Requests served by hyp server's listener, by status code.",
		}, []string{"code"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hyp_server_rejected_total",
			Help: "Requests refused, by error kind.",
		}, []string{"reason"}),
		// A sender waits for each chunk's answer before it sends the partition's next, so
		// these steps bound how fast one gateway's backlog drains.
		step: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hyp_server_chunk_step_seconds",
			Help:    "Time a forwarded chunk spent in each step: read (its body, decompressed), parse (validated and framed), keep (ledger lookup, durable store, ledger record).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"step"}),
		// A server keeps an Arrow body's batches as they came unless a column asks for the
		// text path (columnar.go); a sender whose bodies keep going "as_rows" costs the server
		// several times the CPU per row.
		arrow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hyp_server_arrow_chunks_total",
			Help: "Arrow bodies parsed, by how they were kept: as_sent (the batches themselves, logged or staged as they came) or as_rows (each value written as the rows' text).",
		}, []string{"kept"}),
	}
	for _, kept := range []string{"as_sent", "as_rows"} {
		m.arrow.WithLabelValues(kept)
	}
	if reg == nil {
		return m, nil
	}
	collectors := []prometheus.Collector{m.rows, m.requests, m.rejected, m.step, m.arrow}
	if err := promreg.Register(reg, collectors...); err != nil {
		return nil, fmt.Errorf("server: registering metrics: %w", err)
	}
	return m, nil
}
