package ledger

import (
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	"pgregory.net/rapid"
)

func openTemp(t testing.TB) (*Ledger, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, path
}

// stored reads k's intervals straight from the bucket, to check the layout itself and not
// only what Held makes of it.
func stored(t interface{ Fatal(...any) }, l *Ledger, k Key) []Interval {
	var out []Interval
	err := l.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(intervalsBucket).Bucket(encodeKey(k))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			s, err := decodeSeq(k)
			if err != nil {
				return err
			}
			e, err := decodeSeq(v)
			if err != nil {
				return err
			}
			out = append(out, Interval{s, e})
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var key = Key{Gateway: "gw-1", Dataset: "logs", Partition: "source=web"}

func TestRecordMerges(t *testing.T) {
	const top = math.MaxInt64
	tests := []struct {
		name    string
		records [][]Interval // one Record call each
		want    []Interval
	}{
		{"single", [][]Interval{{{1, 5}}}, []Interval{{1, 5}}},
		{"point", [][]Interval{{{0, 0}}}, []Interval{{0, 0}}},
		{"adjacent after", [][]Interval{{{1, 5}}, {{6, 9}}}, []Interval{{1, 9}}},
		{"adjacent before", [][]Interval{{{6, 9}}, {{1, 5}}}, []Interval{{1, 9}}},
		{"gap kept", [][]Interval{{{1, 5}}, {{7, 9}}}, []Interval{{1, 5}, {7, 9}}},
		{"overlap", [][]Interval{{{1, 5}}, {{3, 9}}}, []Interval{{1, 9}}},
		{"contained", [][]Interval{{{1, 9}}, {{3, 4}}}, []Interval{{1, 9}}},
		{"same start", [][]Interval{{{3, 4}}, {{3, 9}}}, []Interval{{3, 9}}},
		{"bridges many", [][]Interval{{{1, 2}}, {{4, 5}}, {{7, 8}}, {{10, 11}}, {{3, 9}}}, []Interval{{1, 11}}},
		{"bridges into prev and next", [][]Interval{{{1, 2}}, {{10, 20}}, {{3, 9}}}, []Interval{{1, 20}}},
		{"unsorted overlapping input", [][]Interval{{{10, 12}, {1, 3}, {2, 4}, {13, 13}}}, []Interval{{1, 4}, {10, 13}}},
		{"top of range", [][]Interval{{{top - 1, top}}, {{top - 5, top - 2}}}, []Interval{{top - 5, top}}},
		{"top point", [][]Interval{{{top, top}}, {{top, top}}}, []Interval{{top, top}}},
		{"empty record", [][]Interval{{}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := openTemp(t)
			for _, ivs := range tc.records {
				if err := l.Record(key, ivs, 0); err != nil {
					t.Fatal(err)
				}
			}
			if got := stored(t, l, key); !slices.Equal(got, tc.want) {
				t.Fatalf("stored %v, want %v", got, tc.want)
			}
		})
	}
}

func TestHeld(t *testing.T) {
	const top = math.MaxInt64
	tests := []struct {
		name string
		have []Interval
		seqs []int64
		want []bool
	}{
		{"empty key", nil, []int64{1, 2}, []bool{false, false}},
		{"no seqs", []Interval{{1, 5}}, nil, []bool{}},
		{"inside and around", []Interval{{3, 5}}, []int64{1, 2, 3, 4, 5, 6}, []bool{false, false, true, true, true, false}},
		{"two intervals", []Interval{{1, 2}, {5, 6}}, []int64{0, 1, 2, 3, 4, 5, 6, 7}, []bool{false, true, true, false, false, true, true, false}},
		{"repeated seqs", []Interval{{5, 5}}, []int64{5, 5, 6, 6}, []bool{true, true, false, false}},
		{"zero", []Interval{{0, 0}}, []int64{0, 1}, []bool{true, false}},
		{"after last", []Interval{{1, 5}}, []int64{9, 10}, []bool{false, false}},
		{"sparse seqs skip intervals", []Interval{{1, 1}, {3, 3}, {5, 5}, {100, 200}}, []int64{2, 150, 300}, []bool{false, true, false}},
		{"interval starting at top", []Interval{{top, top}}, []int64{top - 1, top}, []bool{false, true}},
		{"interval ending at top", []Interval{{top - 3, top}}, []int64{0, top - 2, top}, []bool{false, true, true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := openTemp(t)
			if err := l.Record(key, tc.have, 0); err != nil {
				t.Fatal(err)
			}
			got, err := l.Held(key, tc.seqs)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Held(%v) = %v, want %v", tc.seqs, got, tc.want)
			}
		})
	}
}

func TestRejectsBadInput(t *testing.T) {
	l, _ := openTemp(t)
	for _, ivs := range [][]Interval{{{-1, 3}}, {{5, 4}}} {
		if err := l.Record(key, ivs, 9); err == nil {
			t.Errorf("Record(%v) succeeded", ivs)
		}
	}
	if cp, err := l.Checkpoint(key); err != nil || cp != 0 {
		t.Errorf("a refused Record moved the checkpoint to %d (err %v)", cp, err)
	}
	for _, seqs := range [][]int64{{2, 1}, {-1}} {
		if _, err := l.Held(key, seqs); err == nil {
			t.Errorf("Held(%v) succeeded", seqs)
		}
	}
}

