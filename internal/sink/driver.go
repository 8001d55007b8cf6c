// Package sink owns exporting: every configured sink instance, its schedule, and the unit
// loop that moves rows from the cache to a destination exactly once.
//
// A unit is a seq range of one partition. Before it is shipped its bounds are persisted as
// an intent in the partition's watermark file; the watermark moves past it only after the
// destination has it durably. A crash at any instant therefore either re-ships exactly the
// same unit (same rows, same batch id, same object key, which the destination recognises)
// or finds it done. Ticks of one instance never overlap.
//
// Within a tick, a destination that takes concurrent requests (a forward sink) exports up
// to limits.inFlight partitions at once, each by one goroutine running the partition's unit
// loop (exportPartition). What runs concurrently is therefore only the unit loops of
// different partitions: one partition is still exported by one goroutine at a time, one
// unit after the other in seq order, each intent written before its unit ships, so no unit
// is ever in flight twice (to one destination or to two). A forward sink's loop also reads
// its partition's next unit in a goroutine of its own while a unit ships (readAhead), which
// only reads the cache, and queues that unit's intent in another beside the ship
// (queueNext); the loop waits for the latter before it writes or ships anything else, so a
// partition's units still ship one at a time, in order, and its watermark has one writer at
// a time. What those loops share is safe for it: the watermark store serialises each key's
// read-compare-write, the cache's scans
// and the shipper take concurrent callers, the metrics are atomic, and each loop's result
// is its own until the tick sums them in partition order.
//
// The package never writes to the cache; retention asks it for floors instead.
package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/failpoint"
	"github.com/hyp-project/hyp/internal/home"
	"github.com/hyp-project/hyp/internal/partition"
	"github.com/hyp-project/hyp/internal/watermark"
)

// ErrUnknownSink is returned for an instance name the config does not have.
var ErrUnknownSink = errors.New("no such sink")

// Options configure a Driver.
type Options struct {
	Home string
	// GatewayID is the config's gateway_id; empty means the id generated for Home.
	GatewayID string
	// Incarnation is the id of Cache's seq space (cache.Cache.Incarnation): part of every
	// unit's id, so a reinstalled home's units never repeat its earlier life's ids.
	Incarnation string
	Sinks       map[string]config.Sink
	Cache       Cache
	Registerer  prometheus.Registerer
	Logger      *slog.Logger
	Now         func() time.Time
	// UnitRows overrides the per-unit row budget of every sink (tests use small units).
	UnitRows int64
}

// Driver runs every sink instance of a home.
type Driver struct {
	store *watermark.Store
	cache Cache
	insts []*instance
	log   *slog.Logger
	now   func() time.Time
	lag   lagMemo
	// transforms is the engine every sink's transform runs on, opened on first use.
	transforms *runners
	// afterLossIntent and beforeSettle are crash-test failpoints of a forced prune; nil
	// unless HYP_FAILPOINT names them.
	afterLossIntent, beforeSettle func()
}

type instance struct {
	name string
	cfg  config.Sink // as built; Reconfigure changes only what live holds
	live atomic.Pointer[liveSettings]
	wake chan struct{} // a new schedule: the loop recomputes its next tick
	// maintainWake is wake for the maintain loop of an iceberg sink.
	maintainWake chan struct{}
	cache        Cache
	store        *watermark.Store
	exp          exporter
	lim          limits // the unit budget of the destination
	gateway      string
	incarnation  string
	home         string
	sem          chan struct{} // single flight: a tick holds it
	log          *slog.Logger
	now          func() time.Time
	metrics      *metrics
	hooks        hooks
	broken       error // why the sink could not be built; it then exports nothing
	transforms   *runners
}

type metrics struct {
	exported *prometheus.CounterVec
	failures *prometheus.CounterVec
	withheld *prometheus.CounterVec
	filtered *prometheus.CounterVec
	unitStep *prometheus.HistogramVec
	maintain *maintainMetrics
	reg      prometheus.Registerer // for what a sink registers as it is built (its TLS reloads)
}

