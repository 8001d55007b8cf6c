package sink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/hyp-project/hyp/internal/blob"
	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/forward"
	"github.com/hyp-project/hyp/internal/watermark"
)

// Cache is what the sinks read: committed rows by partition and seq, and where seqs and
// ingest times lie for status and rewinds.
type Cache interface {
	Flush(ctx context.Context) error
	Status() []cache.PartitionStatus
	Scan(ctx context.Context, dataset, partition string, since, until int64, fn func(arrow.RecordBatch) error) (cache.ScanStats, error)
	Positions(dataset, partition string) (*cache.Positions, error)
}

// limits bound one export unit, and how many partitions' units may be in flight at once.
// Bytes are estimated from the Arrow buffers, which track the encoded size closely enough to
// keep a unit near its budget.
type limits struct {
	rows  int64
	bytes int64
	// inFlight is how many partitions a tick exports at once (0 or 1: one after the other);
	// one partition never has more than one unit in flight.
	inFlight int
	// readAhead reads (and, for an encodingShipper, encodes) a partition's next unit while
	// the current one ships (readAhead below).
	readAhead bool
}

// readAhead reads a partition's next units while the loop ships the one before: one scan
// of (since, until] cut into units as read would cut them, one unit ahead of the loop, so
// the scan's file and position carry from one unit to the next instead of every unit
// opening the file again and seeking to its first row. The units are only a guess at what
// the loop reads next: it takes one only for the exact read it would otherwise make (same
// since, until and limits), so a rewind, an intent left by a failure or a changed limit
// discards the rest. Their rows are those a read after the ship would return, as a
// partition's rows above a seq do not change (compaction rewrites files, not rows); the one
// difference is a forced prune while a unit ships, whose rows the next unit may still
// carry, as the unit already in flight does. The scan holds its generation of the
// partition until discard, as any scan does while it runs.
type readAhead struct {
	until  int64
	lim    limits
	tf     string // the transform its units are shaped with
	since  int64  // the since of the next unit on units
	units  chan aheadUnit
	cancel context.CancelFunc
	done   chan struct{}
}

// aheadUnit is one unit of the read ahead, or the error that ended it.
type aheadUnit struct {
	rows *unitRows
	err  error
}

// startReadAhead starts reading p's units in (since, until] within lim for shipping,
// shaped by tf.
func (x *instance) startReadAhead(ctx context.Context, p Part, since, until int64, lim limits, tf string) *readAhead {
	ctx, cancel := context.WithCancel(ctx)
	r := &readAhead{until: until, lim: lim, tf: tf, since: since, units: make(chan aheadUnit), cancel: cancel, done: make(chan struct{})}
	enc, _ := x.shipper().(encodingShipper)
	go func() {
		defer close(r.done)
		defer close(r.units)
		send := func(au aheadUnit) error {
			select {
			case r.units <- au:
				return nil
			case <-ctx.Done():
				if au.rows != nil {
					au.rows.release()
				}
				return ctx.Err()
			}
		}
		err := x.cutUnits(ctx, p, since, until, lim, tf, enc, func(u *unitRows) error {
			if u.rows == 0 {
				u.release()
				return nil
			}
			return send(aheadUnit{rows: u})
		})
		if err != nil && ctx.Err() == nil {
			_ = send(aheadUnit{err: err})
		}
	}()
	return r
}

