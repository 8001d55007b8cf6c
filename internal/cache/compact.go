package cache

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/table"

	"github.com/hyp-project/hyp/internal/fsutil"
)

const (
	// compactFiles: a partition with more small data files than this is due for compaction.
	compactFiles = 8
	// defaultSettledRows: a file this large is never rewritten again. Compaction hard-links it into
	// the new generation and rewrites only runs of adjacent smaller files, so its cost is
	// bounded by the small files (at most about settledRows rows per run), not by how many
	// rows the partition holds.
	defaultSettledRows = 1 << 20
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
	// BoundsFixed counts the files kept as they are whose entries got other bounds: ones
	// described before internal/bounds, whose bounds may leave out values of the file.
	BoundsFixed int
}

// Compact moves due partitions (all matching ones when force) into a new generation: a
// fresh table with few snapshots whose files are the old settled files, hard-linked, and
// runs of small files merged, in seq order, internal columns copied verbatim. match selects partitions by dataset and partition name; nil matches all.
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

func (p *Partition) compactionDue(settledRows int64) bool {
	g := p.gen
	small := 0
	for _, f := range g.files {
		if f.Rows < settledRows {
			small++
		}
	}
	return small > compactFiles || g.holdsDeadFiles()
}

// worthCompacting is false when a new generation would hold exactly what this one does: at
// most one live file and no dead file on disk. Even a forced compaction skips it, so that
// compacting many small partitions costs nothing for those already compact.
func (g *generation) worthCompacting() bool {
	return len(g.files) > 1 || g.holdsDeadFiles()
}

// holdsDeadFiles reports whether the generation's data directory keeps files that are no
// longer live: retention drops and rewrites files only in table metadata, and their disk
// space comes back when a compaction retires the generation (live files are only linked,
// so that costs little).
func (g *generation) holdsDeadFiles() bool {
	ents, err := os.ReadDir(tableDir(g.dir).data())
	if err != nil {
		return false
	}
	n := 0
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".parquet") {
			n++
		}
	}
	return n > len(g.files)
}

// compactionPlan splits a generation's files (in seq order) into groups that stay in seq
// order: a settled file or a lone small file alone (kept as it is), and each run of two or
// more adjacent small files (merged into one). Merging only adjacent files keeps files
// disjoint in seq, which scans rely on.
func compactionPlan(files []FileInfo, settledRows int64) [][]FileInfo {
	var out [][]FileInfo
	for i := 0; i < len(files); {
		j := i + 1
		if files[i].Rows < settledRows {
			for j < len(files) && files[j].Rows < settledRows {
				j++
			}
		}
		out = append(out, files[i:j])
		i = j
	}
	return out
}

// compactPartition rewrites p without holding its lock while the new generation is built,
// so flushes keep committing to p (and to every other partition) meanwhile. Order matters:
//  1. under p.mu, decide and take a snapshot of the current generation;
//  2. without it, build the new generation from the snapshot (the long part);
//  3. under p.mu again, carry what flushes committed since the snapshot (new columns, new
//     files) into it, check that it holds every row, and swap it in.
//
// Retention and repair take p.rewrite as compaction does, so the snapshot's rows cannot be
// deleted while it is copied; only appends can land in between, and step 3 carries them.
func (c *Cache) compactPartition(ctx context.Context, p *Partition, force bool) (CompactResult, error) {
	p.rewrite.Lock()
	defer p.rewrite.Unlock()
	p.mu.Lock()
	res := CompactResult{Dataset: p.Dataset, Partition: p.Name()}
	if p.gen == nil {
		p.mu.Unlock()
		res.Skipped = "empty"
		return res, nil
	}
	res.From, res.FilesBefore = p.gen.name, len(p.gen.files)
	if !p.gen.worthCompacting() {
		// Even then a forced compaction rewrites entries whose bounds are wrong: this
		// checks at most one file.
		wrong, err := 0, error(nil)
		if force {
			wrong, err = p.gen.wrongBounds(ctx)
		}
		if wrong == 0 {
			p.mu.Unlock()
			res.Skipped = "nothing to gain"
			if err != nil {
				res.Skipped += fmt.Sprintf(" (bounds not checked: %v)", err)
			}
			return res, nil
		}
	}
	if !force && !p.compactionDue(c.settledRows) {
		p.mu.Unlock()
		res.Skipped = "not due"
		return res, nil
	}
	snap := p.gen.snapshot()
	p.mu.Unlock()

	g, fixed, err := c.build(ctx, p, snap, c.settledRows)
	if c.built != nil {
		c.built()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		err = g.carry(ctx, snap, p.gen, c.link)
	}
	if err == nil && g.rows() != p.gen.rows() {
		err = fmt.Errorf("new generation has %d rows, old %d", g.rows(), p.gen.rows())
	}
	if err == nil {
		err = c.install(p, g)
	}
	if err != nil {
		c.discard(p, g)
		return res, fmt.Errorf("compact %s/%s: %w", p.Dataset, p.Name(), err)
	}
	res.To, res.FilesAfter, res.Rows, res.BoundsFixed = g.name, len(g.files), g.rows(), fixed
	return res, nil
}

