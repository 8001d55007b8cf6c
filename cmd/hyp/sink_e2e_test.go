package main

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/hyp-project/hyp/internal/failpoint"
	"github.com/hyp-project/hyp/internal/testutil/listening"
	"github.com/hyp-project/hyp/internal/testutil/miniotest"
)

// These tests hold the sinks to SPEC 9.1 (exactly once) through the built binary only:
// hyp.yaml, the CLI, HTTP, signals and kill -9. Destinations are read from outside: the
// server through `hyp query sql`, files with pqarrow/gzip, S3 objects from MinIO.
//
// Every row carries a unique integer id; exactly once means the multiset of ids at the
// destination equals the set ingested.

// ---------- processes ----------

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// hypProc is a long-running `hyp daemon` or `hyp server` started by a test.
type hypProc struct {
	name string
	cmd  *exec.Cmd
	out  *lockedBuf
	done chan struct{} // closed once the process has exited
}

// baseEnv is the test's environment without anything that would change how hyp behaves.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "HYP_FAILPOINT=") || strings.HasPrefix(kv, "HYP_HOME=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// startHyp runs hyp with args and extra environment and waits until GET
// http://<healthAddr>/healthz answers 200.
func startHyp(t *testing.T, name string, env []string, healthAddr string, args ...string) *hypProc {
	t.Helper()
	return startHypProbe(t, name, env, &http.Client{Timeout: 2 * time.Second}, "http://"+healthAddr+"/healthz", args...)
}

// startHypProbe is startHyp for any health URL and the client that can reach it (one that
// speaks TLS to an HTTPS listener).
func startHypProbe(t *testing.T, name string, env []string, client *http.Client, healthURL string, args ...string) *hypProc {
	t.Helper()
	p := &hypProc{name: name, out: &lockedBuf{}, done: make(chan struct{})}
	bin := hypBin
	if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, failpoint.Env+"=") }) {
		bin = hypArmedBin // the shipped binary ignores the switch
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(baseEnv(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			t.Fatalf("%s exited before it was ready (%v):\n%s", name, p.cmd.ProcessState, p.out)
		default:
		}
		resp, err := client.Get(healthURL)
		// Whoever holds the port answers too: the process is ready once it is the one
		// listening there (another test's process can take a port freePort handed out).
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 && listening.On(p.cmd.Process.Pid, resp.Request.URL.Host) {
				return p
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not become ready on %s:\n%s", name, healthURL, p.out)
	return nil
}

// stop sends SIGTERM and expects a clean exit 0.
func (p *hypProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("%s did not exit within 60s of SIGTERM:\n%s", p.name, p.out)
	}
	if !p.cmd.ProcessState.Success() {
		t.Fatalf("%s after SIGTERM: %v\n%s", p.name, p.cmd.ProcessState, p.out)
	}
}

func (p *hypProc) kill9() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// waitExit waits for the process to end on its own.
func (p *hypProc) waitExit(t *testing.T, within time.Duration) *os.ProcessState {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState
	case <-time.After(within):
		t.Fatalf("%s still running %v later:\n%s", p.name, within, p.out)
		return nil
	}
}

func startHypDaemon(t *testing.T, home, addr string, env ...string) *hypProc {
	t.Helper()
	return startHyp(t, "daemon "+filepath.Base(home), env, addr, "daemon", "--home", home)
}

