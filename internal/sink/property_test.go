package sink

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/watermark"
)

// The exactly-once model test: random sequences of ingest, flush, compaction, retention,
// ticks, ticks that crash or fail at a random step, and restarts, over a real cache and two
// sinks whose destinations are in-memory models:
//
//   - "blob": objects keyed by (dataset, partition, first, last); a put of an existing key
//     with the same unit id is a no-op, with another id a conflict (a violation here);
//   - "fwd": a server that stores rows deduplicated by (partition, seq).
//
// Operator rewinds re-export rows legitimately, so they are applied to the fwd sink only
// (whose server dedupes by seq), between ticks from another process and in the middle of a
// unit; hand edits that keep the content (a file rewritten in another layout) hit both sinks.
//
// Checked after every action: no watermark above its partition's head; every row at or
// below a watermark is at that sink's destination (nothing skipped); no row in two blob
// objects; every unit shipped is exactly the cache's rows of (from, last] with its id; the
// cache still holds every committed row above the lowest watermark. After a clean tick every
// watermark is at its head. At the end, after a clean tick: every ingested row in exactly
// one blob object, and the server's rows are exactly the ingested rows.

const (
	blobSinkName = "blob"
	fwdSinkName  = "fwd"
)

var propSources = []string{"a", "b", "c"}

// blobModel is an object store.
type blobModel struct {
	objs map[string]blobObject
}

type blobObject struct {
	unit watermark.Unit
	ids  []int64
}

func (b *blobModel) put(c shipCall) error {
	k := fmt.Sprintf("%s/%s/part-%020d-%020d", c.Part.Dataset, c.Part.Partition, c.Unit.First, c.Unit.Last)
	if o, ok := b.objs[k]; ok {
		if o.unit.ID != c.Unit.ID || !slices.Equal(o.ids, c.IDs) {
			return fmt.Errorf("conflict: %s holds unit %+v ids %v, put of unit %+v ids %v", k, o.unit, o.ids, c.Unit, c.IDs)
		}
		return nil // the same unit again: first writer wins, nothing changes
	}
	b.objs[k] = blobObject{unit: c.Unit, ids: slices.Clone(c.IDs)}
	return nil
}

// fwdModel is the central server's ledger.
type fwdModel struct {
	stored map[string]map[int64]int64 // partition -> seq -> id
}

func (f *fwdModel) put(c shipCall) error {
	m := f.stored[c.Part.Partition]
	if m == nil {
		m = map[int64]int64{}
		f.stored[c.Part.Partition] = m
	}
	for i, s := range c.Seqs {
		if prev, ok := m[s]; ok {
			if prev != c.IDs[i] {
				return fmt.Errorf("conflict: seq %d of %s stored as id %d, now sent as id %d", s, c.Part.Partition, prev, c.IDs[i])
			}
			continue // a duplicate, counted and not stored again
		}
		m[s] = c.IDs[i]
	}
	return nil
}

type propModel struct {
	ctx      context.Context
	home     string
	clk      *testClock
	c        *cache.Cache
	d        *Driver
	fakes    map[string]*fakeShipper
	unitRows map[string]int64
	l        *ledger
	blob     *blobModel
	fwd      *fwdModel
	checked  map[string]int // calls of each fake already checked
	conflict []string

	// counts, for the log of a failing case
	crashes, fails, restarts, rewinds int
	pruned                            int64
}

func newPropModel(t *rapid.T, base string) *propModel {
	home, err := os.MkdirTemp(base, "case")
	if err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	m := &propModel{
		ctx:  context.Background(),
		home: home,
		clk:  newTestClock(),
		unitRows: map[string]int64{
			blobSinkName: int64(rapid.IntRange(3, 7).Draw(t, "blob_unit_rows")),
			fwdSinkName:  int64(rapid.IntRange(3, 7).Draw(t, "fwd_unit_rows")),
		},
		l:       newLedger(),
		blob:    &blobModel{objs: map[string]blobObject{}},
		fwd:     &fwdModel{stored: map[string]map[int64]int64{}},
		checked: map[string]int{},
	}
	m.c = openCache(t, filepath.Join(home, "cache"), m.clk)
	m.newDriver(t)
	return m
}

