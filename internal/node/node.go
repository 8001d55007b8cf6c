// Package node owns one running hyp instance's state-changing operations over its cache:
// ingest, flush, compaction, prune, sink runs, status and the metrics that describe them. The daemon
// serves a Node over its control socket; a CLI command with no daemon opens its own Node
// under the cache's writer lock. There is never more than one Node per home.
//
// Retention is a protocol node drives between the cache and the sinks (Prune), so that the
// cache never calls sink code. Its locks, outermost first: Node.positions for the whole
// prune; then, per partition, the cache's rewrite lock of that partition, held by a
// cache.Pruning from StartPrune to Close; under it alone the sink driver is called (its
// watermark entry locks, fsync'd writes), never with the partition's mu held, which the
// cache takes only inside StartPrune and Delete and releases before they return.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/home"
	"github.com/hyp-project/hyp/internal/lake"
	"github.com/hyp-project/hyp/internal/promreg"
	"github.com/hyp-project/hyp/internal/rowform"
	"github.com/hyp-project/hyp/internal/sink"
)

// Node is the single writer of a home.
type Node struct {
	Home string
	// Cfg is the config the node started with; live is the latest one Reload accepted,
	// which retention and the sinks follow.
	Cfg   *config.Config
	live  atomic.Pointer[config.Config]
	Cache *cache.Cache
	Sinks *sink.Driver
	Reg   *prometheus.Registry
	log   *slog.Logger

	// positions serialises retention with rewinds: a rewind is checked against what
	// retention removed, and retention decides from the watermarks, so neither may act on
	// what the other is changing.
	positions sync.Mutex

	compactions    *prometheus.CounterVec
	retentionRows  *prometheus.CounterVec
	unexportedRows *prometheus.CounterVec
}

// Open takes the writer lock of home's cache and replays its log.
func Open(ctx context.Context, dir string, cfg *config.Config, log *slog.Logger) (*Node, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Group fsyncs take from well under a millisecond (NVMe) to a second (a struggling
	// disk); flushes move up to a segment of rows.
	fsyncs := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "hyp_wal_fsync_seconds",
		Help: "Time of each group fsync of the cache's write-ahead log (an acknowledgement waits for one).", Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12)})
	flushes := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "hyp_flush_seconds",
		Help: "Time of each flush of acknowledged rows from the log into the cache's tables.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 13)})
	// Before the cache loads its first table: the sinks' lakes swap iceberg-go's local file
	// IO, which the cache's tables go through too.
	lake.InstallDurableIO()
	c, err := cache.Open(ctx, home.Cache(dir), cache.Options{Logger: log,
		OnFsync: func(d time.Duration) { fsyncs.Observe(d.Seconds()) }, OnFlush: func(d time.Duration) { flushes.Observe(d.Seconds()) }})
	if err != nil {
		return nil, err
	}
	n := &Node{Home: dir, Cfg: cfg, Cache: c, Reg: prometheus.NewRegistry(), log: log}
	n.live.Store(cfg)
	n.compactions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hyp_compactions_total", Help: "Partition compactions completed."}, []string{"dataset"})
	n.retentionRows = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hyp_retention_deleted_rows_total", Help: "Rows deleted by retention."}, []string{"dataset"})
	n.unexportedRows = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hyp_retention_unexported_deleted_rows_total", Help: "Rows retention deleted before a sink exported them (forced by max_age)."}, []string{"sink", "dataset"})
	n.Reg.MustRegister(fsyncs, flushes, n.compactions, n.retentionRows, n.unexportedRows, cacheCollector{c}, prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	n.Sinks, err = sink.New(ctx, sink.Options{Home: dir, GatewayID: cfg.GatewayID, Incarnation: c.Incarnation(), Sinks: cfg.Sinks, Cache: c, Registerer: n.Reg, Logger: log})
	if err != nil {
		c.Close(ctx)
		return nil, err
	}
	if err := n.settleGaps(); err != nil {
		c.Close(ctx)
		return nil, fmt.Errorf("settle retention gaps left pending: %w", err)
	}
	return n, nil
}

