package cache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go/table"
)

// flushLimits bound what a flush holds in memory (defaultFlushLimits; tests lower them).
type flushLimits struct {
	// chunkRows and chunkBytes bound what one partition holds as Arrow builders: a batch
	// that reaches either is handed to its partition's stream as one record and its builders
	// start empty again. Records are smaller than a row group: the data file's writer
	// gathers them into row groups of rowGroupRows.
	chunkRows, chunkBytes int
	// chunkCells bounds rows × columns of a batch: every column of a batch is padded with
	// nulls to its rows, so a sparse dataset of many columns costs that, whatever the bytes.
	chunkCells int
	// budget bounds the log bytes all of a flush's batches hold together. Beyond it the
	// largest batches are streamed; when they cannot be (no stream could be opened) every
	// batch and stream of the round is committed.
	budget int
	// streams bounds the partitions streaming at once: each holds an open data file, a
	// goroutine and a buffered row group.
	streams int
	// commits bounds the partitions a round commits at once (flushRound.commit); each
	// encodes its batch's data file, so this also bounds that encoding's memory.
	commits int
}

// full reports whether b holds a chunk: its rows are to become a record.
func (l flushLimits) full(b *batch) bool {
	return b.rows >= l.chunkRows || b.bytes >= l.chunkBytes || b.rows*len(b.cols) >= l.chunkCells
}

var defaultFlushLimits = flushLimits{chunkRows: rowGroupRows / 4, chunkBytes: 2 << 20, chunkCells: 1 << 22, budget: 32 << 20, streams: 64, commits: 8}

// flushRound collects the rows a flush reads from the log, per partition, and commits them.
// It keeps memory bounded whatever the size of the log being flushed: a partition whose
// batch fills a chunk gets a stream, which encodes each chunk into the partition's new data
// file as it comes, so the flush holds at most a chunk of Arrow data per partition (plus the
// budget across the partitions that never filled one).
//
// Each partition's rows reach its table in seq order, and a round commits each partition
// once (a stream whose table needs new columns commits early, before they are added). The
// order of commits across partitions is free: every partition's table has its own max seq.
type flushRound struct {
	c       *Cache
	ctx     context.Context
	batches map[*Partition]*batch
	streams map[*Partition]*stream
	failed  map[*Partition]bool // partitions given up on for the rest of the segment
	order   []*Partition        // partitions with a batch (every stream has one), first seen first
	held    int                 // log bytes of the rows in batches, not yet streamed
	errs    []error
}

func newFlushRound(ctx context.Context, c *Cache) *flushRound {
	return &flushRound{c: c, ctx: ctx, batches: map[*Partition]*batch{}, streams: map[*Partition]*stream{}, failed: map[*Partition]bool{}}
}

// batch is p's batch, made on first use.
func (r *flushRound) batch(p *Partition, ds *dataset) *batch {
	b := r.batches[p]
	if b == nil {
		b = newBatch(ds)
		b.spare = p.spare
		r.batches[p] = b
		r.order = append(r.order, p)
	}
	return b
}

// added accounts for a row of n bytes just added to p's batch b, streaming or committing
// as the bounds require.
func (r *flushRound) added(p *Partition, b *batch, n int) {
	b.bytes += n
	r.held += n
	lim := r.c.limits
	if lim.full(b) {
		r.spill(p, b)
	}
	if r.held <= lim.budget {
		return
	}
	// Largest first, so a few streams relieve the most.
	for r.held > lim.budget/2 {
		var big *Partition
		for q, qb := range r.batches {
			if qb.rows > 0 && (big == nil || qb.bytes > r.batches[big].bytes) {
				big = q
			}
		}
		if big == nil || !r.spill(big, r.batches[big]) {
			r.commit()
			return
		}
	}
}

