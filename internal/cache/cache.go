// Package cache owns hyp's durable local cache: the write-ahead log that makes an ingest
// request durable before it is acknowledged, the cache-global ingest sequence, and one Apache
// Iceberg table per (dataset, source) partition that the log is flushed into. It also owns
// every rewrite of those tables (compaction, retention, repair, relocation of a moved
// home), the incremental scan that sinks read through, the listing queries read (the
// tables' files, and the rows the log holds that they do not yet, encoded for the query
// alone: unflushed.go), and the record of what it could not keep (cache/_lost: the bytes
// and losses.jsonl). Every name it gives a file or directory under its root is joined in
// layout.go, except those of the hadoop catalog's files in a generation (catalogfiles.go)
// and the log's segments (internal/wal).
//
// Invariants it keeps:
//   - seqs are strictly increasing in commit order within every partition and never reused,
//     also after a crash or the loss of any single state file;
//   - a row acknowledged to a client is in exactly one table after replay, never twice, and
//     in exactly one place of every listing asked for after the acknowledgement, flushed
//     or not;
//   - tables hold no delete files, so the live data files are the rows;
//   - nothing acknowledged goes missing without a loss naming its seq range, and no bytes
//     that held acknowledged rows are deleted unread;
//   - readers match a table's columns by field id, never by the names it stores;
//   - a flush holds a bounded amount of memory however large the log it flushes (flush.go),
//     and a flush never waits while a compaction or prune rewrites files, only for its swap.
//
// Locks: a partition's rewrite lock, held by what rewrites or deletes its rows
// (compaction, retention, repair, and a flush's stream, which only tries it so that a flush
// never waits for a rewrite), is taken before its mu, never while holding it; the whole
// order is in docs/ARCHITECTURE.md, Locks. No partition lock is held while code a caller
// passed runs (Compact's match, a Scan's fn, a Listing's put). The cache imports nothing of
// the sinks and takes none of their locks: a retention step that needs them (recording a
// consumer's losses, settling them) is its caller's, between the steps of a Pruning, which
// holds only the partition's rewrite lock then (retention.go).
//
// It never talks to the network and never decides retention policy: callers pass the
// policy and where each consumer stands, as data.
package cache

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/apache/iceberg-go/catalog/hadoop"
	"github.com/apache/iceberg-go/table"

	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/fsutil"
	"github.com/hyp-project/hyp/internal/wal"
)

// ErrLocked means another process owns the cache for writing.
var ErrLocked = errors.New("the cache is locked by another hyp process (is a daemon running on this home?)")

// ErrDiskFull means a request's rows could not be made durable for lack of space. Nothing
// of it was stored; the same request succeeds once there is room again.
var ErrDiskFull = errors.New("no space left for the cache")

// ErrUnavailable means the write-ahead log failed in a way it cannot vouch for what it
// wrote (a failed fsync): nothing more is acknowledged until the process restarts; reads
// still work.
var ErrUnavailable = errors.New("the cache's write-ahead log failed; restart hyp to recover")

