package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/hyp-project/hyp/internal/lake"
)

// icebergMaintainFigure maintains the table icebergBench left (one first export, then a
// commit per tick) as `hyp sink maintain --compact` would with retain_last 10 and every
// snapshot old enough to expire, and prints the table's snapshots and live data files
// before and after.
func icebergMaintainFigure(ctx context.Context, dir, warehouse string) error {
	l, err := lake.Open(ctx, lake.Options{Catalog: "sql", URI: "sqlite://" + filepath.Join(dir, "catalog.db"), Warehouse: warehouse, Namespace: "hyp", PartitionBy: "day"})
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
		fmt.Printf("iceberg maintain --compact (retain_last 10): %s: snapshots %d -> %d, live data files %d -> %d, in %s\n",
			r.Table, r.SnapshotsBefore, r.SnapshotsAfter, r.FilesBefore, r.FilesAfter, el.Round(time.Millisecond))
	}
	return nil
}
