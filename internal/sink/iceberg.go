package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/lake"
	"github.com/hyp-project/hyp/internal/partition"
	"github.com/hyp-project/hyp/internal/watermark"
)

// An iceberg sink (SPEC 6b) does not ship unit by unit: a tick takes one unit from every
// partition of a dataset and commits them all in one table snapshot. The watermark files
// keep their role: before the commit every unit is an intent recording the commit id and
// the table's snapshot at that moment; after it the watermarks move. An intent found later
// (a crash, a commit error whose outcome is unknown) is resolved by asking the table whether
// the commit landed (lake.Committed: this writer's last-commit property, or its commit id in
// a snapshot after the recorded one): landed, the watermarks move; not, the same units are
// committed again, pinned to the head that was checked. Every intent is resolved before the
// instance makes its next commit to the table, which is what keeps the property exact.

// lakeSink is an iceberg sink's table writer. The catalog is opened on the first tick that
// needs it, and again after a failure, so a catalog that is down at start fails ticks
// instead of keeping the daemon from starting.
type lakeSink struct {
	opts lake.Options
	mu   sync.Mutex
	l    *lake.Lake
}

// newLakeSink keeps what opening the catalog needs; lake.Open checks it.
func newLakeSink(x *instance, unitRows int64) (*lakeSink, limits) {
	lim := blobLimits // a unit is a data file, as for blob sinks
	if unitRows > 0 {
		lim.rows = unitRows
	}
	return &lakeSink{opts: LakeOptions(x.cfg, x.gateway, x.name)}, lim
}

// LakeOptions is the lake.Options of an iceberg sink block, writing as gateway under the
// writer name instance.
func LakeOptions(c config.Sink, gateway, instance string) lake.Options {
	return lake.Options{
		Catalog: c.Catalog.Type, URI: c.Catalog.URI, Warehouse: c.Warehouse, Namespace: c.Namespace, PartitionBy: c.PartitionBy,
		Region: c.S3.Region, Endpoint: c.S3.Endpoint, PathStyle: c.S3.ForcePathStyle, Gateway: gateway, Writer: instance,
	}
}

// ErrNotIceberg is OpenLake's answer for a sink instance that is not an iceberg sink.
var ErrNotIceberg = errors.New("not an iceberg sink")

// OpenLake opens the catalog of cfg's iceberg sink instance for reading (`query sql
// --sink`): ErrUnknownSink or ErrNotIceberg when the config has no such sink.
func OpenLake(ctx context.Context, cfg *config.Config, instance string) (*lake.Lake, error) {
	sc, ok := cfg.Sinks[instance]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownSink, instance)
	}
	if sc.Type != "iceberg" {
		return nil, fmt.Errorf("sink %q is a %s sink: %w", instance, sc.Type, ErrNotIceberg)
	}
	return lake.Open(ctx, LakeOptions(sc, "", instance))
}

func (s *lakeSink) open(ctx context.Context) (*lake.Lake, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.l == nil {
		l, err := lake.Open(ctx, s.opts)
		if err != nil {
			return nil, &errDestination{err}
		}
		s.l = l
	}
	return s.l, nil
}

// lakeTick is tick for an iceberg sink: every covered dataset's table in turn.
func (x *instance) lakeTick(ctx context.Context, res RunResult) RunResult {
	l, err := x.lake.open(ctx)
	if err != nil {
		res.Status = "failed"
		res.Errors = append(res.Errors, err.Error())
		return res
	}
	parts := map[string][]partHead{}
	var datasets []string
	for _, ps := range x.cache.Status() {
		if !x.covers(ps.Dataset) {
			continue
		}
		if parts[ps.Dataset] == nil {
			datasets = append(datasets, ps.Dataset)
		}
		parts[ps.Dataset] = append(parts[ps.Dataset], partHead{Part{Dataset: ps.Dataset, Partition: ps.Partition}, ps.HeadSeq})
	}
	failed := 0
	for _, ds := range datasets {
		r := x.exportTable(ctx, l, ds, parts[ds])
		res.Rows += r.rows
		res.Bytes += r.bytes
		res.Units += r.units
		if r.err != nil {
			failed++
			res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", ds, r.err))
		}
		if ctx.Err() != nil {
			break
		}
	}
	switch {
	case failed > 0 && failed == len(datasets) && res.Units == 0:
		res.Status = "failed"
	case failed > 0:
		res.Status = "partial"
	}
	return res
}

