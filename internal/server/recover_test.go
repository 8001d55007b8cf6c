package server

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/ledger"
	"github.com/hyp-project/hyp/internal/partition"
)

// countingStore counts the rows Recover reads, to show it reads only what the ledger lacks.
type countingStore struct {
	Store
	mu    sync.Mutex
	scans int
	rows  int64
}

func (s *countingStore) Scan(ctx context.Context, dataset, name string, since, until int64, fn func(arrow.RecordBatch) error) (cache.ScanStats, error) {
	st, err := s.Store.Scan(ctx, dataset, name, since, until, fn)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scans++
	s.rows += st.RowsReturned
	return st, err
}

func TestRecoverAfterCrashBetweenAppendAndRecord(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	e.send(1, 5, seqRange(1, 5), 5, 0)

	// The crash: rows 6..10 reach the cache exactly as the handler writes them, but the
	// ledger Record never happens.
	ch, rerr := parseRows(rows(seqRange(6, 10)...), 6, 10, cacheRows, "")
	if rerr != nil {
		t.Fatal(rerr.Msg)
	}
	name := partition.GatewayName(testGateway, testSource)
	res, err := e.cache.IngestPartitionRows("logs", name, ch.rows, len(ch.seqs))
	if err != nil {
		t.Fatal(err)
	}
	// The server's own rows (no gateway) are not forwarded rows and are left alone.
	if _, err := e.cache.Ingest("logs", "local", []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}

	cs := &countingStore{Store: e.cache}
	if err := Recover(ctx, cs, e.led); err != nil {
		t.Fatal(err)
	}
	if cs.rows != 5 {
		t.Fatalf("Recover read %d rows, want only the 5 appended after the last Record", cs.rows)
	}
	key := ledger.Key{Gateway: testGateway, Dataset: "logs", Partition: partition.Name(testSource)}
	if cp, err := e.led.Checkpoint(key); err != nil || cp != res.LastSeq {
		t.Fatalf("checkpoint %d, %v; want %d", cp, err, res.LastSeq)
	}

	// The sender never got its 200 and re-sends, chunked differently.
	e.send(1, 10, seqRange(1, 10), 0, 10)
	e.send(8, 12, seqRange(8, 12), 2, 3)
	if got := originSeqs(t, e.cache); !slices.Equal(got, seqRange(1, 12)) {
		t.Fatalf("stored %v", got)
	}

	// With the ledger up to date, Recover reads nothing.
	cs = &countingStore{Store: e.cache}
	if err := Recover(ctx, cs, e.led); err != nil {
		t.Fatal(err)
	}
	if cs.scans != 0 {
		t.Fatalf("Recover scanned %d times with nothing to recover", cs.scans)
	}
}

func TestAppendSeq(t *testing.T) {
	tests := []struct {
		seqs []int64
		want []ledger.Interval
	}{
		{nil, nil},
		{[]int64{1, 2, 3}, []ledger.Interval{{Start: 1, End: 3}}},
		{[]int64{1, 3, 4, 9}, []ledger.Interval{{Start: 1, End: 1}, {Start: 3, End: 4}, {Start: 9, End: 9}}},
		{[]int64{5, 5, 6}, []ledger.Interval{{Start: 5, End: 6}}},
		{[]int64{5, 2}, []ledger.Interval{{Start: 5, End: 5}, {Start: 2, End: 2}}},
	}
	for _, tc := range tests {
		var got []ledger.Interval
		for _, s := range tc.seqs {
			got = appendSeq(got, s)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("appendSeq(%v) = %v, want %v", tc.seqs, got, tc.want)
		}
	}
}

func TestHandlerRefusesWhileRepairFails(t *testing.T) {
	fs := &failingStore{fails: 1}
	var flushErr error
	e := newEnvStore(t, nil, func(s Store) Store { fs.Store = s; return &flushFailStore{Store: fs, err: &flushErr} })
	if rp := e.do(request(1, 3, rows(1, 2, 3))); rp.code != http.StatusServiceUnavailable {
		t.Fatalf("got %d", rp.code)
	}
	// While the key cannot be repaired it is not served, so nothing can be stored twice.
	flushErr = context.DeadlineExceeded
	if rp := e.do(request(1, 3, rows(1, 2, 3))); rp.code != http.StatusServiceUnavailable {
		t.Fatalf("got %d", rp.code)
	}
	flushErr = nil
	e.send(1, 3, seqRange(1, 3), 0, 3)
	if got := originSeqs(t, e.cache); !slices.Equal(got, seqRange(1, 3)) {
		t.Fatalf("stored %v", got)
	}
}

type flushFailStore struct {
	Store
	err *error
}

func (s *flushFailStore) Flush(ctx context.Context) error {
	if *s.err != nil {
		return *s.err
	}
	return s.Store.Flush(ctx)
}