// spill hands b's rows to p's stream, opening one if it can; false when p has no stream
// and cannot get one now (its rows then stay in b).
func (r *flushRound) spill(p *Partition, b *batch) bool {
	if b.rows == 0 {
		return true
	}
	s := r.streams[p]
	if s == nil {
		if len(r.streams) >= r.c.limits.streams || !p.rewrite.TryLock() {
			// Compaction or retention holds the partition: a stream would hold its table's
			// base from under them, so the rows wait in the batch for the round's commit.
			return false
		}
		var err error
		if s, err = r.c.openStream(r.ctx, p, b); err != nil {
			p.rewrite.Unlock()
			r.fail(p, b, err)
			return true
		}
		r.streams[p] = s
	} else if cols := b.newColumns(s.gen.columns()); len(cols) > 0 {
		// A stream's schema is fixed when it opens: commit what it wrote, then evolve.
		err := s.finish(r.ctx)
		delete(r.streams, p)
		if err != nil {
			p.rewrite.Unlock()
			r.fail(p, b, err)
			return true
		}
		if s, err = r.c.openStream(r.ctx, p, b); err != nil {
			p.rewrite.Unlock()
			r.fail(p, b, err)
			return true
		}
		r.streams[p] = s
	}
	if err := s.push(b); err != nil {
		r.fail(p, b, err)
		return true
	}
	r.held -= b.bytes
	b.reset()
	return true
}

// fail gives up on p for the rest of the segment: its stream is stopped, its batch dropped,
// and the flush skips its later rows, because committing those would raise its max seq past
// the dropped ones and the segment's replay would skip them. The segment stays pending.
func (r *flushRound) fail(p *Partition, b *batch, err error) {
	r.errs = append(r.errs, err)
	r.failed[p] = true
	if s := r.streams[p]; s != nil {
		s.abort()
		delete(r.streams, p)
		p.rewrite.Unlock()
	}
	if b != nil {
		r.held -= b.bytes
		b.reset()
	}
}

// commit commits every partition of the round and starts a new round. Partitions commit
// in parallel, up to limits.commits at once: each holds only its own locks, and what a
// commit mostly waits for is its files' fsyncs and its table's metadata writes, so a round
// of thousands of new partitions (each a table to create) is not that many waits in a row.
func (r *flushRound) commit() {
	// Rows left in a streaming partition's batch go to its stream first: spill changes the
	// round's maps, so it runs here, before the commits.
	for _, p := range r.order {
		if b := r.batches[p]; r.streams[p] != nil && b.rows > 0 {
			r.spill(p, b) // on failure it ends the stream
		}
	}
	errs := make([]error, len(r.order))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(r.c.limits.commits, len(r.order)) {
		wg.Go(func() {
			for i := range work {
				errs[i] = r.commitPartition(r.order[i])
			}
		})
	}
	for i := range r.order {
		work <- i
	}
	close(work)
	wg.Wait()
	for i, p := range r.order {
		if errs[i] != nil {
			r.errs = append(r.errs, errs[i])
			r.failed[p] = true
		}
	}
	clear(r.batches)
	clear(r.streams)
	r.order, r.held = r.order[:0], 0
}

// commitPartition commits p's stream or batch and releases the batch. It reads the round's
// maps but changes nothing in them, so commits of different partitions can run at once.
func (r *flushRound) commitPartition(p *Partition) error {
	b := r.batches[p]
	defer b.release()
	if s := r.streams[p]; s != nil {
		defer p.rewrite.Unlock()
		return s.finish(r.ctx)
	}
	if b.rows > 0 {
		return r.c.commit(r.ctx, p, b)
	}
	return nil
}

// abort ends the round without committing anything after a read error.
func (r *flushRound) abort() {
	for p, s := range r.streams {
		s.abort()
		p.rewrite.Unlock()
	}
	for _, b := range r.batches {
		b.release()
	}
	clear(r.batches)
	clear(r.streams)
	r.order, r.held = r.order[:0], 0
}

func (r *flushRound) err() error { return errors.Join(r.errs...) }

// stream is one partition's append in progress: a transaction whose data file the cache's
// writer (datafile.go) writes, in its own goroutine, from the records pushed into ch. Its owner holds the
// partition's rewrite lock from open to finish or abort, so nothing but this append changes
// the table meanwhile and the transaction's base stays current; the partition lock is taken
// only to open and to commit, so readers never wait for the rows being encoded.
type stream struct {
	p      *Partition
	gen    *generation
	tx     *table.Transaction
	sc     *arrow.Schema
	ch     chan chunkRecord
	done   chan error
	maxSeq int64
	added  []FileInfo // the files the append added; set before done is sent
	ended  bool       // done has been received into err
	err    error      // the append's result, once ended
}