// cutUnits scans p's rows in (since, until] and hands emit each unit as it fills within
// lim, then the last one however short (empty when there are no rows), its rows shaped by
// the transform tf (none when empty); emit owns the unit it is given, and an error from it
// ends the scan and is returned.
func (x *instance) cutUnits(ctx context.Context, p Part, since, until int64, lim limits, tf string, enc encodingShipper, emit func(*unitRows) error) error {
	newBuilder := func() unitBuilder {
		b := unitBuilder{u: &unitRows{transform: tf}, lim: lim, enc: enc}
		if tf != "" {
			b.shape = func(recs []arrow.RecordBatch) ([]arrow.RecordBatch, error) { return x.shape(ctx, tf, recs) }
		}
		return b
	}
	b := newBuilder()
	_, err := x.cache.Scan(ctx, p.Dataset, p.Partition, since, until, func(rec arrow.RecordBatch) error {
		if rec.NumRows() == 0 {
			return nil
		}
		rec = exported(rec)
		defer rec.Release()
		for {
			took, full, err := b.add(ctx, rec)
			if err != nil || !full {
				return err
			}
			if err := b.shapePending(ctx); err != nil {
				return err
			}
			unit := b.u
			b = newBuilder()
			unit.seal()
			if err := emit(unit); err != nil {
				return err
			}
			if took == rec.NumRows() {
				return nil
			}
			rest := rec.NewSlice(took, rec.NumRows())
			defer rest.Release()
			rec = rest
		}
	})
	if err == nil {
		err = b.shapePending(ctx)
	}
	if err != nil {
		b.discard()
		return err
	}
	b.u.seal()
	return emit(b.u)
}

// take returns the next unit read ahead if it is the read (since, until] within lim shaped
// by tf, and nil otherwise (a failed read included: the caller reads again, and reports what
// that read finds), in which case r is used up.
func (r *readAhead) take(since, until int64, lim limits, tf string) *unitRows {
	if r == nil {
		return nil
	}
	if r.since != since || r.until != until || r.lim != lim || r.tf != tf {
		r.discard()
		return nil
	}
	au, ok := <-r.units
	if !ok || au.err != nil {
		r.discard()
		return nil
	}
	r.since = au.rows.last
	return au.rows
}

// follows reports whether r's next unit is the one after a unit ending at since, so that
// r can go on once that unit is decided.
func (r *readAhead) follows(since int64) bool { return r != nil && r.since == since }

// discard stops the read and drops the units it holds; it does nothing on nil or a second
// call.
func (r *readAhead) discard() {
	if r == nil {
		return
	}
	r.cancel()
	for au := range r.units {
		if au.rows != nil {
			au.rows.release()
		}
	}
	<-r.done
}

// unitRows is an export unit's rows as read from the cache: retained records until shipped,
// or, for a shipper that encodes while reading (encodingShipper), the encoding under way.
// With a transform, schema, recs and enc hold the shaped rows, while rows, first and last
// still describe the unit as read from the cache.
type unitRows struct {
	schema *arrow.Schema
	recs   []arrow.RecordBatch
	enc    unitEncoding
	rows   int64
	first  int64
	last   int64
	// transform is the SQL the rows were shaped with ("" for none); kept is how many rows
	// it returned (rows without one), keptFirst and keptLast their seq bounds.
	transform           string
	kept                int64
	keptFirst, keptLast int64
}

// filtered is how many of the unit's rows its transform dropped.
func (u *unitRows) filtered() int64 { return u.rows - u.kept }

// seal finishes a complete unit's encoding where it has a last step (sealer), so that
// step too runs on the goroutine that read the unit: the read-ahead's, beside the unit in
// flight.
func (u *unitRows) seal() {
	if s, ok := u.enc.(sealer); ok {
		s.seal()
	}
}

func (u *unitRows) release() {
	if u == nil {
		return
	}
	for _, r := range u.recs {
		r.Release()
	}
	u.recs = nil
	if u.enc != nil {
		u.enc.discard()
		u.enc = nil
	}
}

// encodingShipper is a shipper that encodes a unit while it is read, so a unit's rows are
// never all held at once and the encoding runs beside the scan rather than after it.
type encodingShipper interface {
	shipper
	// encode starts a unit of records with schema; ship is then given unitRows.enc.
	encode(schema *arrow.Schema) (unitEncoding, error)
}

// unitEncoding is one unit's encoding under way.
type unitEncoding interface {
	// add encodes rec's rows after those added before; it retains rec as long as it needs.
	add(ctx context.Context, rec arrow.RecordBatch) error
	// discard stops the encoding and removes what it wrote; a second call does nothing.
	discard()
}

// sealer is a unitEncoding with work left once its unit has all its rows. seal may fail
// only in a way ship can see and report.
type sealer interface {
	seal()
}

