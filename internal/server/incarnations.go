package server

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyp-project/hyp/internal/ledger"
)

// incarnationWatch remembers the incarnations that sent to this process within the last
// ConcurrentWindow, for hyp_server_gateway_incarnations: how many are active, and how many
// were found sending alongside another incarnation of their gateway (ledger.Concurrent), which
// means two live machines configured with one gateway_id. It holds only what the last hour
// brought, so it stays as small as the fleet that is sending.
type incarnationWatch struct {
	mu   sync.Mutex
	now  func() time.Time
	seen map[[2]string]incarnationSeen
	desc *prometheus.Desc
}

type incarnationSeen struct{ last, concurrentAt time.Time }

func newIncarnationWatch(now func() time.Time) *incarnationWatch {
	return &incarnationWatch{now: now, seen: map[[2]string]incarnationSeen{},
		desc: prometheus.NewDesc("hyp_server_gateway_incarnations",
			"Sender incarnations (seq spaces, SPEC 5) that sent to this server process within the last hour (state=active), and those of them found sending alongside another incarnation of their gateway (state=concurrent: two live machines configured with one gateway_id).",
			[]string{"state"}, nil)}
}

// note records s and reports whether it newly found the incarnation concurrent (not already
// within the window), which is when it is worth a log line.
func (w *incarnationWatch) note(s ledger.Sighting) (newlyConcurrent bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pruneLocked()
	k := [2]string{s.Gateway, s.ID}
	e := w.seen[k]
	e.last = w.now()
	if s.Concurrent {
		newlyConcurrent = e.concurrentAt.IsZero() || e.last.Sub(e.concurrentAt) > ledger.ConcurrentWindow
		e.concurrentAt = e.last
	}
	w.seen[k] = e
	return newlyConcurrent
}

// pruneLocked drops what is older than the window. It walks the map, which holds one entry
// per incarnation active in the last hour.
func (w *incarnationWatch) pruneLocked() {
	cut := w.now().Add(-ledger.ConcurrentWindow)
	for k, e := range w.seen {
		if e.last.Before(cut) {
			delete(w.seen, k)
		}
	}
}

func (w *incarnationWatch) counts() (active, concurrent int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pruneLocked()
	cut := w.now().Add(-ledger.ConcurrentWindow)
	for _, e := range w.seen {
		active++
		if !e.concurrentAt.IsZero() && !e.concurrentAt.Before(cut) {
			concurrent++
		}
	}
	return active, concurrent
}

func (w *incarnationWatch) Describe(ch chan<- *prometheus.Desc) { ch <- w.desc }

func (w *incarnationWatch) Collect(ch chan<- prometheus.Metric) {
	active, concurrent := w.counts()
	ch <- prometheus.MustNewConstMetric(w.desc, prometheus.GaugeValue, float64(active), "active")
	ch <- prometheus.MustNewConstMetric(w.desc, prometheus.GaugeValue, float64(concurrent), "concurrent")
}

// noteIncarnation logs and counts a chunk whose incarnation was found concurrent.
func (h *handler) noteIncarnation(s ledger.Sighting) {
	if s.Gateway == "" {
		return // the keeper kept nothing it could say whose it was
	}
	if h.incarnations.note(s) {
		h.log.Warn("server: a gateway is sending from two incarnations at once: two live machines are configured with one gateway_id; give each its own",
			"gateway", s.Gateway, "incarnation", s.ID, "first_seen", s.FirstSeen, "rows", s.Rows)
	}
}
