package cache

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/hyp-project/hyp/internal/columns"
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
	// Ingest times are whole microseconds: a row stamped in T's microsecond but below T
	// is before T, so a T with a fraction of a microsecond rounds up.
	us := t.UnixMicro()
	if t.Sub(time.UnixMicro(us)) > 0 {
		us++
	}
	s, err := lastSeqBefore(ctx, ps.files, us)
	if err != nil {
		return 0, err
	}
	if ps.PrunedThrough > 0 && ps.PrunedAt.Before(t) {
		s = max(s, ps.PrunedThrough)
	}
	return s, nil
}

// rowsBetween counts rows with seq in (since, until]. Files and row groups wholly inside
// count from their bounds; only a boundary row group is read.
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
		err := withInternal(f.Path, func(fi *internalFile) error {
			for i, g := range fi.groups {
				switch {
				case g.known && (g.maxSeq <= since || g.minSeq > until):
				case g.known && g.minSeq > since && g.maxSeq <= until:
					n += g.rows
				default:
					if err := fi.read(ctx, i, func(seqs, _ []int64) {
						lo := sort.Search(len(seqs), func(i int) bool { return seqs[i] > since })
						hi := sort.Search(len(seqs), func(i int) bool { return seqs[i] > until })
						n += int64(hi - lo)
					}); err != nil {
						return err
					}
				}
			}
			return nil
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
	return searchFile(ctx, f.Path,
		func(g groupBounds) bool { return g.maxSeq > seq },
		func(seqs, _ []int64) int { return sort.Search(len(seqs), func(i int) bool { return seqs[i] > seq }) })
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
	return searchFile(ctx, f.Path,
		func(g groupBounds) bool { return g.maxSeq > cut },
		func(seqs, _ []int64) int {
			return sort.Search(len(seqs), func(i int) bool { return seqs[i] > cut }) - 1
		})
}

// lastSeqBefore returns the largest seq ingested before t (µs), 0 if none. Ingest times
// never decrease with seq, so whole files and row groups answer from their bounds and only
// the boundary row group is read.
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
		pos, ok, err := searchFile(ctx, f.Path,
			func(g groupBounds) bool { return g.maxAt >= t },
			func(_, times []int64) int {
				return sort.Search(len(times), func(i int) bool { return times[i] >= t }) - 1
			})
		if err != nil {
			return 0, err
		}
		if ok {
			last = pos.Seq
		}
		break
	}
	return last, nil
}

// searchFile finds one row of a file whose rows are in seq (and ingest-time) order: the
// first row group for which past is true is read, and pick returns the index of the row in
// it, where -1 means the row before it (the last row of the previous group).
func searchFile(ctx context.Context, path string, past func(groupBounds) bool, pick func(seqs, times []int64) int) (RowPos, bool, error) {
	var pos RowPos
	found := false
	err := withInternal(path, func(fi *internalFile) error {
		var prev *RowPos // the last row of the groups before
		for i, g := range fi.groups {
			var seqs, times []int64
			if !g.known {
				// No statistics: the group's values are its bounds.
				if err := fi.read(ctx, i, func(s, t []int64) { seqs, times = s, t }); err != nil {
					return err
				}
				if len(seqs) == 0 {
					continue
				}
				g = groupBounds{minSeq: seqs[0], maxSeq: seqs[len(seqs)-1], minAt: times[0], maxAt: times[len(times)-1], known: true}
			}
			if !past(g) {
				prev = &RowPos{Seq: g.maxSeq, IngestedAt: g.maxAt}
				continue
			}
			if seqs == nil {
				if err := fi.read(ctx, i, func(s, t []int64) { seqs, times = s, t }); err != nil {
					return err
				}
			}
			switch j := pick(seqs, times); {
			case j >= 0 && j < len(seqs):
				pos, found = RowPos{Seq: seqs[j], IngestedAt: times[j]}, true
			case j < 0 && prev != nil:
				pos, found = *prev, true
			}
			return nil
		}
		return nil
	})
	return pos, found, err
}

// groupBounds are a row group's row count and, when the footer has statistics, its seq and
// ingest-time bounds.
type groupBounds struct {
	rows           int64
	minSeq, maxSeq int64
	minAt, maxAt   int64
	known          bool
}

// internalFile is a data file opened for position questions: the footer's row-group
// bounds, and a reader of the two internal columns only.
type internalFile struct {
	pf     *file.Reader
	fr     *pqarrow.FileReader
	cols   []int
	groups []groupBounds
}

func withInternal(path string, fn func(*internalFile) error) error {
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return err
	}
	defer pf.Close()
	md := pf.MetaData()
	seqCol, atCol := md.Schema.ColumnIndexByName(columns.SeqColumn), md.Schema.ColumnIndexByName(columns.IngestedAtColumn)
	if seqCol < 0 || atCol < 0 {
		return fmt.Errorf("%s: no %s or %s column", path, columns.SeqColumn, columns.IngestedAtColumn)
	}
	fi := &internalFile{pf: pf, cols: []int{seqCol, atCol}}
	for i := 0; i < md.NumRowGroups(); i++ {
		rg := md.RowGroup(i)
		g := groupBounds{rows: rg.NumRows()}
		var okSeq, okAt bool
		g.minSeq, g.maxSeq, okSeq = rowGroupBounds(rg, seqCol)
		g.minAt, g.maxAt, okAt = rowGroupBounds(rg, atCol)
		g.known = okSeq && okAt
		fi.groups = append(fi.groups, g)
	}
	if fi.fr, err = pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: rowGroupRows, Parallel: false}, memory.DefaultAllocator); err != nil {
		return err
	}
	if err := fn(fi); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// read passes row group i's seqs and ingest times to fn, in one call.
func (fi *internalFile) read(ctx context.Context, i int, fn func(seqs, times []int64)) error {
	rr, err := fi.fr.GetRecordReader(ctx, fi.cols, []int{i})
	if err != nil {
		return err
	}
	defer rr.Release()
	var seqs, times []int64
	for rr.Next() {
		rec := rr.RecordBatch()
		sc, ok1 := rec.Column(0).(*array.Int64)
		tc, ok2 := rec.Column(1).(*array.Timestamp)
		if !ok1 || !ok2 {
			return fmt.Errorf("internal columns are %s and %s", rec.Column(0).DataType(), rec.Column(1).DataType())
		}
		seqs = append(seqs, sc.Int64Values()...)
		for _, v := range tc.TimestampValues() {
			times = append(times, int64(v))
		}
	}
	if err := rr.Err(); err != nil {
		return err
	}
	fn(seqs, times)
	return nil
}
