package server

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyp-project/hyp/internal/promreg"
)

type metrics struct {
	rows     *prometheus.CounterVec
	requests *prometheus.CounterVec
	rejected *prometheus.CounterVec
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
	}
	if reg == nil {
		return m, nil
	}
	collectors := []prometheus.Collector{m.rows, m.requests, m.rejected}
	if err := promreg.Register(reg, collectors...); err != nil {
		return nil, fmt.Errorf("server: registering metrics: %w", err)
	}
	return m, nil
}
