package sink

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyp-project/hyp/internal/lake"
	"github.com/hyp-project/hyp/internal/watermark"
)

// Table upkeep of iceberg sinks (`hyp sink maintain`, and the daemon on maintain.schedule).
// It runs holding the instance's tick slot, so never while the instance exports: the
// intents it protects are then exactly the commits the instance has left unresolved, and
// none of its own commits is in flight.

// orphanAge is how old an unreferenced file must be before maintain removes it: other
// machines writing the same table have files written and not committed yet, for as long as
// a commit and its retries take (minutes), and recover their own interrupted commits by
// writing the files again.
const orphanAge = 3 * 24 * time.Hour

// MaintainRequest asks for the table upkeep of one iceberg sink (every one when Instance
// is empty).
type MaintainRequest struct {
	Instance string `json:"instance"`
	Compact  bool   `json:"compact"` // compact even when the sink's maintain.compact is off
	DryRun   bool   `json:"dry_run"`
}

// MaintainResult is one sink's upkeep (SPEC 7 `sink maintain --json`).
type MaintainResult struct {
	Instance string             `json:"instance"`
	DryRun   bool               `json:"dry_run"`
	Tables   []lake.TableReport `json:"tables"`
	Error    string             `json:"error,omitempty"`
}

type maintainMetrics struct {
	runs      *prometheus.CounterVec
	expired   *prometheus.CounterVec
	orphans   *prometheus.CounterVec
	dataFiles *prometheus.GaugeVec
}

func newMaintainMetrics() *maintainMetrics {
	return &maintainMetrics{
		runs:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hyp_lake_maintain_total", Help: "Table upkeep runs of an iceberg sink, by result (ok or failed)."}, []string{"sink", "result"}),
		expired:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hyp_lake_snapshots_expired_total", Help: "Snapshots table upkeep expired."}, []string{"sink"}),
		orphans:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hyp_lake_orphans_removed_total", Help: "Orphan files table upkeep removed."}, []string{"sink"}),
		dataFiles: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hyp_lake_data_files", Help: "Live data files of an iceberg sink's table after its last upkeep."}, []string{"sink", "table"}),
	}
}

func (m *maintainMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.runs, m.expired, m.orphans, m.dataFiles}
}

// Maintain runs the upkeep req asks for, waiting for a tick of the instance in progress to
// finish first. Naming a sink that is not an iceberg sink is ErrNotIceberg.
func (d *Driver) Maintain(ctx context.Context, req MaintainRequest) ([]MaintainResult, error) {
	sel, err := d.selectInstances(req.Instance)
	if err != nil {
		return nil, err
	}
	if req.Instance != "" && sel[0].table() == nil {
		return nil, fmt.Errorf("sink %q is a %s sink: %w", req.Instance, sel[0].cfg.Type, ErrNotIceberg)
	}
	out := []MaintainResult{}
	for _, x := range sel {
		if x.table() == nil {
			continue
		}
		select {
		case x.sem <- struct{}{}:
		case <-ctx.Done():
			return out, ctx.Err()
		}
		res := x.maintain(ctx, req.Compact || x.live.Load().maintain.Compact, req.DryRun)
		<-x.sem
		out = append(out, res)
	}
	return out, nil
}

// maintainLoop runs the instance's upkeep on its maintain.schedule until ctx is done,
// each run between two of its ticks. A reload that changes the schedule wakes it to
// recompute its next run; with no schedule it only waits for one.
func (x *instance) maintainLoop(ctx context.Context) {
	for {
		var due <-chan time.Time // nil, never ready, without a schedule
		if sched := x.live.Load().maintainSched; sched != nil {
			// An abandoned time.After timer is collected (Go 1.23), so a wake leaks nothing.
			due = time.After(time.Until(sched.Next(x.now())))
		}
		select {
		case <-ctx.Done():
			return
		case <-x.maintainWake:
			continue
		case <-due:
		}
		select {
		case x.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		x.maintain(ctx, x.live.Load().maintain.Compact, false)
		<-x.sem
	}
}

// maintain runs the upkeep of the instance's tables; the caller holds x.sem.
func (x *instance) maintain(ctx context.Context, compact, dryRun bool) MaintainResult {
	res := MaintainResult{Instance: x.name, DryRun: dryRun, Tables: []lake.TableReport{}}
	fail := func(err error) MaintainResult {
		res.Error = err.Error()
		if !dryRun {
			x.metrics.maintain.runs.WithLabelValues(x.name, "failed").Inc()
		}
		x.log.Warn("table upkeep failed", "err", err, "dry_run", dryRun)
		return res
	}
	if x.broken != nil {
		return fail(x.broken)
	}
	l, err := x.table().open(ctx)
	if err != nil {
		return fail(err)
	}
	pending, err := x.pending()
	if err != nil {
		return fail(err)
	}
	m := x.live.Load().maintain
	res.Tables, err = l.Maintain(ctx, lake.MaintainOptions{
		Compact: compact, DryRun: dryRun, ExpireOlderThan: time.Duration(m.ExpireOlderThan), RetainLast: m.RetainLast,
		OrphanOlderThan: orphanAge, Protect: pending,
	})
	if res.Tables == nil {
		res.Tables = []lake.TableReport{}
	}
	for _, t := range res.Tables {
		x.log.Info("table upkeep", "table", t.Table, "dry_run", dryRun, "compact", compact, "snapshots_expired", t.SnapshotsExpired, "snapshots_before", t.SnapshotsBefore, "snapshots_after", t.SnapshotsAfter,
			"files_before", t.FilesBefore, "files_after", t.FilesAfter, "orphans_removed", t.OrphansRemoved, "error", t.Error)
		if !dryRun {
			x.metrics.maintain.expired.WithLabelValues(x.name).Add(float64(t.SnapshotsExpired))
			x.metrics.maintain.orphans.WithLabelValues(x.name).Add(float64(t.OrphansRemoved))
			if t.Error == "" {
				x.metrics.maintain.dataFiles.WithLabelValues(x.name, t.Table).Set(float64(t.FilesAfter))
			}
		}
	}
	if err != nil {
		return fail(err)
	}
	if !dryRun {
		x.metrics.maintain.runs.WithLabelValues(x.name, "ok").Inc()
	}
	return res
}

// pending are the table commits the instance's intents name: decided, perhaps written,
// not yet resolved. Every partition the cache has is looked at, covered or not, so an
// intent left by a sink whose datasets were narrowed since is protected too.
func (x *instance) pending() ([]lake.Pending, error) {
	var out []lake.Pending
	for _, ps := range x.cache.Status() {
		k := watermark.Key{Instance: x.name, Dataset: ps.Dataset, Partition: ps.Partition}
		st, err := x.store.Get(k)
		if err != nil {
			return nil, err
		}
		in := st.Intent
		if in == nil || in.Commit == nil {
			continue
		}
		u := lake.Unit{Dataset: ps.Dataset, Partition: ps.Partition, First: in.First, Last: in.Last, Rows: in.Rows}
		i := slices.IndexFunc(out, func(p lake.Pending) bool {
			return p.Dataset == ps.Dataset && p.ID == in.Commit.ID && p.Base == in.Commit.Snapshot
		})
		if i < 0 {
			out = append(out, lake.Pending{Dataset: ps.Dataset, ID: in.Commit.ID, Base: in.Commit.Snapshot})
			i = len(out) - 1
		}
		out[i].Units = append(out[i].Units, u)
	}
	return out, nil
}