// RunSinks exports now for one instance, or all when instance is empty, and waits.
func (n *Node) RunSinks(ctx context.Context, instance string) ([]sink.RunResult, error) {
	return n.Sinks.RunNow(ctx, instance)
}

// MaintainSinks runs the table upkeep of iceberg sinks, between their exports.
func (n *Node) MaintainSinks(ctx context.Context, req sink.MaintainRequest) ([]sink.MaintainResult, error) {
	return n.Sinks.Maintain(ctx, req)
}

// Close flushes and releases the writer lock.
func (n *Node) Close(ctx context.Context) error {
	return errors.Join(n.Sinks.Close(), n.Cache.Close(ctx))
}

// Ingest implements the ingest store.
func (n *Node) Ingest(dataset, source string, body []byte) (cache.Result, error) {
	return n.Cache.Ingest(dataset, source, body)
}

// IngestRowGroups implements the ingest store.
func (n *Node) IngestRowGroups(dataset string, groups []rowform.RowGroup) (cache.Result, error) {
	return n.Cache.IngestRowGroups(dataset, groups)
}

// Flush moves logged rows into the tables.
func (n *Node) Flush(ctx context.Context) error { return n.Cache.Flush(ctx) }

// CompactRequest selects partitions; empty fields match all.
type CompactRequest struct {
	Dataset   string `json:"dataset,omitempty"`
	Partition string `json:"partition,omitempty"`
	Force     bool   `json:"force,omitempty"`
}

// Compact flushes, then compacts the selected partitions.
func (n *Node) Compact(ctx context.Context, req CompactRequest) ([]cache.CompactResult, error) {
	if err := n.Cache.Flush(ctx); err != nil {
		return nil, err
	}
	res, err := n.Cache.Compact(ctx, req.Force, func(ds, p string) bool {
		return (req.Dataset == "" || req.Dataset == ds) && (req.Partition == "" || req.Partition == p)
	})
	for _, r := range res {
		if r.Skipped == "" {
			n.compactions.WithLabelValues(r.Dataset).Inc()
			n.log.Info("compacted partition", "dataset", r.Dataset, "partition", r.Partition, "files_before", r.FilesBefore, "files_after", r.FilesAfter, "rows", r.Rows, "generation", r.To)
		}
	}
	return res, err
}

// Prune applies retention now (or reports what it would do). Rows max_age removes before
// a sink exported them become a gap on that sink's watermark, with the exact seq range.
func (n *Node) Prune(ctx context.Context, dryRun bool) ([]cache.PruneResult, error) {
	if err := n.Cache.Flush(ctx); err != nil {
		return nil, err
	}
	n.positions.Lock()
	defer n.positions.Unlock()
	cfg := n.live.Load()
	r := cfg.Cache.Retention
	pol := cache.PrunePolicy{
		Retention:    cfg.RetentionFor,
		HoldForSinks: r.HoldForSinks,
		MaxAge:       time.Duration(r.MaxAge),
		Now:          n.Cache.Now(),
	}
	reason := fmt.Sprintf("deleted by retention max_age %s before export", time.Duration(r.MaxAge))
	var res []cache.PruneResult
	var err error
	for _, st := range n.Cache.Status() {
		var p cache.PruneResult
		if p, err = n.prunePartition(ctx, st.Dataset, st.Partition, pol, reason, dryRun); err != nil {
			break
		}
		if p.ThroughSeq > 0 || p.HeldRows > 0 {
			res = append(res, p)
		}
	}
	if dryRun {
		return res, err
	}
	for _, p := range res {
		if p.DeletedRows > 0 {
			n.retentionRows.WithLabelValues(p.Dataset).Add(float64(p.DeletedRows))
			n.log.Info("retention pruned partition", "dataset", p.Dataset, "partition", p.Partition, "through_seq", p.ThroughSeq, "rows", p.DeletedRows, "held_rows", p.HeldRows)
		}
		for _, l := range p.Losses {
			n.unexportedRows.WithLabelValues(l.Consumer, p.Dataset).Add(float64(l.Rows))
		}
	}
	return res, err
}

