package cache

import (
	"context"
	"fmt"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

const (
	// compactFiles: a partition with more live data files than this is due for compaction.
	compactFiles = 8
	// compactSnapshots: metadata grows with every commit; a new generation starts it afresh.
	compactSnapshots = 200
)

// CompactResult reports one partition's compaction.
type CompactResult struct {
	Dataset     string
	Partition   string
	FilesBefore int
	FilesAfter  int
	Rows        int64
	From, To    string // generations
	Skipped     string // why nothing was done, if so
}

// Compact rewrites due partitions (all matching ones when force) into a new generation:
// one sorted run of files, internal columns copied verbatim, a fresh table with one
// snapshot. match selects partitions by dataset and partition name; nil matches all.
func (c *Cache) Compact(ctx context.Context, force bool, match func(dataset, partition string) bool) ([]CompactResult, error) {
	var out []CompactResult
	for _, p := range c.tables.partitions() {
		if match != nil && !match(p.Dataset, p.Name()) {
			continue
		}
		r, err := c.compactPartition(ctx, p, force)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

func (p *Partition) compactionDue() bool {
	g := p.gen
	return len(g.files) > compactFiles || len(g.tbl.Metadata().Snapshots()) > compactSnapshots
}

// compactPartition holds the partition lock for the whole rewrite, so no flush can commit
// into the generation being replaced; ingest is not blocked (it only writes the log).
func (c *Cache) compactPartition(ctx context.Context, p *Partition, force bool) (CompactResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	res := CompactResult{Dataset: p.Dataset, Partition: p.Name()}
	if p.gen == nil {
		res.Skipped = "empty"
		return res, nil
	}
	old := p.gen
	res.From, res.FilesBefore = old.name, len(old.files)
	if !force && !p.compactionDue() {
		res.Skipped = "not due"
		return res, nil
	}
	n, _ := genNumber(old.name)
	g, err := createGeneration(ctx, c.cat, c.tables.dir, c.tables.namespace(p), n+1, newTableSchema(old.columns()), old.maxSeq)
	if err != nil {
		return res, err
	}
	abandon := func(err error) (CompactResult, error) {
		p.retired = append(p.retired, g)
		p.collect()
		return res, err
	}
	if len(old.files) > 0 {
		sc, err := table.SchemaToArrowSchema(g.tbl.Schema(), nil, true, false)
		if err != nil {
			return abandon(err)
		}
		rdr := newScanReader(ctx, old, sc)
		tx := g.tbl.NewTransaction()
		err = tx.SetProperties(iceberg.Properties{propMaxSeq: strconv.FormatInt(old.maxSeq, 10)})
		if err == nil {
			err = tx.Append(ctx, rdr, nil)
		}
		rdr.Release()
		if err == nil {
			err = rdr.Err()
		}
		if err != nil {
			return abandon(fmt.Errorf("compact %s/%s: %w", p.Dataset, p.Name(), err))
		}
		tbl, err := tx.Commit(ctx)
		if err != nil {
			return abandon(fmt.Errorf("compact %s/%s: commit: %w", p.Dataset, p.Name(), err))
		}
		g.tbl = tbl
		if err := g.reload(ctx); err != nil {
			return abandon(err)
		}
	}
	if got, want := g.rows(), old.rows(); got != want {
		return abandon(fmt.Errorf("compact %s/%s: new generation has %d rows, old %d", p.Dataset, p.Name(), got, want))
	}
	if err := setCurrent(p.dir, g.name); err != nil {
		return abandon(err)
	}
	p.gen = g
	p.retired = append(p.retired, old)
	p.collect()
	res.To, res.FilesAfter, res.Rows = g.name, len(g.files), g.rows()
	return res, nil
}

func (g *generation) rows() int64 {
	var n int64
	for _, f := range g.files {
		n += f.Rows
	}
	return n
}

// scanReader streams a generation's rows in seq order as an array.RecordReader, which is
// what Iceberg's append consumes; a goroutine runs the scan and hands batches over.
type scanReader struct {
	schema *arrow.Schema
	ch     chan arrow.RecordBatch
	cur    arrow.RecordBatch
	err    error
	errc   chan error
	cancel context.CancelFunc
	refs   int64
}

func newScanReader(ctx context.Context, g *generation, sc *arrow.Schema) *scanReader {
	ctx, cancel := context.WithCancel(ctx)
	r := &scanReader{schema: sc, ch: make(chan arrow.RecordBatch, 2), errc: make(chan error, 1), cancel: cancel, refs: 1}
	plain, _ := table.SchemaToArrowSchema(g.tbl.Schema(), nil, false, false)
	go func() {
		defer close(r.ch)
		var st ScanStats
		for _, f := range g.files {
			err := scanFile(ctx, f.Path, plain, 0, 1<<62, &st, func(rec arrow.RecordBatch) error {
				// Re-badge the batch with the field-id schema the writer expects.
				out := array.NewRecordBatch(sc, rec.Columns(), rec.NumRows())
				select {
				case r.ch <- out:
					return nil
				case <-ctx.Done():
					out.Release()
					return ctx.Err()
				}
			})
			if err != nil {
				r.errc <- err
				return
			}
		}
	}()
	return r
}

func (r *scanReader) Schema() *arrow.Schema { return r.schema }
func (r *scanReader) Next() bool {
	if r.cur != nil {
		r.cur.Release()
		r.cur = nil
	}
	rec, ok := <-r.ch
	if !ok {
		select {
		case r.err = <-r.errc:
		default:
		}
		return false
	}
	r.cur = rec
	return true
}
func (r *scanReader) RecordBatch() arrow.RecordBatch { return r.cur }
func (r *scanReader) Record() arrow.RecordBatch      { return r.cur }
func (r *scanReader) Err() error                     { return r.err }
func (r *scanReader) Retain()                        { r.refs++ }
func (r *scanReader) Release() {
	r.refs--
	if r.refs > 0 {
		return
	}
	r.cancel()
	if r.cur != nil {
		r.cur.Release()
		r.cur = nil
	}
	for rec := range r.ch {
		rec.Release()
	}
}