// errPoison marks a unit the destination refuses for what it contains; retrying it can
// never succeed, so it is quarantined and the watermark moves past it.
type errPoison struct {
	status int
	err    error
}

func (e *errPoison) Error() string { return e.err.Error() }
func (e *errPoison) Unwrap() error { return e.err }

// errDestination is a failure to reach or write the destination, as opposed to one
// partition's problem (a unit that cannot be encoded, an object key conflict): the rest of
// the tick would only wait on it again, so the tick ends there.
type errDestination struct{ err error }

func (e *errDestination) Error() string { return e.err.Error() }
func (e *errDestination) Unwrap() error { return e.err }

// errTooLarge means the destination refused the unit's size; a smaller unit may pass.
var errTooLarge = errors.New("export unit too large for the destination")

// shipper delivers one unit durably; nil means the destination has every row of it. A
// retry of the same unit (same id, same rows) must be harmless.
type shipper interface {
	ship(ctx context.Context, p Part, u watermark.Unit, rows *unitRows) (bytes int64, err error)
}

// Part is one partition a sink exports.
type Part struct {
	Dataset   string
	Partition string
}

var errStop = errors.New("unit full")

// read collects the rows of p with seq in (since, until], stopping at lim, shaped by tf.
// It opens only the files and row groups that hold such rows.
func (x *instance) read(ctx context.Context, p Part, since, until int64, lim limits, tf string) (*unitRows, error) {
	return x.readInto(ctx, p, since, until, lim, tf, nil)
}

// readToShip is read for a unit that is to be shipped: a shipper that encodes while reading
// gets the rows as they come.
func (x *instance) readToShip(ctx context.Context, p Part, since, until int64, lim limits, tf string) (*unitRows, error) {
	enc, _ := x.shipper().(encodingShipper)
	return x.readInto(ctx, p, since, until, lim, tf, enc)
}

// readInto reads the first unit of p's rows in (since, until].
func (x *instance) readInto(ctx context.Context, p Part, since, until int64, lim limits, tf string, enc encodingShipper) (*unitRows, error) {
	var first *unitRows
	err := x.cutUnits(ctx, p, since, until, lim, tf, enc, func(u *unitRows) error {
		first = u
		return errStop
	})
	if !errors.Is(err, errStop) {
		return nil, err // a scan always ends in emit, so this is a failed one
	}
	return first, nil
}

// unitBuilder collects one unit's rows, record by record in seq order, within lim, shaped
// as they come; with an encodingShipper it encodes them as they come.
type unitBuilder struct {
	u     *unitRows
	bytes int64
	lim   limits
	enc   encodingShipper
	// shape is the unit's transform (nil for none). It runs over pending rows once they
	// reach shapeRows or shapeBytes and when the unit is complete, so a unit pays its fixed
	// cost (planning the SQL over a view of the rows, ~0.8 ms) about once, not once per
	// record the scan hands over, while what waits for it stays bounded.
	shape                     func([]arrow.RecordBatch) ([]arrow.RecordBatch, error)
	pending                   []arrow.RecordBatch
	pendingRows, pendingBytes int64
}

// What a unit's rows may gather before its transform runs over them.
const (
	shapeRows  = 16 << 10
	shapeBytes = 8 << 20
)

