package ingest

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyp-project/hyp/internal/httpbody"
)

type metrics struct {
	rows     *prometheus.CounterVec
	rejected *prometheus.CounterVec
	requests *prometheus.CounterVec
	// duration is resolved per endpoint up front: the set is closed, and every series then
	// exists (at zero) from the first scrape.
	duration [numEndpoints]prometheus.Observer
}

// newMetrics registers the handler's metrics on reg; with a budget, also the count of the
// requests it refused (the listener's Guard refuses them, whichever handler reads the body).
func newMetrics(reg prometheus.Registerer, budget *httpbody.Budget) (*metrics, error) {
	m := &metrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hyp_ingest_rows_total",
			Help: "Rows the store made durable and the ingest listener acknowledged.",
		}, []string{"dataset"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hyp_ingest_rejected_total",
			Help: "Ingest and OTLP requests rejected, by error kind; dataset is empty when the name was not valid.",
		}, []string{"dataset", "reason"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hyp_ingest_requests_total",
			Help: "Requests served by the ingest listener, by endpoint and status code.",
		}, []string{"endpoint", "code"}),
	}
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "hyp_ingest_request_duration_seconds",
		Help: "Time from request start to reply, including the wait for durability.",
		// 0.5 ms to ~16 s: an acknowledged ingest waits for a group commit (an fsync), so
		// the interesting range starts at about a millisecond.
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"endpoint"})
	for ep, name := range endpointNames {
		m.duration[ep] = duration.WithLabelValues(name)
	}
	collectors := []prometheus.Collector{m.rows, m.rejected, m.requests, duration}
	if budget != nil {
		collectors = append(collectors, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "hyp_ingest_unavailable_total",
			Help:        "Requests answered 503 unavailable, by reason; memory: the listener held its limit of request-body bytes.",
			ConstLabels: prometheus.Labels{"reason": "memory"},
		}, func() float64 { return float64(budget.Refused()) }))
	}
	for i, c := range collectors {
		if err := reg.Register(c); err != nil {
			// Leave the registry as it was, so the caller can retry or carry on without us.
			for _, done := range collectors[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("ingest: registering metrics: %w", err)
		}
	}
	return m, nil
}