// tableUnit is one partition's unit in a table commit.
type tableUnit struct {
	k    watermark.Key
	p    Part
	gen  int64 // of the state holding the unit's intent
	u    watermark.Unit
	rows *unitRows // nil for a unit found already committed
}

// exported is how many of the unit's rows reached the table: its rows as read, or as
// decided when the commit was found already made.
func (t tableUnit) exported() int64 {
	if t.rows != nil {
		return t.rows.rows
	}
	return t.u.Rows
}

// filtered is how many of the unit's rows its transform dropped, as far as this process
// read them (a commit found already made was not read again).
func (t tableUnit) filtered() int64 {
	if t.rows != nil {
		return t.rows.filtered()
	}
	return 0
}

// exportTable commits dataset's new rows, one unit per partition per commit, until every
// partition is at its head, after resolving whatever intents an earlier tick left.
func (x *instance) exportTable(ctx context.Context, l *lake.Lake, dataset string, parts []partHead) partResult {
	var res partResult
	log := x.log.With("dataset", dataset)
	for {
		if err := ctx.Err(); err != nil {
			res.err = err
			return res
		}
		if err := x.resolveIntents(ctx, l, dataset, parts, &res); err != nil {
			res.err = err
			return res
		}
		units, err := x.nextUnits(ctx, parts)
		if err != nil {
			res.err = err
			return res
		}
		if len(units) == 0 {
			return res // nothing new: no data file, no commit
		}
		base, err := l.Head(ctx, dataset)
		if err != nil {
			release(units)
			x.noteFailure(units, err)
			res.err = &errDestination{err}
			return res
		}
		id := lake.CommitID(x.gateway, x.incarnation, lakeUnits(units))
		stale := false
		for i := range units {
			t := &units[i]
			t.u.Commit = &watermark.TableCommit{ID: id, Snapshot: base}
			st, err := x.store.Update(t.k, t.gen, func(s *watermark.State) error {
				s.Intent = &t.u
				return nil
			})
			if errors.Is(err, watermark.ErrStale) {
				// A rewind or an edit: decide again. Intents already written name this
				// commit id and are resolved (committed alone) first.
				stale = true
				break
			}
			if err != nil {
				release(units)
				res.err = err
				return res
			}
			t.gen = st.Generation
		}
		if stale {
			release(units)
			continue
		}
		for _, t := range units {
			if x.hooks.afterIntent != nil {
				x.hooks.afterIntent(t.k, t.u)
			}
		}
		r, err := l.Commit(ctx, lake.Commit{Dataset: dataset, ID: id, Base: base, Batches: batches(units)})
		release(units)
		if err != nil {
			err = fmt.Errorf("commit %s: %w", id, err)
			x.noteFailure(units, err)
			// The intents stay: the next tick finds out whether the commit landed.
			res.err = &errDestination{err}
			return res
		}
		log.Debug("committed", "commit_id", id, "snapshot", r.Snapshot, "units", len(units), "rows", r.Rows, "files", r.Files)
		res.bytes += r.Bytes
		if err := x.settleUnits(units, &res); err != nil {
			res.err = err
			return res
		}
	}
}

// noteFailure counts a failed table export and shows err as the last error of each unit's
// partition, whatever step it failed at.
func (x *instance) noteFailure(units []tableUnit, err error) {
	x.metrics.failures.WithLabelValues(x.name).Inc()
	msg := err.Error()
	for _, t := range units {
		_, _ = x.store.Update(t.k, t.gen, func(s *watermark.State) error {
			s.LastError = msg
			return nil
		})
	}
}

