// Command bench prints hyp's headline figures on this machine: durable HTTP ingest rows/s
// (1,000-row requests of ~200-byte rows, 4 concurrent clients, fsync'd acks, flushing to
// Iceberg at the same time), the cost of incremental scans on a large partition, and the
// daemon's peak memory under slow or flooding clients (the edge section).
// Run it with `go run ./bench` after `make build`; it starts bin/hyp on a temporary home.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/lake"

	"github.com/apache/arrow-go/v18/arrow"
)

func main() {
	// Before the cache or a lake loads an iceberg table (lake.InstallDurableIO).
	lake.InstallDurableIO()
	rowsTotal := flag.Int("rows", 2_000_000, "rows to send over HTTP")
	clients := flag.Int("clients", 4, "concurrent clients")
	batch := flag.Int("batch", 1000, "rows per request")
	scanRows := flag.Int("scan-rows", 1_000_000, "partition size for the scan figures")
	bin := flag.String("bin", "bin/hyp", "hyp binary")
	sinkRows := flag.Int("sink-rows", 1_000_000, "rows exported through each sink type (0 skips)")
	tickRows := flag.Int("tick-rows", 10_000_000, "partition size for the idle-tick figure (0 skips)")
	minioBin := flag.String("minio", filepath.Join(os.Getenv("HOME"), ".cache/hyp-tools/bin/minio"), "MinIO binary for the S3 figure")
	trickleSources := flag.Int("trickle-sources", 100, "partitions trickling a few rows each (0 skips)")
	trickleEvery := flag.Duration("trickle-every", 200*time.Millisecond, "how often each trickling partition gets rows")
	trickleFor := flag.Duration("trickle-for", 60*time.Second, "how long the partitions trickle")
	manySources := flag.Int("many-sources", 10_000, "partitions for the query and sink status figures (0 skips)")
	wideFields := flag.Int("wide-fields", 3000, "rows each adding a new field, for the wide figure (0 skips)")
	widePerReq := flag.Int("wide-per-request", 100, "rows per request of the wide figure")
	compactRows := flag.Int("compact-rows", 2_000_000, "rows of the partition compacted in the compactwait figure (0 skips)")
	edge := edgeOptions{}
	flag.IntVar(&edge.conns, "edge-conns", 300, "connections of the edge figure (0 skips)")
	flag.Int64Var(&edge.declared, "edge-declared", 16<<20, "Content-Length each edge connection declares")
	flag.IntVar(&edge.rate, "edge-rate", 16, "body bytes/s each edge connection sends (0: as fast as possible)")
	flag.DurationVar(&edge.hold, "edge-hold", 30*time.Second, "longest an edge connection is kept open")
	blobRows := flag.Int("blob-rows", 2_000_000, "rows of the blob Parquet export figure (0 skips)")
	blobUnitRows := flag.Int64("blob-unit-rows", 0, "rows per blob unit of the blob figure (0: the sink's default)")
	blobProfile := flag.String("blob-cpuprofile", "", "write a CPU profile of the blob export to this file")
	icebergRows := flag.Int("iceberg-rows", 1_000_000, "rows of the iceberg sink figure (0 skips)")
	icebergTicks := flag.Int("iceberg-ticks", 60, "small ticks after the iceberg sink's first export")
	clusterGateways := flag.Int("cluster-gateways", 50, "machines forwarding to the cluster figure's replicas (0 skips)")
	clusterRows := flag.Int("cluster-rows", 20_000, "rows of each machine's backlog in the cluster figure")
	clusterGroupBytes := flag.Int64("cluster-group-bytes", 0, "the replicas' server.cluster.group_bytes in the cluster figure (0: the default)")
	clusterJSON := flag.String("cluster-json", "", "also write the cluster figures to this file, for bench/table.py")
	only := flag.String("only", "", "run one section: ingest, scan, sinks, blob, iceberg, tick, trickle, many, edge, wide, compactwait or cluster")
	flag.Parse()
	fmt.Printf("machine: %d CPUs, %s/%s, %s\n", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, time.Now().UTC().Format(time.RFC3339))
	sections := []struct {
		name string
		run  func() error
	}{
		{"ingest", func() error { return ingestBench(*bin, *rowsTotal, *clients, *batch) }},
		{"scan", func() error { return scanBench(*scanRows) }},
		{"sinks", func() error { return sinkBench(*bin, *minioBin, *sinkRows) }},
		{"blob", func() error { return blobBench(*blobRows, *blobUnitRows, *blobProfile) }},
		{"iceberg", func() error {
			if err := icebergBench(*icebergRows, *icebergTicks); err != nil {
				return err
			}
			return icebergS3Bench(*minioBin, *icebergRows, *icebergTicks)
		}},
		{"tick", func() error { return tickBench(*tickRows) }},
		{"trickle", func() error { return trickleBench(*bin, *trickleSources, *trickleEvery, *trickleFor) }},
		{"many", func() error { return manyBench(*bin, *manySources) }},
		{"edge", func() error { return edgeBench(*bin, edge) }},
		{"wide", func() error { return wideBench(*bin, *wideFields, *widePerReq) }},
		{"compactwait", func() error { return compactWaitBench(*compactRows) }},
		{"cluster", func() error {
			return clusterBench(*bin, *minioBin, *clusterGateways, *clusterRows, *clusterGroupBytes, *clusterJSON)
		}},
	}
	for _, s := range sections {
		if *only != "" && *only != s.name {
			continue
		}
		if (s.name == "sinks" && *sinkRows == 0) || (s.name == "blob" && *blobRows == 0) || (s.name == "iceberg" && *icebergRows == 0) || (s.name == "tick" && *tickRows == 0) ||
			(s.name == "trickle" && *trickleSources == 0) || (s.name == "many" && *manySources == 0) || (s.name == "edge" && edge.conns == 0) ||
			(s.name == "wide" && *wideFields == 0) || (s.name == "compactwait" && *compactRows == 0) || (s.name == "cluster" && *clusterGateways == 0) {
			continue
		}
		if err := s.run(); err != nil {
			fmt.Fprintf(os.Stderr, "%s bench: %v\n", s.name, err)
			os.Exit(1)
		}
	}
}

