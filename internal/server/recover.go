package server

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/hyp-project/hyp/internal/ledger"
	"github.com/hyp-project/hyp/internal/partition"
)

// Recover makes the ledger reflect every forwarded row the cache holds, closing the window
// between a cache append and its ledger Record that a crash may have left open. Call it at
// startup, after the cache is open and before the handler serves. For each gateway partition
// it reads only the rows above the key's checkpoint, so it costs the rows appended after the
// last Record, not the partition.
func Recover(ctx context.Context, store Store, led *ledger.Ledger) error {
	if err := store.Flush(ctx); err != nil {
		return fmt.Errorf("recover: flushing the cache: %w", err)
	}
	for _, st := range store.Status() {
		gw, src, err := partition.Parse(st.Partition)
		if err != nil {
			// Skipping it could let a retry store its rows twice.
			return fmt.Errorf("recover: %s: %w", st.Dataset, err)
		}
		if gw == "" {
			continue // the server's own rows, not forwarded ones: nothing to remember
		}
		k := ledger.Key{Gateway: gw, Dataset: st.Dataset, Partition: partition.Name(src)}
		if err := reconcile(ctx, store, led, k, st.Partition, st.HeadSeq); err != nil {
			return fmt.Errorf("recover: %w", err)
		}
	}
	return nil
}

// reconcile records the origin seqs of the rows in the cache partition name with server seq
// in (checkpoint, head], each under its sender's incarnation, and raises the partition's
// checkpoint to head. The checkpoint moves only after every incarnation's seqs are recorded,
// so a crash in between makes the next Recover read the same rows again; recording a seq
// twice changes nothing.
func reconcile(ctx context.Context, store Store, led *ledger.Ledger, k ledger.Key, name string, head int64) error {
	k.Incarnation = "" // the partition's key; each row's incarnation is read from the row
	cp, err := led.Checkpoint(k)
	if err != nil {
		return err
	}
	if head <= cp {
		return nil
	}
	ivs := map[string][]ledger.Interval{}
	_, err = store.Scan(ctx, k.Dataset, name, cp, head, func(rec arrow.RecordBatch) error {
		idx := rec.Schema().FieldIndices(originSeqColumn)
		if len(idx) == 0 {
			return nil // rows not stored by this handler carry no origin seq
		}
		col, ok := rec.Column(idx[0]).(*array.Int64)
		if !ok {
			return fmt.Errorf("column %s is %s, want int64", originSeqColumn, rec.Column(idx[0]).DataType())
		}
		var incs *array.String // nil: every row is of the incarnation ""
		if idx := rec.Schema().FieldIndices(originIncarnationColumn); len(idx) > 0 {
			if incs, ok = rec.Column(idx[0]).(*array.String); !ok {
				return fmt.Errorf("column %s is %s, want string", originIncarnationColumn, rec.Column(idx[0]).DataType())
			}
		}
		for i := range col.Len() {
			// Only this handler writes origin seqs, and never negative ones.
			if col.IsValid(i) && col.Value(i) >= 0 {
				inc := ""
				if incs != nil && incs.IsValid(i) {
					inc = incs.Value(i)
				}
				ivs[inc] = appendSeq(ivs[inc], col.Value(i))
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("scanning %s/%s above server seq %d: %w", k.Dataset, name, cp, err)
	}
	for _, inc := range slices.Sorted(maps.Keys(ivs)) {
		ik := k
		ik.Incarnation = inc
		if err := led.Record(ik, ivs[inc], 0); err != nil {
			return err
		}
	}
	return led.Record(k, nil, head)
}

// appendSeq adds s to ivs, extending the last interval when s continues it, so a scan of a
// contiguous run builds one interval instead of one per row.
func appendSeq(ivs []ledger.Interval, s int64) []ledger.Interval {
	if n := len(ivs); n > 0 && s >= ivs[n-1].Start && s-1 <= ivs[n-1].End {
		ivs[n-1].End = max(ivs[n-1].End, s)
		return ivs
	}
	return append(ivs, ledger.Interval{Start: s, End: s})
}