// openStream starts p's stream with b's columns in its table, creating the table or
// adding columns first.
func (c *Cache) openStream(ctx context.Context, p *Partition, b *batch) (*stream, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := c.prepare(ctx, p, b); err != nil {
		return nil, err
	}
	return startStream(ctx, p, p.gen)
}

func startStream(ctx context.Context, p *Partition, g *generation) (*stream, error) {
	w, err := g.fileWriter(ctx)
	if err != nil {
		return nil, fmt.Errorf("table %v: %w", g.ident, err)
	}
	s := &stream{p: p, gen: g, tx: g.tbl.NewTransaction(), sc: w.sc, ch: make(chan chunkRecord, 1), done: make(chan error, 1), maxSeq: g.maxSeq}
	rdr := &chanReader{sc: w.sc, ch: s.ch}
	rdr.refs.Store(1)
	go func() {
		var err error
		s.added, err = w.append(ctx, s.tx, rdr)
		s.done <- err
	}()
	return s, nil
}

// push sends b's rows, which must have only columns the stream's table has, to the stream.
func (s *stream) push(b *batch) error {
	rec, back, err := b.recordHanding(s.sc, s.gen.logical)
	if err != nil {
		return fmt.Errorf("partition %s/%s: %w", s.p.Dataset, s.p.Name(), err)
	}
	select {
	case s.ch <- chunkRecord{rec, back}:
	case err := <-s.done:
		// The append gave up; it reads no more.
		rec.Release()
		s.ended, s.err = true, err
		return fmt.Errorf("table %v: append: %w", s.gen.ident, err)
	}
	s.maxSeq = b.maxSeq
	return nil
}

// finish waits for the data file and commits it with the stream's max seq.
func (s *stream) finish(ctx context.Context) error {
	if err := s.end(); err != nil {
		return fmt.Errorf("table %v: append: %w", s.gen.ident, err)
	}
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	return s.gen.commitAppend(ctx, s.tx, s.added, s.maxSeq)
}

// abort stops the stream without committing. A data file it completed stays unreferenced;
// its rows are still in the log (the segment stays pending), and at a restart the recovery
// of unreferenced files (recover.go) adds it back only if no replay stored those seqs first.
func (s *stream) abort() { s.end() }

// end closes the stream's input and waits for its append to return.
func (s *stream) end() error {
	close(s.ch)
	if !s.ended {
		s.ended, s.err = true, <-s.done
	}
	for cr := range s.ch {
		cr.rec.Release() // pushed after the append had stopped reading
	}
	return s.err
}

// chunkRecord is a chunk of a stream: its record, and the string buffers the record wraps
// that go back to their columns once the data file has the rows.
type chunkRecord struct {
	rec  arrow.RecordBatch
	back []handback
}

// chanReader is the array.RecordReader a stream's append reads: the records pushed into ch,
// in order, until ch is closed. It owns each record it yields until the next Next; by then
// the data file's writer, which copies what it keeps, is done with it, so the record's
// string buffers go back to the batch (recycle).
type chanReader struct {
	refs atomic.Int64
	sc   *arrow.Schema
	ch   <-chan chunkRecord
	cur  chunkRecord
}

func (r *chanReader) Retain() { r.refs.Add(1) }

func (r *chanReader) Release() {
	if r.refs.Add(-1) == 0 {
		r.drop()
	}
}

func (r *chanReader) drop() {
	if r.cur.rec != nil {
		r.cur.rec.Release()
		recycle(r.cur.back)
		r.cur = chunkRecord{}
	}
}

func (r *chanReader) Schema() *arrow.Schema { return r.sc }

func (r *chanReader) Next() bool {
	r.drop()
	cr, ok := <-r.ch
	r.cur = cr
	return ok
}

func (r *chanReader) RecordBatch() arrow.RecordBatch { return r.cur.rec }

// Record is RecordBatch under its deprecated name, which the interface still requires.
func (r *chanReader) Record() arrow.RecordBatch { return r.cur.rec }

func (r *chanReader) Err() error { return nil }