// rebuild moves p (whose lock the caller holds throughout) into a new generation built
// from old, which is p's current generation or a view of it with fewer files (repair
// leaves out the ones it set aside).
func (c *Cache) rebuild(ctx context.Context, p *Partition, old *generation, settledRows int64) error {
	g, _, err := c.build(ctx, p, old, settledRows)
	if err == nil {
		err = c.install(p, g)
	}
	if err != nil {
		c.discard(p, g)
		return err
	}
	return nil
}

// build makes the next generation of p holding every row of old: files of settledRows rows
// or more, and lone smaller ones, hard-linked in as they are, runs of smaller files
// rewritten into one. It touches neither p.gen nor p.retired, and counts the linked files
// whose bounds it fixed (fill). On error the generation it returns (if any) is for discard.
func (c *Cache) build(ctx context.Context, p *Partition, old *generation, settledRows int64) (*generation, int, error) {
	n, _ := genNumber(old.name)
	// The new generation keeps the old one's stored names and field ids, so hard-linked
	// files mean the same in both.
	g, err := createGeneration(ctx, c.cat, c.tables.dir, c.tables.namespace(p), n+1, old.tbl.Schema(), old.marks, old.escaped)
	if err != nil {
		return nil, 0, err
	}
	fixed := 0
	if len(old.files) > 0 {
		var tx *table.Transaction
		tx, fixed, err = g.fill(ctx, old, settledRows, c.link)
		if err != nil {
			return g, 0, err
		}
		if err := g.commit(ctx, tx); err != nil {
			return g, 0, fmt.Errorf("commit: %w", err)
		}
		if err := g.reload(ctx); err != nil {
			return g, 0, err
		}
	}
	if got, want := g.rows(), old.rows(); got != want {
		return g, 0, fmt.Errorf("new generation has %d rows, old %d", got, want)
	}
	return g, fixed, nil
}

// install makes g p's current generation and retires the one it replaces; p.mu is held.
func (c *Cache) install(p *Partition, g *generation) error {
	if err := setCurrent(p.dir, g.name); err != nil {
		return err
	}
	p.retired = append(p.retired, p.gen)
	p.gen = g
	p.collect(c.tables.dir)
	return nil
}

// discard retires a generation that was never made current; p.mu is held.
func (c *Cache) discard(p *Partition, g *generation) {
	if g != nil {
		p.retired = append(p.retired, g)
		p.collect(c.tables.dir)
	}
}

// copyFile copies a data file durably, for filesystems without hard links.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(dst, b, 0o600)
}

// snapshot is a copy of g's state that later commits to g do not change.
func (g *generation) snapshot() *generation {
	s := *g
	s.files = slices.Clone(g.files)
	return &s
}

// carry adds to g, built from snap, what was committed to cur (the generation snap was taken
// of) since: the columns added, with the same field ids, and the files appended,
// hard-linked in, with cur's max seq, in one commit.
func (g *generation) carry(ctx context.Context, snap, cur *generation, link func(oldname, newname string) error) error {
	if had, has := snap.columns(), cur.columns(); len(has) > len(had) {
		if err := g.addColumns(ctx, has[len(had):]); err != nil {
			return err
		}
		if !maps.Equal(g.fieldIDs(), cur.fieldIDs()) {
			return fmt.Errorf("the columns added meanwhile got other field ids in the new generation")
		}
	}
	var snapMax int64
	for _, f := range snap.files {
		snapMax = max(snapMax, f.MaxSeq)
	}
	var added []string
	dataDir := tableDir(g.dir).data()
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	for _, f := range cur.files {
		if f.MinSeq <= snapMax {
			continue
		}
		dst := tableDir(g.dir).dataFileFrom(f.Path)
		if err := link(f.Path, dst); err != nil {
			if !linkUnsupported(err) {
				return fmt.Errorf("link %s into the new generation: %w", f.Path, err)
			}
			if err := copyFile(f.Path, dst); err != nil {
				return err
			}
		}
		added = append(added, fileURI(dst))
	}
	if len(added) == 0 && cur.maxSeq == g.maxSeq {
		return nil
	}
	if err := fsutil.SyncDir(dataDir); err != nil {
		return err
	}
	tx := g.tbl.NewTransaction()
	m := g.marks
	m.maxSeq = cur.maxSeq
	if err := tx.SetProperties(m.props()); err != nil {
		return err
	}
	if len(added) > 0 {
		if _, err := g.addFiles(ctx, tx, added); err != nil {
			return err
		}
	}
	if err := g.commit(ctx, tx); err != nil {
		return fmt.Errorf("commit what was flushed meanwhile: %w", err)
	}
	return g.reload(ctx)
}