// add takes the leading rows of rec that fit the unit and returns how many it took; full
// means the unit takes no more rows (it took fewer than rec's, or reached lim.rows).
func (b *unitBuilder) add(ctx context.Context, rec arrow.RecordBatch) (took int64, full bool, err error) {
	u, n := b.u, rec.NumRows()
	per := recordBytes(rec) / max(n, 1)
	take := n
	if room := b.lim.rows - u.rows; take > room {
		take = room
	}
	if b.lim.bytes > 0 && per > 0 {
		if room := (b.lim.bytes - b.bytes) / per; take > room {
			take = max(room, 0)
		}
	}
	if take == 0 && u.rows == 0 {
		take = 1 // one row larger than the budget still travels alone
	}
	if take > 0 {
		part := rec
		if take < n {
			part = rec.NewSlice(0, take)
		} else {
			rec.Retain()
		}
		seqs, err := seqColumn(part)
		if err != nil {
			part.Release()
			return 0, false, err
		}
		if u.rows == 0 {
			u.first = seqs.Value(0)
		}
		u.last = seqs.Value(int(take) - 1)
		u.rows += take
		b.bytes += per * take
		if b.shape == nil {
			err = b.keep(ctx, []arrow.RecordBatch{part})
		} else {
			b.pending = append(b.pending, part)
			b.pendingRows, b.pendingBytes = b.pendingRows+take, b.pendingBytes+per*take
			if b.pendingRows >= shapeRows || b.pendingBytes >= shapeBytes {
				err = b.shapePending(ctx)
			}
		}
		if err != nil {
			return 0, false, err
		}
	}
	return take, take < n || u.rows >= b.lim.rows, nil
}

// shapePending runs the transform over the rows waiting for it and keeps what it returns.
func (b *unitBuilder) shapePending(ctx context.Context) error {
	if len(b.pending) == 0 {
		return nil
	}
	recs := b.pending
	b.pending, b.pendingRows, b.pendingBytes = nil, 0, 0
	out, err := b.shape(recs)
	for _, rec := range recs {
		rec.Release()
	}
	if err != nil {
		return err
	}
	return b.keep(ctx, out)
}

// discard drops the unit under way and the rows waiting for its transform.
func (b *unitBuilder) discard() {
	for _, rec := range b.pending {
		rec.Release()
	}
	b.pending = nil
	b.u.release()
}

// keep adds the shaped records out (owned by keep from here on) to the unit: to its
// encoding, or to its records.
func (b *unitBuilder) keep(ctx context.Context, out []arrow.RecordBatch) error {
	u := b.u
	defer func() {
		for _, rec := range out {
			if rec != nil {
				rec.Release()
			}
		}
	}()
	for i, rec := range out {
		if rec.NumRows() == 0 {
			continue
		}
		seqs, err := seqColumn(rec)
		if err != nil {
			return err
		}
		if u.kept == 0 {
			u.keptFirst = seqs.Value(0)
		}
		u.keptLast = seqs.Value(seqs.Len() - 1)
		u.kept += rec.NumRows()
		if u.schema == nil {
			u.schema = rec.Schema()
		}
		if b.enc != nil && u.enc == nil {
			if u.enc, err = b.enc.encode(u.schema); err != nil {
				// The rows are kept instead, so the ship fails on the same error and
				// the unit is recorded as failing like any other that cannot be written.
				u.enc, b.enc = nil, nil
			}
		}
		if u.enc == nil {
			u.recs = append(u.recs, rec)
			out[i] = nil
			continue
		}
		if err := u.enc.add(ctx, rec); err != nil {
			return err
		}
	}
	return nil
}

// exported returns rec with the columns an export carries (SPEC 6): the user columns
// (columns.OverflowColumn among them) and the two internal ones every row has. Other internal
// columns, such as the sender's seq a central server keeps, stay in the cache. The caller
// releases the result.
func exported(rec arrow.RecordBatch) arrow.RecordBatch {
	sc := rec.Schema()
	keep := make([]int, 0, sc.NumFields())
	for i, f := range sc.Fields() {
		if !columns.Internal(f.Name) || f.Name == columns.SeqColumn || f.Name == columns.IngestedAtColumn {
			keep = append(keep, i)
		}
	}
	if len(keep) == sc.NumFields() {
		rec.Retain()
		return rec
	}
	fields := make([]arrow.Field, len(keep))
	cols := make([]arrow.Array, len(keep))
	for j, i := range keep {
		fields[j], cols[j] = sc.Field(i), rec.Column(i)
	}
	md := sc.Metadata()
	return array.NewRecordBatch(arrow.NewSchema(fields, &md), cols, rec.NumRows())
}

