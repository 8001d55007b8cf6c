package sink

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyp-project/hyp/internal/watermark"
)

// Reading a partition's next unit while the current one ships must not change what ships:
// every scenario runs with and without the read ahead, and the units shipped (bounds, ids,
// rows, outcomes, in order) and the watermarks left must be the same, and exactly once.
func TestReadAheadShipsWhatReadingAfterwardsShips(t *testing.T) {
	type scenario struct {
		name string
		// setup ingests and arms the fake; it runs before the first tick.
		setup func(t *testing.T, e *env)
		ticks int
		// exactlyOnce: no watermark is moved by hand, so every row ships once.
		exactlyOnce bool
	}
	// failCall makes sink s1's n-th ship call end as fail says (stored, err); the others pass.
	failCall := func(e *env, n int, fail func() (bool, error)) {
		calls := 0
		e.fakes["s1"].fail = func(shipCall) (bool, error) {
			if calls++; calls == n {
				return fail()
			}
			return false, nil
		}
	}
	rewindOnce := func(t *testing.T, e *env, at int, to func() int64) {
		n := 0
		x := e.d.inst(t, "s1")
		x.hooks.afterShip = func(k watermark.Key, u watermark.Unit) {
			if n++; n != at {
				return
			}
			seq := to()
			cur, err := e.d.Store().Get(k)
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := e.d.Store().Update(k, cur.Generation, func(s *watermark.State) error { s.Seq = seq; return nil }); err != nil {
				t.Errorf("move watermark: %v", err)
			}
		}
	}
	scenarios := []scenario{
		{"many units, two partitions, many files", func(t *testing.T, e *env) {
			for range 3 {
				e.l.ingest(t, e.c, "a", 9)
				e.l.ingest(t, e.c, "b", 7)
				if err := e.c.Flush(e.ctx); err != nil {
					t.Fatal(err)
				}
			}
		}, 1, true},
		{"a unit fails, the next tick retries it", func(t *testing.T, e *env) {
			e.l.ingest(t, e.c, "a", 23)
			failCall(e, 3, func() (bool, error) { return false, errors.New("boom: destination unavailable") })
		}, 2, true},
		{"a unit is stored but its ack is lost", func(t *testing.T, e *env) {
			e.l.ingest(t, e.c, "a", 23)
			failCall(e, 2, func() (bool, error) { return true, errors.New("boom: ack lost") })
		}, 2, true},
		{"rewind while a unit ships", func(t *testing.T, e *env) {
			seqs := e.l.seqs(e.l.ingest(t, e.c, "a", 23))
			rewindOnce(t, e, 3, func() int64 { return seqs[1] })
		}, 1, false},
		{"skip ahead while a unit ships", func(t *testing.T, e *env) {
			seqs := e.l.seqs(e.l.ingest(t, e.c, "a", 23))
			rewindOnce(t, e, 2, func() int64 { return seqs[16] })
		}, 1, false},
		{"rows arrive between ticks", func(t *testing.T, e *env) {
			e.l.ingest(t, e.c, "a", 12)
			failCall(e, 2, func() (bool, error) {
				e.l.ingest(t, e.c, "a", 6)
				if err := e.c.Flush(e.ctx); err != nil {
					t.Error(err)
				}
				return false, errors.New("boom: destination unavailable")
			})
		}, 2, true},
	}
	type outcome struct {
		calls []string
		marks []watermark.State
	}
	run := func(t *testing.T, sc scenario, ahead bool) outcome {
		e := newEnv(t, 4)
		x := e.d.inst(t, "s1")
		x.lim.readAhead = ahead
		sc.setup(t, e)
		for range sc.ticks {
			e.d.RunNow(e.ctx, "s1") // failures are part of the scenario; the calls tell
		}
		var out outcome
		for _, c := range e.fakes["s1"].all() {
			u := c.Unit
			u.ID = "" // made of the gateway id, which differs between the two homes
			out.calls = append(out.calls, fmt.Sprintf("%s %+v ids %v failed %v", c.Part.Partition, u, c.IDs, c.Err != nil))
		}
		for _, src := range []string{"a", "b"} {
			st := getWM(t, e.d, key("s1", src))
			st.LastExportAt, st.UpdatedAt, st.Generation = nil, time.Time{}, 0
			out.marks = append(out.marks, st)
		}
		if ahead && sc.exactlyOnce {
			exactlyOnce(t, e.l, e.fakes["s1"].all(), "a", "b")
		}
		return out
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			without, with := run(t, sc, false), run(t, sc, true)
			if !slices.Equal(with.calls, without.calls) {
				t.Fatalf("with the read ahead shipped\n%v\nwithout\n%v", with.calls, without.calls)
			}
			for i := range with.marks {
				if fmt.Sprint(with.marks[i]) != fmt.Sprint(without.marks[i]) {
					t.Fatalf("watermark %d with the read ahead %+v, without %+v", i, with.marks[i], without.marks[i])
				}
			}
		})
	}
}

