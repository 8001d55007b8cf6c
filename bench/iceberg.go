package main

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/sink"
)

// icebergBench exports n rows in 4 partitions from an in-process cache to an Iceberg table
// on local disk with a SQL catalog on SQLite (one tick: every partition's units in one
// snapshot per round), then runs ticks of small batches, as minute ticks of a quiet
// gateway would, and prints the tick latency and the data files the table holds after them.
func icebergBench(n, ticks int) error {
	ctx := context.Background()
	c, dir, done, err := tempCache(ctx, "hyp-icebergbench-")
	if err != nil {
		return err
	}
	defer done()
	const parts = 4
	for p := range parts {
		if err := fill(ctx, c, fmt.Sprintf("s%d", p), n/parts, 100_000); err != nil {
			return err
		}
	}
	warehouse := filepath.Join(dir, "warehouse")
	sinks := map[string]config.Sink{
		"lake": {Type: "iceberg", Schedule: "@every 1h", Catalog: config.Catalog{Type: "sql", URI: "sqlite://" + filepath.Join(dir, "catalog.db")},
			Warehouse: warehouse, Namespace: "hyp", PartitionBy: "day"},
	}
	d, err := sink.New(ctx, sink.Options{Home: dir, Sinks: sinks, Cache: c})
	if err != nil {
		return err
	}
	cpu0 := cpuTime()
	start := time.Now()
	res, err := d.RunNow(ctx, "lake")
	el, cpu := time.Since(start), cpuTime()-cpu0
	if err != nil {
		return err
	}
	r := res[0]
	if len(r.Errors) > 0 {
		return fmt.Errorf("export: %v", r.Errors)
	}
	fmt.Printf("iceberg (sqlite catalog, local warehouse): %d rows in %d units, %.1f MB, %s: %.0f rows/s (CPU %s)\n",
		r.Rows, r.Units, float64(r.Bytes)/1e6, el.Round(time.Millisecond), float64(r.Rows)/el.Seconds(), cpu.Round(time.Millisecond))
	var total time.Duration
	for i := range ticks {
		for p := range parts {
			if _, err := c.Ingest("logs", fmt.Sprintf("s%d", p), body(n+i*100, 100)); err != nil {
				return err
			}
		}
		if err := c.Flush(ctx); err != nil {
			return err
		}
		start := time.Now()
		res, err := d.RunNow(ctx, "lake")
		if err != nil {
			return err
		}
		if len(res[0].Errors) > 0 {
			return fmt.Errorf("tick %d: %v", i, res[0].Errors)
		}
		total += time.Since(start)
	}
	files := 0
	err = filepath.WalkDir(warehouse, func(p string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() && strings.HasSuffix(p, ".parquet") {
			files++
		}
		return err
	})
	if err != nil {
		return err
	}
	fmt.Printf("iceberg: %d ticks of %d new rows each: %s per tick on average (one commit each); %d data files in the warehouse\n",
		ticks, parts*100, (total / time.Duration(max(ticks, 1))).Round(time.Millisecond), files)
	return icebergMaintainFigure(ctx, dir, warehouse)
}
