package sink

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hyp-project/hyp/internal/watermark"
)

// A partition's position is decided in one place, for both exporters: the unit exporter
// (forward and blob, exportPartition) and the table exporter (iceberg, exportTable).
//
// nextAction is the pure part: from the watermark state and the partition's head it says
// what the partition needs next; after a read, afterRead says what the rows read need.
// nextUnit carries both out up to the point where the exporters differ, a unit to ship, and
// every write to a watermark is a move made by advance, whose requirement says what the
// write stands on. The order of a unit's steps is fixed: decide it (nextUnit), write its
// intent, deliver it, settle it (moveSettle). Nothing else may be reordered. One merge is
// allowed, the unit exporter's when it reads ahead (a forward sink, exportPartition): while
// a unit ships, the next unit, already read, is queued behind it (its intent written as
// State.Next: moveQueue), in one write with the settle of the unit delivered before
// (moveSettleQueued), so that the next unit ships the moment the one in flight is
// delivered; with nothing left to queue, the last two units of a run settle in one write
// once the last is delivered (moveSettleThrough). A unit still ships only once its own
// intent is durable, and the watermark passes only units delivered.

// action is what a partition's watermark asks of an exporter next.
type action int

const (
	actIdle   action = iota // at the head: nothing new to export
	actReplay               // a unit is in flight (an intent): exactly its rows again
	actClamp                // above the head: only an edit, or restored state, puts it there
	actRead                 // rows above the position: read the next unit
)

// nextAction decides what st, of a partition whose newest row is head, needs next.
func nextAction(st watermark.State, head int64) action {
	switch {
	case st.Intent != nil:
		return actReplay
	case st.Seq > head:
		return actClamp
	case st.Seq == head:
		return actIdle
	}
	return actRead
}

// readAction is what rows read above a position need.
type readAction int

const (
	actShip     readAction = iota // decide a unit of them
	actSkip                       // none is left (retention removed them, recording gaps): move to the head
	actWithhold                   // a withheld source: count them and move past, never ship them
)

// afterRead decides what a read of n rows above a position needs, withheld telling whether
// the partition's source is withheld.
func afterRead(n int64, withheld bool) readAction {
	switch {
	case n == 0:
		return actSkip
	case withheld:
		return actWithhold
	}
	return actShip
}

// A move is one write an exporter makes to a partition's watermark: what it requires of
// the state and what it changes. What losing its compare-and-set (watermark.ErrStale) means
// is fixed by the move, never by the caller:
//
//	move        requires            lost means
//	clamp       position P          the position moved: decide again
//	skip        position P          the position moved: decide again
//	withhold    position P          the position moved: decide again (nothing is counted)
//	intent      position P          the position moved: decide again (the rows are dropped)
//	settle      the intent U at P   a rewind or an edit moved the position after U was
//	            (and V queued       delivered: the new position wins, and the destination
//	            behind it)          dedupes U if it comes again
//	settle      the intent U at P   as settle (V was delivered too)
//	through     and V queued behind
//	            it
//	queue       the intent U at P   the position moved while U ships: the new position
//	                                wins (the queued unit's rows are dropped)
//	drop        the intent U at P   decide again
//	quarantine  the intent U at P   decide again (the quarantined file stays for operators)
//	note        nothing             never lost
//
// Retention's gap bookkeeping changes none of what these stand on, so it never makes an
// export stale.
type move struct {
	req watermark.Requirement
	fn  func(*watermark.State) error
}

// advance makes m on k's watermark: landed false means it was lost as the table above says
// (never an error).
func (x *instance) advance(k watermark.Key, m move) (st watermark.State, landed bool, err error) {
	st, err = x.store.Apply(k, m.req, m.fn)
	if errors.Is(err, watermark.ErrStale) {
		return st, false, nil
	}
	return st, err == nil, err
}

func moveClamp(from, to int64) move {
	return move{watermark.AtPosition(from), func(s *watermark.State) error { s.Seq = to; return nil }}
}

