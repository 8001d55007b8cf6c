package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/partition"
	"github.com/hyp-project/hyp/internal/watermark"
)

// ErrBadRewind marks a rewind the request itself makes impossible (no target, a dataset
// the sink does not export, a partition the cache does not hold): a usage error.
var ErrBadRewind = errors.New("bad rewind")

// ErrRewindGap marks a rewind refused because rows it would re-export are no longer
// cached; AllowGap overrides it.
var ErrRewindGap = errors.New("rewind target is below the oldest cached row")

// Target is where a rewind moves watermarks (SPEC 7). Exactly one field is set.
type Target struct {
	Seq      *int64     `json:"seq,omitempty"`
	Time     *time.Time `json:"time,omitempty"` // the largest seq ingested before it
	Earliest bool       `json:"earliest,omitempty"`
	Latest   bool       `json:"latest,omitempty"`
}

func (t Target) String() string {
	switch {
	case t.Seq != nil:
		return fmt.Sprintf("seq %d", *t.Seq)
	case t.Time != nil:
		return "time " + t.Time.UTC().Format(time.RFC3339Nano)
	case t.Earliest:
		return "earliest"
	case t.Latest:
		return "latest"
	}
	return "none"
}

func (t Target) check() error {
	n := 0
	for _, set := range []bool{t.Seq != nil, t.Time != nil, t.Earliest, t.Latest} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("%w: give exactly one of --to-seq, --to-time, --by-duration, --to-earliest, --to-latest", ErrBadRewind)
	}
	if t.Seq != nil && *t.Seq < 0 {
		return fmt.Errorf("%w: --to-seq %d is negative", ErrBadRewind, *t.Seq)
	}
	return nil
}

// RewindRequest moves one instance's watermarks on the matching partitions.
type RewindRequest struct {
	Instance  string `json:"instance"`
	Dataset   string `json:"dataset,omitempty"`
	Partition string `json:"partition,omitempty"` // a partition name, or a bare source
	Target    Target `json:"target"`
	DryRun    bool   `json:"dry_run"`
	AllowGap  bool   `json:"allow_gap"`
	By        string `json:"by"` // who asked, for the log and the watermark file
}

// RewindChange is one partition's move (SPEC 7 `sink rewind --json`).
type RewindChange struct {
	Dataset   string `json:"dataset"`
	Partition string `json:"partition"`
	FromSeq   int64  `json:"from_seq"`
	ToSeq     int64  `json:"to_seq"`
	// RowsToExport counts the cached rows in (to, from] the sink exports again; RowsToSkip
	// the cached rows in (from, to] it will not export when the move goes forward.
	RowsToExport int64 `json:"rows_to_export"`
	RowsToSkip   int64 `json:"rows_to_skip"`
	// Missing is the seq range the move asks for that retention already removed.
	Missing *SeqRange `json:"missing,omitempty"`
	// Withheld warns that withhold_sources still match: the rows will be skipped again.
	Withheld bool `json:"withheld,omitempty"`
	// RowsKept, in a dry run of a sink with a transform, counts the rows of RowsToExport its
	// transform would keep.
	RowsKept *int64 `json:"rows_kept,omitempty"`
}

// SeqRange is First..Last inclusive.
type SeqRange struct {
	First int64 `json:"first_seq"`
	Last  int64 `json:"last_seq"`
}

// RewindResult is what a rewind did, or would do.
type RewindResult struct {
	Instance string         `json:"instance"`
	DryRun   bool           `json:"dry_run"`
	Changes  []RewindChange `json:"changes"`
}

// Rewind moves the watermarks of req.Instance. Every matching partition is planned first;
// if any would need rows retention removed, nothing changes unless AllowGap. Each move is
// a compare-and-set on the watermark's generation that clears the intent, so an export in
// flight finds its own next write stale and continues from the new position: it can never
// overwrite the rewind. The caller serialises rewinds with retention.
func (d *Driver) Rewind(ctx context.Context, req RewindRequest) (RewindResult, error) {
	res := RewindResult{Instance: req.Instance, DryRun: req.DryRun, Changes: []RewindChange{}}
	if req.Instance == "" {
		return res, fmt.Errorf("%w: name the sink instance", ErrBadRewind)
	}
	sel, err := d.selectInstances(req.Instance)
	if err != nil {
		return res, err
	}
	x := sel[0]
	if err := req.Target.check(); err != nil {
		return res, err
	}
	parts, err := d.rewindParts(x, req)
	if err != nil {
		return res, err
	}
	var missing []string
	gens := make([]int64, len(parts)) // the generation each plan was made from
	for i, p := range parts {
		st, err := d.store.Get(watermark.Key{Instance: x.name, Dataset: p.Dataset, Partition: p.Partition})
		if err != nil {
			return res, err
		}
		ch, err := d.planRewind(ctx, x, p, st.Seq, req.Target)
		if err != nil {
			return res, err
		}
		if ch.Missing != nil {
			missing = append(missing, fmt.Sprintf("%s %s: seq %d..%d", p.Dataset, p.Partition, ch.Missing.First, ch.Missing.Last))
		}
		res.Changes = append(res.Changes, ch)
		gens[i] = st.Generation
	}
	if len(missing) > 0 && !req.AllowGap {
		return res, fmt.Errorf("%w: rows it would re-export were removed by retention (%s); nothing changed; pass --allow-gap to move anyway", ErrRewindGap, strings.Join(missing, "; "))
	}
	if req.DryRun {
		return res, d.countKept(ctx, x, parts, res.Changes)
	}
	for i, p := range parts {
		ch, err := d.applyRewind(ctx, x, p, req, res.Changes[i], gens[i])
		if err != nil {
			return res, fmt.Errorf("rewind %s %s: %w (partitions before it were moved)", p.Dataset, p.Partition, err)
		}
		res.Changes[i] = ch
	}
	return res, nil
}