// New builds every configured sink. A sink that cannot be built (unreadable token file, bad
// destination) is kept, holds its rows from retention like any other, fails every run with
// why, and is reported by Err: the daemon refuses to start with it, while a CLI command that
// only reads still works.
func New(ctx context.Context, o Options) (*Driver, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	m := &metrics{
		exported: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hyp_sink_exported_rows_total", Help: "Rows a sink delivered to its destination."}, []string{"sink", "dataset"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hyp_sink_export_failures_total", Help: "Export units that failed or were quarantined."}, []string{"sink"}),
		withheld: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hyp_sink_withheld_rows_total", Help: "Rows a sink skipped and advanced past because withhold_sources matched."}, []string{"sink", "dataset"}),
		filtered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hyp_sink_filtered_rows_total", Help: "Rows a sink's transform dropped; they count as exported, as the watermark passed them."}, []string{"sink"}),
		// A partition ships one unit at a time, so these steps add up to how fast it
		// catches up: where a slow backlog's time goes.
		unitStep: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "hyp_sink_unit_step_seconds",
			Help:    "Time a forward or blob sink's export unit spent in each step: read (its rows from the cache, or waiting for the read ahead), ship (to the destination's answer), record (a watermark file write: an intent, an advance).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"sink", "step"}),
		maintain: newMaintainMetrics(),
		reg:      o.Registerer,
	}
	d := &Driver{store: watermark.Open(home.Sinks(o.Home), log, now), cache: o.Cache, log: log, now: now, transforms: &runners{}}
	if o.Registerer != nil {
		o.Registerer.MustRegister(m.exported, m.failures, m.withheld, m.filtered, m.unitStep, positionCollector{d}, forwardCollector{d})
		o.Registerer.MustRegister(m.maintain.collectors()...)
	}
	names := make([]string, 0, len(o.Sinks))
	for name := range o.Sinks {
		names = append(names, name)
	}
	slices.Sort(names)
	var gateway string
	var conflict error // a gateway identity conflict: forward sinks refuse to send
	d.afterLossIntent = failpoint.At("after-loss-intent")
	d.beforeSettle = failpoint.At("before-settle")
	for _, name := range names {
		cfg := o.Sinks[name]
		if gateway == "" {
			var err error
			if gateway, conflict, err = gatewayID(o.Home, o.GatewayID, log); err != nil {
				return nil, err
			}
		}
		live, err := newLive(cfg)
		if err != nil {
			return nil, fmt.Errorf("sink %s: %w", name, err)
		}
		x := &instance{
			name: name, cfg: cfg, cache: o.Cache, store: d.store, gateway: gateway, incarnation: o.Incarnation, home: o.Home,
			wake: make(chan struct{}, 1), maintainWake: make(chan struct{}, 1), sem: make(chan struct{}, 1),
			log: log.With("sink", name), now: now, metrics: m, hooks: failpoints(), transforms: d.transforms,
		}
		x.live.Store(live)
		if cfg.Type == "iceberg" {
			var l *lakeSink
			l, x.lim = newLakeSink(x, o.UnitRows)
			x.exp = &tableExporter{l}
		} else {
			var sh shipper
			sh, x.lim, err = newShipper(ctx, x, o.UnitRows)
			x.exp = &unitExporter{sh}
		}
		if err != nil {
			x.broken = fmt.Errorf("sink %s: %w", name, err)
		} else if conflict != nil && cfg.Type == "forward" {
			x.broken = fmt.Errorf("sink %s: %w", name, conflict)
		}
		m.failures.WithLabelValues(name) // a healthy sink shows 0, not nothing
		if cfg.Transform != "" {
			m.filtered.WithLabelValues(name)
		}
		d.insts = append(d.insts, x)
	}
	return d, nil
}

// Err reports the sinks that could not be built, or nil. A forward sink held back by a
// gateway identity conflict is not among them: the daemon must still start and capture rows
// (a cloned machine's telemetry would otherwise be lost), while that sink fails every run,
// naming the conflict, until the operator resolves it.
func (d *Driver) Err() error {
	var errs []error
	for _, x := range d.insts {
		if !errors.Is(x.broken, home.ErrGatewayConflict) {
			errs = append(errs, x.broken)
		}
	}
	return errors.Join(errs...)
}

// Close releases what the driver's sinks opened that outlives a tick (the transform
// engine). The driver must not run after it.
func (d *Driver) Close() error { return d.transforms.close() }

// Store is the watermark store the driver writes through.
func (d *Driver) Store() *watermark.Store { return d.store }

