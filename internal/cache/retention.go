package cache

import (
	"context"
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
	// Consumers returns the partition's consumers and their positions.
	Consumers func(dataset, partition string) []Consumer
	// Record is given a partition's losses before its rows are deleted (an intent); the
	// delete happens only when it returns nil, so no row is deleted that no loss names.
	Record func(dataset, partition string, losses []Loss) error
	// Settle is told, after the delete, through which seq the partition is now pruned:
	// recorded losses at or below it happened, any above it did not.
	Settle func(dataset, partition string, prunedThrough int64) error
	DryRun bool
}

// Loss is the exact range of rows a prune deleted (or would delete) before one consumer
// read them: seqs First..Last inclusive, Rows rows. Only MaxAge causes one.
type Loss struct {
	Consumer string
	First    int64
	Last     int64
	Rows     int64
}

// PruneResult is one partition's prune.
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

// Prune deletes expired rows from the front of every partition: whole files are dropped,
// the boundary file is rewritten.
func (c *Cache) Prune(ctx context.Context, pol PrunePolicy) ([]PruneResult, error) {
	now := c.now()
	var out []PruneResult
	for _, p := range c.tables.partitions() {
		r, err := c.prunePartition(ctx, p, pol, now)
		if err != nil {
			return out, err
		}
		if r.ThroughSeq > 0 || r.HeldRows > 0 {
			out = append(out, r)
		}
	}
	return out, nil
}

func (c *Cache) prunePartition(ctx context.Context, p *Partition, pol PrunePolicy, now time.Time) (PruneResult, error) {
	// Lock order: p.rewrite, then p.mu. The rewrite lock is held throughout and keeps
	// compaction and repair out, so p.gen stays g and only appends can land meanwhile: the
	// files of g that hold rows at or below any cut stay as they are. The partition lock is
	// held only to take g's file list and to commit the delete (deleteOutsideLock), never
	// while the policy's callbacks run: they are the sinks' code, making fsync'd watermark
	// writes, and a slow disk under sinks/ must not stall this partition's flush.
	p.rewrite.Lock()
	defer p.rewrite.Unlock()
	res := PruneResult{Dataset: p.Dataset, Partition: p.Name()}
	p.mu.Lock()
	g := p.gen
	var files []FileInfo
	if g != nil {
		files = slices.Clone(g.files) // appends grow g.files, and reload reuses its array
	}
	p.mu.Unlock()
	if len(files) == 0 {
		return res, nil
	}
	var ageCut int64 // largest seq old enough to expire by retention
	if keep := pol.Retention(p.Dataset); keep > 0 {
		s, err := lastSeqBefore(ctx, files, now.Add(-keep).UnixMicro())
		if err != nil {
			return res, err
		}
		ageCut = s
	}
	cut := ageCut
	var consumers []Consumer
	if pol.Consumers != nil {
		consumers = pol.Consumers(p.Dataset, p.Name())
	}
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
		forced, err := lastSeqBefore(ctx, files, now.Add(-pol.MaxAge).UnixMicro())
		if err != nil {
			return res, err
		}
		cut = max(cut, forced)
	}
	var err error
	if res.DeletedRows, err = rowsBetween(ctx, files, 0, cut); err != nil {
		return res, err
	}
	if ageCut > cut {
		all, err := rowsBetween(ctx, files, 0, ageCut)
		if err != nil {
			return res, err
		}
		res.HeldRows = all - res.DeletedRows
	}
	if res.HeldRows == 0 {
		res.HeldFor = nil // max_age overrode the holders
	}
	if res.DeletedRows == 0 {
		return res, nil
	}
	// The last deleted row bounds every loss and becomes the pruned mark.
	last, ok, err := lastThrough(ctx, files, cut)
	if err != nil || !ok {
		return res, err
	}
	// Whatever goes above a consumer's position was never read by it: that exact range is
	// reported so it becomes a recorded gap, never a silent loss.
	if floor.Seq >= 0 && cut > floor.Seq {
		if res.ForcedRows, err = rowsBetween(ctx, files, floor.Seq, cut); err != nil {
			return res, err
		}
		for _, c := range consumers {
			l, err := loss(ctx, files, c, cut, last)
			if err != nil {
				return res, err
			}
			if l.Rows > 0 {
				res.Losses = append(res.Losses, l)
			}
		}
	}
	res.ThroughSeq = cut
	if pol.DryRun {
		return res, nil
	}
	// Order matters: the losses are durable before the delete, and settled after it. A
	// crash in between leaves them pending, and they are settled against the pruned mark
	// the table then holds (PrunedThrough), so every lost row is in exactly one loss.
	if len(res.Losses) > 0 && pol.Record != nil {
		if err := pol.Record(p.Dataset, p.Name(), res.Losses); err != nil {
			return PruneResult{Dataset: p.Dataset, Partition: p.Name()}, fmt.Errorf("prune %s/%s: record losses before deleting: %w", p.Dataset, p.Name(), err)
		}
	}
	p.mu.Lock()
	err = c.deleteOutsideLock(ctx, p, g, cut, last.IngestedAt)
	prunedThrough := g.prunedThrough
	p.mu.Unlock()
	if err != nil {
		// Whether the delete committed is unknown: the pending losses stay for the next
		// prune, or the next start, to settle against the table.
		return res, err
	}
	if len(res.Losses) > 0 && pol.Settle != nil {
		return res, pol.Settle(p.Dataset, p.Name(), prunedThrough)
	}
	return res, nil
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

// loss is what deleting every row of files up to cut, the last of which is last, takes
// from c.
func loss(ctx context.Context, files []FileInfo, c Consumer, cut int64, last RowPos) (Loss, error) {
	l := Loss{Consumer: c.Name}
	if c.Seq >= cut {
		return l, nil
	}
	n, err := rowsBetween(ctx, files, c.Seq, cut)
	if err != nil || n == 0 {
		return l, err
	}
	first, _, err := firstAfter(ctx, files, c.Seq)
	if err != nil {
		return l, err
	}
	l.First, l.Last, l.Rows = first.Seq, last.Seq, n
	return l, nil
}
