package ledger

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// commits is how many write transactions the ledger has committed.
func commits(t *testing.T, l *Ledger) int {
	t.Helper()
	var id int
	if err := l.db.View(func(tx *bolt.Tx) error { id = tx.ID(); return nil }); err != nil {
		t.Fatal(err)
	}
	return id
}

// holdFirstBatch makes the committer wait, inside its first batch, until want more Records
// have queued behind it, so the test knows they form the next batch. The first batch must
// be one Record alone: start it, wait for entered, and only then start the others.
func holdFirstBatch(l *Ledger, want int) (entered <-chan struct{}, sizes func() []int) {
	var mu sync.Mutex
	var got []int
	in := make(chan struct{})
	first := true
	l.beforeCommit = func(n int) {
		mu.Lock()
		got = append(got, n)
		wait := first
		first = false
		mu.Unlock()
		if wait {
			close(in)
		}
		for wait {
			runtime.Gosched()
			l.mu.Lock()
			wait = len(l.queue) < want
			l.mu.Unlock()
		}
	}
	return in, func() []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), got...)
	}
}

// TestConcurrentRecordsShareACommit: Records made while a commit runs are committed
// together in one transaction, and every one of them is durable and correct afterwards.
func TestConcurrentRecordsShareACommit(t *testing.T) {
	const n = 20
	l, path := openTemp(t)
	entered, sizes := holdFirstBatch(l, n)
	before := commits(t, l)
	var wg sync.WaitGroup
	errs := make([]error, n+1)
	wg.Go(func() { errs[n] = l.Record(Key{"gw", "", "logs", "source=first"}, []Interval{{1, 1}}, 1) })
	<-entered
	for i := range n {
		wg.Go(func() {
			k := Key{"gw", "", "logs", fmt.Sprintf("source=%d", i)}
			errs[i] = l.Record(k, []Interval{{int64(10 * i), int64(10*i + 5)}}, int64(i+1))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got := sizes(); len(got) != 2 || got[0] != 1 || got[1] != n {
		t.Fatalf("batches of %v, want [1 %d]", got, n)
	}
	if got := commits(t, l) - before; got != 2 {
		t.Fatalf("%d commits for %d Records, want 2", got, n+1)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range n {
		k := Key{"gw", "", "logs", fmt.Sprintf("source=%d", i)}
		if got := stored(t, l, k); len(got) != 1 || got[0] != (Interval{int64(10 * i), int64(10*i + 5)}) {
			t.Errorf("%v holds %v after reopening", k, got)
		}
		if cp, err := l.Checkpoint(k); err != nil || cp != int64(i+1) {
			t.Errorf("%v checkpoint %d, %v; want %d", k, cp, err, i+1)
		}
	}
}

// TestFailingRecordSparesItsBatch: a Record whose update fails gets its error, and the other
// Records of its batch are still stored.
func TestFailingRecordSparesItsBatch(t *testing.T) {
	const n = 5
	l, _ := openTemp(t)
	bad := Key{"gw", "", "logs", "source=bad"}
	// A damaged entry: insert cannot decode it.
	if err := l.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.Bucket(intervalsBucket).CreateBucketIfNotExists(encodeKey(bad))
		if err != nil {
			return err
		}
		return b.Put(seqKey(5), []byte("bad"))
	}); err != nil {
		t.Fatal(err)
	}
	entered, sizes := holdFirstBatch(l, n+1)
	var wg sync.WaitGroup
	errs := make([]error, n)
	var badErr error
	wg.Go(func() { _ = l.Record(Key{"gw", "", "logs", "source=first"}, []Interval{{1, 1}}, 0) })
	<-entered
	wg.Go(func() { badErr = l.Record(bad, []Interval{{6, 7}}, 0) })
	for i := range n {
		wg.Go(func() { errs[i] = l.Record(Key{"gw", "", "logs", fmt.Sprintf("source=%d", i)}, []Interval{{1, 2}}, 0) })
	}
	wg.Wait()
	if got := sizes(); len(got) < 2 || got[1] != n+1 {
		t.Fatalf("batches of %v, want the bad Record batched with %d others", got, n)
	}
	if badErr == nil {
		t.Fatal("the Record on a damaged key succeeded")
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("Record %d failed with its batch: %v", i, err)
		}
		if got := stored(t, l, Key{"gw", "", "logs", fmt.Sprintf("source=%d", i)}); len(got) != 1 {
			t.Errorf("Record %d stored %v", i, got)
		}
	}
}

// TestRecordAfterClose is refused, never lost silently.
func TestRecordAfterClose(t *testing.T) {
	l, _ := openTemp(t)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Record(key, []Interval{{1, 1}}, 0); err == nil {
		t.Fatal("Record on a closed ledger succeeded")
	}
}

// TestRecordOrderPerKey: one caller's Records on a key land in order, so a later checkpoint
// is never overwritten by an earlier one and intervals accumulate.
func TestRecordOrderPerKey(t *testing.T) {
	l, _ := openTemp(t)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			k := Key{"gw", "", "logs", fmt.Sprintf("source=%d", g)}
			for i := int64(1); i <= 50; i++ {
				if err := l.Record(k, []Interval{{i, i}}, i); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for g := range 4 {
		k := Key{"gw", "", "logs", fmt.Sprintf("source=%d", g)}
		if got := stored(t, l, k); len(got) != 1 || got[0] != (Interval{1, 50}) {
			t.Errorf("%v holds %v, want [1,50]", k, got)
		}
		if cp, _ := l.Checkpoint(k); cp != 50 {
			t.Errorf("%v checkpoint %d, want 50", k, cp)
		}
	}
}
