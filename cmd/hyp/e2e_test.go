package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hyp-project/hyp/internal/testutil/hypbin"
)

// These tests drive the built binary through the SPEC surface only: HTTP ingest, the CLI,
// signals and kill -9.

var hypBin string

// hypArmedBin is hyp built with the failpoints tag: what a process started with
// HYP_FAILPOINT runs (startHypProbe), since the shipped binary has no switch.
var hypArmedBin string

func TestMain(m *testing.M) { hypbin.Main(".", &hypBin, &hypArmedBin, m.Run) }

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type daemonProc struct {
	cmd    *exec.Cmd
	addr   string
	stderr *bytes.Buffer
}

func newHome(t *testing.T) (string, string) {
	t.Helper()
	home := t.TempDir()
	addr := freePort(t)
	cfg := fmt.Sprintf("ingest:\n  listen: %s\ncache:\n  flush_interval: 500ms\nsinks: {}\n", addr)
	if err := os.WriteFile(filepath.Join(home, "hyp.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return home, addr
}

func startDaemon(t *testing.T, home, addr string) *daemonProc {
	t.Helper()
	d := &daemonProc{addr: addr, stderr: &bytes.Buffer{}}
	d.cmd = exec.Command(hypBin, "daemon", "--home", home)
	d.cmd.Stderr = d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				t.Cleanup(func() { d.cmd.Process.Kill(); d.cmd.Wait() })
				return d
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.cmd.Process.Kill()
	t.Fatalf("daemon did not become ready: %s", d.stderr)
	return nil
}

func hyp(t *testing.T, home string, a ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(hypBin, append(a, "--home", home)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String() + errb.String(), code
}

func post(addr, path string, body []byte) (int, map[string]any, error) {
	resp, err := http.Post("http://"+addr+path, "application/x-ndjson", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var m map[string]any
	err = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m, err
}

func rows(from, n int, source string) []byte {
	var b bytes.Buffer
	for i := from; i < from+n; i++ {
		fmt.Fprintf(&b, `{"id":%d,"source":%q,"level":"info","msg":"request handled in %d ms","attrs":{"path":"/api/v1/items","status":200}}`+"\n", i, source, i%97)
	}
	return b.Bytes()
}

func queryJSON(t *testing.T, home, sql string, extra ...string) []map[string]any {
	t.Helper()
	out, code := hyp(t, home, append([]string{"query", "sql", sql, "--format", "json"}, extra...)...)
	if code != 0 {
		t.Fatalf("query %q: exit %d: %s", sql, code, out)
	}
	var res []map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("query output %q: %v", out, err)
	}
	return res
}

func TestDaemonIngestQueryStatus(t *testing.T) {
	home, addr := newHome(t)
	d := startDaemon(t, home, addr)

	code, m, err := post(addr, "/v1/ingest/logs", append(rows(0, 1000, "web"), rows(1000, 500, "db")...))
	if err != nil || code != 200 || m["accepted"].(float64) != 1500 {
		t.Fatalf("ingest: %d %v %v", code, m, err)
	}
	code, m, _ = post(addr, "/v1/ingest/logs", []byte("{\"id\":1}\n{\"id\":\n"))
	if code != 400 || m["error"] != "bad_json" || m["line"].(float64) != 2 {
		t.Fatalf("bad json: %d %v", code, m)
	}
	if code, m, _ = post(addr, "/v1/ingest/Bad-Name", rows(0, 1, "x")); code != 400 || m["error"] != "bad_dataset" {
		t.Fatalf("bad dataset: %d %v", code, m)
	}
	if code, _, _ = post(addr, "/v1/ingest/logs?source=cli", []byte(`{"id":9999}`)); code != 200 {
		t.Fatalf("single row without newline: %d", code)
	}

	otlpLogs := `{"resourceLogs":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"checkout"}}]},"scopeLogs":[{"logRecords":[{"timeUnixNano":"1700000000000000000","severityText":"INFO","body":{"stringValue":"paid"},"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174"}]}]}]}`
	resp, err := http.Post("http://"+addr+"/v1/logs", "application/json", strings.NewReader(otlpLogs))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("otlp logs: %v %v", resp, err)
	}
	resp.Body.Close()
	otel := queryJSON(t, home, "SELECT body, trace_id, _hyp_partition AS p FROM logs WHERE body = 'paid'", "--internal")
	if len(otel) != 1 || otel[0]["trace_id"] != "5b8efff798038103d269b633813fc60c" || otel[0]["p"] != "source=checkout" {
		t.Fatalf("otlp row: %v", otel)
	}

	res := queryJSON(t, home, "SELECT count(*) AS n, count(DISTINCT id) AS d FROM logs WHERE id IS NOT NULL")
	if res[0]["n"].(float64) != 1501 || res[0]["d"].(float64) != 1501 {
		t.Fatalf("count: %v", res)
	}
	res = queryJSON(t, home, "SELECT _hyp_partition AS p, count(*) AS n FROM logs GROUP BY 1 ORDER BY 1", "--internal")
	if len(res) != 4 || res[0]["p"] != "source=checkout" || res[3]["n"].(float64) != 1000 {
		t.Fatalf("by partition: %v", res)
	}
	if out, code := hyp(t, home, "query", "sql", "SELECT _hyp_ingest_seq FROM logs"); code != 2 {
		t.Fatalf("internal column visible without --internal: exit %d %s", code, out)
	}

	out, code := hyp(t, home, "cache", "status", "--json")
	if code != 0 {
		t.Fatalf("cache status: %d %s", code, out)
	}
	var st struct {
		Datasets []struct {
			Dataset    string
			Partitions []struct {
				Partition      string
				Rows           int64
				MinSeq, MaxSeq int64 `json:"-"`
				Min            int64 `json:"min_seq"`
				Max            int64 `json:"max_seq"`
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Datasets) != 1 || len(st.Datasets[0].Partitions) != 4 {
		t.Fatalf("cache status: %s", out)
	}
	// The metrics count flushed rows; cache status flushed them all.
	mresp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mbody := new(bytes.Buffer)
	mbody.ReadFrom(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{`hyp_ingest_rows_total{dataset="logs"} 1502`, `hyp_cache_rows{dataset="logs",partition="source=web"} 1000`, `hyp_ingest_rejected_total{dataset="logs",reason="bad_json"} 1`} {
		if !strings.Contains(mbody.String(), want) {
			t.Fatalf("/metrics lacks %s", want)
		}
	}
	// SPEC 8's histograms: every acknowledged request waited for a group fsync.
	if m := regexp.MustCompile(`(?m)^hyp_wal_fsync_seconds_count (\d+)$`).FindStringSubmatch(mbody.String()); m == nil || m[1] == "0" {
		t.Errorf("/metrics: hyp_wal_fsync_seconds_count %v, want some fsyncs", m)
	}
	if !strings.Contains(mbody.String(), "hyp_flush_seconds_bucket{") {
		t.Errorf("/metrics lacks the hyp_flush_seconds histogram")
	}

	// `hyp ingest` while the daemon runs goes through the control socket.
	f := filepath.Join(t.TempDir(), "in.ndjson")
	os.WriteFile(f, rows(0, 300, "piped"), 0o644)
	if out, code := hyp(t, home, "ingest", "viacli", f); code != 0 || !strings.Contains(out, "accepted 300") {
		t.Fatalf("hyp ingest with daemon: %d %s", code, out)
	}
	if res := queryJSON(t, home, "SELECT count(*) AS n FROM viacli"); res[0]["n"].(float64) != 300 {
		t.Fatalf("viacli count %v", res)
	}

	// A second daemon on the same home refuses clearly.
	out, code = hyp(t, home, "daemon")
	if code != 1 || !strings.Contains(out, "hyp daemon") {
		t.Fatalf("second daemon: exit %d: %s", code, out)
	}

	// SIGTERM drains and exits 0; the rows are in the tables afterwards.
	d.cmd.Process.Signal(syscall.SIGTERM)
	if err := d.cmd.Wait(); err != nil {
		t.Fatalf("daemon exit after SIGTERM: %v\n%s", err, d.stderr)
	}
	res = queryJSON(t, home, "SELECT count(*) AS n FROM logs")
	if res[0]["n"].(float64) != 1502 {
		t.Fatalf("after SIGTERM: %v", res)
	}
}

func TestKillNineLosesNoAcknowledgedRow(t *testing.T) {
	home, addr := newHome(t)
	d := startDaemon(t, home, addr)

	var mu sync.Mutex
	acked := map[int]bool{}
	var maxSeq int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for c := 0; c < 4; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				from := (c*100000 + i) * 100
				code, m, err := post(addr, "/v1/ingest/logs", rows(from, 100, fmt.Sprintf("s%d", c%2)))
				if err != nil || code != 200 {
					return
				}
				var last int64
				fmt.Sscan(m["last_seq"].(string), &last)
				mu.Lock()
				for j := from; j < from+100; j++ {
					acked[j] = true
				}
				maxSeq = max(maxSeq, last)
				mu.Unlock()
			}
		}(c)
	}
	time.Sleep(1500 * time.Millisecond)
	d.cmd.Process.Kill()
	d.cmd.Wait()
	close(stop)
	wg.Wait()
	if len(acked) == 0 {
		t.Fatal("no request was acknowledged before the kill")
	}

	d = startDaemon(t, home, addr)
	res := queryJSON(t, home, "SELECT count(*) AS n, count(DISTINCT id) AS d FROM logs")
	n, distinct := int(res[0]["n"].(float64)), int(res[0]["d"].(float64))
	if n != distinct {
		t.Fatalf("%d rows but %d distinct ids: duplicates after crash", n, distinct)
	}
	if n < len(acked) {
		t.Fatalf("%d rows cached, %d acknowledged: acknowledged rows lost", n, len(acked))
	}
	ids := queryJSON(t, home, "SELECT id FROM logs")
	have := map[int]bool{}
	for _, r := range ids {
		have[int(r["id"].(float64))] = true
	}
	for id := range acked {
		if !have[id] {
			t.Fatalf("acknowledged id %d missing", id)
		}
	}
	code, m, _ := post(addr, "/v1/ingest/logs", rows(-1, 1, "s0"))
	var first int64
	fmt.Sscan(m["first_seq"].(string), &first)
	if code != 200 || first <= maxSeq {
		t.Fatalf("seq after restart %d, highest acknowledged before crash %d", first, maxSeq)
	}
	bySource := queryJSON(t, home, "SELECT _hyp_partition AS p, count(*) AS n, count(DISTINCT _hyp_ingest_seq) AS s FROM logs GROUP BY 1", "--internal")
	for _, r := range bySource {
		if r["n"] != r["s"] {
			t.Fatalf("seq reused within %v", r)
		}
	}
}

func TestCLIWithoutDaemon(t *testing.T) {
	home, _ := newHome(t)
	f := filepath.Join(t.TempDir(), "in.ndjson")
	os.WriteFile(f, rows(0, 2500, "file"), 0o644)
	if out, code := hyp(t, home, "ingest", "app", f); code != 0 || !strings.Contains(out, "accepted 2500") {
		t.Fatalf("ingest: %d %s", code, out)
	}
	if out, code := hyp(t, home, "ingest", "app", "--source", "x"); code != 0 {
		t.Fatalf("ingest stdin: %d %s", code, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.ndjson")
	os.WriteFile(bad, []byte("{\"a\":1}\nnot json\n"), 0o644)
	if out, code := hyp(t, home, "ingest", "app", bad); code != 1 || !strings.Contains(out, "line 2") {
		t.Fatalf("bad ingest: %d %s", code, out)
	}
	res := queryJSON(t, home, "SELECT count(*) AS n FROM app")
	if res[0]["n"].(float64) != 2500 {
		t.Fatalf("count %v", res)
	}
	if out, code := hyp(t, home, "cache", "compact", "--json"); code != 0 || !strings.Contains(out, "to_generation") {
		t.Fatalf("compact: %d %s", code, out)
	}
	if out, code := hyp(t, home, "cache", "prune", "--dry-run", "--json"); code != 0 || !strings.Contains(out, `"dry_run": true`) {
		t.Fatalf("prune: %d %s", code, out)
	}
	if out, code := hyp(t, home, "query", "schema", "app", "--json"); code != 0 || !strings.Contains(out, `"attrs"`) {
		t.Fatalf("schema: %d %s", code, out)
	}
	if _, code := hyp(t, home, "query", "sql"); code != 2 {
		t.Fatalf("missing sql arg: exit %d", code)
	}
	if _, code := hyp(t, home, "nonsense"); code != 2 {
		t.Fatalf("unknown command: exit %d", code)
	}
}