// resolveIntents finishes the table commits the partitions' intents name: committed ones
// move their watermarks, the others are committed now.
func (x *instance) resolveIntents(ctx context.Context, l *lake.Lake, dataset string, parts []partHead, res *partResult) error {
	groups := map[string][]tableUnit{}
	var ids []string
	for _, ph := range parts {
		k := watermark.Key{Instance: x.name, Dataset: ph.Part.Dataset, Partition: ph.Part.Partition}
		st, err := x.store.Get(k)
		if err != nil {
			return err
		}
		if st.Intent == nil {
			continue
		}
		if st.Intent.Commit == nil {
			// Not written by a table sink, so no table commit holds it: decide afresh.
			if _, err := x.store.Update(k, st.Generation, func(s *watermark.State) error {
				s.Intent = nil
				return nil
			}); err != nil && !errors.Is(err, watermark.ErrStale) {
				return err
			}
			continue
		}
		id := st.Intent.Commit.ID
		if groups[id] == nil {
			ids = append(ids, id)
		}
		groups[id] = append(groups[id], tableUnit{k: k, p: ph.Part, gen: st.Generation, u: *st.Intent})
	}
	slices.Sort(ids)
	for _, id := range ids {
		units := groups[id]
		base := units[0].u.Commit.Snapshot
		done, err := l.Committed(ctx, dataset, id, base)
		if err != nil {
			return &errDestination{err}
		}
		if !done {
			for i := range units {
				t := &units[i]
				if t.rows, err = x.read(ctx, t.p, t.u.From, t.u.Last, limits{rows: 1 << 62}, t.u.Transform); err != nil {
					release(units)
					return err
				}
			}
			bs := batches(units)
			if len(bs) > 0 {
				r, err := l.Commit(ctx, lake.Commit{Dataset: dataset, ID: id, Base: base, Batches: bs})
				if err != nil {
					release(units)
					err = fmt.Errorf("recover commit %s: %w", id, err)
					x.noteFailure(units, err)
					return &errDestination{err}
				}
				res.bytes += r.Bytes
				x.log.Info("recovered an interrupted table commit", "dataset", dataset, "commit_id", id, "already_committed", r.Already, "units", len(units))
			}
			release(units)
		} else {
			x.log.Info("an interrupted table commit had landed; moving its watermarks", "dataset", dataset, "commit_id", id, "units", len(units))
		}
		if err := x.settleUnits(units, res); err != nil {
			return err
		}
	}
	return nil
}

// nextUnits reads the next unit of every partition with rows above its watermark, moving
// past what needs no commit (rows gone from the cache, withheld sources) on the way.
func (x *instance) nextUnits(ctx context.Context, parts []partHead) ([]tableUnit, error) {
	var out []tableUnit
	for _, ph := range parts {
		k := watermark.Key{Instance: x.name, Dataset: ph.Part.Dataset, Partition: ph.Part.Partition}
		for {
			st, err := x.store.Get(k)
			if err != nil {
				release(out)
				return nil, err
			}
			if st.Intent != nil || st.Seq == ph.head {
				break // an intent appeared under us (rewind raced): the next round resolves it
			}
			var next func(*watermark.State) error
			var withheld int64 // rows next moves past for withhold_sources
			if st.Seq > ph.head {
				to, ok, err := x.clampAbove(ctx, k, ph.Part, st.Seq)
				if err != nil {
					release(out)
					return nil, err
				}
				if !ok {
					break
				}
				x.log.Warn("watermark is above the partition's head; clamped to the last row ingested before it was written", "dataset", ph.Part.Dataset, "partition", ph.Part.Partition, "watermark_seq", st.Seq, "clamped_to", to)
				next = func(s *watermark.State) error { s.Seq = to; return nil }
			} else {
				tf := x.live.Load().transform
				if x.withheld(ph.Part) {
					tf = "" // counted, never exported, so never shaped
				}
				rows, err := x.read(ctx, ph.Part, st.Seq, ph.head, x.lim, tf)
				if err != nil {
					release(out)
					return nil, err
				}
				switch {
				case rows.rows == 0:
					next = func(s *watermark.State) error { s.Seq = ph.head; return nil }
				case x.withheld(ph.Part):
					rows.release()
					withheld = rows.rows
					next = func(s *watermark.State) error { s.Seq, s.WithheldRows = rows.last, s.WithheldRows+withheld; return nil }
				default:
					u := x.decide(ph.Part, st.Seq, rows)
					u.KeyLayout = 0 // a table has no object keys
					out = append(out, tableUnit{k: k, p: ph.Part, gen: st.Generation, u: u, rows: rows})
				}
			}
			if next == nil {
				break
			}
			_, err = x.store.Update(k, st.Generation, next)
			switch {
			case err == nil && withheld > 0:
				// Counted once the write landed, as the unit exporters do.
				x.metrics.withheld.WithLabelValues(x.name, ph.Part.Dataset).Add(float64(withheld))
			case err != nil && !errors.Is(err, watermark.ErrStale):
				release(out)
				return nil, err
			}
		}
	}
	return out, nil
}