// newServerHome makes a `hyp server` home with no sinks and a token file; it returns the
// home, the forward listener address and the token file.
func newServerHome(t *testing.T) (home, listen, tokenFile string) {
	t.Helper()
	home = t.TempDir()
	cfg := fmt.Sprintf("ingest:\n  listen: %s\ncache:\n  flush_interval: 500ms\nsinks: {}\n", freePort(t))
	if err := os.WriteFile(filepath.Join(home, "hyp.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	tokenFile = filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokenFile, []byte("s3cr3t-gateway-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return home, freePort(t), tokenFile
}

func startHypServer(t *testing.T, home, listen, tokenFile string, extra ...string) *hypProc {
	t.Helper()
	args := append([]string{"server", "--home", home, "--listen", listen, "--token-file", tokenFile}, extra...)
	return startHyp(t, "server", nil, listen, args...)
}

// ---------- config ----------

func forwardSinkYAML(name, url, tokenFile string) string {
	return fmt.Sprintf("  %s:\n    type: forward\n    url: %q\n    token_file: %q\n    schedule: \"@every 1h\"\n", name, url, tokenFile)
}

func localSinkYAML(name, format, root string) string {
	return fmt.Sprintf("  %s:\n    type: blob\n    format: %s\n    destination: {type: local-fs, path: %q}\n    schedule: \"@every 1h\"\n", name, format, root)
}

func s3SinkYAML(name, format, bucket, prefix, endpoint string) string {
	return fmt.Sprintf("  %s:\n    type: blob\n    format: %s\n    destination: {type: s3, bucket: %q, prefix: %q, region: us-east-1, endpoint: %q, force_path_style: true}\n    schedule: \"@every 1h\"\n",
		name, format, bucket, prefix, endpoint)
}

// writeDaemonYAML writes home/hyp.yaml: the ingest address, an optional retention default
// ("" keeps the default), and the given sinks (each from a *SinkYAML helper).
func writeDaemonYAML(t *testing.T, home, addr, retention string, sinks ...string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "ingest:\n  listen: %s\ncache:\n  flush_interval: 500ms\n", addr)
	if retention != "" {
		fmt.Fprintf(&b, "  retention:\n    default: %s\n", retention)
	}
	if len(sinks) == 0 {
		b.WriteString("sinks: {}\n")
	} else {
		b.WriteString("sinks:\n")
		for _, s := range sinks {
			b.WriteString(s)
		}
	}
	if err := os.WriteFile(filepath.Join(home, "hyp.yaml"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ---------- CLI ----------

type cliResult struct {
	args           []string
	stdout, stderr string
	code           int
	elapsed        time.Duration
}

func (r cliResult) String() string {
	return fmt.Sprintf("hyp %s: exit %d after %v\nstdout: %s\nstderr: %s", strings.Join(r.args, " "), r.code, r.elapsed.Round(time.Millisecond), r.stdout, r.stderr)
}

// runHyp runs one CLI command against home, failing t if it has not ended within timeout.
func runHyp(t *testing.T, home string, timeout time.Duration, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	all := append(slices.Clone(args), "--home", home)
	cmd := exec.CommandContext(ctx, hypBin, all...)
	cmd.Env = baseEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	res := cliResult{args: args, stdout: out.String(), stderr: errb.String(), elapsed: time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("hyp %s did not finish within %v (killed)\nstdout: %s\nstderr: %s", strings.Join(args, " "), timeout, res.stdout, res.stderr)
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return res
}

type sinkRunJSON struct {
	Sinks []struct {
		Instance string   `json:"instance"`
		Status   string   `json:"status"`
		Rows     int64    `json:"rows"`
		Bytes    int64    `json:"bytes"`
		Units    int      `json:"units"`
		Errors   []string `json:"errors"`
	} `json:"sinks"`
}

func (s sinkRunJSON) totals() (rows, bytes int64, units int) {
	for _, x := range s.Sinks {
		rows += x.Rows
		bytes += x.Bytes
		units += x.Units
	}
	return
}

// sinkRun runs `hyp sink run [instance] --json`. The JSON is parsed when stdout has any.
func sinkRun(t *testing.T, home, instance string, timeout time.Duration) (sinkRunJSON, cliResult) {
	t.Helper()
	args := []string{"sink", "run", "--json"}
	if instance != "" {
		args = []string{"sink", "run", instance, "--json"}
	}
	r := runHyp(t, home, timeout, args...)
	var res sinkRunJSON
	if strings.TrimSpace(r.stdout) != "" {
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			t.Fatalf("sink run output is not JSON: %v\n%s", err, r)
		}
	}
	return res, r
}

// requireRun runs the sinks and expects exit 0, every instance ok, and wantRows rows in
// total (unless wantRows < 0).
func requireRun(t *testing.T, home, instance string, wantRows int64) sinkRunJSON {
	t.Helper()
	res, r := sinkRun(t, home, instance, 2*time.Minute)
	if r.code != 0 {
		t.Fatalf("sink run failed: %s", r)
	}
	for _, s := range res.Sinks {
		if s.Status != "ok" || len(s.Errors) > 0 {
			t.Fatalf("sink %s: status %s errors %v\n%s", s.Instance, s.Status, s.Errors, r)
		}
	}
	if rows, _, _ := res.totals(); wantRows >= 0 && rows != wantRows {
		t.Fatalf("sink run exported %d rows, want %d\n%s", rows, wantRows, r)
	}
	return res
}

// requireNoopRun expects a run with nothing new to report rows 0, bytes 0, units 0.
func requireNoopRun(t *testing.T, home, instance string) {
	t.Helper()
	res := requireRun(t, home, instance, 0)
	if rows, b, units := res.totals(); rows != 0 || b != 0 || units != 0 {
		t.Fatalf("run without new rows: rows %d bytes %d units %d, want 0 0 0: %+v", rows, b, units, res)
	}
	if len(res.Sinks) == 0 {
		t.Fatalf("run without new rows reported no sinks: %+v", res)
	}
}

// ---------- ingest bookkeeping ----------

// feeder hands out unique ids and remembers every row a daemon acknowledged.
type feeder struct {
	mu      sync.Mutex
	next    int
	pending int64                   // rows ingested since the last take
	want    map[string]map[int]bool // dataset -> ids
}

func newFeeder(first int) *feeder { return &feeder{next: first, want: map[string]map[int]bool{}} }

func (f *feeder) ingest(t *testing.T, addr, dataset, source string, n int) {
	t.Helper()
	f.mu.Lock()
	from := f.next
	f.next += n
	f.mu.Unlock()
	code, m, err := post(addr, "/v1/ingest/"+dataset, rows(from, n, source))
	if err != nil || code != 200 {
		t.Fatalf("ingest %d rows into %s source %q: %d %v %v", n, dataset, source, code, m, err)
	}
	if got, _ := m["accepted"].(float64); int(got) != n {
		t.Fatalf("ingest: accepted %v, want %d", m["accepted"], n)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.want[dataset] == nil {
		f.want[dataset] = map[int]bool{}
	}
	for i := from; i < from+n; i++ {
		f.want[dataset][i] = true
	}
	f.pending += int64(n)
}

// take returns the rows ingested since the last take.
func (f *feeder) take() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.pending
	f.pending = 0
	return n
}

func unionWant(sets ...map[string]map[int]bool) map[string]map[int]bool {
	out := map[string]map[int]bool{}
	for _, s := range sets {
		for ds, ids := range s {
			if out[ds] == nil {
				out[ds] = map[int]bool{}
			}
			for id := range ids {
				out[ds][id] = true
			}
		}
	}
	return out
}

// checkExactlyOnce compares the ids found at a destination (with repeats) to the ids
// acknowledged at ingest.
func checkExactlyOnce(t *testing.T, where string, got map[string][]int, want map[string]map[int]bool) bool {
	t.Helper()
	ok := true
	all := map[string]bool{}
	for ds := range got {
		all[ds] = true
	}
	for ds := range want {
		all[ds] = true
	}
	for ds := range all {
		seen := map[int]int{}
		for _, id := range got[ds] {
			seen[id]++
		}
		var dups, extra, missing []int
		for id, c := range seen {
			if c > 1 {
				dups = append(dups, id)
			}
			if !want[ds][id] {
				extra = append(extra, id)
			}
		}
		for id := range want[ds] {
			if seen[id] == 0 {
				missing = append(missing, id)
			}
		}
		if len(dups)+len(extra)+len(missing) > 0 {
			ok = false
			t.Errorf("%s, dataset %s: %d rows, %d distinct ids, want %d ids: %d duplicated %v, %d missing %v, %d unexpected %v",
				where, ds, len(got[ds]), len(seen), len(want[ds]), len(dups), sample(dups), len(missing), sample(missing), len(extra), sample(extra))
		}
	}
	return ok
}

func sample(ids []int) []int {
	sort.Ints(ids)
	if len(ids) > 8 {
		return ids[:8]
	}
	return ids
}

// ---------- destinations ----------

// serverIDs reads every id the server stored, per dataset.
func serverIDs(t *testing.T, serverHome string, datasets []string) map[string][]int {
	t.Helper()
	out := map[string][]int{}
	for _, ds := range datasets {
		r := runHyp(t, serverHome, time.Minute, "query", "sql", "select id from "+ds, "--format", "json")
		if r.code != 0 {
			t.Fatalf("query server: %s", r)
		}
		var res []map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			t.Fatalf("query server output: %v\n%s", err, r)
		}
		for _, row := range res {
			v, ok := row["id"].(float64)
			if !ok {
				t.Fatalf("server row without a numeric id: %v", row)
			}
			out[ds] = append(out[ds], int(v))
		}
	}
	return out
}

func checkServer(t *testing.T, where, serverHome string, want map[string]map[int]bool) bool {
	t.Helper()
	var ds []string
	for d := range want {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	return checkExactlyOnce(t, where+" (server)", serverIDs(t, serverHome, ds), want)
}

// blobFile is one exported file, named relative to the destination root.
type blobFile struct {
	rel  string
	data []byte
}

// localFiles reads every file under root except the destination's hidden temp directory.
func localFiles(t *testing.T, root string) []blobFile {
	t.Helper()
	var out []blobFile
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == ".hyp-tmp" {
				return fs.SkipDir
			}
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out = append(out, blobFile{rel: rel, data: data})
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	return out
}

// localSnapshot names every finished file with its size and modification time.
func localSnapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && d.Name() == ".hyp-tmp" {
			return fs.SkipDir
		}
		if !d.IsDir() {
			if info, err := d.Info(); err == nil {
				snap[p] = fmt.Sprintf("%d %d", info.Size(), info.ModTime().UnixNano())
			}
		}
		return nil
	})
	return snap
}

func s3Files(t *testing.T, m *miniotest.Server, bucket, prefix string) []blobFile {
	t.Helper()
	var out []blobFile
	for _, k := range m.List(t, bucket, "") {
		rel, ok := strings.CutPrefix(k, prefix+"/")
		if !ok {
			t.Errorf("object %q is outside the prefix %q", k, prefix)
			continue
		}
		out = append(out, blobFile{rel: rel, data: m.Get(t, bucket, k)})
	}
	return out
}

type exportedRow struct {
	id     int
	seq    int64
	source string
}

var (
	partName    = regexp.MustCompile(`^part-(\d{20})-(\d{20})\.(parquet|jsonl\.gz)$`)
	datasetName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)
)