// storeError classifies a failure to make rows durable.
func storeError(err error) error {
	var failed *wal.FailedError
	switch {
	case errors.Is(err, wal.ErrNoSpace), fsutil.NoSpace(err):
		return fmt.Errorf("%w: %v", ErrDiskFull, err)
	case errors.As(err, &failed):
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return err
}

// Err is the cache's lasting failure, when its log can no longer take rows.
func (c *Cache) Err() error {
	if err := c.wal.Err(); err != nil {
		return storeError(err)
	}
	return nil
}

// seqBlock is how far ahead seq.json reserves, so the allocator file is written once per
// million rows rather than per request.
const seqBlock = 1 << 20

// Options tune a Cache.
type Options struct {
	Logger *slog.Logger
	Now    func() time.Time
	// OnFsync is told how long each group fsync of the log took, OnFlush how long each
	// flush that moved rows into the tables took (hyp_wal_fsync_seconds, hyp_flush_seconds).
	// Either may be nil; neither may block.
	OnFsync, OnFlush func(time.Duration)
}

// Cache is the writer: one per home, guarded by an exclusive lock file.
type Cache struct {
	dir     string
	log     *slog.Logger
	now     func() time.Time
	onFsync func(time.Duration)
	onFlush func(time.Duration)
	lock    *fsutil.Lock
	cat     *hadoop.Catalog
	wal     *wal.Log
	tables  *tableSet
	// settledRows is the file size compaction leaves alone (defaultSettledRows; tests lower it).
	settledRows int64
	limits      flushLimits
	// link hard-links a settled file into a new generation (os.Link; tests fail it).
	link func(oldname, newname string) error
	// built, when set, runs after compaction built a new generation and before it takes the
	// partition lock to swap it in (tests hold compaction there).
	built func()
	// planned, when set, runs after a prune wrote its delete and before it retakes the
	// partition lock to commit it (tests hold the prune there).
	planned func()

	mu       sync.Mutex // orders seq allocation with log appends
	nextSeq  int64
	reserved int64 // seqs below this may have been issued (seq.json)
	// incarnation names the seq space (incarnation.go); set once at open.
	incarnation string
	lastAt      int64 // µs; ingest times never go backwards

	flushMu sync.Mutex
	pending []wal.Segment // sealed, not yet flushed
	damage  walDamage     // guarded by flushMu
	losses  *losses
}

// tableSet is the in-memory view of every partition table, shared by the writer and
// read-only openers.
type tableSet struct {
	dir string
	cat *hadoop.Catalog
	mu  sync.RWMutex
	ds  map[string]*dataset
	// notes are what loading had to repair (a lost CURRENT pointer), for the writer to log;
	// lost records a generation loading had to set aside.
	notes []string
	lost  func(Lost) error
}

type dataset struct {
	name  string
	mu    sync.Mutex // guards types, order and capped
	types map[string]ColType
	order []Column
	// capped is how many of order count toward MaxColumns: all but the internal columns.
	capped int
	parts  map[string]*Partition // by partition name; guarded by tableSet.mu
}

// Partition is one (dataset, partition name) table. mu serialises everything that changes
// which generation or files are current: flush commits, compaction swaps, retention rewrites.
type Partition struct {
	Dataset string
	name    string
	dir     partitionDir

	mu      sync.Mutex
	gen     *generation
	retired []*generation
	// rewrite serialises what rewrites or deletes the partition's rows (compaction,
	// retention, repair), so compaction can build outside mu while only appends land.
	// Taken before mu.
	rewrite sync.Mutex
	// spares are the string buffers its string columns hand back after a flush's chunks
	// are written (colBuilder.spare), kept across flush rounds, which under load come every
	// few hundred milliseconds. Only the flush touches the map, under flushMu.
	spares map[string]chan stringBufs
}

// spare is the channel of p's string column name's spare buffers.
func (p *Partition) spare(name string) chan stringBufs {
	ch := p.spares[name]
	if ch == nil {
		if p.spares == nil {
			p.spares = map[string]chan stringBufs{}
		}
		ch = make(chan stringBufs, spareChunks)
		p.spares[name] = ch
	}
	return ch
}

// DropSpares lets go of the buffers flushes keep for their next chunks, so memory an ingest
// burst used can go back to the OS once ingest is quiet.
func (c *Cache) DropSpares() {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	for _, p := range c.tables.partitions() {
		p.spares = nil
	}
}

// Name is the partition's name, source=<value> (gateway=<id>/source=<value> on a server).
func (p *Partition) Name() string { return p.name }

// resolve picks the column a value of type vt under key goes to, adding it to the dataset
// when new; false when that would take the dataset past MaxColumns (the value then belongs
// in columns.OverflowColumn, which always fits: it is counted in the cap from the start).
//
// Internal columns (Internal: what a server adds, such as `_hyp_origin_seq`) always get
// their column and are outside the cap: ingest refuses every `_hyp_` field name, so only
// hyp itself can bring one, a few per dataset, and a server's crash recovery reads the
// origin seq from its column, never from the overflow object.
func (d *dataset) resolve(key string, vt ColType) (string, ColType, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	name, t := resolve(d.types, key, vt)
	if _, ok := d.types[name]; !ok {
		if !columns.Internal(name) {
			room := MaxColumns - d.capped
			if _, ok := d.types[columns.OverflowColumn]; !ok {
				room-- // kept for columns.OverflowColumn
			}
			if name != columns.OverflowColumn && room <= 0 {
				return "", 0, false
			}
		}
		d.add(Column{Name: name, Type: t})
	}
	return name, t, true
}

// established is where resolve puts a value of type vt under key when that column is
// already the dataset's; false when resolve would add a column.
func (d *dataset) established(key string, vt ColType) (string, ColType, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	name, t := resolve(d.types, key, vt)
	_, ok := d.types[name]
	return name, t, ok
}

func (d *dataset) learn(cols []Column) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range cols {
		if _, ok := d.types[c.Name]; !ok {
			d.add(c)
		}
	}
}