// recordBytes estimates rec's encoded size from its string bytes plus 8 bytes per other
// value. Buffers cannot be used: a scan slices row groups, and a slice shares its parent's.
func recordBytes(rec arrow.RecordBatch) int64 {
	var n int64
	for _, col := range rec.Columns() {
		switch a := col.(type) {
		case *array.String:
			if offs := a.ValueOffsets(); len(offs) > 0 {
				n += int64(offs[len(offs)-1] - offs[0])
			}
		case *array.LargeString:
			if offs := a.ValueOffsets(); len(offs) > 0 {
				n += offs[len(offs)-1] - offs[0]
			}
		default:
			n += 8 * int64(a.Len())
		}
	}
	return n
}

func seqColumn(rec arrow.RecordBatch) (*array.Int64, error) {
	idx := rec.Schema().FieldIndices(columns.SeqColumn)
	if len(idx) != 1 {
		return nil, fmt.Errorf("cache batch has no %s column", columns.SeqColumn)
	}
	col, ok := rec.Column(idx[0]).(*array.Int64)
	if !ok {
		return nil, fmt.Errorf("cache column %s is %s, not int64", columns.SeqColumn, rec.Column(idx[0]).DataType())
	}
	return col, nil
}

// partResult is what one partition's export did in one tick.
type partResult struct {
	rows, bytes int64
	units       int
	quarantined []string // units moved past as poison, for the run's report
	err         error
}