// With the next unit read ahead, the unit after the one in flight is queued behind it while
// it ships, in one write with the settle of the unit before: a crash right after that write
// finds the unit in flight and the one queued, and the restart ships exactly those two
// units, in order, once each (the one in flight again under its id, which the destination
// dedupes), before any unit of the rows that arrived in between.
func TestQueuedIntentsSurviveACrash(t *testing.T) {
	e := flushedEnv(t, 14, true)
	n := 0
	e.d.inst(t, "s1").hooks.afterWatermark = func(k watermark.Key, u watermark.Unit) {
		if n++; n == 2 {
			panic(crashPanic{"after-watermark"})
		}
	}
	if _, crashed := runCrashing(t, e.d, "s1"); !crashed {
		t.Fatal("the hook never fired")
	}
	// The second settle (of seqs 5-8) was written while the third unit shipped, queueing
	// the fourth (seqs 13-14) behind it.
	calls := e.fakes["s1"].all()
	st := getWM(t, e.d, key("s1", "a"))
	if len(calls) != 3 || st.Seq != calls[1].Unit.Last || st.Intent == nil || *st.Intent != calls[2].Unit ||
		st.Next == nil || st.Next.From != st.Intent.Last || st.Next.Rows != 2 {
		t.Fatalf("after the second settle: %d calls, watermark %+v (next %+v); want the second unit's end, the third unit in flight and the fourth queued", len(calls), st, st.Next)
	}
	inFlight, queued := *st.Intent, *st.Next
	// sink status shows both.
	ss, err := e.d.Status(e.ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ss[0].Partitions, func(ps PartitionStatus) bool { return ps.Partition == "source=a" })
	if i < 0 {
		t.Fatalf("status has no source=a: %+v", ss)
	}
	if ps := ss[0].Partitions[i]; ps.InFlight == nil || *ps.InFlight != inFlight || ps.Queued == nil || *ps.Queued != queued {
		t.Fatalf("status in flight %+v, queued %+v; want %+v, %+v", ps.InFlight, ps.Queued, inFlight, queued)
	}

	e.l.ingest(t, e.c, "a", 3)
	if err := e.c.Flush(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.restart(t, 4)
	e.d.inst(t, "s1").lim.readAhead = true
	if res := runNow(t, e.d, "s1"); res.Status != "ok" {
		t.Fatalf("run after restart: %+v", res)
	}
	calls = e.fakes["s1"].all()
	if len(calls) < 5 || calls[3].Unit != inFlight || calls[4].Unit != queued {
		t.Fatalf("first units after restart %+v, want the one in flight %+v, then the one queued %+v", calls[3:], inFlight, queued)
	}
	for _, c := range calls {
		checkUnit(t, e.d.inst(t, "s1"), e.l, c)
	}
	exactlyOnce(t, e.l, calls, "a")
	if st := getWM(t, e.d, key("s1", "a")); st.Intent != nil || st.Next != nil || st.Seq != calls[len(calls)-1].Unit.Last {
		t.Fatalf("watermark at the end: %+v", st)
	}
}

// A rewind that lands while a unit ships, after the next unit was queued behind it, wins
// before the queued unit ships: the queued unit never goes out, and the export goes on from
// the rewound position.
func TestRewindDropsTheQueuedUnit(t *testing.T) {
	e := flushedEnv(t, 12, true)
	x := e.d.inst(t, "s1")
	n := 0
	x.hooks.afterShip = func(k watermark.Key, u watermark.Unit) {
		if n++; n != 1 {
			return
		}
		st, err := e.d.Store().Get(k)
		if err != nil || st.Next == nil {
			t.Errorf("after the first ship: %+v, %v; want a unit queued", st, err)
			return
		}
		if _, err := e.d.Store().Update(k, st.Generation, func(s *watermark.State) error { s.Seq, s.Intent = 0, nil; return nil }); err != nil {
			t.Errorf("rewind: %v", err)
		}
	}
	if res := runNow(t, e.d, "s1"); res.Status != "ok" {
		t.Fatalf("run: %+v", res)
	}
	var firsts []int64
	for _, c := range e.fakes["s1"].all() {
		firsts = append(firsts, c.Unit.First)
	}
	if want := []int64{1, 1, 5, 9}; !slices.Equal(firsts, want) {
		t.Fatalf("units shipped start at %v, want %v (the queued unit 5-8 not shipped before the rewound export)", firsts, want)
	}
	if st := getWM(t, e.d, key("s1", "a")); st.Intent != nil || st.Next != nil || st.Seq != 12 {
		t.Fatalf("watermark at the end: %+v", st)
	}
}

// The last unit of a run settles together with the one before it; when the last one fails
// instead, the one before is settled first, and the failure is the last one's alone: a
// transient failure leaves it the intent for the next run, a poison one is quarantined.
func TestLastUnitFailsWhileTheOneBeforeIsOwed(t *testing.T) {
	for _, poison := range []bool{false, true} {
		t.Run(fmt.Sprintf("poison %v", poison), func(t *testing.T) {
			e := flushedEnv(t, 8, true)
			calls := 0
			e.fakes["s1"].fail = func(shipCall) (bool, error) {
				if calls++; calls != 2 {
					return false, nil
				}
				if poison {
					return false, &errPoison{status: 422, err: errors.New("422: not acceptable")}
				}
				return false, errors.New("injected: destination unavailable")
			}
			res := runNow(t, e.d, "s1")
			st := getWM(t, e.d, key("s1", "a"))
			switch {
			case poison && (res.Status != "partial" || st.Seq != 8 || st.Intent != nil || st.Next != nil || len(st.Quarantined) != 1 || st.ExportedRows != 4):
				t.Fatalf("after a poison last unit: %+v, watermark %+v", res, st)
			case !poison && (res.Status == "ok" || st.Seq != 4 || st.Intent == nil || st.Intent.From != 4 || st.Next != nil || st.ExportedRows != 4):
				t.Fatalf("after a failed last unit: %+v, watermark %+v (intent %+v)", res, st, st.Intent)
			}
			if poison {
				return
			}
			if res := runNow(t, e.d, "s1"); res.Status != "ok" || res.Rows != 4 {
				t.Fatalf("retry: %+v", res)
			}
			if st := getWM(t, e.d, key("s1", "a")); st.Seq != 8 || st.Intent != nil || st.ExportedRows != 8 {
				t.Fatalf("after the retry: %+v", st)
			}
			exactlyOnce(t, e.l, e.fakes["s1"].all(), "a")
		})
	}
}

// hyp_sink_unit_step_seconds sees every unit's steps: one read and one ship a unit; with
// the next unit read ahead one watermark write a unit (queueing the next with the settle of
// the one before; the last two units settle together) and the first intent, without it two.
func TestUnitStepsMetric(t *testing.T) {
	for _, ahead := range []bool{false, true} {
		t.Run(fmt.Sprintf("read ahead %v", ahead), func(t *testing.T) {
			e := flushedEnv(t, 14, ahead)
			x := e.d.inst(t, "s1")
			if res := runNow(t, e.d, "s1"); res.Status != "ok" || res.Units != 4 {
				t.Fatalf("run: %+v", res)
			}
			count := func(step string) float64 {
				return metricValue(t, x.metrics.unitStep.WithLabelValues("s1", step).(prometheus.Metric))
			}
			records := 8.0
			if ahead {
				records = 5
			}
			if r, s, w := count("read"), count("ship"), count("record"); r != 4 || s != 4 || w != records {
				t.Fatalf("steps observed: read %v, ship %v, record %v; want 4, 4, %v", r, s, w, records)
			}
		})
	}
}

// flushedEnv is an env of 4-row units whose sink s1 reads ahead as ahead says, with rows
// rows of source a ingested and flushed.
func flushedEnv(t *testing.T, rows int, ahead bool) *env {
	t.Helper()
	e := newEnv(t, 4)
	e.d.inst(t, "s1").lim.readAhead = ahead
	e.l.ingest(t, e.c, "a", rows)
	if err := e.c.Flush(e.ctx); err != nil {
		t.Fatal(err)
	}
	return e
}
