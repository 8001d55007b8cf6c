package main

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/lake"
	"github.com/hyp-project/hyp/internal/sink"
	"github.com/hyp-project/hyp/internal/testutil/lakeread"
)

// icebergParts is how many partitions (sources) the iceberg figures spread rows over, so
// that every tick commits one unit per partition in one snapshot.
const icebergParts = 4

// icebergBench exports n rows in 4 partitions from an in-process cache to an Iceberg table
// on local disk with a SQL catalog on SQLite (one tick: every partition's units in one
// snapshot per round), then runs ticks of small batches, as minute ticks of a quiet
// gateway would, and prints the tick latency and the data files the table holds after them.
func icebergBench(n, ticks int) error {
	ctx := context.Background()
	c, dir, done, err := icebergCache(ctx, n)
	if err != nil {
		return err
	}
	defer done()
	warehouse := filepath.Join(dir, "warehouse")
	sinks := map[string]config.Sink{
		"lake": {Type: "iceberg", Schedule: "@every 1h", Catalog: config.Catalog{Type: "sql", URI: "sqlite://" + filepath.Join(dir, "catalog.db")},
			Warehouse: warehouse, Namespace: "hyp", PartitionBy: "day"},
	}
	d, err := sink.New(ctx, sink.Options{Home: dir, Sinks: sinks, Cache: c})
	if err != nil {
		return err
	}
	if err := icebergExport(ctx, d, "sqlite catalog, local warehouse"); err != nil {
		return err
	}
	lat, err := icebergTicks(ctx, c, d, n, ticks)
	if err != nil {
		return err
	}
	var total time.Duration
	for _, l := range lat {
		total += l
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
		ticks, icebergParts*100, (total / time.Duration(max(ticks, 1))).Round(time.Millisecond), files)
	return icebergMaintainFigure(ctx, "sqlite catalog, local warehouse", lake.Options{Catalog: "sql", URI: "sqlite://" + filepath.Join(dir, "catalog.db"),
		Warehouse: warehouse, Namespace: "hyp", PartitionBy: "day"})
}

// icebergS3Bench is the same export to a MinIO warehouse with a PostgreSQL catalog (both
// subprocesses on this machine): rows/s of the first export, the latency of each small
// tick's commit (median, p95, max), and the live data files of the table after the ticks,
// as an independent reader (lakeread) counts them.
func icebergS3Bench(minioBin string, n, ticks int) error {
	ctx := context.Background()
	c, dir, done, err := icebergCache(ctx, n)
	if err != nil {
		return err
	}
	defer done()
	endpoint, stopMinIO, err := startMinIO(minioBin, filepath.Join(dir, "minio"))
	if err != nil {
		return fmt.Errorf("minio: %w", err)
	}
	defer stopMinIO()
	uri, stopPG, err := startPostgres()
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer stopPG()
	sinks := map[string]config.Sink{
		"lake": {Type: "iceberg", Schedule: "@every 1h", Catalog: config.Catalog{Type: "sql", URI: uri},
			Warehouse: "s3://bench/warehouse", Namespace: "hyp", PartitionBy: "day",
			S3: config.S3Options{Region: "us-east-1", Endpoint: endpoint, ForcePathStyle: true}},
	}
	d, err := sink.New(ctx, sink.Options{Home: dir, Sinks: sinks, Cache: c})
	if err != nil {
		return err
	}
	if err := icebergExport(ctx, d, "postgres catalog, MinIO warehouse"); err != nil {
		return err
	}
	lat, err := icebergTicks(ctx, c, d, n, ticks)
	if err != nil {
		return err
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		return lat[max(int(float64(len(lat))*p+0.999)-1, 0)].Round(100 * time.Microsecond)
	}
	if len(lat) > 0 {
		fmt.Printf("iceberg (postgres, MinIO): %d ticks of %d new rows each, one commit each: median %s, p95 %s, max %s\n",
			len(lat), icebergParts*100, pct(0.5), pct(0.95), lat[len(lat)-1].Round(100*time.Microsecond))
	}
	cl, err := s3Client(ctx, endpoint)
	if err != nil {
		return err
	}
	tbl, err := lakeread.Read(ctx, lakeread.Options{Catalog: uri, Namespace: "hyp", S3: cl}, "logs")
	if err != nil {
		return err
	}
	var rows int64
	for _, f := range tbl.Files {
		rows += f.Records
	}
	fmt.Printf("iceberg (postgres, MinIO): table hyp.logs after %d ticks: %d live data files (%d rows), %d snapshots\n",
		ticks, len(tbl.Files), rows, len(tbl.Snapshots))
	if err := icebergMaintainFigure(ctx, "postgres catalog, MinIO warehouse", lake.Options{Catalog: "sql", URI: uri, Warehouse: "s3://bench/warehouse",
		Namespace: "hyp", PartitionBy: "day", Region: "us-east-1", Endpoint: endpoint, PathStyle: true}); err != nil {
		return err
	}
	if tbl, err = lakeread.Read(ctx, lakeread.Options{Catalog: uri, Namespace: "hyp", S3: cl}, "logs"); err != nil {
		return err
	}
	fmt.Printf("iceberg (postgres, MinIO): table hyp.logs after maintain, as lakeread finds it: %d live data files, %d snapshots\n", len(tbl.Files), len(tbl.Snapshots))
	return nil
}

// icebergCache is a temporary cache holding n bench rows over icebergParts partitions.
func icebergCache(ctx context.Context, n int) (*cache.Cache, string, func(), error) {
	c, dir, done, err := tempCache(ctx, "hyp-icebergbench-")
	if err != nil {
		return nil, "", nil, err
	}
	for p := range icebergParts {
		if err := fill(ctx, c, fmt.Sprintf("s%d", p), n/icebergParts, 100_000); err != nil {
			done()
			return nil, "", nil, err
		}
	}
	return c, dir, done, nil
}

// icebergExport runs the lake sink once over everything cached and prints rows/s.
func icebergExport(ctx context.Context, d *sink.Driver, what string) error {
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
	fmt.Printf("iceberg (%s): %d rows in %d units, %.1f MB, %s: %.0f rows/s (CPU %s)\n",
		what, r.Rows, r.Units, float64(r.Bytes)/1e6, el.Round(time.Millisecond), float64(r.Rows)/el.Seconds(), cpu.Round(time.Millisecond))
	return nil
}

// icebergTicks runs ticks of 100 new rows per partition (what a quiet gateway's minute
// brings, without waiting the minute) and returns how long each tick's run took.
func icebergTicks(ctx context.Context, c *cache.Cache, d *sink.Driver, n, ticks int) ([]time.Duration, error) {
	var lat []time.Duration
	for i := range ticks {
		for p := range icebergParts {
			if _, err := c.Ingest("logs", fmt.Sprintf("s%d", p), body(n+i*100, 100)); err != nil {
				return nil, err
			}
		}
		if err := c.Flush(ctx); err != nil {
			return nil, err
		}
		start := time.Now()
		res, err := d.RunNow(ctx, "lake")
		if err != nil {
			return nil, err
		}
		if len(res[0].Errors) > 0 {
			return nil, fmt.Errorf("tick %d: %v", i, res[0].Errors)
		}
		lat = append(lat, time.Since(start))
	}
	return lat, nil
}