func body(from, n int) []byte {
	var b bytes.Buffer
	for i := from; i < from+n; i++ {
		fmt.Fprintf(&b, `{"ts":"2026-11-30T09:00:00.%06dZ","level":"info","service":"checkout","msg":"request handled","path":"/api/v1/items/%d","status":200,"duration_ms":%d,"id":%d}`+"\n", i%1000000, i%5000, i%977, i)
	}
	return b.Bytes()
}

func ingestBench(bin string, total, clients, batch int) error {
	home, err := os.MkdirTemp("", "hyp-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(home)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	os.WriteFile(filepath.Join(home, "hyp.yaml"), []byte("ingest:\n  listen: "+addr+"\ncache:\n  flush_interval: "+os.Getenv("BENCH_FLUSH")+"\nsinks: {}\n"), 0o644)
	cmd := exec.Command(bin, "daemon", "--home", home)
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	for i := 0; ; i++ {
		if r, err := http.Get("http://" + addr + "/healthz"); err == nil && r.StatusCode == 200 {
			break
		}
		if i > 200 {
			return fmt.Errorf("daemon not ready")
		}
		time.Sleep(50 * time.Millisecond)
	}
	bodies := make([][]byte, 64)
	for i := range bodies {
		bodies[i] = body(i*batch, batch)
	}
	fmt.Printf("ingest: %d rows, %d-row requests, %d clients, %d bytes/row\n", total, batch, clients, len(bodies[0])/batch)
	var sent atomic.Int64
	var wg sync.WaitGroup
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := c; sent.Add(int64(batch)) <= int64(total); i += clients {
				resp, err := hc.Post("http://"+addr+"/v1/ingest/logs?source=bench", "application/x-ndjson", bytes.NewReader(bodies[i%len(bodies)]))
				if err != nil || resp.StatusCode != 200 {
					fmt.Fprintln(os.Stderr, "request failed", err)
					return
				}
				resp.Body.Close()
			}
		}(c)
	}
	wg.Wait()
	el := time.Since(start)
	fmt.Printf("ingest: %.0f rows/s durable (acks after fsync), %.1f MB/s, %s\n", float64(total)/el.Seconds(), float64(total*len(bodies[0])/batch)/el.Seconds()/1e6, el.Round(time.Millisecond))
	fstart := time.Now()
	out, err := exec.Command(bin, "query", "sql", "SELECT count(*) AS n FROM logs", "--home", home, "--format", "jsonl").CombinedOutput()
	fmt.Printf("ingest: count query right after ingest (unflushed rows read from the log) %s: %s", time.Since(fstart).Round(time.Millisecond), out)
	return err
}