// exportPartition ships p's rows above its watermark, unit by unit, up to head. Each unit
// is written as an intent before it is shipped and the watermark moves only after the
// destination has it (cursor.go: nextUnit decides, every write is a move whose loss the
// moves' table explains), so a rewind or a hand edit between two units wins over what this
// loop decided.
//
// The one merge of two writes: when the next unit is read ahead by the time one ships, the
// settle of the shipped unit also writes the next unit's intent (decided from the rows read
// ahead, exactly as the next turn would decide it). A crash after that write finds the
// intent and re-ships the same unit; a crash before it finds the shipped unit's intent, as
// it always did. The watermark file then sees one fsync'd write per unit instead of two.
// The price: the settle waits for the next unit's read, so a crash in that wait re-ships
// the shipped unit, which every destination recognises (same batch id, same object key).
func (x *instance) exportPartition(ctx context.Context, p Part, head int64) partResult {
	var res partResult
	k := x.key(p)
	lim := x.lim
	log := x.log.With("dataset", p.Dataset, "partition", p.Partition)
	var ahead *readAhead // the next unit's rows, read while a unit ships
	defer func() { ahead.discard() }()
	// read is nextUnit's reader: the read ahead when it holds the rows asked for. A withheld
	// partition's rows are counted, never shipped, so they are neither shaped nor encoded.
	read := func(since, until int64, withheld bool) (*unitRows, error) {
		defer x.step("read", time.Now())
		if withheld {
			ahead.discard()
			ahead = nil
			return x.read(ctx, p, since, until, lim, "")
		}
		tf := x.live.Load().transform
		if rows := ahead.take(since, until, lim, tf); rows != nil {
			return rows, nil
		}
		ahead = nil // used up
		return x.readToShip(ctx, p, since, until, lim, tf)
	}
	var next decided // a unit queued behind the one last shipped; rows nil when none
	defer func() { next.rows.release() }()
	// prev is a delivered unit the watermark has not passed yet: its settle rides on the
	// write that queues the unit after next (queueNext), made while next ships.
	var prev *delivered
	for {
		if err := ctx.Err(); err != nil {
			res.err = err
			return res
		}
		var u watermark.Unit
		var rows *unitRows
		var at int64               // where the watermark stands while u is in flight
		var queued *watermark.Unit // a unit a replayed intent had queued behind it
		switch {
		case next.rows != nil:
			// Its intent is written, or queued behind prev, whose settle makes it the intent
			// (at u.From) before anything below stands on at.
			u, rows, at, next = next.u, next.rows, next.u.From, decided{}
			if prev != nil {
				// A rewind or an edit that landed while prev shipped wins before u ships, as
				// it would before an intent is written.
				ok, err := x.store.Holds(k, watermark.HoldsQueue(prev.f.at, prev.f.u, u))
				if err != nil || !ok {
					rows.release()
					prev = nil
					if err != nil {
						res.err = err
						return res
					}
					log.Info("watermark moved while a unit was shipping; the new position wins", "unit_first", u.First, "unit_last", u.Last)
					continue
				}
			}
		default:
			pd, err := x.nextUnit(ctx, p, head, read)
			if err != nil {
				res.err = err
				return res
			}
			switch {
			case pd.idle:
				return res // nothing new: no data file was opened
			case pd.replay:
				// A unit decided before a crash or a failed attempt: exactly those rows again.
				u, at, queued = pd.u, pd.at, pd.queued
				t := time.Now()
				rows, err = x.readToShip(ctx, p, u.From, u.Last, limits{rows: 1 << 62}, u.Transform)
				x.step("read", t)
				if err != nil {
					res.err = x.readFailed(ctx, k, err)
					return res
				}
			default:
				u, rows, at = pd.u, pd.rows, pd.at
				t := time.Now()
				_, landed, err := x.advance(k, moveIntent(u))
				x.step("record", t)
				if err != nil || !landed {
					rows.release()
					if err != nil {
						res.err = err
						return res
					}
					continue
				}
			}
		}
		if x.hooks.afterIntent != nil {
			x.hooks.afterIntent(k, u)
		}
		if !ahead.follows(u.Last) {
			ahead.discard() // one left by a unit that did not ship
			ahead = nil
			if lim.readAhead && u.Last < head {
				ahead = x.startReadAhead(ctx, p, u.Last, head, lim, x.live.Load().transform)
			}
		}
		// A forward sink queues the next unit's intent while u ships (with prev's settle),
		// unless a replayed u brought its own queued unit, which is the next one.
		var queuing chan queuedNext
		if lim.readAhead && queued == nil && (prev != nil || u.Last < head) {
			queuing = make(chan queuedNext, 1)
			go func(ahead *readAhead, cur inFlight, prev *delivered) {
				queuing <- x.queueNext(p, k, ahead, cur, prev, head, lim)
			}(ahead, inFlight{at, u}, prev)
		}
		t := time.Now()
		n, err := x.shipUnit(ctx, p, u, rows)
		x.step("ship", t)
		rows.release()
		var qn queuedNext
		if queuing != nil {
			qn = <-queuing
		}
		var owed *delivered // prev, when queueNext left its settle to go with u's (nothing after u)
		switch {
		case prev != nil && qn.landed:
			x.settled(&res, p, k, prev)
		case prev != nil && !qn.stale && qn.err == nil:
			owed = prev
		}
		prev = nil
		switch {
		case qn.err != nil:
			// The delivered units stay intents: the next run ships them again, and the
			// destination dedupes them.
			res.err = qn.err
			return res
		case qn.stale && err == nil:
			log.Info("watermark moved while a unit was shipping; the new position wins", "unit_first", u.First, "unit_last", u.Last)
			continue
		}
		if err == nil {
			if x.hooks.afterShip != nil {
				x.hooks.afterShip(k, u)
			}
			done := &delivered{f: inFlight{at, u}, rows: rows.rows, filtered: rows.filtered(), bytes: n}
			if qn.next.rows != nil {
				// The next unit is queued behind u: it ships now, and u's settle rides on
				// the write that queues the one after it.
				prev, next = done, qn.next
				continue
			}
			// Nothing queued behind u, or a replayed u's own queued unit, which the settle
			// makes the intent (the next turn replays it); a settle owed for the unit before
			// u goes in the same write.
			t = time.Now()
			m := moveSettle(done.f, done.rows, done.filtered, x.now().UTC(), queued)
			if owed != nil {
				m = moveSettleThrough(owed.f, u, owed.rows+done.rows, owed.filtered+done.filtered, x.now().UTC())
			}
			_, landed, err := x.advance(k, m)
			x.step("record", t)
			if err != nil || !landed {
				if err != nil {
					res.err = err
					return res
				}
				log.Info("watermark moved while a unit was shipping; the new position wins", "unit_first", u.First, "unit_last", u.Last)
				continue
			}
			if owed != nil {
				x.settled(&res, p, k, owed)
			}
			x.settled(&res, p, k, done)
			continue
		}
		qn.next.rows.release() // a queued unit never ships before the one it follows
		if owed != nil {
			// The settle owed first: it makes u the intent that u's failure is recorded on.
			_, landed, err := x.advance(k, moveSettleQueued(owed.f, owed.rows, owed.filtered, x.now().UTC(), u, nil))
			if err != nil || !landed {
				if err != nil {
					res.err = err
					return res
				}
				continue // a rewind or an edit: the new position wins
			}
			x.settled(&res, p, k, owed)
		}
		var poison *errPoison
		switch {
		case errors.As(err, &poison) || (errors.Is(err, errTooLarge) && u.Rows <= 1):
			q, qerr := x.quarantine(ctx, p, u, err)
			if qerr != nil {
				res.err = fmt.Errorf("quarantine unit %d-%d: %w", u.First, u.Last, qerr)
				return res
			}
			if poison != nil {
				q.Status = poison.status
			}
			log.Error("destination refused a unit as poison; quarantined it and moved past", "unit_first", u.First, "unit_last", u.Last, "rows", u.Rows, "file", q.File, "err", err)
			if _, _, err := x.advance(k, moveQuarantine(inFlight{at, u}, q, err)); err != nil {
				res.err = err
				return res
			}
			x.metrics.failures.WithLabelValues(x.name).Inc()
			res.quarantined = append(res.quarantined, fmt.Sprintf("quarantined seqs %d-%d (%d rows) in %s: %v", u.First, u.Last, q.Rows, q.File, err))
		case errors.Is(err, errTooLarge):
			// Nothing of the unit was stored, so a smaller unit may replace the intent.
			lim.rows = max(u.Rows/2, 1)
			if _, _, err := x.advance(k, moveDrop(inFlight{at, u})); err != nil {
				res.err = err
				return res
			}
		default:
			if ctx.Err() != nil {
				// Shutdown, not a failure: the intent stays and the next start re-ships it.
				res.err = ctx.Err()
				return res
			}
			x.metrics.failures.WithLabelValues(x.name).Inc()
			_, _, _ = x.advance(k, moveNote(err.Error()))
			res.err = fmt.Errorf("export seqs %d-%d: %w", u.First, u.Last, err)
			return res
		}
	}
}

