package cache

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Floor is how far a partition may be pruned on behalf of its consumers: rows with seq
// above Seq are still needed by the consumers named in Holders. Seq < 0 means no consumer
// holds anything back.
type Floor struct {
	Seq     int64
	Holders []string
}

// NoFloor holds nothing back.
var NoFloor = Floor{Seq: -1}

// PrunePolicy decides what a prune may delete. The cache applies it; it never invents one.
type PrunePolicy struct {
	// Retention returns how long rows of a dataset are kept by ingest time (0 = forever).
	Retention func(dataset string) time.Duration
	// HoldForSinks keeps rows above each partition's floor.
	HoldForSinks bool
	// MaxAge deletes rows older than this whatever the floor says (0 = never).
	MaxAge time.Duration
	// Floor returns the partition's floor.
	Floor  func(dataset, partition string) Floor
	DryRun bool
}

// PruneResult is one partition's prune.
type PruneResult struct {
	Dataset     string
	Partition   string
	ThroughSeq  int64 // rows with seq <= ThroughSeq are (or would be) deleted; 0 = none
	DeletedRows int64
	HeldRows    int64 // expired by age but kept for the holders
	HeldFor     []string
	// ForcedFrom..ForcedTo is the seq range deleted by MaxAge although a consumer had not
	// exported it yet; ForcedRows counts the rows in it.
	ForcedFrom, ForcedTo int64
	ForcedRows           int64
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
	p.mu.Lock()
	defer p.mu.Unlock()
	res := PruneResult{Dataset: p.Dataset, Partition: p.Name()}
	if p.gen == nil || len(p.gen.files) == 0 {
		return res, nil
	}
	g := p.gen
	var ageCut int64 // largest seq old enough to expire by retention
	if keep := pol.Retention(p.Dataset); keep > 0 {
		s, err := g.lastSeqBefore(ctx, now.Add(-keep).UnixMicro())
		if err != nil {
			return res, err
		}
		ageCut = s
	}
	cut := ageCut
	floor := NoFloor
	if pol.Floor != nil {
		floor = pol.Floor(p.Dataset, p.Name())
	}
	if pol.HoldForSinks && floor.Seq >= 0 && cut > floor.Seq {
		cut = floor.Seq
		res.HeldFor = floor.Holders
	}
	if pol.MaxAge > 0 {
		forced, err := g.lastSeqBefore(ctx, now.Add(-pol.MaxAge).UnixMicro())
		if err != nil {
			return res, err
		}
		cut = max(cut, forced)
	}
	var err error
	if res.DeletedRows, err = g.rowsThrough(ctx, cut); err != nil {
		return res, err
	}
	if ageCut > cut {
		all, err := g.rowsThrough(ctx, ageCut)
		if err != nil {
			return res, err
		}
		res.HeldRows = all - res.DeletedRows
	}
	// Whatever goes above the floor was never exported by some consumer: that exact range
	// is reported so it becomes a recorded gap, never a silent loss.
	if floor.Seq >= 0 && cut > floor.Seq {
		below, err := g.rowsThrough(ctx, floor.Seq)
		if err != nil {
			return res, err
		}
		if res.ForcedRows = res.DeletedRows - below; res.ForcedRows > 0 {
			res.ForcedFrom, res.ForcedTo = floor.Seq+1, cut
			res.HeldFor = floor.Holders
		}
	}
	if res.DeletedRows == 0 {
		return res, nil
	}
	res.ThroughSeq = cut
	if pol.DryRun {
		return res, nil
	}
	if err := g.deleteThrough(ctx, cut); err != nil {
		return res, err
	}
	return res, nil
}

// lastSeqBefore returns the largest seq ingested before t (µs), 0 if none. Ingest times
// never decrease with seq, so whole files answer from their bounds and only the boundary
// file is read, and only its two internal columns.
func (g *generation) lastSeqBefore(ctx context.Context, t int64) (int64, error) {
	var last int64
	for _, f := range g.files {
		if f.MaxIngestedAt < t {
			last = f.MaxSeq
			continue
		}
		if f.MinIngestedAt >= t {
			break
		}
		err := readInternal(ctx, f.Path, func(seqs, times []int64) bool {
			i := sort.Search(len(times), func(i int) bool { return times[i] >= t })
			if i > 0 {
				last = seqs[i-1]
			}
			return i == len(times)
		})
		if err != nil {
			return 0, err
		}
		break
	}
	return last, nil
}

// rowsThrough counts rows with seq <= cut.
func (g *generation) rowsThrough(ctx context.Context, cut int64) (int64, error) {
	var n int64
	for _, f := range g.files {
		if f.MaxSeq <= cut {
			n += f.Rows
			continue
		}
		if f.MinSeq > cut {
			break
		}
		err := readInternal(ctx, f.Path, func(seqs, _ []int64) bool {
			i := sort.Search(len(seqs), func(i int) bool { return seqs[i] > cut })
			n += int64(i)
			return i == len(seqs)
		})
		if err != nil {
			return 0, err
		}
		break
	}
	return n, nil
}

// readInternal feeds a file's seq and ingest-time columns to fn batch by batch until fn
// returns false.
func readInternal(ctx context.Context, path string, fn func(seqs, times []int64) bool) error {
	var st ScanStats
	sc := arrow.NewSchema([]arrow.Field{
		{Name: SeqColumn, Type: TypeLong.arrow()},
		{Name: IngestedAtColumn, Type: TypeTimestamp.arrow()},
	}, nil)
	stop := fmt.Errorf("stop")
	err := scanFile(ctx, path, sc, 0, 1<<62, &st, func(rec arrow.RecordBatch) error {
		seqs := rec.Column(0).(*array.Int64).Int64Values()
		ts := rec.Column(1).(*array.Timestamp).TimestampValues()
		times := make([]int64, len(ts))
		for i, v := range ts {
			times[i] = int64(v)
		}
		if !fn(seqs, times) {
			return stop
		}
		return nil
	})
	if err == stop {
		return nil
	}
	return err
}
