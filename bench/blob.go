package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/sink"
)

// blobBench exports n rows from an in-process cache to a local directory as Parquet, end to
// end (cache scan, encode, fsync, rename), and prints rows/s and how much the live Go heap
// grew at most. unitRows > 0 replaces the blob unit budget (250,000 rows); with cpuProfile
// set it writes a CPU profile of the export alone (not of filling the cache).
func blobBench(n int, unitRows int64, cpuProfile string) error {
	ctx := context.Background()
	c, dir, done, err := tempCache(ctx, "hyp-blobbench-")
	if err != nil {
		return err
	}
	defer done()
	start := time.Now()
	if err := fill(ctx, c, "bench", n, 100_000); err != nil {
		return err
	}
	if _, err := c.Compact(ctx, true, nil); err != nil {
		return err
	}
	st := c.Status()[0]
	fmt.Printf("blob: %d rows of %d bytes in one partition (%d files) built in %s\n", st.Rows, len(body(0, 1)), st.Files, time.Since(start).Round(time.Second))
	sinks := map[string]config.Sink{
		"local-parquet": {Type: "blob", Format: "parquet", Schedule: "@every 1h", Destination: config.Destination{Type: "local-fs", Path: filepath.Join(dir, "exports")}},
	}
	d, err := sink.New(ctx, sink.Options{Home: dir, Sinks: sinks, Cache: c, UnitRows: unitRows})
	if err != nil {
		return err
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	runtime.GC()
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	base := sample[0].Value.Uint64()
	peak := make(chan uint64)
	stop := make(chan struct{})
	go func() { peak <- peakHeap(stop) }()
	cpu0 := cpuTime()
	start = time.Now()
	res, err := d.RunNow(ctx, "local-parquet")
	el := time.Since(start)
	cpu := cpuTime() - cpu0
	close(stop)
	hp := <-peak
	if err != nil {
		return err
	}
	r := res[0]
	fmt.Printf("blob local-parquet: %d rows in %d units, %.1f MB, %s: %.0f rows/s (CPU %s), live heap +%.0f MiB %v\n", r.Rows, r.Units, float64(r.Bytes)/1e6, el.Round(time.Millisecond), float64(r.Rows)/el.Seconds(), cpu.Round(time.Millisecond), float64(hp-min(hp, base))/(1<<20), r.Errors)
	return nil
}

// peakHeap samples the live heap (as the last GC found it) every 10ms until stop closes and
// returns the largest: what the export keeps, not the garbage it makes between collections.
func peakHeap(stop <-chan struct{}) uint64 {
	var top uint64
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		metrics.Read(sample)
		top = max(top, sample[0].Value.Uint64())
		select {
		case <-stop:
			return top
		case <-t.C:
		}
	}
}

// cpuTime is the CPU time (user and system) the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
