package cache

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// RowPos is one row's place: its seq and ingest time (µs).
type RowPos struct {
	Seq        int64
	IngestedAt int64
}

// Time is the row's ingest time.
func (r RowPos) Time() time.Time { return time.UnixMicro(r.IngestedAt).UTC() }

// Positions is a consistent read-only view of one partition's seqs and ingest times, for
// questions about where a consumer stands: how many rows lie above it, how old the first
// of them is, which seq a wall-clock instant maps to, and what retention already removed.
// Its files stay readable until Release, whatever compaction does meanwhile. Answers read
// at most the boundary row groups' two internal columns, never whole partitions.
type Positions struct {
	Dataset   string
	Partition string
	// Head is the highest seq ever committed to the partition.
	Head int64
	// PrunedThrough is the highest seq retention ever deleted (0 = none) and PrunedAt that
	// row's ingest time: no row at or below it is cached any more.
	PrunedThrough int64
	PrunedAt      time.Time
	files         []FileInfo
	release       func()
}

// Positions pins one partition for position questions.
func (c *Cache) Positions(dataset, partitionName string) (*Positions, error) {
	p := c.tables.lookup(dataset, partitionName)
	if p == nil {
		return nil, fmt.Errorf("%w: %s/%s", ErrNoPartition, dataset, partitionName)
	}
	for range 3 {
		v, err := p.pin(0, 1<<62)
		if errors.Is(err, ErrGenerationGone) {
			continue
		}
		if err != nil {
			return nil, err
		}
		ps := &Positions{Dataset: dataset, Partition: partitionName, Head: v.head, PrunedThrough: v.marks.prunedThrough, files: v.files, release: func() {}}
		if v.marks.prunedThrough > 0 {
			ps.PrunedAt = time.UnixMicro(v.marks.prunedAt).UTC()
		}
		if v.lock != nil {
			ps.release = v.release
		}
		return ps, nil
	}
	return nil, ErrGenerationGone
}

// Release lets compaction remove the pinned files.
func (ps *Positions) Release() { ps.release() }

// Rows counts the cached rows with seq in (since, until].
func (ps *Positions) Rows(ctx context.Context, since, until int64) (int64, error) {
	return rowsBetween(ctx, ps.files, since, until)
}

// FirstAfter is the first cached row with seq above seq; false if there is none.
func (ps *Positions) FirstAfter(ctx context.Context, seq int64) (RowPos, bool, error) {
	return firstAfter(ctx, ps.files, seq)
}

// SeqBefore is the largest seq ingested before t. When retention removed rows ingested at
// or after t, the answer is not known any more: it is then at most the largest cached or
// pruned seq before t that is known, which lies below PrunedThrough, so a caller comparing
// it with PrunedThrough sees the missing range.
func (ps *Positions) SeqBefore(ctx context.Context, t time.Time) (int64, error) {
	s, err := lastSeqBefore(ctx, ps.files, t.UnixMicro())
	if err != nil {
		return 0, err
	}
	if ps.PrunedThrough > 0 && ps.PrunedAt.Before(t) {
		s = max(s, ps.PrunedThrough)
	}
	return s, nil
}

// rowsBetween counts rows with seq in (since, until]. Files wholly inside count from their
// bounds; a boundary file is read only in its overlapping row groups.
func rowsBetween(ctx context.Context, files []FileInfo, since, until int64) (int64, error) {
	var n int64
	if since >= until {
		return 0, nil
	}
	for _, f := range files {
		switch {
		case f.MaxSeq <= since:
			continue
		case f.MinSeq > until:
			return n, nil
		case f.MinSeq > since && f.MaxSeq <= until:
			n += f.Rows
			continue
		}
		err := readInternal(ctx, f.Path, since, until, func(seqs, _ []int64) bool {
			n += int64(len(seqs))
			return true
		})
		if err != nil {
			return 0, err
		}
	}
	return n, nil
}

// firstAfter is the first row with seq above seq.
func firstAfter(ctx context.Context, files []FileInfo, seq int64) (RowPos, bool, error) {
	i := sort.Search(len(files), func(i int) bool { return files[i].MaxSeq > seq })
	if i == len(files) {
		return RowPos{}, false, nil
	}
	f := files[i]
	if f.MinSeq > seq {
		return RowPos{Seq: f.MinSeq, IngestedAt: f.MinIngestedAt}, true, nil
	}
	var pos RowPos
	found := false
	err := readInternal(ctx, f.Path, seq, 1<<62, func(seqs, times []int64) bool {
		pos, found = RowPos{Seq: seqs[0], IngestedAt: times[0]}, true
		return false
	})
	return pos, found, err
}

// lastThrough is the last row with seq at or below cut.
func lastThrough(ctx context.Context, files []FileInfo, cut int64) (RowPos, bool, error) {
	i := sort.Search(len(files), func(i int) bool { return files[i].MinSeq > cut }) - 1
	if i < 0 {
		return RowPos{}, false, nil
	}
	f := files[i]
	if f.MaxSeq <= cut {
		return RowPos{Seq: f.MaxSeq, IngestedAt: f.MaxIngestedAt}, true, nil
	}
	var pos RowPos
	found := false
	err := readInternal(ctx, f.Path, 0, cut, func(seqs, times []int64) bool {
		pos, found = RowPos{Seq: seqs[len(seqs)-1], IngestedAt: times[len(times)-1]}, true
		return true
	})
	return pos, found, err
}

// lastSeqBefore returns the largest seq ingested before t (µs), 0 if none. Ingest times
// never decrease with seq, so whole files answer from their bounds and only the boundary
// file is read, and only its two internal columns.
func lastSeqBefore(ctx context.Context, files []FileInfo, t int64) (int64, error) {
	var last int64
	for _, f := range files {
		if f.MaxIngestedAt < t {
			last = f.MaxSeq
			continue
		}
		if f.MinIngestedAt >= t {
			break
		}
		err := readInternal(ctx, f.Path, 0, 1<<62, func(seqs, times []int64) bool {
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

// internalSchema is the projection position questions read.
var internalSchema = arrow.NewSchema([]arrow.Field{
	{Name: SeqColumn, Type: TypeLong.arrow()},
	{Name: IngestedAtColumn, Type: TypeTimestamp.arrow()},
}, nil)

var errStopRead = errors.New("stop")

// readInternal feeds the seq and ingest-time columns of a file's rows with seq in
// (since, until] to fn, batch by batch, in seq order, until fn returns false. Batches are
// never empty.
func readInternal(ctx context.Context, path string, since, until int64, fn func(seqs, times []int64) bool) error {
	var st ScanStats
	err := scanFile(ctx, path, internalSchema, since, until, &st, func(rec arrow.RecordBatch) error {
		seqs := rec.Column(0).(*array.Int64).Int64Values()
		ts := rec.Column(1).(*array.Timestamp).TimestampValues()
		times := make([]int64, len(ts))
		for i, v := range ts {
			times[i] = int64(v)
		}
		if !fn(seqs, times) {
			return errStopRead
		}
		return nil
	})
	if errors.Is(err, errStopRead) {
		return nil
	}
	return err
}