func (m *propModel) close() {
	if m.c != nil {
		_ = m.c.Close(m.ctx)
		m.c = nil
	}
	_ = os.RemoveAll(m.home)
}

// newDriver starts a driver over the home as a fresh process would: new watermark store
// memory, no hooks, shippers wired to the destination models.
func (m *propModel) newDriver(t *rapid.T) {
	sinks := map[string]config.Sink{
		blobSinkName: blobSink(m.home, blobSinkName),
		fwdSinkName:  blobSink(m.home, fwdSinkName),
	}
	d, err := New(m.ctx, Options{Home: m.home, Sinks: sinks, Cache: m.c})
	if err != nil {
		t.Fatalf("sink.New: %v", err)
	}
	old := m.fakes
	m.fakes = map[string]*fakeShipper{}
	for _, x := range d.insts {
		// The forward sink reads its next unit ahead, as forwardLimits has it, so the model
		// also covers the advance that writes the next unit's intent.
		f := &fakeShipper{lim: limits{rows: m.unitRows[x.name], readAhead: x.name == fwdSinkName}}
		if old != nil {
			f.calls = old[x.name].calls
		}
		dest := m.blob.put
		if x.name == fwdSinkName {
			dest = m.fwd.put
		}
		f.deliver = func(c shipCall) error {
			if err := dest(c); err != nil {
				m.conflict = append(m.conflict, x.name+": "+err.Error())
				return err
			}
			return nil
		}
		x.exp, x.lim = &unitExporter{f}, f.lim
		m.fakes[x.name] = f
	}
	m.d = d
}

func (m *propModel) restartCache(t *rapid.T) {
	if err := m.c.Close(m.ctx); err != nil {
		m.c = nil
		t.Fatalf("close cache: %v", err)
	}
	m.c = nil
	m.c = openCache(t, filepath.Join(m.home, "cache"), m.clk)
}

// --- actions ---

func (m *propModel) Ingest(t *rapid.T) {
	src := rapid.SampledFrom(propSources).Draw(t, "source")
	n := rapid.IntRange(1, 8).Draw(t, "rows")
	m.l.ingest(t, m.c, src, n)
}

