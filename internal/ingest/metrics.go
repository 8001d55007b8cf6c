package ingest

import (
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyp-project/hyp/internal/httpbody"
	"github.com/hyp-project/hyp/internal/promreg"
)

type metrics struct {
	rows     *prometheus.CounterVec
	rejected *prometheus.CounterVec
	requests *prometheus.CounterVec
	// pieced counts the OTLP requests too large to take whole, taken in pieces (pieces.go).
	pieced prometheus.Counter
	// unavailable counts the requests the store could not take (disk_full, io_error); the
	// budget's refusals (memory) are read from it at scrape time.
	unavailable *unavailableCollector
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
		pieced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hyp_ingest_otlp_pieced_requests_total",
			Help: "Compressed OTLP/protobuf requests too large to take whole once decompressed, taken one resource at a time (stored in several appends, so not atomic).",
		}),
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
	m.unavailable = &unavailableCollector{budget: budget}
	collectors := []prometheus.Collector{m.rows, m.rejected, m.requests, m.pieced, duration, m.unavailable}
	if budget != nil {
		collectors = append(collectors, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "hyp_ingest_body_bytes_held",
			Help: "Request-body bytes the listener holds now; at hyp_ingest_body_bytes_limit further requests are answered 503.",
		}, func() float64 { return float64(budget.Held()) }), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "hyp_ingest_body_bytes_limit",
			Help: "The listener's budget of request-body bytes held at once.",
		}, func() float64 { return float64(budget.Limit()) }))
	}
	if err := promreg.Register(reg, collectors...); err != nil {
		return nil, fmt.Errorf("ingest: registering metrics: %w", err)
	}
	return m, nil
}

var unavailableDesc = prometheus.NewDesc("hyp_ingest_unavailable_total",
	"Requests the daemon could not take, by reason: disk_full (answered 507), io_error (the log failed; 503), memory (the listener held its limit of request-body bytes; 503).",
	[]string{"reason"}, nil)

// unavailableCollector is one family for every reason a request could not be taken, so the
// listener's budget (counted where it refuses) and the store's failures (counted here)
// share it.
type unavailableCollector struct {
	budget            *httpbody.Budget
	diskFull, ioError atomic.Uint64
}

func (u *unavailableCollector) Describe(ch chan<- *prometheus.Desc) { ch <- unavailableDesc }

func (u *unavailableCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(unavailableDesc, prometheus.CounterValue, float64(u.diskFull.Load()), "disk_full")
	ch <- prometheus.MustNewConstMetric(unavailableDesc, prometheus.CounterValue, float64(u.ioError.Load()), "io_error")
	if u.budget != nil {
		ch <- prometheus.MustNewConstMetric(unavailableDesc, prometheus.CounterValue, float64(u.budget.Refused()), "memory")
	}
}