// tempCache opens a cache in a new temporary home; done closes it and removes the home.
func tempCache(ctx context.Context, prefix string) (c *cache.Cache, home string, done func(), err error) {
	home, err = os.MkdirTemp("", prefix)
	if err != nil {
		return nil, "", nil, err
	}
	c, err = cache.Open(ctx, filepath.Join(home, "cache"), cache.Options{})
	if err != nil {
		os.RemoveAll(home)
		return nil, "", nil, err
	}
	return c, home, func() { c.Close(ctx); os.RemoveAll(home) }, nil
}

// fill ingests n bench rows into source in chunks, flushing each chunk to the tables.
func fill(ctx context.Context, c *cache.Cache, source string, n, chunk int) error {
	return fillWith(ctx, c, source, n, chunk, body)
}

// loadgenBody is n rows as the peers' load generator sends hyp NDJSON (bench/peers/load,
// otlpgen.NDJSON): a timestamp, severity, service, a 150-byte body holding the row's id,
// and the id; about 290 bytes a row.
func loadgenBody(from, n int) []byte {
	const filler = "user=alice action=login status=ok latency_ms=12 path=/api/v1/items/12345 agent=loadgen/1.0 lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor"
	var b bytes.Buffer
	for i := from; i < from+n; i++ {
		id := fmt.Sprintf("bench-%010d", i)
		body := ("event id=" + id + " " + filler)[:150]
		fmt.Fprintf(&b, `{"time_unix_nano":1764547200%09d,"severity_number":9,"severity_text":"INFO","service_name":"loadgen","body":"%s","id":"%s"}`+"\n", i%1000000000, body, id)
	}
	return b.Bytes()
}

func fillWith(ctx context.Context, c *cache.Cache, source string, n, chunk int, body func(from, n int) []byte) error {
	for i := 0; i < n; i += chunk {
		if _, err := c.Ingest("logs", source, body(i, min(chunk, n-i))); err != nil {
			return err
		}
		if err := c.Flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

func scanBench(n int) error {
	ctx := context.Background()
	c, _, done, err := tempCache(ctx, "hyp-scan-")
	if err != nil {
		return err
	}
	defer done()
	if err := fill(ctx, c, "big", n, 100_000); err != nil {
		return err
	}
	if _, err := c.Compact(ctx, true, nil); err != nil {
		return err
	}
	head := c.Status()[0].HeadSeq
	measure := func(label string, since int64) {
		start := time.Now()
		var rows int64
		st, err := c.Scan(ctx, "logs", "source=big", since, 1<<62, func(r arrow.RecordBatch) error { rows += r.NumRows(); return nil })
		if err != nil {
			fmt.Println(label, err)
			return
		}
		fmt.Printf("scan %d-row partition, %s: %s, files opened %d, row groups %d, rows read %d, rows returned %d\n", n, label, time.Since(start).Round(time.Microsecond), st.FilesOpened, st.RowGroupsRead, st.RowsRead, st.RowsReturned)
	}
	measure("no new rows", head)
	for _, k := range []int{1000, 100_000} {
		r, err := c.Ingest("logs", "big", body(n, k))
		if err != nil {
			return err
		}
		c.Flush(ctx)
		measure(fmt.Sprintf("%d new rows", k), r.FirstSeq-1)
	}
	return nil
}
