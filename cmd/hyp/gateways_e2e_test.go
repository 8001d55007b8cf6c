package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// These tests hold `hyp server` to issue 24's many-gateways promises through the built
// binary: one token sending as thousands of gateways is capped by
// server.max_gateways_per_token, /metrics stays small however many gateway partitions there
// are, and a query over all of them counts every row.

// forwardAs posts one forward chunk of rows seqs 1..rows as gateway, with the forward
// protocol's headers, and returns the status and body of the reply.
func forwardAs(t *testing.T, c *http.Client, srvAddr, token, gateway string, rows int) (int, string) {
	t.Helper()
	var b bytes.Buffer
	for s := 1; s <= rows; s++ {
		fmt.Fprintf(&b, `{"_hyp_ingest_seq":%d,"_hyp_ingested_at":"2026-01-02T03:04:05Z","msg":"row %d of %s"}`+"\n", s, s, gateway)
	}
	req, err := http.NewRequest(http.MethodPost, "http://"+srvAddr+"/v1/ingest/logs", &b)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set("X-Hyp-Gateway", gateway)
	req.Header.Set("X-Hyp-Partition", "source=web")
	req.Header.Set("X-Hyp-Batch-Id", "chunk-of-"+gateway)
	req.Header.Set("X-Hyp-Seq-Range", fmt.Sprintf("1-%d", rows))
	resp, err := c.Do(req)
	if err != nil {
		t.Errorf("gateway %s: %v", gateway, err)
		return 0, ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// gatewayServerHome makes a server home whose config sets max_gateways_per_token and
// runs a local sink, so the sink's per-partition metrics cover every gateway too.
func gatewayServerHome(t *testing.T, maxGateways int) (home, listen, tokenFile string) {
	t.Helper()
	home, listen, tokenFile = newServerHome(t)
	cfg := fmt.Sprintf("ingest:\n  listen: %s\ncache:\n  flush_interval: 500ms\nserver:\n  max_gateways_per_token: %d\nsinks:\n%s",
		freePort(t), maxGateways, localSinkYAML("files", "jsonl", filepath.Join(t.TempDir(), "exports")))
	if err := os.WriteFile(filepath.Join(home, "hyp.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return home, listen, tokenFile
}

// Many gateways on one token (HYP_GATEWAYS, 100 by default; make soak sends issue 24's
// 3,000): every chunk is stored, the next gateway is refused, /metrics lists a bounded top
// of partitions and stays under 100 KB, and count(*) over every partition is right, first
// right after the burst (most rows still in the server's log: the query reads them from
// there, without waiting for the flush) and again once everything is flushed. The times are
// logged, not asserted. Each new partition costs the server's flush a table of its own
// (about 13 ms of CPU here), which is what keeps the default small.
func TestManyGatewaysOnOneToken(t *testing.T) {
	gateways, rowsEach := 100, 3
	if v, err := strconv.Atoi(os.Getenv("HYP_GATEWAYS")); err == nil && v > 0 {
		gateways = v
	}
	home, listen, tokenFile := gatewayServerHome(t, gateways)
	srv := startHypServer(t, home, listen, tokenFile)
	const token = "s3cr3t-gateway-token"

	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	start := time.Now()
	work := make(chan int)
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				code, body := forwardAs(t, c, listen, token, fmt.Sprintf("gw-%04d", i), rowsEach)
				mu.Lock()
				if codes[code]++; code != 200 && codes[code] == 1 {
					t.Errorf("gateway %d: %d %s", i, code, body)
				}
				mu.Unlock()
			}
		})
	}
	for i := range gateways {
		work <- i
	}
	close(work)
	wg.Wait()
	t.Logf("%d gateways forwarded in %v: %v", gateways, time.Since(start), codes)
	if codes[200] != gateways {
		t.Fatalf("replies %v, want %d 200s", codes, gateways)
	}

	code, body := forwardAs(t, c, listen, token, "one-too-many", 1)
	if code != http.StatusTooManyRequests || !strings.Contains(body, `"too_many_gateways"`) {
		t.Fatalf("gateway %d: %d %s, want 429 too_many_gateways", gateways+1, code, body)
	}
	if code, body := forwardAs(t, c, listen, token, "gw-0007", rowsEach); code != 200 || !strings.Contains(body, fmt.Sprintf(`"duplicates":%d`, rowsEach)) {
		t.Fatalf("a counted gateway re-sending: %d %s, want 200 with every row a duplicate", code, body)
	}

	start = time.Now()
	res := queryJSON(t, home, "SELECT count(*) AS n FROM logs")
	t.Logf("count(*) over %d partitions: %v", gateways, time.Since(start))
	if len(res) != 1 || res[0]["n"] != float64(gateways*rowsEach) {
		t.Fatalf("query: %v, want %d rows", res, gateways*rowsEach)
	}
	start = time.Now()
	res = queryJSON(t, home, "SELECT count(*) AS n, count(DISTINCT _hyp_partition) AS parts FROM logs", "--internal")
	t.Logf("count(*) and count(DISTINCT _hyp_partition): %v", time.Since(start))
	if len(res) != 1 || res[0]["n"] != float64(gateways*rowsEach) || res[0]["parts"] != float64(gateways) {
		t.Fatalf("query: %v, want %d rows in %d partitions", res, gateways*rowsEach, gateways)
	}
	// cache status flushes through the server first, so the metrics below see every row
	// too, and the next query reads tables alone.
	start = time.Now()
	if out, code := hyp(t, home, "cache", "status"); code != 0 {
		t.Fatalf("cache status: exit %d: %s", code, out)
	}
	t.Logf("cache status, flush included: %v", time.Since(start))
	start = time.Now()
	if res := queryJSON(t, home, "SELECT count(*) AS n FROM logs"); len(res) != 1 || res[0]["n"] != float64(gateways*rowsEach) {
		t.Fatalf("query once flushed: %v, want %d rows", res, gateways*rowsEach)
	}
	t.Logf("count(*) again, every partition flushed: %v", time.Since(start))

	start = time.Now()
	resp, err := http.Get("http://" + listen + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("/metrics: %d bytes in %v", len(metrics), time.Since(start))
	if len(metrics) >= 100<<10 {
		t.Errorf("/metrics is %d bytes, want under 100 KB", len(metrics))
	}
	series := map[string]int{}
	var cachedRows float64
	sc := bufio.NewScanner(bytes.NewReader(metrics))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || !strings.Contains(line, `partition="`) {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		series[name]++
		if name == "hyp_cache_rows" {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			cachedRows += v
		}
	}
	for _, name := range []string{"hyp_cache_rows", "hyp_cache_head_seq", "hyp_sink_watermark_seq", "hyp_sink_lag_rows", "hyp_sink_oldest_unexported_age_seconds"} {
		if series[name] != 21 { // the top 20 and _other
			t.Errorf("%s has %d partition series, want 21", name, series[name])
		}
	}
	if !bytes.Contains(metrics, []byte(`hyp_cache_rows{dataset="logs",partition="_other"}`)) {
		t.Errorf("no folded hyp_cache_rows series")
	}
	if cachedRows != float64(gateways*rowsEach) {
		t.Errorf("hyp_cache_rows sum to %v, want %d", cachedRows, gateways*rowsEach)
	}

	start = time.Now()
	srv.stop(t)
	t.Logf("stopped in %v", time.Since(start))
}

// The cap survives a restart: the gateways the server holds rows of are counted again, so
// a token at its cap stays there, and a gateway it already sent as is still served.
func TestGatewayCapAfterRestart(t *testing.T) {
	home, listen, tokenFile := gatewayServerHome(t, 2)
	const token = "s3cr3t-gateway-token"
	c := &http.Client{}
	srv := startHypServer(t, home, listen, tokenFile)
	for _, gw := range []string{"gw-a", "gw-b"} {
		if code, body := forwardAs(t, c, listen, token, gw, 2); code != 200 {
			t.Fatalf("%s: %d %s", gw, code, body)
		}
	}
	srv.stop(t)
	srv = startHypServer(t, home, listen, tokenFile)
	if code, body := forwardAs(t, c, listen, token, "gw-c", 1); code != http.StatusTooManyRequests || !strings.Contains(body, "too_many_gateways") {
		t.Fatalf("a third gateway after the restart: %d %s, want 429 too_many_gateways", code, body)
	}
	if code, body := forwardAs(t, c, listen, token, "gw-a", 3); code != 200 || !strings.Contains(body, `"accepted":1,"duplicates":2`) {
		t.Fatalf("gw-a after the restart: %d %s", code, body)
	}
	srv.stop(t)
}