// add appends a column new to the dataset; d.mu is held.
func (d *dataset) add(c Column) {
	d.types[c.Name] = c.Type
	d.order = append(d.order, c)
	if !columns.Internal(c.Name) {
		d.capped++
	}
}

// Columns returns the dataset's user columns in first-seen order.
func (d *dataset) columns() []Column {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.order)
}

type seqState struct {
	Reserved int64 `json:"reserved"`
	// Incarnation copies the incarnation file (nil in a file written before incarnations).
	Incarnation *string `json:"incarnation,omitempty"`
}

// checkDir refuses a directory iceberg-go cannot take as a warehouse: it parses the path as
// a URL once more inside its catalog, so a '%' that starts no valid escape fails there.
func checkDir(dir string) error {
	if _, err := url.Parse(dir); err != nil {
		return fmt.Errorf("cache directory %s cannot hold Iceberg tables (%v); choose a HYP_HOME without a '%%' that is not followed by two hex digits", dir, err)
	}
	return nil
}

// Open takes the writer lock on dir, loads every partition table, replays the log into the
// tables and returns a cache ready to ingest.
func Open(ctx context.Context, dir string, opts Options) (*Cache, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := checkDir(dir); err != nil {
		return nil, err
	}
	if err := fsutil.MkdirAllSync(dir); err != nil {
		return nil, err
	}
	lk, err := fsutil.TryLock(layout(dir).lock())
	if errors.Is(err, fsutil.ErrLocked) {
		return nil, ErrLocked
	}
	if err != nil {
		return nil, err
	}
	c := &Cache{dir: dir, log: opts.Logger, now: opts.Now, onFsync: opts.OnFsync, onFlush: opts.OnFlush, lock: lk, settledRows: defaultSettledRows, limits: defaultFlushLimits, link: os.Link}
	if err := c.open(ctx); err != nil {
		if c.wal != nil {
			_ = c.wal.Close()
		}
		lk.Unlock()
		return nil, err
	}
	return c, nil
}

func (c *Cache) open(ctx context.Context) error {
	var err error
	if c.losses, err = openLosses(c.dir); err != nil {
		return err
	}
	ts, err := loadTables(ctx, c.dir, true, func(x Lost) error {
		c.log.Error("a partition's table could not be read; its generation is kept aside and the partition goes on without it",
			"dataset", x.Dataset, "partition", x.Partition, "from_seq", x.FromSeq, "to_seq", x.ToSeq, "rows", x.Rows, "kept_at", x.KeptAt, "reason", x.Reason)
		_, err := c.losses.add([]Lost{x})
		return err
	})
	if err != nil {
		return err
	}
	c.tables, c.cat = ts, ts.cat
	for _, n := range ts.notes {
		c.log.Warn("cache state repaired at open", "what", n)
	}
	if err := c.relocate(ctx); err != nil {
		return err
	}
	// The next seq must be above everything persisted anywhere, so that losing or
	// corrupting any one of these sources can never send seqs backwards. The log is read
	// before its new segment starts, because that segment's marker is the next seq.
	lg, sealed, err := wal.Open(layout(c.dir).wal(), func(sealed []wal.Segment) ([]byte, error) {
		high := ts.maxSeq()
		for _, seg := range sealed {
			if _, err := wal.Read(seg.Path, func(_ int64, p []byte) error {
				if next, ok := decodeMarker(p); ok {
					high = max(high, next-1)
					return nil
				}
				rec, err := decodeRecord(p)
				if err != nil {
					return nil // damage is reported at flush
				}
				rec.release()
				high = max(high, rec.lastSeq())
				c.lastAt = max(c.lastAt, rec.IngestedAt)
				return nil
			}, nil); err != nil {
				return nil, err
			}
		}
		st, err := readSeqState(layout(c.dir).seqState())
		if err != nil {
			c.log.Warn("seq allocator file unreadable; continuing above every seq found in the log and tables", "err", err)
		}
		c.nextSeq = max(high+1, st.Reserved, 1)
		if err := c.loadIncarnation(st, c.nextSeq == 1); err != nil {
			return nil, err
		}
		if err := c.reserve(c.nextSeq + seqBlock); err != nil {
			return nil, err
		}
		return appendMarker(nil, c.nextSeq), nil
	}, c.onFsync)
	if err != nil {
		return err
	}
	c.wal, c.pending = lg, sealed
	c.damage = walDamage{lo: ts.maxSeq() + 1, activeStart: c.nextSeq}
	c.lastAt = max(c.lastAt, ts.maxIngestedAt())
	return c.Flush(ctx)
}

