package sink

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/hyp-project/hyp/internal/config"
)

// A unit is shaped by the transform its intent names: a retry after a failure ships the same
// rows in the same shape although the config changed in between, and the units decided
// after the change take the new transform. Dropped rows count as exported and filtered.
func TestTransformIntentKeepsItsShape(t *testing.T) {
	const even, odd = "SELECT * FROM rows WHERE id % 2 = 0", "SELECT * FROM rows WHERE id % 2 = 1"
	cfg := blobSink(t.TempDir(), "s1")
	cfg.Transform = even
	e := newEnv(t, 4, cfg)
	ids := e.l.ingest(t, e.c, "a", 8)
	f := e.fakes["s1"]
	f.fail = func(shipCall) (bool, error) { return false, errors.New("boom") }
	if res := runNow(t, e.d, "s1"); res.Status != "failed" {
		t.Fatalf("run: %+v, want failed", res)
	}
	failed := f.all()[0]
	st := getWM(t, e.d, key("s1", "a"))
	if st.Intent == nil || st.Intent.Transform != even || st.Intent.Rows != 4 {
		t.Fatalf("intent %+v, want 4 rows shaped by %q", st.Intent, even)
	}
	keptOf := func(ids []int64, parity int64) []int64 {
		var out []int64
		for _, id := range ids {
			if id%2 == parity {
				out = append(out, id)
			}
		}
		return out
	}
	if want := keptOf(ids[:4], 0); !slices.Equal(failed.IDs, want) {
		t.Fatalf("first unit shipped ids %v, want %v", failed.IDs, want)
	}

	next := cfg
	next.Transform = odd
	applied, restart := e.d.Reconfigure(map[string]config.Sink{"s1": next})
	if len(restart) != 0 || len(applied) != 1 || !strings.Contains(applied[0], "transform") {
		t.Fatalf("reconfigure: applied %v, restart %v", applied, restart)
	}
	f.fail = nil
	f.reset()
	if res := runNow(t, e.d, "s1"); res.Status != "ok" || res.Rows != 8 {
		t.Fatalf("retry run: %+v, want ok with 8 rows exported", res)
	}
	calls := f.ok()
	if len(calls) != 2 || calls[0].Unit != failed.Unit || !slices.Equal(calls[0].IDs, failed.IDs) {
		t.Fatalf("retry shipped %+v, want the failed unit %+v with ids %v first", calls, failed.Unit, failed.IDs)
	}
	if want := keptOf(ids[4:], 1); calls[1].Unit.Transform != odd || !slices.Equal(calls[1].IDs, want) {
		t.Fatalf("second unit %+v ids %v, want ids %v shaped by %q", calls[1].Unit, calls[1].IDs, want, odd)
	}
	st = getWM(t, e.d, key("s1", "a"))
	if st.ExportedRows != 8 || st.FilteredRows != 4 || st.Intent != nil {
		t.Fatalf("watermark %+v, want 8 exported of which 4 filtered", st)
	}
}

// A unit the transform empties ships nothing, and the watermark still passes it.
func TestTransformEmptyUnitShipsNothing(t *testing.T) {
	cfg := blobSink(t.TempDir(), "s1")
	cfg.Transform = "SELECT * FROM rows WHERE false"
	e := newEnv(t, 4, cfg)
	e.l.ingest(t, e.c, "a", 6)
	if res := runNow(t, e.d, "s1"); res.Status != "ok" || res.Rows != 6 || res.Bytes != 0 {
		t.Fatalf("run: %+v, want ok, 6 rows exported, 0 bytes", res)
	}
	if calls := e.fakes["s1"].all(); len(calls) != 0 {
		t.Fatalf("shipped %+v, want nothing", calls)
	}
	if st := getWM(t, e.d, key("s1", "a")); st.Seq != headOf(t, e.c, "a") || st.FilteredRows != 6 {
		t.Fatalf("watermark %+v, want at the head with 6 filtered", st)
	}
}

// A transform that fails over a unit's rows (here a cast the rows refuse) fails the
// partition's export with the reason in its last error, writes no intent and moves nothing;
// once a reload fixes the transform, the rows go out.
func TestTransformFailingOverRowsIsReported(t *testing.T) {
	cfg := blobSink(t.TempDir(), "s1")
	cfg.Transform = "SELECT * REPLACE (CAST(msg AS INTEGER) AS msg) FROM rows"
	e := newEnv(t, 4, cfg)
	e.l.ingest(t, e.c, "a", 6)
	res := runNow(t, e.d, "s1")
	if res.Status != "failed" || len(res.Errors) != 1 || !strings.Contains(res.Errors[0], "transform") {
		t.Fatalf("run: %+v, want failed naming the transform", res)
	}
	st := getWM(t, e.d, key("s1", "a"))
	if st.Seq != 0 || st.Intent != nil || !strings.Contains(st.LastError, "transform") {
		t.Fatalf("watermark %+v, want unmoved, no intent, the transform's error", st)
	}
	if calls := e.fakes["s1"].all(); len(calls) != 0 {
		t.Fatalf("shipped %+v", calls)
	}
	next := cfg
	next.Transform = "SELECT * FROM rows"
	e.d.Reconfigure(map[string]config.Sink{"s1": next})
	if res := runNow(t, e.d, "s1"); res.Status != "ok" || res.Rows != 6 {
		t.Fatalf("run after the fix: %+v", res)
	}
	if st := getWM(t, e.d, key("s1", "a")); st.LastError != "" || st.ExportedRows != 6 {
		t.Fatalf("watermark after the fix: %+v", st)
	}
}
