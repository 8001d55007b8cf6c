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

// With the next unit read ahead, the advance past a shipped unit writes the next unit's
// intent in the same write: a crash right after it finds that intent, and the restart
// ships exactly that unit, once, whatever arrived in between.
func TestAdvanceWritesTheReadAheadIntent(t *testing.T) {
	e := newEnv(t, 4)
	e.d.inst(t, "s1").lim.readAhead = true
	e.l.ingest(t, e.c, "a", 14)
	if err := e.c.Flush(e.ctx); err != nil {
		t.Fatal(err)
	}
	n := 0
	e.d.inst(t, "s1").hooks.afterWatermark = func(k watermark.Key, u watermark.Unit) {
		if n++; n == 2 {
			panic(crashPanic{"after-watermark"})
		}
	}
	if _, crashed := runCrashing(t, e.d, "s1"); !crashed {
		t.Fatal("the hook never fired")
	}
	calls := e.fakes["s1"].all()
	st := getWM(t, e.d, key("s1", "a"))
	if len(calls) != 2 || st.Seq != calls[1].Unit.Last || st.Intent == nil || st.Intent.From != st.Seq || st.Intent.Rows != 4 {
		t.Fatalf("after the second advance: %d calls, watermark %+v; want the second unit's end and the third unit's intent", len(calls), st)
	}
	intent := *st.Intent

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
	if len(calls) < 3 || calls[2].Unit != intent {
		t.Fatalf("first unit after restart %+v, want the intent %+v", calls[2:], intent)
	}
	for _, c := range calls {
		checkUnit(t, e.d.inst(t, "s1"), e.l, c)
	}
	exactlyOnce(t, e.l, calls, "a")
	if st := getWM(t, e.d, key("s1", "a")); st.Intent != nil || st.Seq != calls[len(calls)-1].Unit.Last {
		t.Fatalf("watermark at the end: %+v", st)
	}
}

// hyp_sink_unit_step_seconds sees every unit's steps: one read and one ship a unit; with
// the next unit read ahead one watermark write a unit and the first intent, without it two.
func TestUnitStepsMetric(t *testing.T) {
	for _, ahead := range []bool{false, true} {
		t.Run(fmt.Sprintf("read ahead %v", ahead), func(t *testing.T) {
			e := newEnv(t, 4)
			x := e.d.inst(t, "s1")
			x.lim.readAhead = ahead
			e.l.ingest(t, e.c, "a", 14)
			if err := e.c.Flush(e.ctx); err != nil {
				t.Fatal(err)
			}
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