// settleUnits moves the watermarks past committed units. A watermark that moved meanwhile
// (a rewind) keeps its new position.
func (x *instance) settleUnits(units []tableUnit, res *partResult) error {
	now := x.now().UTC()
	for _, t := range units {
		if x.hooks.afterShip != nil {
			x.hooks.afterShip(t.k, t.u)
		}
	}
	for _, t := range units {
		settle := func(s *watermark.State) error {
			s.Seq, s.ExportedRows, s.Intent = t.u.Last, s.ExportedRows+t.exported(), nil
			s.FilteredRows += t.filtered()
			s.LastExportAt, s.LastError = &now, ""
			return nil
		}
		_, err := x.store.Update(t.k, t.gen, settle)
		for errors.Is(err, watermark.ErrStale) {
			// Something other than a rewind (retention's gap bookkeeping) may have written
			// the state and left the intent: it is still this commit's and must go now, since
			// the table's record of whether a commit landed (lake.PropLastCommit) holds only
			// while no intent outlives its commit.
			st, gerr := x.store.Get(t.k)
			if gerr != nil {
				return gerr
			}
			if st.Intent == nil || st.Intent.Commit == nil || *st.Intent.Commit != *t.u.Commit || st.Intent.Last != t.u.Last {
				break
			}
			_, err = x.store.Update(t.k, st.Generation, settle)
		}
		if errors.Is(err, watermark.ErrStale) {
			x.log.Info("watermark moved while a table commit was in flight; the new position wins", "dataset", t.p.Dataset, "partition", t.p.Partition, "unit_first", t.u.First, "unit_last", t.u.Last)
			continue
		}
		if err != nil {
			return err
		}
		if x.hooks.afterWatermark != nil {
			x.hooks.afterWatermark(t.k, t.u)
		}
		res.rows += t.exported()
		res.units++
		x.metrics.exported.WithLabelValues(x.name, t.p.Dataset).Add(float64(t.exported()))
		x.metrics.filtered.WithLabelValues(x.name).Add(float64(t.filtered()))
	}
	return nil
}

func lakeUnits(units []tableUnit) []lake.Unit {
	out := make([]lake.Unit, len(units))
	for i, t := range units {
		out[i] = lake.Unit{Dataset: t.p.Dataset, Partition: t.p.Partition, First: t.u.First, Last: t.u.Last, Rows: t.u.Rows}
	}
	return out
}

// batches are the units' rows for a commit; units whose rows are all gone (a forced prune
// since the intent), or whose transform kept none, have nothing to add.
func batches(units []tableUnit) []lake.Batch {
	var out []lake.Batch
	for _, t := range units {
		if t.rows == nil || t.rows.kept == 0 {
			continue
		}
		_, src, _ := partition.Parse(t.p.Partition)
		out = append(out, lake.Batch{Unit: lakeUnits([]tableUnit{t})[0], Source: src, Records: slices.Clone(t.rows.recs)})
	}
	return out
}

func release(units []tableUnit) {
	for _, t := range units {
		if t.rows != nil {
			t.rows.release()
		}
	}
}

// TableStatus is an iceberg sink's table: the last commit this machine made to it.
type TableStatus struct {
	Dataset      string     `json:"dataset"`
	Table        string     `json:"table"`
	LastCommitID string     `json:"last_commit_id"`
	LastCommitAt *time.Time `json:"last_commit_at"`
	Error        string     `json:"error,omitempty"`
}

// tableStatus reads the table of every dataset the sink covers; nil for other sinks.
func (x *instance) tableStatus(ctx context.Context, datasets []string) []TableStatus {
	if x.lake == nil {
		return nil
	}
	out := []TableStatus{}
	l, err := x.lake.open(ctx)
	for _, ds := range datasets {
		if !x.covers(ds) {
			continue
		}
		ts := TableStatus{Dataset: ds, Table: x.cfg.Namespace + "." + ds}
		if err != nil {
			ts.Error = err.Error()
		} else if id, at, ok, err := l.LastCommit(ctx, ds); err != nil {
			ts.Error = err.Error()
		} else if ok {
			ts.LastCommitID, ts.LastCommitAt = id, &at
		}
		out = append(out, ts)
	}
	return out
}

func datasetsOf(parts []cache.PartitionStatus) []string {
	var out []string
	for _, p := range parts {
		if !slices.Contains(out, p.Dataset) {
			out = append(out, p.Dataset)
		}
	}
	return out
}