// Run ticks every instance on its schedule, and maintains iceberg sinks' tables on their
// maintain.schedule, until ctx is done.
func (d *Driver) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, x := range d.insts {
		wg.Go(func() { x.loop(ctx) })
		if x.table() != nil {
			// Even without a maintain.schedule: a reload may give it one.
			wg.Go(func() { x.maintainLoop(ctx) })
		}
	}
	wg.Wait()
}

func (x *instance) loop(ctx context.Context) {
	for {
		next := x.live.Load().sched.Next(x.now())
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-x.wake:
			t.Stop()
			continue
		case <-t.C:
		}
		select {
		case x.sem <- struct{}{}:
		default:
			x.log.Info("previous run still going; skipping this tick")
			continue
		}
		res := x.tick(ctx)
		<-x.sem
		if len(res.Errors) > 0 && ctx.Err() == nil {
			x.log.Warn("sink tick had errors", "status", res.Status, "rows", res.Rows, "errors", res.Errors)
		}
	}
}

// RunResult is one instance's run (SPEC 7 `sink run --json`).
type RunResult struct {
	Instance string   `json:"instance"`
	Status   string   `json:"status"` // ok | partial | failed
	Rows     int64    `json:"rows"`
	Bytes    int64    `json:"bytes"`
	Units    int      `json:"units"`
	Errors   []string `json:"errors"`
}

// RunNow runs instance (every instance when empty) now, waiting for a tick in progress to
// finish first, and returns what each run did.
func (d *Driver) RunNow(ctx context.Context, name string) ([]RunResult, error) {
	sel, err := d.selectInstances(name)
	if err != nil {
		return nil, err
	}
	out := []RunResult{}
	for _, x := range sel {
		select {
		case x.sem <- struct{}{}:
		case <-ctx.Done():
			return out, ctx.Err()
		}
		res := x.tick(ctx)
		<-x.sem
		out = append(out, res)
	}
	return out, nil
}

// Names lists the configured instances.
func (d *Driver) Names() []string {
	out := make([]string, len(d.insts))
	for i, x := range d.insts {
		out[i] = x.name
	}
	return out
}

// tick flushes the cache so every acknowledged row is visible, then exports every
// partition of the instance's datasets.
func (x *instance) tick(ctx context.Context) RunResult {
	res := RunResult{Instance: x.name, Status: "ok", Errors: []string{}}
	if x.broken != nil {
		res.Status = "failed"
		res.Errors = append(res.Errors, x.broken.Error())
		return res
	}
	if err := x.cache.Flush(ctx); err != nil {
		res.Status = "failed"
		res.Errors = append(res.Errors, "flush cache: "+err.Error())
		return res
	}
	var parts []partHead
	for _, ps := range x.cache.Status() {
		if x.covers(ps.Dataset) {
			parts = append(parts, partHead{Part{Dataset: ps.Dataset, Partition: ps.Partition}, ps.HeadSeq})
		}
	}
	return x.exp.export(ctx, x, parts, res)
}

// An exporter delivers a sink's new rows in a tick, once the cache is flushed and the
// partitions' heads read: a unitExporter ships each partition unit by unit (forward, blob:
// exportPartition), a tableExporter commits one unit of each partition of a dataset in one
// table snapshot (iceberg: exportTable). Both decide positions the same way (cursor.go).
type exporter interface {
	export(ctx context.Context, x *instance, parts []partHead, res RunResult) RunResult
}

// unitExporter ships units through a shipper.
type unitExporter struct{ ship shipper }

func (e *unitExporter) export(ctx context.Context, x *instance, parts []partHead, res RunResult) RunResult {
	failed, worked := 0, 0
	for i, r := range x.exportAll(ctx, parts) {
		if r == nil {
			continue // not reached: the tick stopped first
		}
		p := parts[i]
		res.Rows += r.rows
		res.Bytes += r.bytes
		res.Units += r.units
		for _, q := range r.quarantined {
			res.Errors = append(res.Errors, fmt.Sprintf("%s %s: %s", p.Dataset, p.Partition, q))
		}
		if r.err != nil {
			failed++
			res.Errors = append(res.Errors, fmt.Sprintf("%s %s: %v", p.Dataset, p.Partition, r.err))
		} else {
			worked++
		}
	}
	switch {
	case failed > 0 && worked == 0 && res.Units == 0:
		res.Status = "failed"
	case failed > 0 || len(res.Errors) > 0:
		res.Status = "partial"
	}
	return res
}

