package cache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Consumer is a reader of a partition that retention waits for: every row with seq above
// Seq is still to be read by it (a sink and its watermark).
type Consumer struct {
	Name string
	Seq  int64
}

// Floor is how far a partition may be pruned on behalf of its consumers: rows with seq
// above Seq are still needed by the consumers named in Holders. Seq < 0 means no consumer
// holds anything back.
type Floor struct {
	Seq     int64
	Holders []string
}

// NoFloor holds nothing back.
var NoFloor = Floor{Seq: -1}

// LowestOf is the floor the consumers set together: the lowest position, and who is there.
func LowestOf(cs []Consumer) Floor {
	f := NoFloor
	for _, c := range cs {
		switch {
		case f.Seq < 0 || c.Seq < f.Seq:
			f = Floor{Seq: c.Seq, Holders: []string{c.Name}}
		case c.Seq == f.Seq:
			f.Holders = append(f.Holders, c.Name)
		}
	}
	return f
}

// PrunePolicy decides what a prune may delete. The cache applies it; it never invents one.
type PrunePolicy struct {
	// Retention returns how long rows of a dataset are kept by ingest time (0 = forever).
	Retention func(dataset string) time.Duration
	// HoldForSinks keeps rows above the lowest consumer position of each partition.
	HoldForSinks bool
	// MaxAge deletes rows older than this whatever the consumers say (0 = never).
	MaxAge time.Duration
	// Now is the instant ages are measured from; zero is now by the cache's clock. A pass
	// over every partition passes one (Cache.Now), so all are cut as of the same instant.
	Now time.Time
}

// Loss is the exact range of rows a prune deleted (or would delete) before one consumer
// read them: seqs First..Last inclusive, Rows rows. Only MaxAge causes one.
type Loss struct {
	Consumer string
	First    int64
	Last     int64
	Rows     int64
}

// PruneResult is one partition's prune, or its plan.
type PruneResult struct {
	Dataset     string
	Partition   string
	ThroughSeq  int64 // rows with seq <= ThroughSeq are (or would be) deleted; 0 = none
	DeletedRows int64
	HeldRows    int64    // expired by age but kept for the holders
	HeldFor     []string // consumers whose position kept expired rows
	// ForcedRows counts deleted rows some consumer had not read; Losses says, per consumer,
	// exactly which.
	ForcedRows int64
	Losses     []Loss
}

// ErrLossesNotRecorded is Delete refusing a plan whose losses its caller has not said are
// recorded: deleting then would lose rows no loss names.
var ErrLossesNotRecorded = errors.New("prune: the plan's losses are not recorded")

// Now is the cache's clock, which stamps ingest times and measures retention.
func (c *Cache) Now() time.Time { return c.now() }

// Pruning is the retention of one partition, in steps its caller drives: Plan, then, once
// the plan's losses are durable where their consumers will find them, Recorded and Delete;
// Close always. The steps are apart so the cache never runs its callers' code: what
// records losses (the sinks' watermarks, fsync'd) is the caller's, and runs between them.
//
// From StartPrune to Close the pruning holds the partition's rewrite lock, so compaction
// and repair cannot replace the generation a plan was made from and the files holding rows
// at or below its cut stay as they are; only appends land meanwhile, above any cut. It
// holds the partition lock only inside Delete (to commit) and StartPrune (to take the file
// list), so a caller that is slow between the steps delays this partition's compaction and
// repair, never its flushes. A Pruning is for one goroutine.
type Pruning struct {
	Dataset   string
	Partition string

	c     *Cache
	p     *Partition
	g     *generation // p.gen at StartPrune; stays current until Close
	files []FileInfo  // g's files at StartPrune

	planned  bool
	res      PruneResult
	cutAt    int64 // ingest time of the last row at or below res.ThroughSeq
	recorded bool  // the caller recorded res.Losses
	deleted  bool
	closed   bool
}

// StartPrune begins pruning a partition: it waits for a compaction or repair of it to end,
// and keeps them out until Close.
func (c *Cache) StartPrune(dataset, partitionName string) (*Pruning, error) {
	p := c.tables.lookup(dataset, partitionName)
	if p == nil {
		return nil, fmt.Errorf("%w: %s/%s", ErrNoPartition, dataset, partitionName)
	}
	// Lock order: p.rewrite, then p.mu.
	p.rewrite.Lock()
	pr := &Pruning{Dataset: dataset, Partition: partitionName, c: c, p: p}
	p.mu.Lock()
	pr.g = p.gen
	if pr.g != nil {
		pr.files = slices.Clone(pr.g.files) // appends grow g.files, and reload reuses its array
	}
	p.mu.Unlock()
	return pr, nil
}

