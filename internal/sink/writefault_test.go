package sink

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hyp-project/hyp/internal/fsutil"
	"github.com/hyp-project/hyp/internal/watermark"
)

// TestFailedStateWriteNeverAdvancesASink puts ENOSPC and EIO under the watermark store: an
// intent that cannot be written ships nothing, a watermark that cannot be written after a
// unit shipped leaves the sink where it was (the retry ships the same unit again, which the
// destination recognises), and once writes work every row is delivered exactly once.
func TestFailedStateWriteNeverAdvancesASink(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault error
		at    int // fail the at-th write of the run (1: the intent, 2: the watermark)
	}{
		{"intent ENOSPC", syscall.ENOSPC, 1},
		{"intent EIO", syscall.EIO, 1},
		{"watermark ENOSPC", syscall.ENOSPC, 2},
		{"watermark EIO", syscall.EIO, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 100)
			var writes, failAt atomic.Int64
			store := watermark.Open(filepath.Join(e.home, "sinks"), nil, nil, watermark.WithWriteFile(func(path string, data []byte, perm os.FileMode) error {
				if n := writes.Add(1); n == failAt.Load() {
					return &os.PathError{Op: "write", Path: path, Err: tc.fault}
				}
				return fsutil.WriteFileAtomic(path, data, perm)
			}))
			e.d.store = store
			for _, x := range e.d.insts {
				x.store = store
			}
			ids := e.l.ingest(t, e.c, "a", 5)
			k := key("s1", "a")
			failAt.Store(int64(tc.at))
			res := runNow(t, e.d, "s1")
			if res.Status == "ok" {
				t.Fatalf("a run whose state write failed reports ok: %+v", res)
			}
			if st := getWM(t, e.d, k); st.Seq != 0 {
				t.Fatalf("the sink advanced to %d although its write failed", st.Seq)
			}
			if calls := len(e.fakes["s1"].all()); tc.at == 1 && calls != 0 {
				t.Fatalf("a unit whose intent failed was shipped %d times", calls)
			}
			failAt.Store(0)
			if res := runNow(t, e.d, "s1"); res.Status != "ok" {
				t.Fatalf("run once writes work: %+v", res)
			}
			exactlyOnce(t, e.l, e.fakes["s1"].all(), "a")
			if st, last := getWM(t, e.d, k), e.l.rows[ids[len(ids)-1]].seq; st.Seq != last {
				t.Fatalf("watermark %d after the retry, want %d", st.Seq, last)
			}
		})
	}
}
