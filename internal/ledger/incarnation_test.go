package ledger

import (
	"encoding/binary"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func TestConcurrent(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	inc := func(id string, first, last int) Incarnation {
		return Incarnation{Gateway: "gw", ID: id, FirstSeen: at(first), LastSeen: at(last)}
	}
	for _, tc := range []struct {
		name   string
		mine   Incarnation
		others []Incarnation
		now    int
		want   bool
	}{
		{"first chunk of a new incarnation (a reinstall)", Incarnation{Gateway: "gw", ID: "b"}, []Incarnation{inc("a", 0, 30)}, 31, false},
		{"the new one goes on after the old one stopped", inc("b", 31, 40), []Incarnation{inc("a", 0, 30)}, 41, false},
		{"the old one sends again after the new one began", inc("a", 0, 30), []Incarnation{inc("b", 31, 40)}, 42, true},
		{"the new one sends after the old one sent again", inc("b", 31, 40), []Incarnation{inc("a", 0, 42)}, 43, true},
		{"the interleaving is over an hour old", inc("a", 0, 30), []Incarnation{inc("b", 31, 40)}, 40 + 61, false},
		{"alone", inc("a", 0, 30), nil, 31, false},
		{"the same id is not another", inc("a", 0, 30), []Incarnation{inc("a", 0, 30)}, 31, false},
	} {
		if got := Concurrent(tc.mine, tc.others, at(tc.now)); got != tc.want {
			t.Errorf("%s: Concurrent = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Keys of two incarnations never share intervals; the checkpoint is the partition's, shared
// by every incarnation of the gateway.
func TestIncarnationKeys(t *testing.T) {
	l, _ := openTemp(t)
	old := Key{"gw", "", "logs", "source=a"}
	mine := Key{"gw", "inc1", "logs", "source=a"}
	if err := l.Record(old, []Interval{{1, 10}}, 7); err != nil {
		t.Fatal(err)
	}
	held, err := l.Held(mine, []int64{1, 10})
	if err != nil || slices.Contains(held, true) {
		t.Fatalf("a new incarnation holds %v (%v) of the old one's seqs", held, err)
	}
	if cp, err := l.Checkpoint(mine); err != nil || cp != 7 {
		t.Fatalf("checkpoint via the new incarnation's key: %d %v, want 7", cp, err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, k := range []Key{mine, old, mine} {
		s, err := l.RecordSeen(k, []Interval{{20, 25}}, int64(8+i), t0.Add(time.Duration(i)*time.Minute), 6)
		if err != nil {
			t.Fatal(err)
		}
		if want := i == 2; s.Concurrent != want {
			t.Fatalf("sighting %d of %q: concurrent %v, want %v", i, k.Incarnation, s.Concurrent, want)
		}
	}
	incs, err := l.Incarnations()
	if err != nil {
		t.Fatal(err)
	}
	if len(incs) != 2 || incs[0].ID != "inc1" || incs[0].Rows != 12 || incs[0].ConcurrentAt.IsZero() ||
		incs[1].ID != "" || incs[1].Rows != 6 || !incs[1].ConcurrentAt.IsZero() {
		t.Fatalf("incarnations %+v", incs)
	}
	if !incs[0].LastSeen.Equal(t0.Add(2*time.Minute)) || !incs[0].FirstSeen.Equal(t0) {
		t.Fatalf("incarnation seen %v..%v", incs[0].FirstSeen, incs[0].LastSeen)
	}
}

// A format 1 ledger (before incarnations) is upgraded in place: what it held is the
// incarnation "" key's.
func TestFormatOneUpgradesAsIncarnationEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Written as format 1 wrote it: three length-prefixed parts.
	var name []byte
	for _, s := range []string{"gw", "logs", "source=a"} {
		name = binary.AppendUvarint(name, uint64(len(s)))
		name = append(name, s...)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucket(metaBucket)
		if err != nil {
			return err
		}
		if err := meta.Put(formatKey, binary.BigEndian.AppendUint64(nil, 1)); err != nil {
			return err
		}
		ivs, err := tx.CreateBucket(intervalsBucket)
		if err != nil {
			return err
		}
		b, err := ivs.CreateBucket(name)
		if err != nil {
			return err
		}
		return b.Put(seqKey(1), seqKey(5))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	held, err := l.Held(Key{"gw", "", "logs", "source=a"}, []int64{1, 5, 6})
	if err != nil || !slices.Equal(held, []bool{true, true, false}) {
		t.Fatalf("after the upgrade the incarnation \"\" holds %v (%v)", held, err)
	}
	held, err = l.Held(Key{"gw", "x", "logs", "source=a"}, []int64{1})
	if err != nil || held[0] {
		t.Fatalf("a new incarnation holds %v (%v)", held, err)
	}
	var v []byte
	_ = l.db.View(func(tx *bolt.Tx) error { v = slices.Clone(tx.Bucket(metaBucket).Get(formatKey)); return nil })
	if binary.BigEndian.Uint64(v) != format {
		t.Fatalf("format %x after the upgrade", v)
	}
}