func (m *propModel) Flush(t *rapid.T) {
	if err := m.c.Flush(m.ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

func (m *propModel) Compact(t *rapid.T) {
	if _, err := m.c.Compact(m.ctx, true, nil); err != nil {
		t.Fatalf("compact: %v", err)
	}
}

// Prune makes every row old and applies retention, holding for the sinks.
func (m *propModel) Prune(t *rapid.T) {
	floors := map[string]int64{}
	for _, ps := range m.c.Status() {
		floors[ps.Partition] = cache.LowestOf(m.d.Consumers(ps.Dataset, ps.Partition)).Seq
	}
	m.clk.Advance(time.Hour)
	res, err := pruneCache(m.ctx, m.c, m.d, cache.PrunePolicy{
		Retention:    func(string) time.Duration { return time.Minute },
		HoldForSinks: true,
	}, "max_age", false)
	if err != nil {
		t.Fatalf("prune: %v", err)
	}
	for _, r := range res {
		m.pruned += r.DeletedRows
		if r.ForcedRows != 0 || r.ThroughSeq > floors[r.Partition] {
			t.Fatalf("prune deleted above the floor %d of %s: %+v", floors[r.Partition], r.Partition, r)
		}
	}
}

// Tick runs every sink with nothing failing: afterwards every acknowledged row is exported.
func (m *propModel) Tick(t *rapid.T) {
	res, err := m.d.RunNow(m.ctx, "")
	if err != nil {
		t.Fatalf("tick: %v", err)
	}
	for _, r := range res {
		if r.Status != "ok" || len(r.Errors) != 0 {
			t.Fatalf("clean tick of %s: %+v", r.Instance, r)
		}
	}
	m.checkCaughtUp(t)
}

var faultKinds = []string{"after-intent", "after-ship", "after-watermark", "fail-before-store", "lost-ack"}

// FaultyTick runs every sink with one fault at the n-th time a step is reached in one sink:
// a crash (panic standing for kill -9) after the intent, the ship or the watermark write, a
// destination failure before it stores anything, or a lost ack (stored, then an error).
func (m *propModel) FaultyTick(t *rapid.T) {
	kind := rapid.SampledFrom(faultKinds).Draw(t, "fault")
	name := rapid.SampledFrom([]string{blobSinkName, fwdSinkName}).Draw(t, "fault_sink")
	nth := rapid.IntRange(1, 4).Draw(t, "fault_nth")
	x := m.d.inst(t, name)
	f := m.fakes[name]
	seen := 0
	hit := func() bool { seen++; return seen == nth }
	crash := func(watermark.Key, watermark.Unit) {
		if hit() {
			panic(crashPanic{kind})
		}
	}
	switch kind {
	case "after-intent":
		x.hooks.afterIntent = crash
	case "after-ship":
		x.hooks.afterShip = crash
	case "after-watermark":
		x.hooks.afterWatermark = crash
	case "fail-before-store":
		f.fail = func(shipCall) (bool, error) {
			if hit() {
				return false, errors.New("injected: destination unavailable")
			}
			return false, nil
		}
	case "lost-ack":
		f.fail = func(shipCall) (bool, error) {
			if hit() {
				return true, errors.New("injected: stored, ack lost")
			}
			return false, nil
		}
	}
	res, crashed := runCrashing(t, m.d, "")
	x.hooks = hooks{}
	f.fail = nil
	if crashed {
		m.crashes++
		// The process died: a new driver starts (fresh watermark store memory), over the
		// same cache or a closed and reopened one.
		if rapid.Bool().Draw(t, "crash_restarts_cache") {
			m.restartCache(t)
		}
		m.newDriver(t)
		return
	}
	for _, r := range res {
		if r.Status == "ok" {
			continue
		}
		m.fails++
		if r.Instance != name || seen < nth || len(r.Errors) != 1 {
			t.Fatalf("tick with fault %s at %d in %s: %+v", kind, nth, name, res)
		}
	}
}

// Restart closes the cache and starts a new process over the same home.
func (m *propModel) Restart(t *rapid.T) {
	m.restarts++
	m.restartCache(t)
	m.newDriver(t)
}

// rewindTarget draws a seq below wm that partition p of the cache can still re-export from
// (see rewindCandidates); ok is false if there is none.
func (m *propModel) rewindTarget(t *rapid.T, p string, wm int64) (int64, bool) {
	cands := m.rewindCandidates(t, p, wm)
	if len(cands) == 0 {
		return 0, false
	}
	return rapid.SampledFrom(cands).Draw(t, "rewind_to"), true
}

// externalStore is a second watermark store over the same files, as another process (the
// CLI acting on the files) would have.
func (m *propModel) externalStore() *watermark.Store {
	return watermark.Open(filepath.Join(m.home, "sinks"), nil, nil)
}

// rewindVia moves k's watermark to seq to through store, as `hyp sink rewind` would.
func rewindVia(store *watermark.Store, k watermark.Key, to int64, clearIntent bool) error {
	cur, err := store.Get(k)
	if err != nil {
		return err
	}
	_, err = store.Update(k, cur.Generation, func(s *watermark.State) error {
		s.Seq = to
		if clearIntent {
			s.Intent = nil
		}
		return nil
	})
	return err
}

// rewindByVerb moves k's watermark to seq to the way `hyp sink rewind --to-seq` does.
func (m *propModel) rewindByVerb(k watermark.Key, to int64) error {
	res, err := m.d.Rewind(m.ctx, RewindRequest{Instance: k.Instance, Dataset: k.Dataset, Partition: k.Partition, Target: Target{Seq: &to}, AllowGap: true, By: "model"})
	if err == nil && (len(res.Changes) != 1 || res.Changes[0].ToSeq != to) {
		err = fmt.Errorf("rewind to %d did %+v", to, res)
	}
	return err
}

// touch rewrites a watermark file by hand with the same content in another layout, which
// the store must adopt as an edit (and the engine must survive without losing anything).
func touch(store *watermark.Store, k watermark.Key) error {
	path, err := store.Path(k)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var st map[string]any
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	out, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

// Rewind is an operator rewind of the fwd sink, between ticks, from another process. The
// server dedupes by seq, so re-sent rows must not change what it stores.
func (m *propModel) Rewind(t *rapid.T) {
	parts := []string{}
	for _, ps := range m.c.Status() {
		parts = append(parts, ps.Partition)
	}
	if len(parts) == 0 {
		return
	}
	p := rapid.SampledFrom(parts).Draw(t, "rewind_partition")
	k := watermark.Key{Instance: fwdSinkName, Dataset: testDataset, Partition: p}
	wm := getWM(t, m.d, k).Seq
	to, ok := m.rewindTarget(t, p, wm)
	if !ok {
		return
	}
	var err error
	if rapid.Bool().Draw(t, "rewind_by_verb") {
		err = m.rewindByVerb(k, to)
	} else {
		err = rewindVia(m.externalStore(), k, to, rapid.Bool().Draw(t, "clear_intent"))
	}
	if err != nil {
		t.Fatalf("rewind: %v", err)
	}
	if got := getWM(t, m.d, k); got.Seq != to || got.Intent != nil {
		t.Fatalf("the driver's store did not honour the rewind to %d: %+v", to, got)
	}
}

// InterferingTick is a clean tick during which, at the n-th time a unit of one sink reaches
// a step, its watermark file is touched by hand or (fwd only) rewound by an operator. The
// tick must still finish caught up, and a rewind must win over the unit in flight.
func (m *propModel) InterferingTick(t *rapid.T) {
	name := rapid.SampledFrom([]string{blobSinkName, fwdSinkName}).Draw(t, "interfere_sink")
	what := "touch"
	if name == fwdSinkName {
		what = rapid.SampledFrom([]string{"touch", "rewind"}).Draw(t, "interference")
	}
	step := rapid.SampledFrom([]string{"after-intent", "after-ship"}).Draw(t, "interfere_step")
	nth := rapid.IntRange(1, 4).Draw(t, "interfere_nth")
	external := rapid.Bool().Draw(t, "interfere_external")
	byVerb := !external && rapid.Bool().Draw(t, "interfere_by_verb")
	clearIntent := rapid.Bool().Draw(t, "interfere_clear_intent")
	// Draws cannot happen inside the hook (rapid is not reentrant there), so the target
	// is chosen by index among the candidates at that time.
	pick := rapid.IntRange(0, 1<<20).Draw(t, "interfere_pick")
	x := m.d.inst(t, name)
	store := m.d.Store()
	if external {
		store = m.externalStore()
	}
	seen := 0
	var fired bool
	var rewound watermark.Key
	var rewoundTo int64
	var callsBefore int
	var hookErr error
	hook := func(k watermark.Key, u watermark.Unit) {
		if seen++; seen != nth {
			return
		}
		fired = true
		if what == "touch" {
			hookErr = touch(store, k)
			return
		}
		cands := m.rewindCandidates(t, k.Partition, u.From)
		if !byVerb && !clearIntent {
			// A forward sink's watermark may still stand below u, at the intent of the unit
			// delivered before it (queued intents, exportPartition): an edit to that very
			// seq that keeps the intent changes nothing, so nothing has to start there.
			if st, err := store.Get(k); err == nil {
				cands = slices.DeleteFunc(cands, func(c int64) bool { return c == st.Seq && st.Intent != nil })
			}
		}
		if len(cands) == 0 {
			return
		}
		rewound, rewoundTo = k, cands[pick%len(cands)]
		callsBefore = len(m.fakes[name].all())
		if byVerb {
			hookErr = m.rewindByVerb(k, rewoundTo)
		} else {
			hookErr = rewindVia(store, k, rewoundTo, clearIntent)
		}
	}
	if step == "after-intent" {
		x.hooks.afterIntent = hook
	} else {
		x.hooks.afterShip = hook
	}
	res, err := m.d.RunNow(m.ctx, "")
	x.hooks = hooks{}
	if err != nil || hookErr != nil {
		t.Fatalf("interfering tick: %v, hook: %v", err, hookErr)
	}
	for _, r := range res {
		if r.Status != "ok" {
			t.Fatalf("tick with a %s of %s at %s: %+v", what, name, step, r)
		}
	}
	m.checkCaughtUp(t)
	if !fired || rewound == (watermark.Key{}) {
		return
	}
	m.rewinds++
	for _, c := range m.fakes[name].all()[callsBefore:] {
		if c.Part.Partition == rewound.Partition && c.Unit.From == rewoundTo {
			return
		}
	}
	t.Fatalf("rewind of %s to %d during a unit was lost: no unit started there afterwards (calls %+v)", rewound, rewoundTo, m.fakes[name].all()[callsBefore:])
}

// rewindCandidates are the seqs below wm that partition p can still be re-exported from:
// every committed row above one is still cached (a rewind below the oldest cached row is
// refused by the operator verb unless a gap is allowed).
func (m *propModel) rewindCandidates(t tb, p string, wm int64) []int64 {
	var head int64
	for _, ps := range m.c.Status() {
		if ps.Partition == p {
			head = ps.HeadSeq
		}
	}
	have := cachedSeqs(t, m.c, p)
	var low int64 // the largest committed seq no longer cached: retention cuts a prefix
	for _, id := range m.l.byPart[p] {
		s := m.l.rows[id].seq
		if s > head {
			break
		}
		if _, ok := slices.BinarySearch(have, s); !ok {
			low = s
		}
	}
	var cands []int64
	if low < wm {
		cands = append(cands, low)
	}
	for _, id := range m.l.byPart[p] {
		if s := m.l.rows[id].seq; s > low && s < wm {
			cands = append(cands, s)
		}
	}
	return cands
}

// --- invariants ---

func (m *propModel) Check(t *rapid.T) {
	if len(m.conflict) > 0 {
		t.Fatalf("destination conflicts: %v", m.conflict)
	}
	// Every unit the engine tried to ship was exactly the cache's rows of (from, last].
	for name, f := range m.fakes {
		calls := f.all()
		x := m.d.inst(t, name)
		for _, c := range calls[m.checked[name]:] {
			checkUnit(t, x, m.l, c)
		}
		m.checked[name] = len(calls)
	}
	blobHas := m.blobCounts()
	for _, ps := range m.c.Status() {
		p := ps.Partition
		minWM := int64(-1)
		for _, name := range []string{blobSinkName, fwdSinkName} {
			st := getWM(t, m.d, watermark.Key{Instance: name, Dataset: ps.Dataset, Partition: p})
			if st.Seq > ps.HeadSeq {
				t.Fatalf("%s %s watermark %d above the head %d", name, p, st.Seq, ps.HeadSeq)
			}
			if st.Intent != nil && (st.Intent.From != st.Seq || st.Intent.Last > ps.HeadSeq) {
				t.Fatalf("%s %s intent %+v at watermark %d, head %d", name, p, *st.Intent, st.Seq, ps.HeadSeq)
			}
			if len(st.Quarantined) != 0 || len(st.Gaps) != 0 || st.WithheldRows != 0 {
				t.Fatalf("%s %s: unexpected quarantine, gap or withheld rows: %+v", name, p, st)
			}
			if minWM < 0 || st.Seq < minWM {
				minWM = st.Seq
			}
			// Nothing at or below a watermark was skipped: it reached the destination.
			for _, id := range m.l.byPart[p] {
				s := m.l.rows[id].seq
				if s > st.Seq {
					break
				}
				switch name {
				case blobSinkName:
					if blobHas[id] != 1 {
						t.Fatalf("blob: row id %d (%s seq %d) is below the watermark %d but in %d objects", id, p, s, st.Seq, blobHas[id])
					}
				case fwdSinkName:
					if got, ok := m.fwd.stored[p][s]; !ok || got != id {
						t.Fatalf("fwd: row id %d (%s seq %d) is below the watermark %d but not on the server", id, p, s, st.Seq)
					}
				}
			}
		}
		// The cache never deleted a row some sink still has to export.
		var want []int64
		for _, id := range m.l.byPart[p] {
			if s := m.l.rows[id].seq; s > minWM && s <= ps.HeadSeq {
				want = append(want, s)
			}
		}
		if len(want) > 0 {
			have := cachedSeqs(t, m.c, p)
			for _, s := range want {
				if _, ok := slices.BinarySearch(have, s); !ok {
					t.Fatalf("%s: seq %d above the lowest watermark %d was deleted (cache holds %v)", p, s, minWM, have)
				}
			}
		}
	}
	// No row is in two objects, ever.
	for id, n := range blobHas {
		if n > 1 {
			t.Fatalf("blob: row id %d in %d objects", id, n)
		}
	}
}

// blobCounts is how many distinct objects hold each id.
func (m *propModel) blobCounts() map[int64]int {
	out := map[int64]int{}
	for _, o := range m.blob.objs {
		for _, id := range o.ids {
			out[id]++
		}
	}
	return out
}

// checkCaughtUp holds after a clean tick: every watermark is at its head, no intent is left,
// and the head is the last row ingested.
func (m *propModel) checkCaughtUp(t *rapid.T) {
	for _, ps := range m.c.Status() {
		ids := m.l.byPart[ps.Partition]
		if len(ids) > 0 && m.l.rows[ids[len(ids)-1]].seq != ps.HeadSeq {
			t.Fatalf("%s: head %d after a tick, last ingested seq %d", ps.Partition, ps.HeadSeq, m.l.rows[ids[len(ids)-1]].seq)
		}
		for _, name := range []string{blobSinkName, fwdSinkName} {
			st := getWM(t, m.d, watermark.Key{Instance: name, Dataset: ps.Dataset, Partition: ps.Partition})
			if st.Seq != ps.HeadSeq || st.Intent != nil || st.LastError != "" {
				t.Fatalf("%s %s after a clean tick: %+v, head %d", name, ps.Partition, st, ps.HeadSeq)
			}
		}
	}
}

// final runs a clean tick and checks exactly-once at both destinations.
func (m *propModel) final(t *rapid.T) {
	m.Tick(t)
	m.Check(t)
	// blob: every ingested id in exactly one object, and nothing else.
	has := m.blobCounts()
	for id, ref := range m.l.rows {
		if has[id] != 1 {
			t.Fatalf("blob: row id %d (%s seq %d) in %d objects", id, ref.part, ref.seq, has[id])
		}
	}
	if len(has) != len(m.l.rows) {
		t.Fatalf("blob: %d distinct ids stored, %d ingested", len(has), len(m.l.rows))
	}
	// fwd: the server's stored set is the ingested set, row for row.
	n := 0
	for p, seqs := range m.fwd.stored {
		for s, id := range seqs {
			n++
			if ref, ok := m.l.rows[id]; !ok || ref.part != p || ref.seq != s {
				t.Fatalf("fwd: server holds id %d at %s seq %d, ingested as %+v", id, p, s, ref)
			}
		}
	}
	if n != len(m.l.rows) {
		t.Fatalf("fwd: server holds %d rows, %d ingested", n, len(m.l.rows))
	}
	// And every sent seq of the fwd sink was a row of the cache, sent in order per
	// partition the first time round.
	for p, ids := range m.l.byPart {
		var firstSeen []int64
		seen := map[int64]bool{}
		for _, c := range m.fakes[fwdSinkName].all() {
			if c.Part.Partition != p {
				continue
			}
			for _, s := range c.Seqs {
				if !seen[s] {
					seen[s] = true
					firstSeen = append(firstSeen, s)
				}
			}
		}
		if !sort.SliceIsSorted(firstSeen, func(i, j int) bool { return firstSeen[i] < firstSeen[j] }) || len(firstSeen) != len(ids) {
			t.Fatalf("fwd: %s first sends in order %v for %d rows", p, firstSeen, len(ids))
		}
	}
}

// defaultModelChecks keeps the model test near 10-20 s on two cores (a case is 0.1-0.4 s
// of real cache and fsync work). -rapid.checks or RAPID_CHECKS override it; -short divides
// it by 5 as rapid does.
const defaultModelChecks = 50

func TestExactlyOnceModel(t *testing.T) {
	explicit := os.Getenv("RAPID_CHECKS") != ""
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "rapid.checks" })
	if f := flag.Lookup("rapid.checks"); f != nil && !explicit {
		prev := f.Value.String()
		if err := f.Value.Set(strconv.Itoa(defaultModelChecks)); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Value.Set(prev) }()
	}
	base := t.TempDir()
	var cases, rows, crashes, fails, restarts, rewinds, pruned int
	defer func() {
		t.Logf("%d cases: %d rows, %d crashes, %d failed ticks, %d restarts, %d rewinds in flight, %d rows pruned", cases, rows, crashes, fails, restarts, rewinds, pruned)
	}()
	rapid.Check(t, func(rt *rapid.T) {
		m := newPropModel(rt, base)
		defer m.close()
		rt.Repeat(map[string]func(*rapid.T){
			"ingest":      m.Ingest,
			"ingest_more": m.Ingest, // ingest twice as often as anything else
			"flush":       m.Flush,
			"compact":     m.Compact,
			"prune":       m.Prune,
			"tick":        m.Tick,
			"faulty_tick": m.FaultyTick,
			"restart":     m.Restart,
			"rewind":      m.Rewind,
			"interfere":   m.InterferingTick,
			"":            m.Check,
		})
		m.final(rt)
		cases++
		rows += len(m.l.rows)
		crashes += m.crashes
		fails += m.fails
		restarts += m.restarts
		rewinds += m.rewinds
		pruned += int(m.pruned)
		rt.Logf("rows %d, crashes %d, failed ticks %d, restarts %d, blob objects %d", len(m.l.rows), m.crashes, m.fails, m.restarts, len(m.blob.objs))
	})
}