// countKept fills in, for a sink with a transform, how many of each change's rows to export
// the transform keeps now: it shapes them unit by unit, as an export would, and holds none.
func (d *Driver) countKept(ctx context.Context, x *instance, parts []Part, changes []RewindChange) error {
	tf := x.live.Load().transform
	if tf == "" {
		return nil
	}
	for i, p := range parts {
		ch := &changes[i]
		if ch.Withheld || ch.RowsToExport == 0 {
			continue
		}
		var kept int64
		err := x.cutUnits(ctx, p, ch.ToSeq, ch.FromSeq, x.lim, tf, nil, func(u *unitRows) error {
			kept += u.kept
			u.release()
			return nil
		})
		if err != nil {
			return fmt.Errorf("transform %s %s: %w", p.Dataset, p.Partition, err)
		}
		ch.RowsKept = &kept
	}
	return nil
}

// rewindParts are the partitions a request names, in cache order.
func (d *Driver) rewindParts(x *instance, req RewindRequest) ([]Part, error) {
	if req.Dataset != "" && !x.covers(req.Dataset) {
		return nil, fmt.Errorf("%w: sink %s does not export dataset %q (it exports %s)", ErrBadRewind, x.name, req.Dataset, strings.Join(x.live.Load().datasets, ", "))
	}
	// A bare value is a source; a full name starts with source= or gateway=. A source may
	// itself contain '=' ("a=b" is the source "a=b").
	want := req.Partition
	if want != "" && !strings.HasPrefix(want, "source=") && !strings.HasPrefix(want, "gateway=") {
		want = partition.Name(want)
	}
	if want != "" {
		if _, _, err := partition.Parse(want); err != nil {
			return nil, fmt.Errorf("%w: --partition %q: %v", ErrBadRewind, req.Partition, err)
		}
	}
	var parts []Part
	datasets := map[string]bool{}
	for _, cp := range d.cache.Status() {
		datasets[cp.Dataset] = true
		if !x.covers(cp.Dataset) || (req.Dataset != "" && cp.Dataset != req.Dataset) || (want != "" && cp.Partition != want) {
			continue
		}
		parts = append(parts, Part{Dataset: cp.Dataset, Partition: cp.Partition})
	}
	switch {
	case req.Dataset != "" && !datasets[req.Dataset]:
		return nil, fmt.Errorf("%w: the cache has no dataset %q", ErrBadRewind, req.Dataset)
	case want != "" && len(parts) == 0:
		return nil, fmt.Errorf("%w: the cache has no partition %q exported by sink %s", ErrBadRewind, want, x.name)
	}
	return parts, nil
}

// planRewind computes the move of one partition from its watermark from.
func (d *Driver) planRewind(ctx context.Context, x *instance, p Part, from int64, t Target) (RewindChange, error) {
	ch := RewindChange{Dataset: p.Dataset, Partition: p.Partition, FromSeq: from, Withheld: x.withheld(p)}
	pos, err := d.cache.Positions(p.Dataset, p.Partition)
	if err != nil {
		return ch, err
	}
	defer pos.Release()
	switch {
	case t.Seq != nil:
		ch.ToSeq = min(*t.Seq, pos.Head) // above the head there is nothing to skip
	case t.Time != nil:
		if ch.ToSeq, err = pos.SeqBefore(ctx, *t.Time); err != nil {
			return ch, err
		}
	case t.Earliest:
		ch.ToSeq = pos.PrunedThrough
	case t.Latest:
		ch.ToSeq = pos.Head
	}
	switch {
	case ch.ToSeq < from:
		if ch.RowsToExport, err = pos.Rows(ctx, ch.ToSeq, from); err != nil {
			return ch, err
		}
		if gone := min(from, pos.PrunedThrough); ch.ToSeq < gone {
			ch.Missing = &SeqRange{First: ch.ToSeq + 1, Last: gone}
		}
	case ch.ToSeq > from:
		if ch.RowsToSkip, err = pos.Rows(ctx, from, ch.ToSeq); err != nil {
			return ch, err
		}
	}
	return ch, nil
}

