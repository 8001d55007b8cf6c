package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/sink"
	"github.com/hyp-project/hyp/internal/watermark"
)

// sinkBench exports n rows from an in-process cache through each sink type and prints
// rows/s: forward to a `hyp server` subprocess once per compression (with bytes on the wire
// per row), blob Parquet and JSONL to local disk, and blob Parquet to a MinIO subprocess when
// minioBin exists. Then the same n rows spread over four partitions go through the forward
// sink again, which ships partitions concurrently.
func sinkBench(bin, minioBin string, n int) error {
	ctx := context.Background()
	c, dir, done, err := tempCache(ctx, "hyp-sinkbench-")
	if err != nil {
		return err
	}
	defer done()
	if err := fill(ctx, c, "bench", n, 100_000); err != nil {
		return err
	}
	fmt.Printf("sinks: %d rows of %d bytes in one partition\n", n, len(body(0, 1)))

	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("bench-token\n"), 0o600); err != nil {
		return err
	}
	if err := forwardBench(ctx, bin, dir, tokenFile, c, "1 partition"); err != nil {
		return err
	}
	// The measure: a backlog of the load generator's rows, one source, as
	// `make bench` ingests them.
	cl, dirl, donel, err := tempCache(ctx, "hyp-sinkbenchl-")
	if err != nil {
		return err
	}
	defer donel()
	if err := fillWith(ctx, cl, "loadgen", n, 100_000, loadgenBody); err != nil {
		return err
	}
	fmt.Printf("sinks: %d rows shaped like the load generator's (%d bytes of NDJSON) in one partition\n", n, len(loadgenBody(0, 1)))
	if err := forwardBench(ctx, bin, dirl, tokenFile, cl, "loadgen rows"); err != nil {
		return err
	}
	sinks := map[string]config.Sink{
		"local-parquet": {Type: "blob", Format: "parquet", Schedule: "@every 1h", Destination: config.Destination{Type: "local-fs", Path: filepath.Join(dir, "exports-parquet")}},
		"local-jsonl":   {Type: "blob", Format: "jsonl", Schedule: "@every 1h", Destination: config.Destination{Type: "local-fs", Path: filepath.Join(dir, "exports-jsonl")}},
	}
	if _, err := os.Stat(minioBin); err == nil {
		endpoint, stop, err := startMinIO(minioBin, filepath.Join(dir, "minio"))
		if err != nil {
			return err
		}
		defer stop()
		sinks["s3-parquet"] = config.Sink{Type: "blob", Format: "parquet", Schedule: "@every 1h", Destination: config.Destination{Type: "s3", Bucket: "bench", Region: "us-east-1", Endpoint: endpoint, ForcePathStyle: true}}
	} else {
		fmt.Printf("sinks: no MinIO at %s; skipping the S3 figure\n", minioBin)
	}
	d, err := sink.New(ctx, sink.Options{Home: dir, Sinks: sinks, Cache: c})
	if err != nil {
		return err
	}
	for _, name := range d.Names() {
		if _, err := runSink(ctx, d, name, ""); err != nil {
			return err
		}
	}

	c4, dir4, done4, err := tempCache(ctx, "hyp-sinkbench4-")
	if err != nil {
		return err
	}
	defer done4()
	for p := range 4 {
		if err := fill(ctx, c4, fmt.Sprintf("bench%d", p), n/4, 100_000); err != nil {
			return err
		}
	}
	fmt.Printf("sinks: %d rows in 4 partitions\n", n/4*4)
	return forwardBench(ctx, bin, dir4, tokenFile, c4, "4 partitions")
}

// forwardBench forwards every row of c once per compression, each to a fresh `hyp server`
// so that none of them finds its rows already in the server's ledger. Besides rows/s it
// prints the CPU time of both ends per million rows (the sender: this process during the
// run; the server: its whole life, its cache's flushes and shutdown included), which a
// loaded machine moves far less than wall time.
func forwardBench(ctx context.Context, bin, dir, tokenFile string, c *cache.Cache, what string) error {
	for _, comp := range []string{"none", "gzip", "zstd"} {
		addr, stop, err := startServer(bin, filepath.Join(dir, "server-"+comp), tokenFile)
		if err != nil {
			return err
		}
		name := "forward-" + comp
		reg := prometheus.NewRegistry()
		d, err := sink.New(ctx, sink.Options{Home: dir, Cache: c, Registerer: reg, Sinks: map[string]config.Sink{
			name: {Type: "forward", URL: config.URLs{"http://" + addr}, TokenFile: tokenFile, Schedule: "@every 1h", Compression: comp},
		}})
		var rows int64
		sender := cpuTime()
		if err == nil {
			rows, err = runSink(ctx, d, name, what)
		}
		sender = cpuTime() - sender
		var steps string
		if err == nil {
			steps, err = unitSteps(reg, "http://"+addr+"/metrics")
		}
		server := stop()
		if err != nil {
			return err
		}
		perM := 1e6 / float64(max(rows, 1))
		fmt.Printf("  cpu per 1M rows: sender %.2f s, server %.2f s\n", sender.Seconds()*perM, server.Seconds()*perM)
		fmt.Printf("  a unit's steps (mean): %s\n", steps)
	}
	return nil
}

