package wal

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"testing"
)

func readAll(t *testing.T, segs []Segment) [][]byte {
	t.Helper()
	var out [][]byte
	for _, s := range segs {
		if _, err := Read(s.Path, func(p []byte) error {
			out = append(out, bytes.Clone(p))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestAppendRotateReopen(t *testing.T) {
	dir := t.TempDir()
	l, segs, err := Open(dir)
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
				tk, err := l.Append([]byte(fmt.Sprintf("g%d-%d", g, i)))
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
	sealed, ok, err := l.Rotate()
	if err != nil || !ok {
		t.Fatalf("rotate: %v %v", ok, err)
	}
	if got := readAll(t, []Segment{sealed}); len(got) != 800 {
		t.Fatalf("sealed segment has %d records", len(got))
	}
	tk, _ := l.Append([]byte("after"))
	if err := l.Wait(tk); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, segs, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if len(segs) != 2 {
		t.Fatalf("reopen found %d segments", len(segs))
	}
	got := readAll(t, segs)
	if len(got) != 801 || string(got[800]) != "after" {
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
		{"flipped byte", func(p string, size int64) {
			f, _ := os.OpenFile(p, os.O_RDWR, 0)
			f.WriteAt([]byte{'#'}, size-1)
			f.Close()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l, _, _ := Open(dir)
			for _, p := range []string{"one", "two", "three"} {
				tk, _ := l.Append([]byte(p))
				l.Wait(tk)
			}
			path := l.seg.Name()
			l.Close()
			st, _ := os.Stat(path)
			tc.tear(path, st.Size())
			l2, segs, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			got := readAll(t, segs)
			want := 3
			if tc.name != "garbage appended" {
				want = 2
			}
			if len(got) != want {
				t.Fatalf("got %d records, want %d", len(got), want)
			}
			tk, _ := l2.Append([]byte("new"))
			l2.Wait(tk)
			l2.Close()
			_, segs, _ = Open(dir)
			if got := readAll(t, segs); string(got[len(got)-1]) != "new" {
				t.Fatalf("record after torn tail lost: %q", got)
			}
		})
	}
}

func BenchmarkAppendWait(b *testing.B) {
	l, _, _ := Open(b.TempDir())
	defer l.Close()
	payload := bytes.Repeat([]byte("x"), 200*1000)
	b.SetBytes(int64(len(payload)))
	var mu sync.Mutex
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			mu.Lock()
			tk, _ := l.Append(payload)
			mu.Unlock()
			if err := l.Wait(tk); err != nil {
				b.Fatal(err)
			}
		}
	})
}