func TestCheckpoint(t *testing.T) {
	l, path := openTemp(t)
	other := Key{Gateway: "gw-2", Dataset: "logs", Partition: "source=web"}
	steps := []struct {
		record int64
		want   int64
	}{{0, 0}, {10, 10}, {5, 10}, {0, 10}, {11, 11}}
	for _, s := range steps {
		if err := l.Record(key, nil, s.record); err != nil {
			t.Fatal(err)
		}
		if got, err := l.Checkpoint(key); err != nil || got != s.want {
			t.Fatalf("after Record(checkpoint %d): Checkpoint = %d, %v; want %d", s.record, got, err, s.want)
		}
	}
	if got, err := l.Checkpoint(other); err != nil || got != 0 {
		t.Fatalf("an untouched key has checkpoint %d, %v", got, err)
	}
	// What Record made durable survives a reopen.
	if err := l.Record(key, []Interval{{1, 100}}, 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if got, err := l2.Checkpoint(key); err != nil || got != 11 {
		t.Fatalf("after reopen: Checkpoint = %d, %v", got, err)
	}
	if got := stored(t, l2, key); !slices.Equal(got, []Interval{{1, 100}}) {
		t.Fatalf("after reopen: %v", got)
	}
}

// Keys whose parts concatenate to the same string must not share a bucket.
func TestKeysAreDistinct(t *testing.T) {
	l, _ := openTemp(t)
	a := Key{Gateway: "ab", Dataset: "c", Partition: "d"}
	b := Key{Gateway: "a", Dataset: "bc", Partition: "d"}
	if err := l.Record(a, []Interval{{1, 1}}, 7); err != nil {
		t.Fatal(err)
	}
	held, err := l.Held(b, []int64{1})
	if err != nil || held[0] {
		t.Fatalf("key %v sees %v's seqs: %v %v", b, a, held, err)
	}
	if cp, err := l.Checkpoint(b); err != nil || cp != 0 {
		t.Fatalf("key %v sees %v's checkpoint: %d %v", b, a, cp, err)
	}
}

func TestOpenLockedFailsFast(t *testing.T) {
	_, path := openTemp(t)
	_, err := Open(path)
	if err == nil || !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("second Open: %v", err)
	}
}

func TestOpenRefusesOtherFormat(t *testing.T) {
	l, path := openTemp(t)
	err := l.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(metaBucket).Put(formatKey, binary.BigEndian.AppendUint64(nil, format+1))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); err == nil || !strings.Contains(err.Error(), "unsupported ledger format") {
		t.Fatalf("Open of a newer format: %v", err)
	}
}

// TestIntervalSetModel checks Record, Held and Checkpoint against a plain set of seqs, and
// that the stored intervals are always the canonical form of that set: sorted, disjoint and
// never adjacent (so a contiguous stream really costs one entry).
func TestIntervalSetModel(t *testing.T) {
	dir := t.TempDir()
	runs := 0
	rapid.Check(t, func(rt *rapid.T) {
		runs++
		path := filepath.Join(dir, fmt.Sprintf("ledger-%d.db", runs))
		l, err := Open(path)
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { _ = l.Close() }()

		keys := []Key{key, {Gateway: "gw-2", Dataset: "logs", Partition: "source=web"}}
		// Seqs live in a small window so that intervals collide often; the window sometimes
		// sits at the top of the int64 range, where end+1 would overflow.
		base := rapid.SampledFrom([]int64{0, math.MaxInt64 - 60}).Draw(rt, "base")
		seq := rapid.Int64Range(base, base+60)
		held := map[Key]map[int64]bool{}
		cps := map[Key]int64{}

		rt.Repeat(map[string]func(*rapid.T){
			"record": func(rt *rapid.T) {
				k := rapid.SampledFrom(keys).Draw(rt, "key")
				ivs := rapid.SliceOfN(rapid.Custom(func(rt *rapid.T) Interval {
					a, b := seq.Draw(rt, "a"), seq.Draw(rt, "b")
					return Interval{min(a, b), max(a, b)}
				}), 0, 4).Draw(rt, "ivs")
				cp := rapid.Int64Range(0, 1000).Draw(rt, "checkpoint")
				if err := l.Record(k, ivs, cp); err != nil {
					rt.Fatal(err)
				}
				if held[k] == nil {
					held[k] = map[int64]bool{}
				}
				for _, iv := range ivs {
					for s := iv.Start; ; s++ {
						held[k][s] = true
						if s == iv.End {
							break
						}
					}
				}
				cps[k] = max(cps[k], cp)
			},
			"held": func(rt *rapid.T) {
				k := rapid.SampledFrom(keys).Draw(rt, "key")
				seqs := rapid.SliceOfN(seq, 0, 30).Draw(rt, "seqs")
				slices.Sort(seqs)
				got, err := l.Held(k, seqs)
				if err != nil {
					rt.Fatal(err)
				}
				for i, s := range seqs {
					if got[i] != held[k][s] {
						rt.Fatalf("Held(%d) = %v, model %v", s, got[i], held[k][s])
					}
				}
			},
			"checkpoint": func(rt *rapid.T) {
				k := rapid.SampledFrom(keys).Draw(rt, "key")
				if got, err := l.Checkpoint(k); err != nil || got != cps[k] {
					rt.Fatalf("Checkpoint = %d, %v; model %d", got, err, cps[k])
				}
			},
			"": func(rt *rapid.T) {
				for _, k := range keys {
					if got, want := stored(rt, l, k), canonical(held[k]); !slices.Equal(got, want) {
						rt.Fatalf("stored %v, canonical form of the model %v", got, want)
					}
				}
			},
		})
	})
}

// canonical turns a set of seqs into its sorted, maximal runs.
func canonical(set map[int64]bool) []Interval {
	seqs := make([]int64, 0, len(set))
	for s := range set {
		seqs = append(seqs, s)
	}
	slices.Sort(seqs)
	var out []Interval
	for _, s := range seqs {
		if n := len(out); n > 0 && out[n-1].End == s-1 {
			out[n-1].End = s
			continue
		}
		out = append(out, Interval{s, s})
	}
	return out
}