// runSink runs one sink instance now, prints its figures and returns the rows it exported.
func runSink(ctx context.Context, d *sink.Driver, name, what string) (int64, error) {
	start := time.Now()
	res, err := d.RunNow(ctx, name)
	if err != nil {
		return 0, err
	}
	el := time.Since(start)
	r := res[0]
	if what != "" {
		name += " (" + what + ")"
	}
	fmt.Printf("sink %s: %d rows in %d units, %.1f MB (%.1f bytes/row), %s: %.0f rows/s %v\n", name, r.Rows, r.Units,
		float64(r.Bytes)/1e6, float64(r.Bytes)/float64(max(r.Rows, 1)), el.Round(time.Millisecond), float64(r.Rows)/el.Seconds(), r.Errors)
	return r.Rows, nil
}

// unitSteps is the mean time of each step of a forwarded unit: the sender's from reg
// (hyp_sink_unit_step_seconds), the server's from its /metrics at url
// (hyp_server_chunk_step_seconds). A partition's units go one at a time, so the steps add
// up to its rate.
func unitSteps(reg prometheus.Gatherer, url string) (string, error) {
	sender, err := reg.Gather()
	if err != nil {
		return "", err
	}
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	server, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return "", fmt.Errorf("%s: %w", url, err)
	}
	var out []string
	for _, end := range []struct {
		name, family string
		mfs          []*dto.MetricFamily
	}{
		{"sender", "hyp_sink_unit_step_seconds", sender},
		{"server", "hyp_server_chunk_step_seconds", []*dto.MetricFamily{server["hyp_server_chunk_step_seconds"]}},
	} {
		for _, mf := range end.mfs {
			if mf.GetName() != end.family {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if h := m.GetHistogram(); l.GetName() == "step" && h.GetSampleCount() > 0 {
						out = append(out, fmt.Sprintf("%s %s %.1f ms", end.name, l.GetValue(), 1e3*h.GetSampleSum()/float64(h.GetSampleCount())))
					}
				}
			}
		}
	}
	return strings.Join(out, ", "), nil
}

// startServer runs `hyp server` on a new home and waits until it answers. stop ends it and
// returns the CPU time it used.
func startServer(bin, home, tokenFile string) (addr string, stop func() time.Duration, err error) {
	if err := os.MkdirAll(home, 0o755); err != nil {
		return "", nil, err
	}
	if err := os.WriteFile(filepath.Join(home, "hyp.yaml"), []byte("ingest:\n  listen: "+freeAddr()+"\nsinks: {}\n"), 0o644); err != nil {
		return "", nil, err
	}
	addr = freeAddr()
	srv := exec.Command(bin, "server", "--home", home, "--listen", addr, "--token-file", tokenFile)
	if err := srv.Start(); err != nil {
		return "", nil, err
	}
	stop = func() time.Duration {
		srv.Process.Signal(os.Interrupt)
		srv.Wait()
		return srv.ProcessState.UserTime() + srv.ProcessState.SystemTime()
	}
	if err := waitHTTP("http://" + addr + "/healthz"); err != nil {
		stop()
		return "", nil, err
	}
	return addr, stop, nil
}