func moveSkip(from, head int64) move {
	return move{watermark.AtPosition(from), func(s *watermark.State) error { s.Seq = head; return nil }}
}

func moveWithhold(u watermark.Unit) move {
	return move{watermark.AtPosition(u.From), func(s *watermark.State) error {
		s.Seq, s.WithheldRows = u.Last, s.WithheldRows+u.Rows
		return nil
	}}
}

func moveIntent(u watermark.Unit) move {
	return move{watermark.AtPosition(u.From), func(s *watermark.State) error { s.Intent = &u; return nil }}
}

// inFlight is a unit in flight and the position it was found at (pending.at).
type inFlight struct {
	at int64
	u  watermark.Unit
}

// moveSettle moves the watermark past the delivered unit f, counting exported rows (as
// read; filtered of them dropped by its transform) at when; next, when not nil, is the
// following unit's intent, written in the same write. A unit queued behind f (State.Next)
// is the following unit: the caller passes it as next.
func moveSettle(f inFlight, exported, filtered int64, when time.Time, next *watermark.Unit) move {
	return move{watermark.HoldsIntent(f.at, f.u), settle(f, exported, filtered, when, next, nil)}
}

// moveSettleQueued settles the delivered unit f while cur, queued behind it, ships: cur
// becomes the intent, and next, when not nil, is queued behind cur in the same write.
func moveSettleQueued(f inFlight, exported, filtered int64, when time.Time, cur watermark.Unit, next *watermark.Unit) move {
	return move{watermark.HoldsQueue(f.at, f.u, cur), settle(f, exported, filtered, when, &cur, next)}
}

// settle is every settle's change: the watermark past f, its rows counted, intent and next
// the units in flight after it (nil for none).
func settle(f inFlight, exported, filtered int64, when time.Time, intent, next *watermark.Unit) func(*watermark.State) error {
	return func(s *watermark.State) error {
		s.Seq, s.ExportedRows, s.Intent, s.Next = f.u.Last, s.ExportedRows+exported, intent, next
		s.FilteredRows += filtered
		s.LastExportAt, s.LastError = &when, ""
		return nil
	}
}

// moveSettleThrough settles the delivered unit f and cur, queued behind it and delivered
// too, in one write: the watermark moves past both, counting exported and filtered rows for
// both.
func moveSettleThrough(f inFlight, cur watermark.Unit, exported, filtered int64, when time.Time) move {
	return move{watermark.HoldsQueue(f.at, f.u, cur), settle(inFlight{u: cur}, exported, filtered, when, nil, nil)}
}

// moveQueue queues next behind f, the unit in flight, so that next ships the moment f is
// delivered.
func moveQueue(f inFlight, next watermark.Unit) move {
	return move{watermark.HoldsIntent(f.at, f.u), func(s *watermark.State) error {
		if s.Next != nil {
			return fmt.Errorf("a unit (seqs %d-%d) is already queued behind seqs %d-%d", s.Next.First, s.Next.Last, f.u.First, f.u.Last)
		}
		s.Next = &next
		return nil
	}}
}

// moveDrop drops the intent of f: the destination found its unit too large (nothing of it
// was stored), so that a smaller unit replaces it, or no table commit can hold it.
func moveDrop(f inFlight) move {
	return move{watermark.HoldsIntent(f.at, f.u), func(s *watermark.State) error { s.Intent, s.Next = nil, nil; return nil }}
}

func moveQuarantine(f inFlight, q watermark.Quarantined, why error) move {
	u := f.u
	return move{watermark.HoldsIntent(f.at, u), func(s *watermark.State) error {
		s.Seq, s.Intent, s.Next = u.Last, nil, nil
		s.Quarantined = append(s.Quarantined, q)
		s.LastError = fmt.Sprintf("quarantined seqs %d-%d: %v", u.First, u.Last, why)
		return nil
	}}
}

// moveNote records why the partition does not move as its last error.
func moveNote(msg string) move {
	return move{watermark.Anyway(), func(s *watermark.State) error { s.LastError = msg; return nil }}
}