// readFailed records a failure to read (or shape) a unit's rows as the partition's last
// error, as a failed ship is, so that `sink status` shows why the partition does not move
// (a transform that fails over its rows, a damaged file), and returns err.
func (x *instance) readFailed(ctx context.Context, k watermark.Key, err error) error {
	if ctx.Err() != nil {
		return err // shutdown, not a failure
	}
	x.metrics.failures.WithLabelValues(x.name).Inc()
	_, _, _ = x.advance(k, moveNote(err.Error()))
	return err
}

// step records how long a unit's step took since start (hyp_sink_unit_step_seconds).
func (x *instance) step(name string, start time.Time) {
	x.metrics.unitStep.WithLabelValues(x.name, name).Observe(time.Since(start).Seconds())
}

// delivered is a unit the destination has, and what it counts for once it is settled.
type delivered struct {
	f        inFlight
	rows     int64
	filtered int64
	bytes    int64
}

// settled accounts for d once the watermark has passed it.
func (x *instance) settled(res *partResult, p Part, k watermark.Key, d *delivered) {
	if x.hooks.afterWatermark != nil {
		x.hooks.afterWatermark(k, d.f.u)
	}
	res.rows += d.rows
	res.bytes += d.bytes
	if d.rows > 0 {
		res.units++
	}
	x.metrics.exported.WithLabelValues(x.name, p.Dataset).Add(float64(d.rows))
	x.metrics.filtered.WithLabelValues(x.name).Add(float64(d.filtered))
}