// tickBench builds an n-row partition, puts a sink's watermark at its head, and times the
// tick that finds nothing new: the cost every idle sink pays on every schedule.
func tickBench(n int) error {
	ctx := context.Background()
	c, dir, done, err := tempCache(ctx, "hyp-tickbench-")
	if err != nil {
		return err
	}
	defer done()
	start := time.Now()
	if err := fill(ctx, c, "big", n, 500_000); err != nil {
		return err
	}
	if _, err := c.Compact(ctx, true, nil); err != nil {
		return err
	}
	st := c.Status()[0]
	fmt.Printf("tick: built a %d-row partition (%d files, %.0f MB) in %s\n", st.Rows, st.Files, float64(st.Bytes)/1e6, time.Since(start).Round(time.Second))
	counting := &countingCache{Cache: c}
	sinks := map[string]config.Sink{"idle": {Type: "blob", Format: "parquet", Schedule: "@every 1h", Destination: config.Destination{Type: "local-fs", Path: filepath.Join(dir, "exports")}}}
	d, err := sink.New(ctx, sink.Options{Home: dir, Sinks: sinks, Cache: counting})
	if err != nil {
		return err
	}
	k := watermark.Key{Instance: "idle", Dataset: "logs", Partition: st.Partition}
	if _, err := d.Store().Update(k, 0, func(s *watermark.State) error { s.Seq = st.HeadSeq; return nil }); err != nil {
		return err
	}
	const ticks = 100
	start = time.Now()
	for range ticks {
		res, err := d.RunNow(ctx, "idle")
		if err != nil || res[0].Rows != 0 {
			return fmt.Errorf("idle tick: %v %+v", err, res)
		}
	}
	el := time.Since(start) / ticks
	fmt.Printf("tick: no new rows on a %d-row partition: %s per tick, %d bytes sent, data files opened %d\n", st.Rows, el.Round(time.Microsecond), 0, counting.files)

	// Status and a rewind plan with the watermark in the middle of the partition: each
	// reads the boundary row group's two internal columns, whatever the partition's size.
	mid := st.MinSeq + st.Rows/2
	cur, err := d.Store().Get(k)
	if err != nil {
		return err
	}
	if _, err := d.Store().Update(k, cur.Generation, func(s *watermark.State) error { s.Seq = mid; return nil }); err != nil {
		return err
	}
	start = time.Now()
	sts, err := d.Status(ctx, "idle")
	if err != nil {
		return err
	}
	fmt.Printf("status: watermark mid-partition of %d rows: %s (lag %d rows)\n", st.Rows, time.Since(start).Round(time.Microsecond), sts[0].Partitions[0].LagRows)
	at := st.OldestIngestedAt.Add(st.NewestIngestedAt.Sub(st.OldestIngestedAt) / 3)
	start = time.Now()
	plan, err := d.Rewind(ctx, sink.RewindRequest{Instance: "idle", Target: sink.Target{Time: &at}, DryRun: true})
	if err != nil {
		return err
	}
	fmt.Printf("rewind --to-time --dry-run on the same partition: %s (to seq %d, %d rows to export)\n", time.Since(start).Round(time.Microsecond), plan.Changes[0].ToSeq, plan.Changes[0].RowsToExport)

	// The daemon's compaction of that partition after ten small flushes: only the small
	// files are rewritten; the settled ones are hard-linked.
	for i := 0; i < 10; i++ {
		if _, err := c.Ingest("logs", "big", body(n+i*1000, 1000)); err != nil {
			return err
		}
		if err := c.Flush(ctx); err != nil {
			return err
		}
	}
	start = time.Now()
	res, err := c.Compact(ctx, false, nil)
	if err != nil {
		return err
	}
	fmt.Printf("compact: %d-row partition with 10 new small files: %s, files %d -> %d\n", res[0].Rows, time.Since(start).Round(time.Millisecond), res[0].FilesBefore, res[0].FilesAfter)
	return nil
}

// countingCache counts the data files the sinks' scans open.
type countingCache struct {
	*cache.Cache
	files int
}

func (c *countingCache) Scan(ctx context.Context, dataset, part string, since, until int64, fn func(arrow.RecordBatch) error) (cache.ScanStats, error) {
	st, err := c.Cache.Scan(ctx, dataset, part, since, until, fn)
	c.files += st.FilesOpened
	return st, err
}

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitHTTP(url string) error {
	for i := 0; i < 200; i++ {
		if r, err := http.Get(url); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s never answered", url)
}

func startMinIO(bin, data string) (string, func(), error) {
	addr := freeAddr()
	cmd := exec.Command(bin, "server", "--quiet", "--address", addr, "--console-address", freeAddr(), data)
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER=benchuser", "MINIO_ROOT_PASSWORD=benchsecret123")
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { cmd.Process.Kill(); cmd.Wait() }
	if err := waitHTTP("http://" + addr + "/minio/health/live"); err != nil {
		stop()
		return "", nil, err
	}
	os.Setenv("AWS_ACCESS_KEY_ID", "benchuser")
	os.Setenv("AWS_SECRET_ACCESS_KEY", "benchsecret123")
	// MinIO creates a bucket for a directory made under its data dir at startup only, so
	// the bucket is made through the S3 API.
	if err := makeBucket("http://"+addr, "bench"); err != nil {
		stop()
		return "", nil, err
	}
	return "http://" + addr, stop, nil
}

func makeBucket(endpoint, bucket string) error {
	ctx := context.Background()
	cl, err := s3Client(ctx, endpoint)
	if err != nil {
		return err
	}
	_, err = cl.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	return err
}

// s3Client reaches the MinIO startMinIO runs, with the credentials it put in the environment.
func s3Client(ctx context.Context, endpoint string) (*s3.Client, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion("us-east-1"))
	if err != nil {
		return nil, err
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.UsePathStyle = true
	}), nil
}
