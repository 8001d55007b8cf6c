package sink

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/lake"
	"github.com/hyp-project/hyp/internal/partition"
	"github.com/hyp-project/hyp/internal/query"
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

// QueryTables describes the tables of cfg's iceberg sink instance for `query sql --sink`,
// reading them as a stranger would (OpenLake); done removes the local copies of files an S3
// warehouse needed, once the query no longer reads them.
func QueryTables(ctx context.Context, cfg *config.Config, instance string) (tables []query.Table, done func(), err error) {
	l, err := OpenLake(ctx, cfg, instance)
	if err != nil {
		return nil, nil, err
	}
	defer l.Close()
	scratch, err := os.MkdirTemp("", "hyp-query-")
	if err != nil {
		return nil, nil, err
	}
	done = func() { os.RemoveAll(scratch) }
	tfs, err := l.Tables(ctx, scratch)
	if err != nil {
		done()
		return nil, nil, err
	}
	return query.FromLake(l.Namespace(), tfs), done, nil
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

// tableExporter commits units to an iceberg sink's tables.
type tableExporter struct{ *lakeSink }

// export commits every covered dataset's table in turn.
func (e *tableExporter) export(ctx context.Context, x *instance, all []partHead, res RunResult) RunResult {
	l, err := e.open(ctx)
	if err != nil {
		res.Status = "failed"
		res.Errors = append(res.Errors, err.Error())
		return res
	}
	parts := map[string][]partHead{}
	var datasets []string
	for _, ph := range all {
		if parts[ph.Dataset] == nil {
			datasets = append(datasets, ph.Dataset)
		}
		parts[ph.Dataset] = append(parts[ph.Dataset], ph)
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
	at   int64 // where the watermark stands while u is in flight
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
			_, landed, err := x.advance(t.k, moveIntent(t.u))
			if err != nil {
				release(units)
				res.err = err
				return res
			}
			if !landed {
				// A rewind or an edit: decide again. Intents already written name this
				// commit id and are resolved (committed alone) first.
				stale = true
				break
			}
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
	for _, t := range units {
		_, _, _ = x.advance(t.k, moveNote(err.Error()))
	}
}

// resolveIntents finishes the table commits the partitions' intents name: committed ones
// move their watermarks, the others are committed now.
func (x *instance) resolveIntents(ctx context.Context, l *lake.Lake, dataset string, parts []partHead, res *partResult) error {
	groups := map[string][]tableUnit{}
	var ids []string
	for _, ph := range parts {
		k := x.key(ph.Part)
		st, err := x.store.Get(k)
		if err != nil {
			return err
		}
		if st.Intent == nil {
			continue
		}
		if st.Intent.Commit == nil {
			// Not written by a table sink, so no table commit holds it: decide afresh.
			if _, _, err := x.advance(k, moveDrop(inFlight{st.Seq, *st.Intent})); err != nil {
				return err
			}
			continue
		}
		id := st.Intent.Commit.ID
		if groups[id] == nil {
			ids = append(ids, id)
		}
		groups[id] = append(groups[id], tableUnit{k: k, p: ph.Part, at: st.Seq, u: *st.Intent})
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
// past what needs no commit (nextUnit) on the way.
func (x *instance) nextUnits(ctx context.Context, parts []partHead) ([]tableUnit, error) {
	var out []tableUnit
	for _, ph := range parts {
		read := func(since, until int64, withheld bool) (*unitRows, error) {
			tf := x.live.Load().transform
			if withheld {
				tf = "" // counted, never exported, so never shaped
			}
			return x.read(ctx, ph.Part, since, until, x.lim, tf)
		}
		pd, err := x.nextUnit(ctx, ph.Part, ph.head, read)
		if err != nil {
			release(out)
			return nil, err
		}
		if pd.idle || pd.replay {
			continue // an intent appeared under us (a rewind raced): the next round resolves it
		}
		pd.u.KeyLayout = 0 // a table has no object keys
		out = append(out, tableUnit{k: x.key(ph.Part), p: ph.Part, at: pd.at, u: pd.u, rows: pd.rows})
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
		_, landed, err := x.advance(t.k, moveSettle(inFlight{t.at, t.u}, t.exported(), t.filtered(), now, nil))
		if err != nil {
			return err
		}
		if !landed {
			x.log.Info("watermark moved while a table commit was in flight; the new position wins", "dataset", t.p.Dataset, "partition", t.p.Partition, "unit_first", t.u.First, "unit_last", t.u.Last)
			continue
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
	table := x.table()
	if table == nil {
		return nil
	}
	out := []TableStatus{}
	l, err := table.open(ctx)
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
