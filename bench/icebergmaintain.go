package main

import (
	"context"
	"fmt"
	"time"

	"github.com/hyp-project/hyp/internal/lake"
)

// icebergMaintainFigure maintains the table an iceberg figure left (one first export, then a
// commit per tick) as `hyp sink maintain --compact` would with retain_last 10 and every
// snapshot old enough to expire, and prints the table's snapshots and live data files
// before and after.
func icebergMaintainFigure(ctx context.Context, what string, o lake.Options) error {
	l, err := lake.Open(ctx, o)
	if err != nil {
		return err
	}
	defer l.Close()
	start := time.Now()
	reps, err := l.Maintain(ctx, lake.MaintainOptions{Compact: true, RetainLast: 10, OrphanOlderThan: 72 * time.Hour})
	if err != nil {
		return err
	}
	el := time.Since(start)
	for _, r := range reps {
		fmt.Printf("iceberg maintain --compact (retain_last 10, %s): %s: snapshots %d -> %d, live data files %d -> %d, in %s\n",
			what, r.Table, r.SnapshotsBefore, r.SnapshotsAfter, r.FilesBefore, r.FilesAfter, el.Round(time.Millisecond))
	}
	return nil
}