// Empty says the partition held no rows at StartPrune: there is nothing to plan, and no
// consumer need be asked where it stands.
func (pr *Pruning) Empty() bool { return len(pr.files) == 0 }

// Plan decides the cut from pol and the consumers' positions (as they stand now) and says
// what deleting through it takes: the rows, those held back for consumers, and each
// consumer's loss, which must be recorded before Delete. It deletes nothing; planning
// again replaces the plan.
func (pr *Pruning) Plan(ctx context.Context, pol PrunePolicy, consumers []Consumer) (PruneResult, error) {
	if pr.closed || pr.deleted {
		return PruneResult{}, fmt.Errorf("prune %s/%s: plan after the pruning ended", pr.Dataset, pr.Partition)
	}
	if pr.Empty() {
		pr.planned, pr.res, pr.recorded = true, PruneResult{Dataset: pr.Dataset, Partition: pr.Partition}, false
		return pr.res, nil
	}
	now := pol.Now
	if now.IsZero() {
		now = pr.c.now()
	}
	res, last, err := plan(ctx, fileIndex(pr.files), pr.Dataset, pol, consumers, now)
	res.Dataset, res.Partition = pr.Dataset, pr.Partition
	pr.planned, pr.res, pr.cutAt, pr.recorded = err == nil, res, last.IngestedAt, false
	return res, err
}

// Recorded is the caller's word, which the cache cannot check, that the plan's losses are
// durable with their consumers: a crash after it and before Delete commits leaves them
// pending, to be settled against the pruned mark the table then holds (Status
// PrunedThrough), so every lost row is in exactly one loss.
func (pr *Pruning) Recorded() { pr.recorded = pr.planned }

// Delete deletes the plan's rows and returns through which seq the partition is now
// pruned, against which recorded losses settle: those at or below it happened, any above
// it did not. It refuses without a plan, and with losses not Recorded. On an error whether
// the delete committed is unknown; recorded losses stay for the next prune, or the next
// start, to settle against the table.
func (pr *Pruning) Delete(ctx context.Context) (prunedThrough int64, err error) {
	switch {
	case pr.closed || pr.deleted:
		return 0, fmt.Errorf("prune %s/%s: delete after the pruning ended", pr.Dataset, pr.Partition)
	case !pr.planned:
		return 0, fmt.Errorf("prune %s/%s: delete without a plan", pr.Dataset, pr.Partition)
	case len(pr.res.Losses) > 0 && !pr.recorded:
		return 0, fmt.Errorf("%w: %s/%s", ErrLossesNotRecorded, pr.Dataset, pr.Partition)
	}
	pr.deleted = true
	p, g := pr.p, pr.g
	p.mu.Lock()
	defer p.mu.Unlock()
	if pr.res.ThroughSeq == 0 {
		if g == nil {
			return 0, nil
		}
		return g.prunedThrough, nil
	}
	err = pr.c.deleteOutsideLock(ctx, p, g, pr.res.ThroughSeq, pr.cutAt)
	return g.prunedThrough, err
}

// Close ends the pruning, deleted or not, and lets compaction and repair of the partition
// go on.
func (pr *Pruning) Close() {
	if !pr.closed {
		pr.closed = true
		pr.p.rewrite.Unlock()
	}
}

// rowIndex answers a plan's questions about one partition's rows, which are in seq and
// ingest-time order. fileIndex reads the data files; tests give rows directly.
type rowIndex interface {
	// lastSeqBefore is the largest seq ingested before t (µs), 0 if none.
	lastSeqBefore(ctx context.Context, t int64) (int64, error)
	// rowsBetween counts rows with seq in (since, until].
	rowsBetween(ctx context.Context, since, until int64) (int64, error)
	// firstAfter is the first row with seq above seq.
	firstAfter(ctx context.Context, seq int64) (RowPos, bool, error)
	// lastThrough is the last row with seq at or below cut.
	lastThrough(ctx context.Context, cut int64) (RowPos, bool, error)
}

type fileIndex []FileInfo

func (f fileIndex) lastSeqBefore(ctx context.Context, t int64) (int64, error) {
	return lastSeqBefore(ctx, f, t)
}
func (f fileIndex) rowsBetween(ctx context.Context, since, until int64) (int64, error) {
	return rowsBetween(ctx, f, since, until)
}
func (f fileIndex) firstAfter(ctx context.Context, seq int64) (RowPos, bool, error) {
	return firstAfter(ctx, f, seq)
}
func (f fileIndex) lastThrough(ctx context.Context, cut int64) (RowPos, bool, error) {
	return lastThrough(ctx, f, cut)
}