// syncedDest serialises a destination model: in this test sinks run concurrently.
type syncedDest struct {
	mu  sync.Mutex
	put func(shipCall) error
}

func (s *syncedDest) deliver(c shipCall) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.put(c)
}

// Exports, ingest, flushes, compactions and retention all running at once, with the
// driver's own schedule racing RunNow: every row still reaches both destinations exactly
// once, and retention never deletes what a sink still needs. Run it with -race.
func TestConcurrentExportAndMaintenanceExactlyOnce(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	clk := newTestClock()
	c := openCache(t, filepath.Join(home, "cache"), clk)
	defer c.Close(ctx)
	sinks := map[string]config.Sink{blobSinkName: blobSink(home, blobSinkName), fwdSinkName: blobSink(home, fwdSinkName)}
	for name, s := range sinks {
		s.Schedule = "@every 7ms"
		sinks[name] = s
	}
	d, err := New(ctx, Options{Home: home, Sinks: sinks, Cache: c})
	if err != nil {
		t.Fatal(err)
	}
	blob := &blobModel{objs: map[string]blobObject{}}
	fwd := &fwdModel{stored: map[string]map[int64]int64{}}
	dests := map[string]*syncedDest{blobSinkName: {put: blob.put}, fwdSinkName: {put: fwd.put}}
	for _, x := range d.insts {
		x.exp, x.lim = &unitExporter{&fakeShipper{deliver: dests[x.name].deliver}}, limits{rows: 5}
	}

	dur := 1500 * time.Millisecond
	if testing.Short() {
		dur = 400 * time.Millisecond
	}
	runCtx, stop := context.WithTimeout(ctx, dur)
	defer stop()
	l := newLedger()
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	wg.Add(4)
	go func() { // the daemon's schedules
		defer wg.Done()
		d.Run(runCtx)
	}()
	go func() { // ingest and flush
		defer wg.Done()
		for i := 0; runCtx.Err() == nil; i++ {
			l.ingest(goTB{t, errc}, c, propSources[i%len(propSources)], 1+i%6)
			if i%4 == 0 {
				if err := c.Flush(ctx); err != nil {
					errc <- err
					return
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	go func() { // operators running sinks by hand
		defer wg.Done()
		for runCtx.Err() == nil {
			if _, err := d.RunNow(runCtx, ""); err != nil && runCtx.Err() == nil {
				errc <- err
				return
			}
		}
	}()
	go func() { // compaction and retention
		defer wg.Done()
		for i := 0; runCtx.Err() == nil; i++ {
			if i%2 == 0 {
				if _, err := c.Compact(ctx, true, nil); err != nil {
					errc <- fmt.Errorf("compact: %w", err)
					return
				}
				continue
			}
			clk.Advance(time.Hour)
			res, err := pruneCache(ctx, c, d, cache.PrunePolicy{
				Retention:    func(string) time.Duration { return time.Minute },
				HoldForSinks: true,
			}, "max_age", false)
			if err != nil {
				errc <- fmt.Errorf("prune: %w", err)
				return
			}
			for _, r := range res {
				if r.ForcedRows != 0 {
					errc <- fmt.Errorf("prune forced a gap: %+v", r)
					return
				}
			}
		}
	}()
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}

	res, err := d.RunNow(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Status != "ok" {
			t.Fatalf("final run: %+v", r)
		}
	}
	has := map[int64]int{}
	for _, o := range blob.objs {
		for _, id := range o.ids {
			has[id]++
		}
	}
	for id, ref := range l.rows {
		if has[id] != 1 {
			t.Errorf("blob: row id %d (%s seq %d) in %d objects", id, ref.part, ref.seq, has[id])
		}
		if got, ok := fwd.stored[ref.part][ref.seq]; !ok || got != id {
			t.Errorf("fwd: row id %d (%s seq %d) not on the server", id, ref.part, ref.seq)
		}
	}
	n := 0
	for _, m := range fwd.stored {
		n += len(m)
	}
	if len(has) != len(l.rows) || n != len(l.rows) {
		t.Fatalf("blob holds %d rows, server %d, ingested %d", len(has), n, len(l.rows))
	}
	t.Logf("%d rows, %d blob objects", len(l.rows), len(blob.objs))
}

// goTB is a tb for a goroutine other than the test's: a fatal error is reported on errc and
// ends the goroutine.
type goTB struct {
	*testing.T
	errc chan<- error
}

func (g goTB) Fatalf(format string, args ...any) {
	g.errc <- fmt.Errorf(format, args...)
	runtime.Goexit()
}