// prunePartition is retention's protocol for one partition: plan from the sinks' positions,
// record the losses the plan forces as pending gaps, delete, settle the gaps. Order
// matters: the losses are durable before the delete and settled after it, so a crash in
// between leaves them pending, and Open settles them against the pruned mark the table
// then holds; every lost row is in exactly one gap. The pruning holds the partition's
// rewrite lock throughout (its plan stays valid), and only that: the sink driver's
// watermark writes, fsync'd, delay the partition's compaction and repair, never its
// flushes.
func (n *Node) prunePartition(ctx context.Context, dataset, part string, pol cache.PrunePolicy, reason string, dryRun bool) (cache.PruneResult, error) {
	pr, err := n.Cache.StartPrune(dataset, part)
	if err != nil {
		return cache.PruneResult{}, err
	}
	defer pr.Close()
	var consumers []cache.Consumer
	if !pr.Empty() {
		consumers = n.Sinks.Consumers(dataset, part)
	}
	plan, err := pr.Plan(ctx, pol, consumers)
	if err != nil || dryRun || plan.ThroughSeq == 0 {
		return plan, err
	}
	if len(plan.Losses) > 0 {
		if err := n.Sinks.RecordLosses(dataset, part, plan.Losses, reason); err != nil {
			return cache.PruneResult{}, fmt.Errorf("prune %s/%s: record losses before deleting: %w", dataset, part, err)
		}
		pr.Recorded()
	}
	prunedThrough, err := pr.Delete(ctx)
	if err != nil || len(plan.Losses) == 0 {
		return plan, err
	}
	return plan, n.Sinks.SettleGaps(dataset, part, prunedThrough)
}

// Repair sets aside the cache's unreadable data files (recording their rows as lost) so
// reads work again, or with dryRun only names them.
func (n *Node) Repair(ctx context.Context, dryRun bool) ([]cache.Repaired, error) {
	if err := n.Cache.Flush(ctx); err != nil {
		return nil, err
	}
	return n.Cache.Repair(ctx, dryRun)
}

// settleGaps resolves losses a crash may have left pending between recording them and the
// delete, against the pruned mark each partition's table holds.
func (n *Node) settleGaps() error {
	var errs []error
	for _, p := range n.Cache.Status() {
		errs = append(errs, n.Sinks.SettleGaps(p.Dataset, p.Partition, p.PrunedThrough))
	}
	return errors.Join(errs...)
}

// Reload applies a new config where the running node can: retention at once, and each
// sink's schedule, datasets, withhold_sources and maintain block. What needs a restart (listeners, flush
// and compaction intervals, sinks added, removed or pointed elsewhere, the server block) is returned and
// left as it was. Everything applied is logged.
func (n *Node) Reload(cfg *config.Config) (applied, needRestart []string) {
	old := n.live.Load()
	applied, needRestart = n.Sinks.Reconfigure(cfg.Sinks)
	if !reflect.DeepEqual(old.Cache.Retention, cfg.Cache.Retention) {
		applied = append(applied, "cache.retention")
	}
	if !reflect.DeepEqual(old.Ingest, cfg.Ingest) {
		needRestart = append(needRestart, "ingest")
	}
	if old.GatewayID != cfg.GatewayID {
		needRestart = append(needRestart, "gateway_id")
	}
	if !reflect.DeepEqual(old.Server, cfg.Server) {
		needRestart = append(needRestart, "server")
	}
	if old.Cache.FlushInterval != cfg.Cache.FlushInterval || old.Cache.Compaction != cfg.Cache.Compaction {
		needRestart = append(needRestart, "cache.flush_interval or cache.compaction")
	}
	live := *old
	live.Cache.Retention = cfg.Cache.Retention
	n.live.Store(&live)
	for _, a := range applied {
		n.log.Info("config reloaded", "applied", a)
	}
	for _, r := range needRestart {
		n.log.Warn("config change needs a restart; not applied", "change", r)
	}
	return applied, needRestart
}