// checkBlobFiles checks the layout <dataset>/_hyp_source=<s>/part-<first>-<last>.<ext> of every
// file, that each file's rows are of its source and exactly span its seq bounds, and that
// no two files of a partition overlap; it returns the ids per dataset.
func checkBlobFiles(t *testing.T, where string, files []blobFile, ext string) map[string][]int {
	t.Helper()
	ids := map[string][]int{}
	type span struct {
		first, last int64
		rel         string
	}
	spans := map[string][]span{}
	for _, f := range files {
		parts := strings.Split(f.rel, "/")
		if len(parts) != 3 {
			t.Errorf("%s: %q is not <dataset>/_hyp_source=<s>/part-<first>-<last>.%s", where, f.rel, ext)
			continue
		}
		ds, dir, name := parts[0], parts[1], parts[2]
		m := partName.FindStringSubmatch(name)
		if !datasetName.MatchString(ds) || !strings.HasPrefix(dir, "_hyp_source=") || m == nil || m[3] != ext {
			t.Errorf("%s: %q is not <dataset>/_hyp_source=<s>/part-<20 digits>-<20 digits>.%s", where, f.rel, ext)
			continue
		}
		source, err := url.PathUnescape(strings.TrimPrefix(dir, "_hyp_source="))
		if err != nil {
			t.Errorf("%s: %q: partition directory does not unescape: %v", where, f.rel, err)
			continue
		}
		first, _ := strconv.ParseInt(m[1], 10, 64)
		last, _ := strconv.ParseInt(m[2], 10, 64)
		var rows []exportedRow
		if ext == "parquet" {
			rows, err = decodeParquet(f.data)
		} else {
			rows, err = decodeJSONLGz(f.data)
		}
		if err != nil {
			t.Errorf("%s: %s: %v", where, f.rel, err)
			continue
		}
		if len(rows) == 0 {
			t.Errorf("%s: %s holds no rows (a unit with no rows must write nothing)", where, f.rel)
			continue
		}
		lo, hi := rows[0].seq, rows[0].seq
		seqs := map[int64]bool{}
		for _, r := range rows {
			lo, hi = min(lo, r.seq), max(hi, r.seq)
			if seqs[r.seq] {
				t.Errorf("%s: %s: seq %d twice in one file", where, f.rel, r.seq)
			}
			seqs[r.seq] = true
			if r.source != source {
				t.Errorf("%s: %s holds a row of source %q (id %d)", where, f.rel, r.source, r.id)
				break
			}
			ids[ds] = append(ids[ds], r.id)
		}
		if lo != first || hi != last {
			t.Errorf("%s: %s: rows span seqs %d-%d, the name says %d-%d", where, f.rel, lo, hi, first, last)
		}
		spans[ds+"/"+dir] = append(spans[ds+"/"+dir], span{first, last, f.rel})
	}
	for _, ss := range spans {
		sort.Slice(ss, func(i, j int) bool { return ss[i].first < ss[j].first })
		for i := 1; i < len(ss); i++ {
			if ss[i].first <= ss[i-1].last {
				t.Errorf("%s: %s and %s overlap: the same rows exported twice", where, ss[i-1].rel, ss[i].rel)
			}
		}
	}
	return ids
}

var wantColumns = []string{"id", "source", "level", "msg", "attrs", "_hyp_ingest_seq", "_hyp_ingested_at"}

