package wal

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
)

// marker is the first record the tests start every segment with.
var marker = []byte("M")

func first([]Segment) ([]byte, error) { return marker, nil }

func markerAt(int64) []byte { return marker }

// readAll returns every intact record but the segment markers, and the damage seen.
func readAll(t *testing.T, segs []Segment) ([][]byte, []Damage) {
	t.Helper()
	var out [][]byte
	var dmg []Damage
	for _, s := range segs {
		if _, err := Read(s.Path, func(_ int64, p []byte) error {
			if !bytes.Equal(p, marker) {
				out = append(out, bytes.Clone(p))
			}
			return nil
		}, func(d Damage) error {
			dmg = append(dmg, d)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out, dmg
}

func TestAppendRotateReopen(t *testing.T) {
	dir := t.TempDir()
	l, segs, err := Open(dir, first, nil)
	if err != nil || len(segs) != 0 {
		t.Fatalf("open: %v %v", segs, err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				mu.Lock()
				tk, err := l.Append([]byte(fmt.Sprintf("g%d-%d", g, i)), 0)
				mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
				if err := l.Wait(tk); err != nil {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	sealed, ok, err := l.Rotate(markerAt)
	if err != nil || !ok {
		t.Fatalf("rotate: %v %v", ok, err)
	}
	if got, _ := readAll(t, []Segment{sealed}); len(got) != 800 {
		t.Fatalf("sealed segment has %d records", len(got))
	}
	tk, _ := l.Append([]byte("after"), 0)
	if err := l.Wait(tk); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, segs, err := Open(dir, first, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if len(segs) != 2 {
		t.Fatalf("reopen found %d segments", len(segs))
	}
	got, dmg := readAll(t, segs)
	if len(got) != 801 || string(got[800]) != "after" || len(dmg) != 0 {
		t.Fatalf("reopen read %d records", len(got))
	}
}

func TestTornTailIsCutOnOpen(t *testing.T) {
	for _, tc := range []struct {
		name string
		tear func(path string, size int64)
	}{
		{"short frame", func(p string, size int64) { os.Truncate(p, size-3) }},
		{"garbage appended", func(p string, size int64) {
			f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
			f.Write([]byte{9, 0, 0, 0, 1, 2, 3, 4, 'x'})
			f.Close()
		}},
		{"flipped byte (damage, not torn: kept and read around)", func(p string, size int64) {
			f, _ := os.OpenFile(p, os.O_RDWR, 0)
			f.WriteAt([]byte{'#'}, size-1)
			f.Close()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l, _, _ := Open(dir, first, nil)
			for _, p := range []string{"one", "two", "three"} {
				tk, _ := l.Append([]byte(p), 0)
				l.Wait(tk)
			}
			path := l.seg.Name()
			l.Close()
			st, _ := os.Stat(path)
			tc.tear(path, st.Size())
			l2, segs, err := Open(dir, first, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := readAll(t, segs)
			want := 3
			if tc.name != "garbage appended" {
				want = 2
			}
			if len(got) != want {
				t.Fatalf("got %d records, want %d", len(got), want)
			}
			tk, _ := l2.Append([]byte("new"), 0)
			l2.Wait(tk)
			l2.Close()
			_, segs, _ = Open(dir, first, nil)
			if got, _ := readAll(t, segs); string(got[len(got)-1]) != "new" {
				t.Fatalf("record after torn tail lost: %q", got)
			}
		})
	}
}

// TestDamageCostsOnlyWhatItHits flips bytes inside records of a sealed segment: every
// other record is still read, the damage is reported where it is, and nothing is cut.
func TestDamageCostsOnlyWhatItHits(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   func(offs []int64) int64 // the byte to flip
		lost []int                    // records that are gone
	}{
		{"payload of the 5th", func(o []int64) int64 { return o[5] + frameHeader + 2 }, []int{5}},
		{"length of the 5th", func(o []int64) int64 { return o[5] + 1 }, []int{5}},
		{"checksum of the first", func(o []int64) int64 { return o[1] + 5 }, []int{1}},
		{"payload of the last", func(o []int64) int64 { return o[len(o)-1] + frameHeader }, []int{20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l, _, _ := Open(dir, first, nil)
			for i := 1; i <= 20; i++ {
				tk, _ := l.Append([]byte(fmt.Sprintf("record-%02d-%s", i, bytes.Repeat([]byte{'x'}, i*7))), 0)
				l.Wait(tk)
			}
			sealed, _, _ := l.Rotate(markerAt)
			l.Close()
			var offs []int64 // offs[i]: record i (0 is the marker)
			Read(sealed.Path, func(off int64, _ []byte) error { offs = append(offs, off); return nil }, nil)
			before, _ := os.ReadFile(sealed.Path)
			f, _ := os.OpenFile(sealed.Path, os.O_RDWR, 0)
			at := tc.at(offs)
			f.WriteAt([]byte{before[at] ^ 0x5a}, at)
			f.Close()
			// Reopening cuts nothing from a sealed segment.
			l2, segs, err := Open(dir, first, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer l2.Close()
			if after, _ := os.ReadFile(sealed.Path); len(after) != len(before) {
				t.Fatalf("segment changed size %d -> %d", len(before), len(after))
			}
			got, dmg := readAll(t, segs[:1])
			var want []string
			for i := 1; i <= 20; i++ {
				if !slices.Contains(tc.lost, i) {
					want = append(want, fmt.Sprintf("record-%02d", i))
				}
			}
			var names []string
			for _, g := range got {
				names = append(names, string(g[:9]))
			}
			if !slices.Equal(names, want) {
				t.Fatalf("read %v, want %v", names, want)
			}
			if len(dmg) != 1 || dmg[0].Offset > at || dmg[0].End <= at {
				t.Fatalf("damage %+v, want one span holding byte %d", dmg, at)
			}
		})
	}
}

func TestTornTailBytesAreKept(t *testing.T) {
	dir := t.TempDir()
	l, _, _ := Open(dir, first, nil)
	tk, _ := l.Append([]byte("kept"), 0)
	l.Wait(tk)
	path := l.seg.Name()
	l.Close()
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte{200, 0, 0, 0, 'g', 'a', 'r', 'b'})
	f.Close()
	st, _ := os.Stat(path)
	l2, _, err := Open(dir, first, nil)
	if err != nil {
		t.Fatal(err)
	}
	l2.Close()
	kept, err := os.ReadFile(fmt.Sprintf("%s.torn-%d", path, st.Size()-8))
	if err != nil || !bytes.Equal(kept, []byte{200, 0, 0, 0, 'g', 'a', 'r', 'b'}) {
		t.Fatalf("torn tail kept as %q, %v", kept, err)
	}
}

func BenchmarkAppendWait(b *testing.B) {
	l, _, _ := Open(b.TempDir(), first, nil)
	defer l.Close()
	payload := bytes.Repeat([]byte("x"), 200*1000)
	b.SetBytes(int64(len(payload)))
	var mu sync.Mutex
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			mu.Lock()
			tk, _ := l.Append(payload, 0)
			mu.Unlock()
			if err := l.Wait(tk); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestRotateMarkerBoundsBothSegments: with appends racing a rotation, the next position
// Rotate hands the new segment's first record is above every record sealed before it and
// at or below every record after it, the bounds a damaged record is reported within.
func TestRotateMarkerBoundsBothSegments(t *testing.T) {
	dir := t.TempDir()
	l, _, _ := Open(dir, first, nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	pos := int64(0)
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			pos++
			tk, err := l.Append([]byte(fmt.Sprint(pos)), pos)
			mu.Unlock()
			if err == nil {
				l.Wait(tk)
			}
		}
	}()
	var nexts []int64
	for range 20 {
		if _, ok, err := l.Rotate(func(n int64) []byte { nexts = append(nexts, n); return []byte(fmt.Sprintf("M%d", n)) }); err != nil || !ok {
			continue
		}
	}
	close(stop)
	wg.Wait()
	l.Close()
	segs, _ := List(dir)
	for _, s := range segs {
		var marker int64 = -1
		Read(s.Path, func(_ int64, p []byte) error {
			var v int64
			if n, _ := fmt.Sscanf(string(p), "M%d", &v); n == 1 {
				marker = v
				return nil
			}
			fmt.Sscan(string(p), &v)
			if marker >= 0 && v < marker {
				t.Fatalf("%s: record at %d below its segment's marker %d", s.Path, v, marker)
			}
			return nil
		}, nil)
	}
	for i, s := range segs[:len(segs)-1] {
		var maxPos int64
		Read(s.Path, func(_ int64, p []byte) error {
			var v int64
			if n, _ := fmt.Sscan(string(p), &v); n == 1 {
				maxPos = max(maxPos, v)
			}
			return nil
		}, nil)
		var next int64 = -1
		Read(segs[i+1].Path, func(_ int64, p []byte) error {
			if next < 0 {
				fmt.Sscanf(string(p), "M%d", &next)
			}
			return nil
		}, nil)
		if next >= 0 && next <= maxPos {
			t.Fatalf("segment %d ends at %d but the next starts at marker %d", i, maxPos, next)
		}
	}
}

// TestAppendFuncRefusesEmptyRecords: an encoder that appends nothing gets an error and
// leaves nothing behind, so the records around it read back intact and in order.
func TestAppendFuncRefusesEmptyRecords(t *testing.T) {
	dir := t.TempDir()
	l, _, _ := Open(dir, first, nil)
	if _, err := l.AppendFunc(func(dst []byte) []byte { return append(dst, "a"...) }, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AppendFunc(func(dst []byte) []byte { return dst }, 2); err == nil {
		t.Fatal("an empty record was taken")
	}
	tk, err := l.AppendFunc(func(dst []byte) []byte { return append(dst, "bc"...) }, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Wait(tk); err != nil {
		t.Fatal(err)
	}
	l.Close()
	segs, _ := List(dir)
	got, dmg := readAll(t, segs)
	if len(dmg) != 0 || len(got) != 2 || string(got[0]) != "a" || string(got[1]) != "bc" {
		t.Fatalf("read back %q, damage %v", got, dmg)
	}
}

// BenchmarkRead reads back a segment of 300 kB records, the size of a 1,000-row request,
// as the flush does. b.N is segments.
func BenchmarkRead(b *testing.B) {
	dir := b.TempDir()
	l, _, _ := Open(dir, first, nil)
	payload := bytes.Repeat([]byte("x"), 300<<10)
	var tk uint64
	for range 100 {
		tk, _ = l.Append(payload, 0)
	}
	if err := l.Wait(tk); err != nil {
		b.Fatal(err)
	}
	l.Close()
	segs, _ := List(dir)
	b.SetBytes(100 * int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Read(segs[0].Path, func(int64, []byte) error { return nil }, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// recordNumber is the number TestSnapshotReadsAPrefixOfTheLog's record p carries; false
// for a segment's first-record marker.
func recordNumber(p []byte) (int, bool) {
	if bytes.Equal(p, marker) {
		return 0, false
	}
	var n int
	fmt.Sscan(string(p), &n)
	return n, true
}

// A snapshot reads every record acknowledged before it was taken, in order, and nothing
// after a gap: a prefix of the log. Appenders and Rotate go on meanwhile, and the segments
// it holds are released before it is read.
func TestSnapshotReadsAPrefixOfTheLog(t *testing.T) {
	l, _, err := Open(t.TempDir(), first, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var mu sync.Mutex // orders appends, so record n is the n-th
	var next, acked int
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				n := next
				next++
				tk, err := l.Append(fmt.Appendf(nil, "%d", n), int64(n))
				mu.Unlock()
				if err == nil {
					err = l.Wait(tk)
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked = max(acked, n+1)
				mu.Unlock()
			}
		})
	}
	var sealed []Segment
	released := -1 // the newest record of a released segment
	for round := range 20 {
		if round%3 == 0 {
			seg, ok, err := l.Rotate(markerAt)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				sealed = append(sealed, seg)
			}
		}
		mu.Lock()
		before := acked
		mu.Unlock()
		s, err := l.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		// Whatever the snapshot holds stays readable once the owner releases it. Released
		// records are the owner's (committed elsewhere): later snapshots need not hold them.
		for _, seg := range sealed {
			if _, err := Read(seg.Path, func(_ int64, p []byte) error {
				if n, ok := recordNumber(p); ok {
					released = max(released, n)
				}
				return nil
			}, nil); err != nil {
				t.Fatal(err)
			}
			if err := Release(seg); err != nil {
				t.Fatal(err)
			}
		}
		sealed = sealed[:0]
		var got []int
		if err := s.Read(func(p []byte) error {
			if n, ok := recordNumber(p); ok {
				got = append(got, n)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		s.Close()
		// Released segments are gone from later snapshots, so each starts where the
		// segments it found start.
		for i := 1; i < len(got); i++ {
			if got[i] != got[i-1]+1 {
				t.Fatalf("round %d: record %d follows %d", round, got[i], got[i-1])
			}
		}
		if before-1 > released && (len(got) == 0 || got[len(got)-1] < before-1) {
			t.Fatalf("round %d: snapshot ends at %v, %d records were acknowledged before it", round, got[max(len(got)-1, 0):], before)
		}
	}
	close(stop)
	wg.Wait()
}
