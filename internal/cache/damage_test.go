package cache

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/hyp-project/hyp/internal/wal"
)

// TestFlippedLogByteCostsOneRequest is the measurement as a test: 50 acknowledged
// requests of 10 rows sit in the log when the process dies, one byte in the middle of the
// segment is flipped, and the restart keeps the other 49 requests, records the damaged
// one's seqs exactly as a loss, and keeps the damaged bytes.
func TestFlippedLogByteCostsOneRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   func(offs []int64, size int64) int64
		hit  int // request whose rows are lost (0-based)
	}{
		{"middle record payload", func(o []int64, _ int64) int64 { return o[25] + 40 }, 24},
		{"middle record length", func(o []int64, _ int64) int64 { return o[25] + 2 }, 24},
		{"first record", func(o []int64, _ int64) int64 { return o[1] + 30 }, 0},
		{"last record", func(o []int64, size int64) int64 { return size - 5 }, 49},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			c := openTest(t, dir)
			var res []Result
			for i := range 50 {
				res = append(res, ingestN(t, c, "web", i*10, 10))
			}
			seg := c.wal.Size()
			crash(c)
			segs, _ := wal.List(filepath.Join(dir, walDir))
			path := segs[len(segs)-1].Path
			var offs []int64 // offs[0] is the marker
			wal.Read(path, func(off int64, _ []byte) error { offs = append(offs, off); return nil }, func(wal.Damage) error { return nil })
			if len(offs) != 51 || seg == 0 {
				t.Fatalf("segment has %d records", len(offs))
			}
			b, _ := os.ReadFile(path)
			at := tc.at(offs, int64(len(b)))
			b[at] ^= 0x21
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}

			c = openTest(t, dir)
			defer c.Close(ctx)
			assertIDs(t, c, "web", 490)
			lost, err := c.Losses()
			if err != nil {
				t.Fatal(err)
			}
			want := res[tc.hit]
			if len(lost) != 1 {
				t.Fatalf("losses %+v", lost)
			}
			x := lost[0]
			// The range is bounded by the intact neighbours: exactly the damaged request's
			// seqs, except at the end of the log, where the next seq to be issued bounds it.
			if x.FromSeq != want.FirstSeq || x.ToSeq < want.LastSeq || (tc.hit < 49 && x.ToSeq != want.LastSeq) {
				t.Errorf("loss %d..%d, want %d..%d", x.FromSeq, x.ToSeq, want.FirstSeq, want.LastSeq)
			}
			kept, err := os.ReadFile(x.KeptAt)
			if err != nil || len(kept) != len(b) || kept[at] != b[at] {
				t.Errorf("damaged bytes not kept at %s: %v", x.KeptAt, err)
			}
			if c.LostRows() != x.Rows || x.Rows < 10 || x.Rows > x.ToSeq-x.FromSeq+1 {
				t.Errorf("lost rows %d, loss %+v", c.LostRows(), x)
			}
		})
	}
}