func readSeqState(path string) (seqState, error) {
	var st seqState
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return seqState{}, fmt.Errorf("%s: %w", path, err)
	}
	return st, nil
}

func (c *Cache) reserve(upTo int64) error {
	b, _ := json.Marshal(seqState{Reserved: upTo, Incarnation: &c.incarnation})
	if err := fsutil.WriteFileAtomic(layout(c.dir).seqState(), b, 0o600); err != nil {
		return fmt.Errorf("reserve seqs: %w", err)
	}
	c.reserved = upTo
	return nil
}

// Close flushes the log into the tables and releases the writer lock.
func (c *Cache) Close(ctx context.Context) error {
	err := c.Flush(ctx)
	if cerr := c.wal.Close(); err == nil {
		err = cerr
	}
	// Segments written after the last flush stay on disk and are replayed at the next open.
	if uerr := c.lock.Unlock(); err == nil {
		err = uerr
	}
	return err
}

// Dir is the cache directory.
func (c *Cache) Dir() string { return c.dir }

// NextSeq is the seq the next ingested row will get: it moves exactly when rows arrive.
func (c *Cache) NextSeq() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nextSeq
}

// WALSize is the size of the active log segment, for flush triggers.
func (c *Cache) WALSize() int64 { return c.wal.Size() }

// Flush moves every acknowledged row from the log into the partition tables and releases
// the log segments it emptied.
func (c *Cache) Flush(ctx context.Context) error {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	// The new segment starts with one above the last seq in the sealed one: at or below
	// every seq after it.
	var next int64
	seg, ok, err := c.wal.Rotate(func(n int64) []byte {
		next = n
		return appendMarker(nil, n)
	})
	if err != nil {
		return err
	}
	if ok {
		c.pending = append(c.pending, seg)
		c.damage.activeStart = next
	}
	if c.onFlush != nil && len(c.pending) > 0 {
		defer func(start time.Time) { c.onFlush(time.Since(start)) }(time.Now())
	}
	for len(c.pending) > 0 {
		last := len(c.pending) == 1
		if err := c.flushSegment(ctx, c.pending[0], last); err != nil {
			return err
		}
		if err := wal.Release(c.pending[0]); err != nil {
			return err
		}
		c.pending = c.pending[1:]
	}
	return nil
}

