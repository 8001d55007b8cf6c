package ledger

import (
	"fmt"
	"sync/atomic"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// BenchmarkLedger1M measures Held and Record on a key holding one million intervals: both
// must cost what the chunk touches, not what the key holds.
func BenchmarkLedger1M(b *testing.B) {
	const entries = 1_000_000
	l, _ := openTemp(b)
	// Intervals [3i, 3i+1] leave one-seq gaps, so nothing fuses while filling.
	err := l.db.Update(func(tx *bolt.Tx) error {
		bk, err := tx.Bucket(intervalsBucket).CreateBucketIfNotExists(encodeKey(key))
		if err != nil {
			return err
		}
		bk.FillPercent = 1 // keys arrive in order
		for i := int64(0); i < entries; i++ {
			if err := bk.Put(seqKey(3*i), seqKey(3*i+1)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	seqs := make([]int64, 1000)
	for i := range seqs {
		seqs[i] = 3*entries/2 + int64(i)
	}

	b.Run("Held1000", func(b *testing.B) {
		for b.Loop() {
			if _, err := l.Held(key, seqs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("RecordAppend", func(b *testing.B) {
		next := int64(3 * entries)
		for b.Loop() {
			if err := l.Record(key, []Interval{{next, next + 99}}, next); err != nil {
				b.Fatal(err)
			}
			next += 100
		}
	})
	b.Run("RecordBridge", func(b *testing.B) {
		gap := int64(2) // the seq between [0,1] and [3,4]
		for b.Loop() {
			if err := l.Record(key, []Interval{{gap, gap}}, 0); err != nil {
				b.Fatal(err)
			}
			gap += 3
		}
	})
}

// BenchmarkRecordConcurrent measures Records from 16 concurrent callers on distinct keys, as
// a server's concurrent chunks make them: they share fsyncs, so a Record costs a fraction of
// one.
func BenchmarkRecordConcurrent(b *testing.B) {
	l, _ := openTemp(b)
	var next atomic.Int64
	b.SetParallelism(8) // 16 callers on 2 cores
	b.RunParallel(func(pb *testing.PB) {
		k := Key{Gateway: "gw", Dataset: "logs", Partition: fmt.Sprintf("source=%d", next.Add(1))}
		seq := int64(0)
		for pb.Next() {
			seq += 100
			if err := l.Record(k, []Interval{{seq, seq + 99}}, seq); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