// applyRewind moves the watermark as planned in ch (made at generation gen) with a
// compare-and-set; whenever an export moved it in between, it plans again from the new
// state.
func (d *Driver) applyRewind(ctx context.Context, x *instance, p Part, req RewindRequest, ch RewindChange, gen int64) (RewindChange, error) {
	k := watermark.Key{Instance: x.name, Dataset: p.Dataset, Partition: p.Partition}
	for {
		rw := watermark.Rewind{At: d.now().UTC(), By: req.By, Target: req.Target.String(), From: ch.FromSeq, To: ch.ToSeq}
		_, err := d.store.Update(k, gen, func(s *watermark.State) error {
			s.Seq, s.Intent, s.Next, s.LastRewind = ch.ToSeq, nil, nil, &rw
			return nil
		})
		if errors.Is(err, watermark.ErrStale) {
			if err := ctx.Err(); err != nil {
				return ch, err
			}
			st, err := d.store.Get(k)
			if err != nil {
				return ch, err
			}
			if ch, err = d.planRewind(ctx, x, p, st.Seq, req.Target); err != nil {
				return ch, err
			}
			gen = st.Generation
			continue
		}
		if err != nil {
			return ch, err
		}
		x.log.Info("sink watermark rewound", "dataset", p.Dataset, "partition", p.Partition, "from_seq", ch.FromSeq, "to_seq", ch.ToSeq, "target", rw.Target, "by", req.By, "rows_to_export", ch.RowsToExport, "rows_to_skip", ch.RowsToSkip)
		return ch, nil
	}
}

// RecordLosses writes, before retention deletes a partition's rows, the rows each consumer
// will lose as pending gaps (the delete happens only once this returns nil). A pending gap
// of an earlier attempt that the new loss overlaps is replaced by it: its rows are still
// there, and the new loss counts them again. SettleGaps makes them final.
func (d *Driver) RecordLosses(dataset, part string, ls []cache.Loss, reason string) error {
	var errs []error
	for _, l := range ls {
		g := watermark.Gap{From: l.First, To: l.Last, Rows: l.Rows, Reason: reason, At: d.now().UTC(), Pending: true}
		errs = append(errs, d.updateGaps(watermark.Key{Instance: l.Consumer, Dataset: dataset, Partition: part}, func(gaps []watermark.Gap) []watermark.Gap {
			gaps = slices.DeleteFunc(gaps, func(p watermark.Gap) bool { return p.Pending && g.From <= p.To })
			return append(gaps, g)
		}))
	}
	if d.afterLossIntent != nil {
		d.afterLossIntent()
	}
	return errors.Join(errs...)
}

// SettleGaps resolves the pending gaps of a partition against what retention deleted:
// every row at or below prunedThrough is gone, so a pending gap there is final (and
// logged); one above it was never deleted and is dropped. It runs after each delete and,
// for a delete a crash may have cut short, when the node starts.
func (d *Driver) SettleGaps(dataset, part string, prunedThrough int64) error {
	if d.beforeSettle != nil {
		d.beforeSettle()
	}
	var errs []error
	for _, x := range d.insts {
		if !x.covers(dataset) {
			continue
		}
		k := watermark.Key{Instance: x.name, Dataset: dataset, Partition: part}
		st, err := d.store.Get(k)
		if err != nil || !slices.ContainsFunc(st.Gaps, func(g watermark.Gap) bool { return g.Pending }) {
			continue // unreadable state is reported by status; nothing pending is nothing to do
		}
		errs = append(errs, d.updateGaps(k, func(gaps []watermark.Gap) []watermark.Gap {
			out := gaps[:0]
			for _, g := range gaps {
				switch {
				case !g.Pending:
				case g.To <= prunedThrough:
					g.Pending = false
					d.log.Warn("retention deleted rows a sink had not exported; recorded as a gap", "sink", x.name, "dataset", dataset, "partition", part, "from_seq", g.From, "to_seq", g.To, "rows", g.Rows, "reason", g.Reason)
				default:
					d.log.Info("retention did not delete the rows of a pending gap; dropped", "sink", x.name, "dataset", dataset, "partition", part, "from_seq", g.From, "to_seq", g.To)
					continue
				}
				out = append(out, g)
			}
			return out
		}))
	}
	return errors.Join(errs...)
}

// updateGaps rewrites the gaps of one watermark file, retrying a write that a concurrent
// export or rewind made stale.
func (d *Driver) updateGaps(k watermark.Key, fn func([]watermark.Gap) []watermark.Gap) error {
	for {
		st, err := d.store.Get(k)
		if err != nil {
			return err
		}
		_, err = d.store.Update(k, st.Generation, func(s *watermark.State) error {
			s.Gaps = fn(s.Gaps)
			return nil
		})
		if !errors.Is(err, watermark.ErrStale) {
			return err
		}
	}
}
