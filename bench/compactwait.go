package main

import (
	"context"
	"fmt"
	"time"
)

// compactWaitBench compacts a partition of n rows held in small files and, while that
// runs, flushes rows into it and into another partition every 50 ms: the figure is how
// long those flushes take while the compaction runs, against how long it runs.
func compactWaitBench(n int) error {
	ctx := context.Background()
	c, _, done, err := tempCache(ctx, "hyp-bench-compactwait-")
	if err != nil {
		return err
	}
	defer done()
	if err := fill(ctx, c, "big", n, 50_000); err != nil {
		return err
	}
	compacted := make(chan time.Duration, 1)
	errc := make(chan error, 1)
	go func() {
		start := time.Now()
		_, err := c.Compact(ctx, true, func(_, part string) bool { return part == "source=big" })
		errc <- err
		compacted <- time.Since(start)
	}()
	var flushes []time.Duration
	for i := 0; ; i++ {
		select {
		case took := <-compacted:
			if err := <-errc; err != nil {
				return err
			}
			var worst, sum time.Duration
			for _, f := range flushes {
				worst, sum = max(worst, f), sum+f
			}
			if len(flushes) == 0 {
				return fmt.Errorf("compaction of %d rows ended before any flush ran", n)
			}
			fmt.Printf("compactwait: compaction of %d rows in small files took %s; %d flushes (10 rows each into it and into another partition) meanwhile took %s on average, %s at worst\n",
				n, took.Round(time.Millisecond), len(flushes), (sum / time.Duration(len(flushes))).Round(time.Microsecond), worst.Round(time.Microsecond))
			return nil
		case <-time.After(50 * time.Millisecond):
		}
		for _, src := range []string{"big", "small"} {
			if _, err := c.Ingest("logs", src, body(n+i*10, 10)); err != nil {
				return err
			}
		}
		start := time.Now()
		if err := c.Flush(ctx); err != nil {
			return err
		}
		flushes = append(flushes, time.Since(start))
	}
}