// queuedNext is what queueNext did: next holds the unit queued (rows nil when none), landed
// whether its write landed, stale whether the write was lost to a rewind or an edit.
type queuedNext struct {
	next   decided
	landed bool
	stale  bool
	err    error
}

// queueNext runs beside the ship of cur: it decides the unit after cur from the rows read
// ahead and queues its intent behind cur, in one write with the settle of prev (delivered
// before cur shipped) when there is one. With nothing to queue it writes nothing, and the
// loop settles prev with cur. It only reads ahead and writes the watermark; the loop alone
// ships, and it waits for queueNext before it writes or ships anything else.
func (x *instance) queueNext(p Part, k watermark.Key, ahead *readAhead, cur inFlight, prev *delivered, head int64, lim limits) queuedNext {
	t := time.Now()
	nx := x.decideAhead(p, ahead, cur.u.Last, head, lim)
	if nx.rows != nil {
		x.step("read", t)
	}
	var m move
	switch {
	case nx.rows == nil:
		// Nothing to queue: prev's settle, if any, waits for cur's answer and goes in the
		// same write as cur's, so a run's last two units cost one write, not two.
		return queuedNext{}
	case prev != nil:
		m = moveSettleQueued(prev.f, prev.rows, prev.filtered, x.now().UTC(), cur.u, &nx.u)
	default:
		m = moveQueue(cur, nx.u)
	}
	t = time.Now()
	_, landed, err := x.advance(k, m)
	x.step("record", t)
	if err != nil || !landed {
		nx.rows.release()
		return queuedNext{stale: err == nil, err: err}
	}
	return queuedNext{next: nx, landed: true}
}

// decided is a unit decided with its rows.
type decided struct {
	u    watermark.Unit
	rows *unitRows
}

// decideAhead decides the unit after one ending at since from the rows read ahead, as the
// loop's next turn would from the same rows: nothing (rows nil) when none are read ahead
// for that position, the read failed, or the partition is withheld; the next turn then
// decides afresh and reports what it finds.
func (x *instance) decideAhead(p Part, ahead *readAhead, since, head int64, lim limits) decided {
	if since >= head || x.withheld(p) || !ahead.follows(since) {
		return decided{}
	}
	rows := ahead.take(since, head, lim, x.live.Load().transform) // never an empty unit: the read ahead drops those
	if rows == nil {
		return decided{}
	}
	return decided{u: x.decide(p, since, rows), rows: rows}
}

// decide is the unit of p above since that rows, just read, make: its bounds, its id, and
// the transform they were shaped with.
func (x *instance) decide(p Part, since int64, rows *unitRows) watermark.Unit {
	u := watermark.Unit{From: since, First: rows.first, Last: rows.last, Rows: rows.rows, ID: x.unitID(p, rows.first, rows.last), KeyLayout: newKeyLayout, Transform: rows.transform}
	if rows.transform != "" && rows.kept > 0 {
		u.KeptFirst, u.KeptLast = rows.keptFirst, rows.keptLast
	}
	return u
}

func (x *instance) shipUnit(ctx context.Context, p Part, u watermark.Unit, rows *unitRows) (int64, error) {
	if rows.kept == 0 {
		// The unit's rows were all pruned since it was decided (a forced gap), or its
		// transform kept none: there is nothing to write (SPEC 6: no empty files).
		return 0, nil
	}
	return x.shipper().ship(ctx, p, u, rows)
}

// newKeyLayout is the blob key layout of every unit decided now (SPEC 6); an intent decided
// before keeps the one it names.
const newKeyLayout = int(blob.LayoutReserved)

// unitID is the batch id / object identity of a unit: a function of where the rows come
// from and their seq bounds only, so every retry of a unit carries the same one.
func (x *instance) unitID(p Part, first, last int64) string {
	return forward.BatchID(x.gateway, x.incarnation, p.Dataset, p.Partition, first, last)
}

// hooks let crash tests stop the process at exact steps of a unit.
type hooks struct {
	afterIntent    func(watermark.Key, watermark.Unit)
	afterShip      func(watermark.Key, watermark.Unit)
	afterWatermark func(watermark.Key, watermark.Unit)
}