func decodeParquet(data []byte) ([]exportedRow, error) {
	pr, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("not a parquet file: %w", err)
	}
	defer pr.Close()
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		return nil, fmt.Errorf("pqarrow: %w", err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		return nil, fmt.Errorf("pqarrow read: %w", err)
	}
	defer tbl.Release()
	sc := tbl.Schema()
	if got := fieldNames(sc); !sameSet(got, wantColumns) {
		return nil, fmt.Errorf("columns %v, want exactly the user columns plus the two internal ones %v", got, wantColumns)
	}
	col := map[string]int{}
	for _, c := range wantColumns {
		idx := sc.FieldIndices(c)
		if len(idx) != 1 {
			return nil, fmt.Errorf("no column %s in %s", c, sc)
		}
		col[c] = idx[0]
	}
	if f := sc.Field(col["_hyp_ingest_seq"]); f.Type.ID() != arrow.INT64 {
		return nil, fmt.Errorf("_hyp_ingest_seq is %s, want int64", f.Type)
	}
	if f := sc.Field(col["_hyp_ingested_at"]); f.Type.ID() != arrow.TIMESTAMP {
		return nil, fmt.Errorf("_hyp_ingested_at is %s, want a timestamp", f.Type)
	}
	n := int(tbl.NumRows())
	out := make([]exportedRow, n)
	fill := func(name string, set func(i int, a arrow.Array, j int) error) error {
		i := 0
		for _, chunk := range tbl.Column(col[name]).Data().Chunks() {
			for j := 0; j < chunk.Len(); j++ {
				if chunk.IsNull(j) {
					return fmt.Errorf("null %s in row %d", name, i)
				}
				if err := set(i, chunk, j); err != nil {
					return err
				}
				i++
			}
		}
		return nil
	}
	if err := fill("id", func(i int, a arrow.Array, j int) error {
		v, err := intValue(a, j)
		out[i].id = int(v)
		return err
	}); err != nil {
		return nil, err
	}
	if err := fill("_hyp_ingest_seq", func(i int, a arrow.Array, j int) error {
		v, err := intValue(a, j)
		out[i].seq = v
		return err
	}); err != nil {
		return nil, err
	}
	if err := fill("source", func(i int, a arrow.Array, j int) error {
		switch s := a.(type) {
		case *array.String:
			out[i].source = s.Value(j)
		case *array.LargeString:
			out[i].source = s.Value(j)
		default:
			return fmt.Errorf("source column is %s", a.DataType())
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return out, nil
}

func fieldNames(sc *arrow.Schema) []string {
	var out []string
	for _, f := range sc.Fields() {
		out = append(out, f.Name)
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b))
	return slices.Equal(a, b)
}

func intValue(a arrow.Array, j int) (int64, error) {
	switch v := a.(type) {
	case *array.Int64:
		return v.Value(j), nil
	case *array.Int32:
		return int64(v.Value(j)), nil
	case *array.Float64:
		return int64(v.Value(j)), nil
	}
	return 0, fmt.Errorf("column of type %s is not numeric", a.DataType())
}

func decodeJSONLGz(data []byte) ([]exportedRow, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("not gzip: %w", err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var out []exportedRow
	for line := 1; sc.Scan(); line++ {
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		for _, c := range wantColumns {
			if _, ok := m[c]; !ok {
				return nil, fmt.Errorf("line %d has no %s: %s", line, c, sc.Bytes())
			}
		}
		if len(m) != len(wantColumns) {
			return nil, fmt.Errorf("line %d has keys beyond %v: %s", line, wantColumns, sc.Bytes())
		}
		id, err1 := jsonInt(m["id"])
		seq, err2 := jsonInt(m["_hyp_ingest_seq"])
		src, _ := m["source"].(string)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		out = append(out, exportedRow{id: int(id), seq: seq, source: src})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, zr.Close()
}

func jsonInt(v any) (int64, error) {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i, nil
		}
		f, err := x.Float64()
		return int64(f), err
	case string:
		return strconv.ParseInt(x, 10, 64)
	}
	return 0, fmt.Errorf("%v (%T) is not an integer", v, v)
}

// ---------- metrics ----------

// metricSum adds up every sample of a metric family on a /metrics endpoint whose labels
// contain labelSubstr.
func metricSum(t *testing.T, addr, name, labelSubstr string) float64 {
	t.Helper()
	return metricSumAt(t, http.DefaultClient, "http://"+addr, name, labelSubstr)
}

// metricSumAt is metricSum for the listener at base (scheme and host) through client.
func metricSumAt(t *testing.T, client *http.Client, base, name, labelSubstr string) float64 {
	t.Helper()
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if !strings.Contains(line[:i], labelSubstr) {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// ---------- 1. forward ----------

func TestForwardExactlyOnce(t *testing.T) {
	t.Parallel()
	srvHome, srvAddr, tokens := newServerHome(t)
	startHypServer(t, srvHome, srvAddr, tokens)

	home, addr := t.TempDir(), freePort(t)
	sink := forwardSinkYAML("central", "http://"+srvAddr, tokens)
	writeDaemonYAML(t, home, addr, "", sink)
	d := startHypDaemon(t, home, addr)

	f := newFeeder(0)
	for _, s := range []string{"web", "db", "edge node/1"} {
		f.ingest(t, addr, "logs", s, 400)
	}
	f.ingest(t, addr, "audit", "auth", 150)
	requireRun(t, home, "central", f.take())
	checkServer(t, "first run", srvHome, f.want)

	// A run with nothing new sends nothing.
	reqs := metricSum(t, srvAddr, "hyp_server_requests_total", "")
	requireNoopRun(t, home, "central")
	if after := metricSum(t, srvAddr, "hyp_server_requests_total", ""); after != reqs {
		t.Errorf("run without new rows made %v requests to the server", after-reqs)
	}

	// Compaction swaps generations under the watermark.
	if r := runHyp(t, home, time.Minute, "cache", "compact", "--json"); r.code != 0 {
		t.Fatalf("compact: %s", r)
	}
	f.ingest(t, addr, "logs", "web", 300)
	f.ingest(t, addr, "logs", "batch", 120)
	f.ingest(t, addr, "audit", "auth", 30)
	requireRun(t, home, "", f.take())
	checkServer(t, "after compaction", srvHome, f.want)

	// Tiny retention: exported rows go, rows the sink has not exported yet are held.
	d.stop(t)
	writeDaemonYAML(t, home, addr, "1s", sink)
	d = startHypDaemon(t, home, addr)
	f.ingest(t, addr, "logs", "web", 200)
	f.ingest(t, addr, "logs", "db", 50)
	f.ingest(t, addr, "audit", "auth", 20)
	pending := f.take()
	if r := runHyp(t, home, time.Minute, "cache", "status", "--json"); r.code != 0 { // flushes
		t.Fatalf("cache status: %s", r)
	}
	time.Sleep(1200 * time.Millisecond) // past the 1s retention of every row
	r := runHyp(t, home, time.Minute, "cache", "prune", "--json")
	if r.code != 0 {
		t.Fatalf("prune: %s", r)
	}
	var pr struct {
		Partitions []struct {
			Dataset, Partition string
			DeletedRows        int64    `json:"deleted_rows"`
			HeldRows           int64    `json:"held_rows"`
			HeldFor            []string `json:"held_for"`
			ForcedLoss         any      `json:"forced_loss"`
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &pr); err != nil {
		t.Fatalf("prune output: %v\n%s", err, r)
	}
	var deleted, held int64
	for _, p := range pr.Partitions {
		deleted += p.DeletedRows
		held += p.HeldRows
		if p.HeldRows > 0 && !slices.Contains(p.HeldFor, "central") {
			t.Errorf("prune held rows of %s %s for %v, want central", p.Dataset, p.Partition, p.HeldFor)
		}
		if p.ForcedLoss != nil {
			t.Errorf("prune forced a loss without max_age: %+v", p)
		}
	}
	if deleted == 0 || held != pending {
		t.Errorf("prune deleted %d rows and held %d, want >0 deleted and %d (the unexported rows) held\n%s", deleted, held, pending, r)
	}
	if res := queryJSON(t, home, "SELECT count(*) AS n FROM logs"); int64(res[0]["n"].(float64)) != 250 {
		t.Errorf("after prune the daemon caches %v logs rows, want the 250 unexported ones", res[0]["n"])
	}
	requireRun(t, home, "central", pending)
	checkServer(t, "after prune", srvHome, f.want)
	requireNoopRun(t, home, "central")

	// A gateway with a wrong token is refused, reported, and stores nothing.
	ihome, iaddr := t.TempDir(), freePort(t)
	badTokens := filepath.Join(t.TempDir(), "bad-token")
	os.WriteFile(badTokens, []byte("not-the-token\n"), 0o600)
	writeDaemonYAML(t, ihome, iaddr, "", forwardSinkYAML("central", "http://"+srvAddr, badTokens))
	id := startHypDaemon(t, ihome, iaddr)
	g := newFeeder(1_000_000)
	g.ingest(t, iaddr, "logs", "intruder", 200)
	for range 2 { // refused every time, never quarantined
		res, r := sinkRun(t, ihome, "", time.Minute)
		all := strings.ToLower(r.stdout + r.stderr)
		if r.code != 1 || !(strings.Contains(all, "unauthorized") || strings.Contains(all, "401")) {
			t.Fatalf("sink run with a wrong token: want exit 1 naming unauthorized/401: %s", r)
		}
		if len(res.Sinks) != 1 || res.Sinks[0].Status != "failed" || res.Sinks[0].Rows != 0 {
			t.Errorf("sink run with a wrong token: %+v", res)
		}
	}
	checkServer(t, "wrong token", srvHome, f.want)
	// A compaction while the refused unit is pending does not change what it holds.
	if r := runHyp(t, ihome, time.Minute, "cache", "compact", "--json"); r.code != 0 {
		t.Fatalf("compact: %s", r)
	}
	// With the right token the refused rows still arrive, once.
	id.stop(t)
	tok, _ := os.ReadFile(tokens)
	os.WriteFile(badTokens, tok, 0o600)
	startHypDaemon(t, ihome, iaddr)
	requireRun(t, ihome, "", 200)
	checkServer(t, "token fixed", srvHome, unionWant(f.want, g.want))
}

// ---------- 2. local-fs parquet ----------

func TestLocalFSParquetExactlyOnce(t *testing.T) {
	t.Parallel()
	home, addr := t.TempDir(), freePort(t)
	root := filepath.Join(t.TempDir(), "exports")
	sink := localSinkYAML("files", "parquet", root)
	writeDaemonYAML(t, home, addr, "", sink)
	d := startHypDaemon(t, home, addr)
	f := newFeeder(0)
	check := func(where string) {
		t.Helper()
		checkExactlyOnce(t, where+" (local-fs)", checkBlobFiles(t, where, localFiles(t, root), "parquet"), f.want)
	}
	for _, s := range []string{"web", "db", "edge node/1"} {
		f.ingest(t, addr, "logs", s, 500)
	}
	f.ingest(t, addr, "audit", "auth", 80)
	requireRun(t, home, "files", f.take())
	check("first run")

	snap := localSnapshot(t, root)
	requireNoopRun(t, home, "files")
	if after := localSnapshot(t, root); !mapsEqual(snap, after) {
		t.Errorf("a run without new rows changed the export files:\nbefore %v\nafter  %v", snap, after)
	}

	if r := runHyp(t, home, time.Minute, "cache", "compact", "--json"); r.code != 0 {
		t.Fatalf("compact: %s", r)
	}
	f.ingest(t, addr, "logs", "web", 250)
	f.ingest(t, addr, "logs", "fresh", 40)
	requireRun(t, home, "", f.take())
	check("after compaction")

	d.stop(t)
	writeDaemonYAML(t, home, addr, "1s", sink)
	startHypDaemon(t, home, addr)
	f.ingest(t, addr, "logs", "db", 90)
	f.ingest(t, addr, "audit", "auth", 10)
	pending := f.take()
	if r := runHyp(t, home, time.Minute, "cache", "status", "--json"); r.code != 0 {
		t.Fatalf("cache status: %s", r)
	}
	time.Sleep(1200 * time.Millisecond)
	r := runHyp(t, home, time.Minute, "cache", "prune", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"files"`) {
		t.Fatalf("prune: want rows held for the sink files: %s", r)
	}
	requireRun(t, home, "files", pending)
	check("after prune")
	requireNoopRun(t, home, "files")
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// ---------- 3. S3 ----------

func TestS3ExactlyOnceAcrossMinIORestart(t *testing.T) {
	t.Parallel()
	m := miniotest.Start(t)
	const bucket, prefix = "hyp-exports", "tenant-a/raw"
	m.CreateBucket(t, bucket)

	home, addr := t.TempDir(), freePort(t)
	writeDaemonYAML(t, home, addr, "", s3SinkYAML("lake", "jsonl", bucket, prefix, m.Endpoint()))
	d := startHypDaemon(t, home, addr, m.Env()...)
	f := newFeeder(0)
	check := func(where string) {
		t.Helper()
		checkExactlyOnce(t, where+" (s3)", checkBlobFiles(t, where, s3Files(t, m, bucket, prefix), "jsonl.gz"), f.want)
	}
	for _, s := range []string{"web", "db", "edge node/1"} {
		f.ingest(t, addr, "logs", s, 300)
	}
	requireRun(t, home, "lake", f.take())
	check("first run")
	before := m.List(t, bucket, "")
	requireNoopRun(t, home, "lake")
	if after := m.List(t, bucket, ""); !slices.Equal(before, after) {
		t.Errorf("a run without new rows wrote objects: before %v after %v", before, after)
	}

	m.Stop()
	f.ingest(t, addr, "logs", "web", 200)
	f.ingest(t, addr, "logs", "db", 20)
	res, r := sinkRun(t, home, "lake", 150*time.Second)
	if r.code != 1 {
		t.Errorf("sink run with S3 down: want exit 1: %s", r)
	}
	if r.elapsed > 90*time.Second {
		t.Errorf("BUG: sink run with S3 down took %v to fail (want well under 90s)", r.elapsed)
	}
	if rows, _, _ := res.totals(); rows != 0 || len(res.Sinks) != 1 || res.Sinks[0].Status == "ok" || len(res.Sinks[0].Errors) == 0 {
		t.Errorf("sink run with S3 down: %+v", res)
	}
	t.Logf("sink run with S3 down failed after %v", r.elapsed.Round(time.Millisecond))

	f.ingest(t, addr, "logs", "db", 35) // more rows arrive before the retry
	if r := runHyp(t, home, time.Minute, "cache", "compact", "--json"); r.code != 0 {
		t.Fatalf("compact: %s", r)
	}
	m.Restart(t)
	requireRun(t, home, "lake", f.take())
	check("after MinIO restart")
	requireNoopRun(t, home, "lake")

	// Killed after the object was created but before the watermark moved: the retry finds
	// its own object (first-writer-wins) and must neither fail nor write a second one.
	d.stop(t)
	d = startHypDaemon(t, home, addr, append(m.Env(), "HYP_FAILPOINT=after-ship:1")...)
	f.ingest(t, addr, "logs", "web", 45)
	if _, r := sinkRun(t, home, "lake", time.Minute); r.code == 0 {
		t.Fatalf("sink run succeeded although the daemon should have died at after-ship: %s", r)
	}
	if st := d.waitExit(t, 30*time.Second); st.Success() {
		t.Fatalf("daemon exited cleanly, want SIGKILL at the failpoint")
	}
	startHypDaemon(t, home, addr, m.Env()...)
	f.ingest(t, addr, "logs", "web", 15)
	requireRun(t, home, "lake", -1)
	check("after kill -9 after the put")
	requireNoopRun(t, home, "lake")

	// MinIO stops in the middle of a run: one unit per source, MinIO killed once a few
	// objects of this run exist.
	for i := 0; i < 40; i++ {
		f.ingest(t, addr, "logs", fmt.Sprintf("mid-%02d", i), 3000)
	}
	had := len(m.List(t, bucket, ""))
	run := make(chan cliResult, 1)
	go func() { _, r := sinkRun(t, home, "lake", 2*time.Minute); run <- r }()
	stopped := false
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && !stopped; {
		select {
		case r := <-run:
			run <- r
			deadline = time.Now() // the run ended before MinIO could be stopped
			continue
		default:
		}
		if len(m.List(t, bucket, "")) >= had+3 {
			m.Stop()
			stopped = true
		}
	}
	r = <-run
	if stopped && r.code != 1 {
		t.Errorf("sink run with MinIO stopped mid-run: want exit 1: %s", r)
	}
	if !stopped {
		t.Logf("the run finished before MinIO could be stopped; checking exactly once anyway")
	} else {
		t.Logf("MinIO stopped mid-run; the run ended with exit %d after %v", r.code, r.elapsed.Round(time.Millisecond))
		m.Restart(t)
	}
	requireRun(t, home, "lake", -1)
	check("after MinIO stopped mid-run")
}

// ---------- 4. kill -9 at every step ----------

func TestKillNineAtEveryUnitStep(t *testing.T) {
	t.Parallel()
	srvHome, srvAddr, tokens := newServerHome(t)
	startHypServer(t, srvHome, srvAddr, tokens)
	home, addr := t.TempDir(), freePort(t)
	root := filepath.Join(t.TempDir(), "exports")
	// Instances run in name order: every unit of "central" before any of "files".
	writeDaemonYAML(t, home, addr, "", forwardSinkYAML("central", "http://"+srvAddr, tokens), localSinkYAML("files", "parquet", root))
	f := newFeeder(0)
	sources := []string{"web", "db"}
	feed := func(n int) {
		for _, s := range sources {
			f.ingest(t, addr, "logs", s, n)
		}
	}
	check := func(where string) {
		t.Helper()
		ok := checkServer(t, where, srvHome, f.want)
		ok = checkExactlyOnce(t, where+" (local-fs)", checkBlobFiles(t, where, localFiles(t, root), "parquet"), f.want) && ok
		if !ok {
			t.FailNow()
		}
	}

	// Killed right after ingest, before any run: the acknowledged rows still go out.
	d := startHypDaemon(t, home, addr)
	feed(100)
	d.kill9()
	startHypDaemon(t, home, addr).stop(t) // exercise a clean restart too
	d = startHypDaemon(t, home, addr)
	feed(30)
	requireRun(t, home, "", 2*f.take()) // two sinks
	check("kill before intent")
	d.stop(t)

	// Each sink ships one unit per source. The failpoint counts per sink instance, so the
	// run names the instance to kill: n=1 is its first unit, n=2 its second (the first
	// one of the tick is then done).
	for _, step := range []string{"after-intent", "after-ship", "after-watermark"} {
		for _, tc := range []struct {
			instance string
			n        int
		}{{"central", 1}, {"files", 1}, {"", 2}} {
			where := fmt.Sprintf("%s:%d", step, tc.n)
			d := startHypDaemon(t, home, addr, "HYP_FAILPOINT="+where)
			where += " running " + cmp.Or(tc.instance, "every sink")
			feed(70)
			runIntoFailpoint(t, home, tc.instance, where, d)
			d = startHypDaemon(t, home, addr)
			feed(40) // new rows arrive before the retry
			f.take()
			requireRun(t, home, "", -1)
			check(where)
			requireNoopRun(t, home, "")
			d.stop(t)
		}
	}
}

// A forward sink ships a partition's units back to back, each queued behind the one in
// flight (its intent written while that one ships, with the settle of the one before): a
// kill at every step of the second and third unit of a backlog of several leaves the
// watermark a unit behind, with a unit in flight and one queued, and the restart, with new
// rows already waiting, stores every row on the server exactly once.
func TestKillNineInsideAForwardPipeline(t *testing.T) {
	t.Parallel()
	srvHome, srvAddr, tokens := newServerHome(t)
	startHypServer(t, srvHome, srvAddr, tokens)
	home, addr := t.TempDir(), freePort(t)
	writeDaemonYAML(t, home, addr, "", forwardSinkYAML("central", "http://"+srvAddr, tokens))
	f := newFeeder(0)
	// A forward unit holds 10,000 rows: 42,000 make five units.
	feed := func(n int) {
		for ; n > 0; n -= 6000 {
			f.ingest(t, addr, "logs", "web", min(n, 6000))
		}
	}
	for _, where := range []string{"after-intent:2", "after-intent:3", "after-ship:2", "after-ship:3", "after-watermark:1", "after-watermark:2"} {
		d := startHypDaemon(t, home, addr, "HYP_FAILPOINT="+where)
		feed(42000)
		runIntoFailpoint(t, home, "central", where, d)
		// The file the kill left names the unit in flight and the one queued behind it.
		files, _ := filepath.Glob(filepath.Join(home, "sinks", "central", "watermarks", "logs", "*.json"))
		var wm struct{ Intent, Next *struct{ From, Last int64 } }
		if len(files) != 1 {
			t.Fatalf("%s: watermark files %v, want one", where, files)
		}
		if b, err := os.ReadFile(files[0]); err != nil || json.Unmarshal(b, &wm) != nil || wm.Intent == nil || wm.Next == nil || wm.Next.From != wm.Intent.Last {
			t.Fatalf("%s: the watermark left by the kill holds no unit queued behind the one in flight: %s %v", where, b, err)
		}
		d = startHypDaemon(t, home, addr)
		feed(3000) // new rows arrive before the retry
		f.take()
		requireRun(t, home, "", -1)
		if !checkServer(t, where, srvHome, f.want) {
			t.FailNow()
		}
		requireNoopRun(t, home, "")
		d.stop(t)
	}
}

// ---------- 5. faults between daemon and server ----------

type proxyReq struct {
	fault, batch, seqRange string
	status                 int
	body                   string
}

// faultProxy sits between a daemon and a server: request i suffers plan[i], every later
// request passes through.
type faultProxy struct {
	target   string
	client   *http.Client
	plan     []string
	stallFor time.Duration // how long a "stall" holds a request (default 2s, below the sender's 10s request timeout)
	mu       sync.Mutex
	reqs     []proxyReq
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	i := len(p.reqs)
	fault := "pass"
	if i < len(p.plan) {
		fault = p.plan[i]
	}
	p.reqs = append(p.reqs, proxyReq{fault: fault, batch: r.Header.Get("X-Hyp-Batch-Id"), seqRange: r.Header.Get("X-Hyp-Seq-Range")})
	p.mu.Unlock()
	switch fault {
	case "429":
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(429)
		io.WriteString(w, `{"error":"rate_limited"}`)
	case "503":
		w.WriteHeader(503)
		io.WriteString(w, `{"error":"unavailable"}`)
	case "500":
		w.WriteHeader(500)
		io.WriteString(w, `{"error":"internal"}`)
	case "reset":
		resetConn(w)
	case "stall":
		d := p.stallFor
		if d == 0 {
			d = 2 * time.Second
		}
		time.Sleep(d)
		p.pass(w, r, body, i)
	case "drop":
		// The server stores the rows; the sender never sees its 200.
		status, _, rb, err := p.send(r, body)
		p.record(i, status, rb, err)
		resetConn(w)
	default:
		p.pass(w, r, body, i)
	}
}

func resetConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

func (p *faultProxy) send(r *http.Request, body []byte) (int, http.Header, []byte, error) {
	req, err := http.NewRequest(r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header = r.Header.Clone()
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, rb, err
}

func (p *faultProxy) record(i, status int, body []byte, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reqs[i].status, p.reqs[i].body = status, string(body)
	if err != nil {
		p.reqs[i].body = "proxy error: " + err.Error()
	}
}

func (p *faultProxy) pass(w http.ResponseWriter, r *http.Request, body []byte, i int) {
	status, h, rb, err := p.send(r, body)
	p.record(i, status, rb, err)
	if err != nil {
		resetConn(w)
		return
	}
	for k, v := range h {
		w.Header()[k] = v
	}
	w.WriteHeader(status)
	w.Write(rb)
}

func (p *faultProxy) log() []proxyReq {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.reqs)
}

func TestForwardThroughFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		plan     []string
		attempts int // requests the first unit takes: its faults and the one that succeeds
	}{
		{"429-503-500-reset-stall", []string{"429", "503", "500", "reset", "stall"}, 5}, // the stalled one goes through
		{"lost-response", []string{"drop"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srvHome, srvAddr, tokens := newServerHome(t)
			startHypServer(t, srvHome, srvAddr, tokens)
			px := &faultProxy{target: "http://" + srvAddr, client: &http.Client{Timeout: time.Minute}, plan: tc.plan}
			ps := httptest.NewServer(px)
			t.Cleanup(ps.Close)

			home, addr := t.TempDir(), freePort(t)
			writeDaemonYAML(t, home, addr, "", forwardSinkYAML("central", ps.URL, tokens))
			startHypDaemon(t, home, addr)
			f := newFeeder(0)
			f.ingest(t, addr, "logs", "web", 250)
			f.ingest(t, addr, "logs", "db", 120)
			want := f.take()

			deadline := time.Now().Add(2 * time.Minute)
			var exported int64
			for attempt := 1; ; attempt++ {
				res, r := sinkRun(t, home, "", 2*time.Minute)
				rows, _, _ := res.totals()
				exported += rows
				if r.code == 0 {
					break
				}
				t.Logf("attempt %d: %s", attempt, r)
				if time.Now().After(deadline) || attempt == 5 {
					t.Fatalf("sink run did not succeed through the faults after %d attempts; proxy saw %+v", attempt, px.log())
				}
			}
			if exported != want {
				t.Errorf("runs reported %d rows exported, want %d", exported, want)
			}
			checkServer(t, tc.name, srvHome, f.want)

			reqs := px.log()
			if len(reqs) < tc.attempts+1 {
				t.Fatalf("proxy saw %d requests, want at least %d: %+v", len(reqs), tc.attempts+1, reqs)
			}
			// The two partitions' units may interleave (a forward sink ships partitions
			// concurrently), so attempts are grouped by batch: there is one batch per unit,
			// every retry of a unit is that same batch and range, and each unit's last attempt
			// got a 200.
			var batches []string
			byBatch := map[string][]proxyReq{}
			for _, q := range reqs {
				if _, ok := byBatch[q.batch]; !ok {
					batches = append(batches, q.batch)
				}
				byBatch[q.batch] = append(byBatch[q.batch], q)
			}
			if len(batches) != 2 || slices.Contains(batches, "") {
				t.Errorf("requests carry batches %q, want one per partition's unit; proxy saw %+v", batches, reqs)
			}
			for _, b := range batches {
				qs := byBatch[b]
				for _, q := range qs[1:] {
					if q.seqRange != qs[0].seqRange {
						t.Errorf("retry of batch %q carries range %q, the first attempt %q; proxy saw %+v", b, q.seqRange, qs[0].seqRange, reqs)
					}
				}
				if last := qs[len(qs)-1]; last.status != 200 {
					t.Errorf("batch %q's last attempt got %d %s; proxy saw %+v", b, last.status, last.body, reqs)
				}
			}
			if tc.plan[0] == "drop" {
				first := reqs[0]
				retry := byBatch[first.batch][min(1, len(byBatch[first.batch])-1)]
				var a1, a2 struct{ Accepted, Duplicates int }
				json.Unmarshal([]byte(first.body), &a1)
				json.Unmarshal([]byte(retry.body), &a2)
				if len(byBatch[first.batch]) < 2 || first.status != 200 || a1.Accepted == 0 || retry.status != 200 || a2.Accepted != 0 || a2.Duplicates != a1.Accepted {
					t.Errorf("lost response: server answered %d %s, then the retry %d %s; want the retry deduped by the ledger", first.status, first.body, retry.status, retry.body)
				}
			}

			// After the faults, more rows still go exactly once.
			f.ingest(t, addr, "logs", "web", 60)
			requireRun(t, home, "", f.take())
			checkServer(t, tc.name+", second run", srvHome, f.want)
		})
	}
}

// ---------- 6. server rate limit ----------

func TestServerRateLimit429(t *testing.T) {
	t.Parallel()
	srvHome, srvAddr, tokens := newServerHome(t)
	startHypServer(t, srvHome, srvAddr, tokens, "--rate-limit", "50")
	home, addr := t.TempDir(), freePort(t)
	writeDaemonYAML(t, home, addr, "", forwardSinkYAML("central", "http://"+srvAddr, tokens))
	startHypDaemon(t, home, addr)
	f := newFeeder(0)
	for _, s := range []string{"a", "b", "c", "d"} {
		f.ingest(t, addr, "logs", s, 80)
	}
	requireRun(t, home, "central", f.take())
	checkServer(t, "rate limited", srvHome, f.want)
	if n := metricSum(t, srvAddr, "hyp_server_requests_total", `code="429"`); n == 0 {
		t.Errorf("the server never answered 429: the rate limit was not exercised")
	}
}

// ---------- 7. usage errors ----------

func TestSinkRunUsageErrors(t *testing.T) {
	t.Parallel()
	home, addr := t.TempDir(), freePort(t)
	writeDaemonYAML(t, home, addr, "", localSinkYAML("files", "jsonl", filepath.Join(t.TempDir(), "x")))
	check := func(r cliResult, want ...string) {
		t.Helper()
		if r.code != 2 {
			t.Errorf("want exit 2: %s", r)
		}
		for _, w := range want {
			if !strings.Contains(r.stdout+r.stderr, w) {
				t.Errorf("message does not name %q: %s", w, r)
			}
		}
	}
	check(runHyp(t, home, time.Minute, "sink", "run", "nosuch"), "nosuch") // no daemon
	d := startHypDaemon(t, home, addr)
	check(runHyp(t, home, time.Minute, "sink", "run", "nosuch", "--json"), "nosuch")
	d.stop(t)
	check(runHyp(t, home, time.Minute, "server"), "--listen")
	check(runHyp(t, home, time.Minute, "server", "--token-file", "/nonexistent"), "--listen")
}

// TestSIGTERMDuringExportToStalledCentral: a daemon whose export is stuck on a central that
// accepts connections and never answers still drains promptly on SIGTERM and exits 0; the
// waiting `hyp sink run` fails; after a restart against a live central every row arrives once.
func TestSIGTERMDuringExportToStalledCentral(t *testing.T) {
	t.Parallel()
	stalled, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	go func() {
		for {
			c, err := stalled.Accept()
			if err != nil {
				return
			}
			defer c.Close() // hold every connection open, answer nothing
		}
	}()
	srvHome, srvListen, tokenFile := newServerHome(t)
	home, addr := newHome(t)
	writeDaemonYAML(t, home, addr, "", forwardSinkYAML("central", "http://"+stalled.Addr().String(), tokenFile))
	d := startHypDaemon(t, home, addr)
	f := newFeeder(0)
	f.ingest(t, addr, "logs", "web", 50)

	run := make(chan cliResult, 1)
	go func() { _, r := sinkRun(t, home, "central", 2*time.Minute); run <- r }()
	// Let the export reach the stalled central before the signal.
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if b, _ := os.ReadFile(filepath.Join(home, "sinks", "central", "watermarks", "logs", "source=web.json")); strings.Contains(string(b), `"intent"`) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	d.stop(t) // SIGTERM, expects exit 0
	if el := time.Since(start); el > 20*time.Second {
		t.Errorf("drain took %v with an export in flight", el)
	}
	if r := <-run; r.code == 0 {
		t.Errorf("sink run succeeded against a stalled central: %s", r)
	}

	startHypServer(t, srvHome, srvListen, tokenFile)
	writeDaemonYAML(t, home, addr, "", forwardSinkYAML("central", "http://"+srvListen, tokenFile))
	startHypDaemon(t, home, addr)
	f.ingest(t, addr, "logs", "web", 20)
	requireRun(t, home, "central", 70)
	checkServer(t, "after drain and restart", srvHome, f.want)
}

// TestServerRunsItsOwnSinks: `hyp server` exports what gateways forwarded through its own
// blob sink, one Hive-style directory per gateway and source, every row once.
func TestServerRunsItsOwnSinks(t *testing.T) {
	t.Parallel()
	srvHome, srvListen, tokenFile := newServerHome(t)
	exports := filepath.Join(t.TempDir(), "central-exports")
	writeDaemonYAML(t, srvHome, freePort(t), "", localSinkYAML("archive", "jsonl", exports))
	startHypServer(t, srvHome, srvListen, tokenFile)

	f := newFeeder(0)
	gateways := map[string]bool{}
	for g := 0; g < 2; g++ {
		home, addr := newHome(t)
		writeDaemonYAML(t, home, addr, "", forwardSinkYAML("central", "http://"+srvListen, tokenFile))
		startHypDaemon(t, home, addr)
		f.ingest(t, addr, "logs", "web", 120)
		f.ingest(t, addr, "logs", "db", 30)
		requireRun(t, home, "central", f.take())
		id, err := os.ReadFile(filepath.Join(home, "gateway_id"))
		if err != nil {
			t.Fatal(err)
		}
		gateways[strings.TrimSpace(string(id))] = true
	}
	requireRun(t, srvHome, "archive", 300)
	requireNoopRun(t, srvHome, "archive")

	seen := map[int]int{}
	files := localFiles(t, exports)
	for _, bf := range files {
		parts := strings.Split(bf.rel, "/")
		if len(parts) != 4 || parts[0] != "logs" || !strings.HasPrefix(parts[1], "_hyp_gateway=") || !gateways[strings.TrimPrefix(parts[1], "_hyp_gateway=")] ||
			!strings.HasPrefix(parts[2], "_hyp_source=") || !partName.MatchString(parts[3]) {
			t.Errorf("%q is not logs/_hyp_gateway=<id>/_hyp_source=<s>/part-<first>-<last>.jsonl.gz", bf.rel)
			continue
		}
		rows, err := decodeJSONLGz(bf.data)
		if err != nil {
			t.Fatalf("%s: %v", bf.rel, err)
		}
		for _, r := range rows {
			if "_hyp_source="+r.source != parts[2] {
				t.Errorf("%s holds a row of source %q", bf.rel, r.source)
			}
			seen[r.id]++
		}
	}
	if len(seen) != 300 {
		t.Errorf("%d distinct ids exported by the server, want 300", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("id %d exported %d times", id, n)
		}
	}
}

// TestBrokenSinkConfig: a forward sink whose token file is missing keeps the daemon from
// starting (naming the file), but reading the cache without a daemon still works, and
// `sink run` fails naming the cause.
func TestBrokenSinkConfig(t *testing.T) {
	t.Parallel()
	home, addr := newHome(t)
	missing := filepath.Join(t.TempDir(), "missing-token")
	writeDaemonYAML(t, home, addr, "", forwardSinkYAML("central", "http://127.0.0.1:9", missing))
	if r := runHyp(t, home, time.Minute, "ingest", "logs", "--source", "web"); r.code != 0 {
		t.Fatalf("ingest without a daemon: %s", r)
	}
	if r := runHyp(t, home, time.Minute, "cache", "status", "--json"); r.code != 0 {
		t.Fatalf("cache status with a broken sink: %s", r)
	}
	if _, r := sinkRun(t, home, "central", time.Minute); r.code != 1 || !strings.Contains(r.stdout+r.stderr, missing) {
		t.Fatalf("sink run with a broken sink: %s", r)
	}
	r := runHyp(t, home, time.Minute, "daemon")
	if r.code != 1 || !strings.Contains(r.stderr, missing) {
		t.Fatalf("daemon with a broken sink: %s", r)
	}
}

// runIntoFailpoint runs instance's export on a daemon started with HYP_FAILPOINT=where and
// checks that the daemon died there, killed by SIGKILL, without answering the run.
func runIntoFailpoint(t *testing.T, home, instance, where string, d *hypProc) {
	t.Helper()
	if _, r := sinkRun(t, home, instance, time.Minute); r.code == 0 {
		t.Fatalf("%s: sink run succeeded although the daemon should have died: %s", where, r)
	}
	ps := d.waitExit(t, 30*time.Second)
	if ws, ok := ps.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("%s: daemon ended with %v, want killed by SIGKILL at the failpoint\n%s", where, ps, d.out)
	}
}

// TestShippedBinaryHasNoFailpoints: the binary `make build` ships has no crash switch, so
// HYP_FAILPOINT at a step every export reaches changes nothing; the armed build the crash
// tests run dies there (internal/failpoint).
func TestShippedBinaryHasNoFailpoints(t *testing.T) {
	for _, tc := range []struct {
		name string
		bin  string
		dies bool
	}{{"shipped", hypBin, false}, {"armed", hypArmedBin, true}} {
		t.Run(tc.name, func(t *testing.T) {
			home, addr := t.TempDir(), freePort(t)
			writeDaemonYAML(t, home, addr, "", localSinkYAML("files", "jsonl", t.TempDir()))
			p := &hypProc{name: "daemon", out: &lockedBuf{}, done: make(chan struct{})}
			p.cmd = exec.Command(tc.bin, "daemon", "--home", home)
			p.cmd.Env = append(baseEnv(), failpoint.Env+"=after-intent:1")
			p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
			if err := p.cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { _ = p.cmd.Wait(); close(p.done) }()
			t.Cleanup(p.kill9)
			deadline := time.Now().Add(60 * time.Second)
			for {
				if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
					resp.Body.Close()
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("daemon not ready:\n%s", p.out)
				}
				time.Sleep(50 * time.Millisecond)
			}
			mustPost(t, addr, "/v1/ingest/logs?source=web", rows(0, 10, "web"), http.StatusOK)
			if tc.dies {
				runIntoFailpoint(t, home, "files", "after-intent:1", p)
				return
			}
			requireRun(t, home, "files", 10)
			select {
			case <-p.done:
				t.Fatalf("the shipped daemon exited (%v) with %s set:\n%s", p.cmd.ProcessState, failpoint.Env, p.out)
			default:
			}
		})
	}
}
