package cache

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/hyp-project/hyp/internal/fsutil"
	"github.com/hyp-project/hyp/internal/partition"
)

// Repaired is one live data file that could not be read, and what repair did with it.
type Repaired struct {
	Dataset   string `json:"dataset"`
	Partition string `json:"partition"`
	File      string `json:"file"`
	FromSeq   int64  `json:"from_seq"` // the seq range and rows the table says it held
	ToSeq     int64  `json:"to_seq"`
	Rows      int64  `json:"rows"`
	Reason    string `json:"reason"`
	KeptAt    string `json:"kept_at,omitempty"` // where the bytes are now; empty on a dry run
}

// Repair reads every live data file whole and sets aside the ones that cannot be read: it
// moves each under cache/_lost/ (kept, never deleted), records its seq range (from the
// table's own bounds) as a loss, and moves the partition into a new generation without it,
// so scans and queries work again. With dryRun it only reports. It costs a full read of
// the cache, which is why only an operator runs it.
func (c *Cache) Repair(ctx context.Context, dryRun bool) ([]Repaired, error) {
	var out []Repaired
	for _, p := range c.tables.partitions() {
		r, err := c.repairPartition(ctx, p, dryRun)
		out = append(out, r...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func (c *Cache) repairPartition(ctx context.Context, p *Partition, dryRun bool) ([]Repaired, error) {
	p.rewrite.Lock()
	defer p.rewrite.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gen == nil {
		return nil, nil
	}
	var bad []Repaired
	var good []FileInfo
	for _, f := range p.gen.files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := readWhole(ctx, f); err != nil {
			bad = append(bad, Repaired{Dataset: p.Dataset, Partition: p.Name(), File: f.Path, FromSeq: f.MinSeq, ToSeq: f.MaxSeq, Rows: f.Rows, Reason: err.Error()})
			continue
		}
		good = append(good, f)
	}
	if len(bad) == 0 || dryRun {
		return bad, nil
	}
	seg, err := partition.PathSegment(p.Name())
	if err != nil {
		return nil, err
	}
	keep := layout(c.dir).lostFiles(p.Dataset, seg)
	if err := fsutil.MkdirAllSync(keep); err != nil {
		return nil, fmt.Errorf("repair: %w", err)
	}
	lost := make([]Lost, len(bad))
	for i := range bad {
		b := &bad[i]
		dst := layout(c.dir).lostFile(p.Dataset, seg, p.gen.name, b.File)
		switch err := os.Rename(b.File, dst); {
		case err == nil:
			b.KeptAt = dst
		case !errors.Is(err, os.ErrNotExist):
			return nil, fmt.Errorf("repair: set aside %s: %w", b.File, err)
		}
		lost[i] = Lost{Dataset: b.Dataset, Partition: b.Partition, FromSeq: b.FromSeq, ToSeq: b.ToSeq, Rows: b.Rows,
			Reason: "unreadable data file: " + b.Reason, DetectedAt: c.now().UTC(), KeptAt: b.KeptAt}
	}
	if err := fsutil.SyncDir(keep); err != nil {
		return nil, fmt.Errorf("repair: %w", err)
	}
	// The losses are durable before the table forgets the files.
	if _, err := c.losses.add(lost); err != nil {
		return nil, err
	}
	view := *p.gen
	view.files = good
	if err := c.rebuild(ctx, p, &view, 0); err != nil {
		return nil, fmt.Errorf("repair %s/%s: %w", p.Dataset, p.Name(), err)
	}
	for _, b := range bad {
		c.log.Error("unreadable cache data file set aside; its rows are recorded as lost", "dataset", b.Dataset, "partition", b.Partition,
			"file", b.File, "kept_at", b.KeptAt, "from_seq", b.FromSeq, "to_seq", b.ToSeq, "rows", b.Rows, "reason", b.Reason)
	}
	return bad, nil
}

// readWhole decodes every row of a data file and checks the count against the table's.
func readWhole(ctx context.Context, f FileInfo) (err error) {
	defer recoverDamage(&err)
	pf, err := file.OpenParquetFile(f.Path, false)
	if err != nil {
		return err
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 64 << 10}, memory.DefaultAllocator)
	if err != nil {
		return err
	}
	rr, err := fr.GetRecordReader(ctx, nil, nil)
	if err != nil {
		return err
	}
	defer rr.Release()
	var n int64
	for rr.Next() {
		n += rr.RecordBatch().NumRows()
	}
	if err := rr.Err(); err != nil {
		return err
	}
	if n != f.Rows {
		return fmt.Errorf("holds %d rows, the table says %d", n, f.Rows)
	}
	return nil
}

// recoverDamage turns a panic of the Parquet decoder, which damaged bytes can cause, into
// the error of the one file being read: a damaged file must never take the process down.
func recoverDamage(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("the Parquet reader failed (damaged bytes?): %v", r)
	}
}