// shipper is a unit exporter's shipper; nil for a table exporter, whose reads encode
// nothing.
func (x *instance) shipper() shipper {
	if e, ok := x.exp.(*unitExporter); ok {
		return e.ship
	}
	return nil
}

// table is a table exporter's table writer; nil for a unit exporter.
func (x *instance) table() *lakeSink {
	if e, ok := x.exp.(*tableExporter); ok {
		return e.lakeSink
	}
	return nil
}

// partHead is a partition to export in a tick, up to the head it had when the tick began.
type partHead struct {
	Part
	head int64
}

// exportAll runs exportPartition over parts, up to x.lim.inFlight partitions at once, taking
// them in order, and returns each one's result: nil for a partition the tick never reached
// because the destination turned out to be down (the rest of the tick would only wait on it
// again) or ctx ended. A panic in one partition's loop (a test's crash hook) cancels the
// others and is re-raised here, as a crash would stop them all.
func (x *instance) exportAll(ctx context.Context, parts []partHead) []*partResult {
	out := make([]*partResult, len(parts))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var stop atomic.Bool
	work := func() {
		for !stop.Load() {
			i := int(next.Add(1)) - 1
			if i >= len(parts) {
				return
			}
			r := x.exportPartition(ctx, parts[i].Part, parts[i].head)
			out[i] = &r
			var de *errDestination
			if errors.As(r.err, &de) || ctx.Err() != nil {
				stop.Store(true)
			}
		}
	}
	n := min(max(x.lim.inFlight, 1), len(parts))
	if n <= 1 {
		work()
		return out
	}
	var wg sync.WaitGroup
	var once sync.Once
	var crash any
	for range n {
		wg.Go(func() {
			defer func() {
				if v := recover(); v != nil {
					once.Do(func() { crash = v })
					stop.Store(true)
					cancel()
				}
			}()
			work()
		})
	}
	wg.Wait()
	if crash != nil {
		panic(crash)
	}
	return out
}

func (x *instance) covers(dataset string) bool {
	ds := x.live.Load().datasets
	return len(ds) == 0 || slices.Contains(ds, dataset)
}

// withheld reports whether the instance skips p's rows (drop-but-advance).
func (x *instance) withheld(p Part) bool {
	patterns := x.live.Load().withhold
	if len(patterns) == 0 {
		return false
	}
	_, src, err := partition.Parse(p.Partition)
	if err != nil {
		return false
	}
	for _, pat := range patterns {
		if ok, _ := filepath.Match(pat, src); ok || pat == src {
			return true
		}
	}
	return false
}

// Consumers are the instances covering dataset with their watermarks on part: retention
// must keep every row above the lowest. An instance with no watermark yet holds everything.
func (d *Driver) Consumers(dataset, part string) []cache.Consumer {
	var out []cache.Consumer
	for _, x := range d.insts {
		if !x.covers(dataset) {
			continue
		}
		st, err := d.store.Get(watermark.Key{Instance: x.name, Dataset: dataset, Partition: part})
		if err != nil {
			st.Seq = 0 // unreadable: hold everything rather than guess
		}
		out = append(out, cache.Consumer{Name: x.name, Seq: st.Seq})
	}
	return out
}

// gatewayID resolves what this home sends as (home.Gateway) and says so loudly when the home
// turned out to be a copy. A conflict is returned apart from other errors: it keeps only the
// forward sinks from sending.
func gatewayID(dir, configured string, log *slog.Logger) (id string, conflict, err error) {
	here, err := home.CurrentPlace(dir)
	if err != nil {
		return "", nil, fmt.Errorf("gateway id: %w", err)
	}
	ident, err := home.Gateway(dir, configured, here)
	if errors.Is(err, home.ErrGatewayConflict) {
		log.Error("forward sinks will not send until the gateway identity conflict is resolved", "err", err)
		return ident.ID, err, nil
	}
	if err != nil {
		return "", nil, err
	}
	if r := ident.Replaced; r != nil {
		log.Warn("this home was copied from another path or machine; it now sends as a new gateway id so that it never shares the original's ledger on the server",
			"old_gateway_id", r.OldID, "old_home", r.OldPlace.Home, "old_machine", r.OldPlace.Machine, "old_host", r.OldPlace.Host,
			"new_gateway_id", ident.ID, "home", here.Home, "machine", here.Machine, "host", here.Host)
	}
	return ident.ID, nil, nil
}