// plan is retention's decision for one partition of dataset, whose rows rows holds, as of
// now: the cut and what it deletes, holds back and takes from each consumer (res), and the
// last row it deletes (last), whose ingest time becomes the pruned mark's.
func plan(ctx context.Context, rows rowIndex, dataset string, pol PrunePolicy, consumers []Consumer, now time.Time) (res PruneResult, last RowPos, err error) {
	var ageCut int64 // largest seq old enough to expire by retention
	if keep := pol.Retention(dataset); keep > 0 {
		if ageCut, err = rows.lastSeqBefore(ctx, now.Add(-keep).UnixMicro()); err != nil {
			return res, last, err
		}
	}
	cut := ageCut
	floor := LowestOf(consumers)
	if pol.HoldForSinks && floor.Seq >= 0 && cut > floor.Seq {
		cut = floor.Seq
		for _, c := range consumers {
			if c.Seq < ageCut {
				res.HeldFor = append(res.HeldFor, c.Name)
			}
		}
		slices.Sort(res.HeldFor)
	}
	if pol.MaxAge > 0 {
		forced, err := rows.lastSeqBefore(ctx, now.Add(-pol.MaxAge).UnixMicro())
		if err != nil {
			return res, last, err
		}
		cut = max(cut, forced)
	}
	if res.DeletedRows, err = rows.rowsBetween(ctx, 0, cut); err != nil {
		return res, last, err
	}
	if ageCut > cut {
		all, err := rows.rowsBetween(ctx, 0, ageCut)
		if err != nil {
			return res, last, err
		}
		res.HeldRows = all - res.DeletedRows
	}
	if res.HeldRows == 0 {
		res.HeldFor = nil // max_age overrode the holders
	}
	if res.DeletedRows == 0 {
		return res, last, nil
	}
	// The last deleted row bounds every loss and becomes the pruned mark.
	last, ok, err := rows.lastThrough(ctx, cut)
	if err != nil || !ok {
		return res, last, err
	}
	// Whatever goes above a consumer's position was never read by it: that exact range is
	// reported so it becomes a recorded gap, never a silent loss.
	if floor.Seq >= 0 && cut > floor.Seq {
		if res.ForcedRows, err = rows.rowsBetween(ctx, floor.Seq, cut); err != nil {
			return res, last, err
		}
		for _, c := range consumers {
			l, err := loss(ctx, rows, c, cut, last)
			if err != nil {
				return res, last, err
			}
			if l.Rows > 0 {
				res.Losses = append(res.Losses, l)
			}
		}
	}
	res.ThroughSeq = cut
	return res, last, nil
}

// deleteOutsideLock deletes the rows of g (p's generation) with seq <= cut. The caller holds
// p.mu and p.rewrite and still holds both when it returns. The delete's files are written
// with p.mu released, so flushes of p and every other partition go on meanwhile; p.mu is
// retaken to commit, and when an append landed in between (the table moved on) the delete is
// planned again from the new table under the lock.
func (c *Cache) deleteOutsideLock(ctx context.Context, p *Partition, g *generation, cut, cutAt int64) error {
	base := g.tbl
	p.mu.Unlock()
	tx, err := g.planDelete(ctx, base, cut)
	if c.planned != nil {
		c.planned()
	}
	p.mu.Lock()
	if err != nil {
		return err
	}
	if g.tbl != base {
		// The first plan's files stay unreferenced in the generation's directory until
		// compaction retires it; their rows overlap the table's, so the open-time recovery
		// of unreferenced files never adds them back.
		if tx, err = g.planDelete(ctx, g.tbl, cut); err != nil {
			return err
		}
	}
	return g.commitDelete(ctx, tx, cut, cutAt)
}

// loss is what deleting every row of rows up to cut, the last of which is last, takes
// from c.
func loss(ctx context.Context, rows rowIndex, c Consumer, cut int64, last RowPos) (Loss, error) {
	l := Loss{Consumer: c.Name}
	if c.Seq >= cut {
		return l, nil
	}
	n, err := rows.rowsBetween(ctx, c.Seq, cut)
	if err != nil || n == 0 {
		return l, err
	}
	first, _, err := rows.firstAfter(ctx, c.Seq)
	if err != nil {
		return l, err
	}
	l.First, l.Last, l.Rows = first.Seq, last.Seq, n
	return l, nil
}