// pending is what nextUnit found of a partition: nothing (idle), the unit in flight at the
// position it was found at (replay, rows not read) with the unit queued behind it if any,
// or a fresh unit decided from the rows just read above u.From.
type pending struct {
	at     int64
	u      watermark.Unit
	queued *watermark.Unit
	rows   *unitRows
	replay bool
	idle   bool
}

// reader reads the rows of a partition in (since, until]; withheld says they will only be
// counted (never shaped nor encoded).
type reader func(since, until int64, withheld bool) (*unitRows, error)

// nextUnit finds p's next unit up to head, moving past what needs no delivery on the way:
// a watermark above the head is clamped, rows gone from the cache skipped, a withheld
// source's rows counted. A failed read is noted as the partition's last error.
func (x *instance) nextUnit(ctx context.Context, p Part, head int64, read reader) (pending, error) {
	k := x.key(p)
	for {
		if err := ctx.Err(); err != nil {
			return pending{}, err
		}
		st, err := x.store.Get(k)
		if err != nil {
			return pending{}, err
		}
		var m move
		var withheld int64
		switch nextAction(st, head) {
		case actIdle:
			return pending{idle: true}, nil
		case actReplay:
			return pending{at: st.Seq, u: *st.Intent, queued: st.Next, replay: true}, nil
		case actClamp:
			// Adopted as it is, a watermark above the head would skip the next rows
			// silently. It is read as the edit meant it when it was made: every row ingested
			// since the file changed is still to be exported.
			to, ok, err := x.clampAbove(ctx, k, p, st.Seq)
			if err != nil {
				return pending{}, err
			}
			if !ok {
				return pending{idle: true}, nil // a rewind to the latest row raced the tick
			}
			x.log.Warn("watermark is above the partition's head; clamped to the last row ingested before it was written", "dataset", p.Dataset, "partition", p.Partition, "watermark_seq", st.Seq, "clamped_to", to)
			m = moveClamp(st.Seq, to)
		case actRead:
			w := x.withheld(p)
			rows, err := read(st.Seq, head, w)
			if err != nil {
				return pending{}, x.readFailed(ctx, k, err)
			}
			switch afterRead(rows.rows, w) {
			case actShip:
				return pending{at: st.Seq, u: x.decide(p, st.Seq, rows), rows: rows}, nil
			case actSkip:
				rows.release()
				m = moveSkip(st.Seq, head)
			case actWithhold:
				rows.release()
				u := x.decide(p, st.Seq, rows)
				withheld = u.Rows
				m = moveWithhold(u)
			}
		}
		_, landed, err := x.advance(k, m)
		if err != nil {
			return pending{}, err
		}
		if landed && withheld > 0 {
			// Counted once the write landed: a lost one reads the same rows again and
			// counts them then.
			x.metrics.withheld.WithLabelValues(x.name, p.Dataset).Add(float64(withheld))
		}
	}
}

// clampAbove decides where a watermark at seq goes when it is above the tick's head: false
// when it is not above the partition's head now (a rewind to the latest row raced the
// tick); else the largest seq ingested before the watermark file was last written.
func (x *instance) clampAbove(ctx context.Context, k watermark.Key, p Part, seq int64) (int64, bool, error) {
	pos, err := x.cache.Positions(p.Dataset, p.Partition)
	if err != nil {
		return 0, false, err
	}
	defer pos.Release()
	if seq <= pos.Head {
		return 0, false, nil
	}
	path, err := x.store.Path(k)
	if err != nil {
		return 0, false, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return 0, false, fmt.Errorf("watermark %s: %w", path, err)
	}
	to, err := pos.SeqBefore(ctx, fi.ModTime())
	if err != nil {
		return 0, false, err
	}
	return min(to, pos.Head), true, nil
}

// key is p's watermark.
func (x *instance) key(p Part) watermark.Key {
	return watermark.Key{Instance: x.name, Dataset: p.Dataset, Partition: p.Partition}
}