// flushSegment commits every row of seg above its partition's head. A row that cannot be
// stored (its line no longer parses) is set aside and recorded as a loss before the
// caller releases seg; it never holds up the rows after it. Damaged log bytes cost only the
// records they hit: the segment is kept, the seqs they may have held are recorded as a loss
// before seg is released (last: seg is the newest sealed one, so the active segment bounds a
// loss at its end), and every intact record after them is flushed. One partition whose
// commit fails does not keep the others from committing: seg then stays pending, and its
// replay skips what did commit. Memory stays bounded however large seg is: rows go through a
// flushRound (flush.go), which streams large partitions into their data files as it reads.
func (c *Cache) flushSegment(ctx context.Context, seg wal.Segment, last bool) error {
	round := newFlushRound(ctx, c)
	var (
		aside []setAside
		lost  []Lost
	)
	dmg := c.damage // advanced only once seg is done
	damaged := func(off, end int64, why string) error {
		kept, err := c.losses.keepSegment(seg.Path)
		if err != nil {
			return err
		}
		dmg.hit(end-off, kept, fmt.Sprintf("%s at bytes %d-%d of %s", why, off, end, filepath.Base(seg.Path)), c.now())
		return nil
	}
	_, err := wal.Read(seg.Path, func(off int64, payload []byte) error {
		if next, ok := decodeMarker(payload); ok {
			lost = dmg.intact(next, next-1, lost)
			return nil
		}
		rec, err := decodeRecord(payload)
		if err != nil {
			return damaged(off, off+int64(len(payload)), "undecodable log record ("+err.Error()+")")
		}
		defer rec.release()
		lost = dmg.intact(rec.Groups[0].FirstSeq, rec.lastSeq(), lost)
		ds := c.tables.dataset(rec.Dataset)
		for _, g := range rec.Groups {
			p, err := c.tables.partition(ds, g.Partition)
			if err != nil && unstorablePartition(err) {
				// No retry can create it: its rows are set aside rather than holding up
				// every other partition's forever.
				seq := g.FirstSeq
				rec.eachRow(g, func(row []byte) {
					aside = append(aside, setAside{dataset: rec.Dataset, partition: g.Partition, seq: seq, line: rec.line(row), err: err})
					seq++
				})
				continue
			}
			if err != nil {
				return err
			}
			if round.failed[p] {
				continue
			}
			floor := p.maxSeq()
			add := func(seq int64, row []byte) {
				if seq <= floor || round.failed[p] {
					return // already committed before a crash: replay skips it
				}
				b := round.batch(p, ds)
				if err := b.add(rec.rowForm(), row, seq, rec.IngestedAt); err != nil {
					aside = append(aside, setAside{dataset: rec.Dataset, partition: g.Partition, seq: seq, line: rec.line(row), err: err})
					return
				}
				round.added(p, b, len(row))
			}
			seq := g.FirstSeq
			if rec.Form == formArrow {
				for _, ar := range g.Records {
					// Column by column where the batch allows it, the rest row by row.
					from := round.addColumns(p, ds, ar, seq, floor, rec.IngestedAt, len(g.Body)/g.Rows)
					at := seq + int64(from)
					eachLine(g.Lines, ar, from, func(line []byte) { add(at, line); at++ })
					seq += ar.NumRows()
				}
				continue
			}
			rec.eachRow(g, func(row []byte) { add(seq, row); seq++ })
		}
		return nil
	}, func(d wal.Damage) error {
		return damaged(d.Offset, d.End, "damaged log bytes")
	})
	if err != nil {
		round.abort()
		return fmt.Errorf("flush %s: %w", seg.Path, err)
	}
	if last {
		lost = dmg.intact(dmg.activeStart, dmg.activeStart-1, lost)
	}
	round.commit()
	if err := round.err(); err != nil {
		return fmt.Errorf("flush %s: %w", seg.Path, err)
	}
	set, err := c.losses.setAside(aside, c.now())
	if err != nil {
		return fmt.Errorf("flush %s: %w", seg.Path, err)
	}
	logged, err := c.losses.add(lost)
	if err != nil {
		return fmt.Errorf("flush %s: %w", seg.Path, err)
	}
	c.damage = dmg
	for _, x := range append(set, logged...) {
		c.log.Error("rows set aside: they could not be stored", "dataset", x.Dataset, "partition", x.Partition,
			"from_seq", x.FromSeq, "to_seq", x.ToSeq, "rows", x.Rows, "reason", x.Reason, "kept_at", x.KeptAt)
	}
	return nil
}

// unstorablePartition tells a partition directory that can never be made (a name the
// filesystem refuses: eCryptfs, for one, takes names of at most 143 bytes, shorter than a
// long source's segment) from one that failed for now (a full disk).
func unstorablePartition(err error) bool {
	return errors.Is(err, syscall.ENAMETOOLONG) || errors.Is(err, syscall.EINVAL)
}

func forLines(body []byte, fn func([]byte)) {
	for len(body) > 0 {
		i := bytes.IndexByte(body, '\n')
		if i < 0 {
			i = len(body)
		}
		fn(body[:i])
		body = body[min(i+1, len(body)):]
	}
}

// commit appends a batch to its partition's current generation, creating the table or
// adding columns first when needed.
func (c *Cache) commit(ctx context.Context, p *Partition, b *batch) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := c.prepare(ctx, p, b); err != nil {
		return err
	}
	sc, err := table.SchemaToArrowSchema(p.gen.tbl.Schema(), nil, true, false)
	if err != nil {
		return err
	}
	rec, err := b.record(sc, p.gen.logical)
	if err != nil {
		return fmt.Errorf("partition %s/%s: %w", p.Dataset, p.Name(), err)
	}
	defer rec.Release()
	return p.gen.append(ctx, rec, b.maxSeq)
}

// prepare makes p's table ready for b's rows, creating it or adding b's new columns. The
// caller holds p.mu.
func (c *Cache) prepare(ctx context.Context, p *Partition, b *batch) error {
	if p.gen == nil {
		g, err := c.tables.createFirstGeneration(ctx, p, b.cols)
		if err != nil {
			return err
		}
		p.gen = g
	} else if cols := b.newColumns(p.gen.columns()); len(cols) > 0 {
		return p.gen.addColumns(ctx, cols)
	}
	return nil
}

func (p *Partition) maxSeq() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gen == nil {
		return 0
	}
	return p.gen.maxSeq
}

// HeadSeq is the highest seq committed to the partition's table.
func (p *Partition) HeadSeq() int64 { return p.maxSeq() }