// SinkStatus reports where sinks stand, after making every acknowledged row visible.
// PreviewSink flushes, then shows a sink's newest rows as its transform shapes them,
// moving nothing.
func (n *Node) PreviewSink(ctx context.Context, req sink.PreviewRequest) (sink.PreviewResult, error) {
	if err := n.Cache.Flush(ctx); err != nil {
		return sink.PreviewResult{}, err
	}
	return n.Sinks.Preview(ctx, req)
}

func (n *Node) SinkStatus(ctx context.Context, instance string) ([]sink.InstanceStatus, error) {
	if err := n.Cache.Flush(ctx); err != nil {
		return nil, err
	}
	return n.Sinks.Status(ctx, instance)
}

// Rewind moves a sink's watermarks (or says how it would), never while retention runs.
func (n *Node) Rewind(ctx context.Context, req sink.RewindRequest) (sink.RewindResult, error) {
	if err := n.Cache.Flush(ctx); err != nil {
		return sink.RewindResult{}, err
	}
	n.positions.Lock()
	defer n.positions.Unlock()
	return n.Sinks.Rewind(ctx, req)
}

// cacheCollector reports per-partition gauges at scrape time from the cache's in-memory
// index, so there is no second copy of those numbers to keep in sync. A dataset's
// partitions beyond the promreg.MaxPartitionSeries holding the most rows are folded into
// partition="_other": their rows summed, their head seq the highest.
type cacheCollector struct{ c *cache.Cache }

var cacheRowsDesc = prometheus.NewDesc("hyp_cache_rows", "Rows held in the cache.", []string{"dataset", "partition"}, nil)
var cacheHeadDesc = prometheus.NewDesc("hyp_cache_head_seq", "Highest seq committed to the partition.", []string{"dataset", "partition"}, nil)
var cacheLostDesc = prometheus.NewDesc("hyp_cache_lost_rows_total", "Acknowledged rows the cache could not keep, as recorded in `cache status` losses.", nil, nil)

func (cc cacheCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- cacheRowsDesc
	ch <- cacheHeadDesc
	ch <- cacheLostDesc
}

func (cc cacheCollector) Collect(ch chan<- prometheus.Metric) {
	st := cc.c.Status()
	group, rank := make([]string, len(st)), make([]float64, len(st))
	for i, p := range st {
		group[i], rank[i] = p.Dataset, float64(p.Rows)
	}
	type folded struct{ rows, head int64 }
	others := map[string]*folded{}
	var order []string // datasets with folded partitions, as they came
	for i, keep := range promreg.Keep(group, rank) {
		p := st[i]
		if keep {
			ch <- prometheus.MustNewConstMetric(cacheRowsDesc, prometheus.GaugeValue, float64(p.Rows), p.Dataset, p.Partition)
			ch <- prometheus.MustNewConstMetric(cacheHeadDesc, prometheus.GaugeValue, float64(p.HeadSeq), p.Dataset, p.Partition)
			continue
		}
		o := others[p.Dataset]
		if o == nil {
			o = &folded{}
			others[p.Dataset] = o
			order = append(order, p.Dataset)
		}
		o.rows += p.Rows
		o.head = max(o.head, p.HeadSeq)
	}
	for _, ds := range order {
		ch <- prometheus.MustNewConstMetric(cacheRowsDesc, prometheus.GaugeValue, float64(others[ds].rows), ds, promreg.OtherPartition)
		ch <- prometheus.MustNewConstMetric(cacheHeadDesc, prometheus.GaugeValue, float64(others[ds].head), ds, promreg.OtherPartition)
	}
	ch <- prometheus.MustNewConstMetric(cacheLostDesc, prometheus.CounterValue, float64(cc.c.LostRows()))
}