// fill stages, in one transaction on the new generation g, every row of old: files kept
// as they are are hard-linked into g's data directory (the old generation's directory is
// removed later without touching them), runs of small files are rewritten into one file
// each, in seq order. Every linked file is described again from its footer; fill counts
// those whose bounds that changes.
func (g *generation) fill(ctx context.Context, old *generation, settledRows int64, link func(oldname, newname string) error) (*table.Transaction, int, error) {
	w, err := g.fileWriter(ctx)
	if err != nil {
		return nil, 0, err
	}
	was, err := old.entriesByName(ctx)
	if err != nil {
		return nil, 0, err
	}
	fixed := 0
	tx := g.tbl.NewTransaction()
	if err := tx.SetProperties(old.marks.props()); err != nil {
		return nil, 0, err
	}
	dataDir := tableDir(g.dir).data()
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, 0, err
	}
	var linked []string
	flushLinked := func() error {
		if len(linked) == 0 {
			return nil
		}
		dfs, err := g.addFiles(ctx, tx, linked)
		fixed += boundsChanged(was, dfs)
		linked = nil
		return err
	}
	for _, group := range compactionPlan(old.files, settledRows) {
		if len(group) == 1 {
			dst := tableDir(g.dir).dataFileFrom(group[0].Path)
			err := link(group[0].Path, dst)
			if err == nil {
				linked = append(linked, fileURI(dst))
				continue
			}
			// A filesystem without hard links still compacts, by copying the rows.
			if !linkUnsupported(err) {
				return nil, 0, fmt.Errorf("link %s into the new generation: %w", group[0].Path, err)
			}
		}
		// Files are registered in seq order, so links gathered so far go in first.
		if err := flushLinked(); err != nil {
			return nil, 0, err
		}
		rdr := newScanReader(ctx, group, old, w.sc)
		_, err := w.append(ctx, tx, rdr)
		rdr.Release()
		if err == nil {
			err = rdr.Err()
		}
		if err != nil {
			return nil, 0, err
		}
	}
	if err := flushLinked(); err != nil {
		return nil, 0, err
	}
	return tx, fixed, fsutil.SyncDir(dataDir)
}

// linkUnsupported reports whether a hard link failed because the filesystem has none.
func linkUnsupported(err error) bool {
	return errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOTSUP) || errors.Is(err, syscall.EXDEV) || errors.Is(err, syscall.EMLINK)
}

func (g *generation) rows() int64 {
	var n int64
	for _, f := range g.files {
		n += f.Rows
	}
	return n
}

// scanReader streams a generation's rows in seq order as an array.RecordReader, which is
// what the file writer consumes; a goroutine runs the scan and hands batches over.
type scanReader struct {
	schema *arrow.Schema
	ch     chan arrow.RecordBatch
	cur    arrow.RecordBatch
	err    error
	errc   chan error
	cancel context.CancelFunc
	refs   int64
}

// newScanReader reads files of generation old; sc is the new generation's schema, which has
// old's columns in the same order.
func newScanReader(ctx context.Context, files []FileInfo, old *generation, sc *arrow.Schema) *scanReader {
	ctx, cancel := context.WithCancel(ctx)
	r := &scanReader{schema: sc, ch: make(chan arrow.RecordBatch, 2), errc: make(chan error, 1), cancel: cancel, refs: 1}
	plain, ids, err := old.readSchema()
	go func() {
		defer close(r.ch)
		if err != nil {
			r.errc <- err
			return
		}
		var st ScanStats
		for _, f := range files {
			err := scanFile(ctx, f.Path, plain, ids, 0, 1<<62, &st, func(rec arrow.RecordBatch) error {
				// A batch of its own (scanFile releases rec once fn returns), in the new
				// generation's schema.
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
