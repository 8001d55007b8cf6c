package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// These tests hold the operator surface to SPEC 7-9 through the built binary only: `sink
// status`, `sink rewind`, `status`, `cache prune`, withhold_sources, hand-edited watermark
// files and the position metrics. The scenario is seed 003: a withheld source is dropped and
// advanced past, then released and recovered with a rewind to a wall-clock instant, while
// the daemon keeps ingesting and exporting.

// ---------- JSON shapes ----------

type opGap struct {
	From   int64      `json:"from_seq"`
	To     int64      `json:"to_seq"`
	Rows   int64      `json:"rows"`
	Reason string     `json:"reason"`
	At     *time.Time `json:"at"`
}

type opRewindRec struct {
	At     time.Time `json:"at"`
	By     string    `json:"by"`
	Target string    `json:"target"`
	From   int64     `json:"from_seq"`
	To     int64     `json:"to_seq"`
}

type opPartStatus struct {
	Dataset                    string          `json:"dataset"`
	Partition                  string          `json:"partition"`
	WatermarkSeq               int64           `json:"watermark_seq"`
	HeadSeq                    int64           `json:"head_seq"`
	LagRows                    int64           `json:"lag_rows"`
	ExportedRows               int64           `json:"exported_rows"`
	OldestUnexportedAt         *time.Time      `json:"oldest_unexported_at"`
	OldestUnexportedAgeSeconds float64         `json:"oldest_unexported_age_seconds"`
	LastExportAt               *time.Time      `json:"last_export_at"`
	LastError                  string          `json:"last_error"`
	Gaps                       []opGap         `json:"gaps"`
	Withheld                   bool            `json:"withheld"`
	WithheldRows               int64           `json:"withheld_rows"`
	InFlight                   json.RawMessage `json:"in_flight"`
	LastRewind                 *opRewindRec    `json:"last_rewind"`
	Generation                 int64           `json:"generation"`
}

func (p opPartStatus) caughtUp() bool {
	return p.WatermarkSeq == p.HeadSeq && p.LagRows == 0 && (len(p.InFlight) == 0 || string(p.InFlight) == "null")
}

type opSinkStatus struct {
	Sinks []struct {
		Instance   string         `json:"instance"`
		Type       string         `json:"type"`
		Error      string         `json:"error"`
		Partitions []opPartStatus `json:"partitions"`
	} `json:"sinks"`
}

// part finds instance's status of dataset/partition; ok false if it is not listed.
func (s opSinkStatus) part(instance, dataset, partition string) (opPartStatus, bool) {
	for _, is := range s.Sinks {
		if is.Instance != instance {
			continue
		}
		for _, p := range is.Partitions {
			if p.Dataset == dataset && p.Partition == partition {
				return p, true
			}
		}
	}
	return opPartStatus{}, false
}

func (s opSinkStatus) parts(instance string) []opPartStatus {
	for _, is := range s.Sinks {
		if is.Instance == instance {
			return is.Partitions
		}
	}
	return nil
}

type opSeqRange struct {
	First int64 `json:"first_seq"`
	Last  int64 `json:"last_seq"`
}

type opChange struct {
	Dataset      string      `json:"dataset"`
	Partition    string      `json:"partition"`
	FromSeq      int64       `json:"from_seq"`
	ToSeq        int64       `json:"to_seq"`
	RowsToExport int64       `json:"rows_to_export"`
	RowsToSkip   int64       `json:"rows_to_skip"`
	Missing      *opSeqRange `json:"missing"`
	Withheld     bool        `json:"withheld"`
}

type opRewindResult struct {
	Instance string     `json:"instance"`
	DryRun   bool       `json:"dry_run"`
	Changes  []opChange `json:"changes"`
}

type opLoss struct {
	Sink string `json:"sink"`
	From int64  `json:"from_seq"`
	To   int64  `json:"to_seq"`
	Rows int64  `json:"rows"`
}

type opPrune struct {
	DryRun     bool `json:"dry_run"`
	Partitions []struct {
		Dataset               string   `json:"dataset"`
		Partition             string   `json:"partition"`
		ThroughSeq            int64    `json:"through_seq"`
		DeletedRows           int64    `json:"deleted_rows"`
		HeldRows              int64    `json:"held_rows"`
		HeldFor               []string `json:"held_for"`
		UnexportedDeletedRows int64    `json:"unexported_deleted_rows"`
		ForcedLosses          []opLoss `json:"forced_losses"`
	} `json:"partitions"`
}

type opStatus struct {
	Home   string `json:"home"`
	Daemon struct {
		Running bool   `json:"running"`
		Listen  string `json:"listen"`
	} `json:"daemon"`
	Sinks []struct {
		Instance     string   `json:"instance"`
		Type         string   `json:"type"`
		Partitions   int      `json:"partitions"`
		LagRows      int64    `json:"lag_rows"`
		ExportedRows int64    `json:"exported_rows"`
		Gaps         int      `json:"gaps"`
		GapRows      int64    `json:"gap_rows"`
		WithheldRows int64    `json:"withheld_rows"`
		Errors       []string `json:"errors"`
	} `json:"sinks"`
}

// ---------- CLI helpers ----------

// opDecode parses r's stdout into v, failing the test on anything but one JSON document.
func opDecode(t *testing.T, r cliResult, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("stdout is not the JSON expected: %v\n%s", err, r)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON document:\n%s", r)
	}
}

func opSinkStatusOf(t *testing.T, home, instance string) opSinkStatus {
	t.Helper()
	args := []string{"sink", "status", "--json"}
	if instance != "" {
		args = []string{"sink", "status", instance, "--json"}
	}
	r := runHyp(t, home, time.Minute, args...)
	if r.code != 0 {
		t.Fatalf("sink status: %s", r)
	}
	var st opSinkStatus
	opDecode(t, r, &st)
	return st
}

// opWait polls `sink status instance --json` until cond holds.
func opWait(t *testing.T, home, instance string, within time.Duration, what string, cond func(opSinkStatus) bool) opSinkStatus {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		st := opSinkStatusOf(t, home, instance)
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(st, "", "  ")
			t.Fatalf("after %v still not %s; last sink status:\n%s", within, what, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// opAllCaughtUp waits until every partition of instance has exported up to its head.
func opAllCaughtUp(t *testing.T, home, instance string, within time.Duration) opSinkStatus {
	t.Helper()
	return opWait(t, home, instance, within, instance+" caught up on every partition", func(st opSinkStatus) bool {
		ps := st.parts(instance)
		if len(ps) == 0 {
			return false
		}
		for _, p := range ps {
			if !p.caughtUp() {
				return false
			}
		}
		return true
	})
}

func opRewind(t *testing.T, home string, args ...string) (opRewindResult, cliResult) {
	t.Helper()
	r := runHyp(t, home, time.Minute, append([]string{"sink", "rewind"}, args...)...)
	var res opRewindResult
	if strings.TrimSpace(r.stdout) != "" && slices.Contains(args, "--json") {
		opDecode(t, r, &res)
	}
	return res, r
}

func opPruneRun(t *testing.T, home string, dry bool) opPrune {
	t.Helper()
	args := []string{"cache", "prune", "--json"}
	if dry {
		args = append(args, "--dry-run")
	}
	r := runHyp(t, home, time.Minute, args...)
	if r.code != 0 {
		t.Fatalf("cache prune: %s", r)
	}
	var p opPrune
	opDecode(t, r, &p)
	if p.DryRun != dry {
		t.Fatalf("cache prune reports dry_run %v, want %v:\n%s", p.DryRun, dry, r)
	}
	return p
}

func opStatusOf(t *testing.T, home string) opStatus {
	t.Helper()
	r := runHyp(t, home, time.Minute, "status", "--json")
	if r.code != 0 {
		t.Fatalf("status: %s", r)
	}
	var st opStatus
	opDecode(t, r, &st)
	return st
}

// opRow is one cached row with its internal columns.
type opRow struct {
	id    int
	seq   int64
	at    time.Time
	atRaw string
	part  string
}

// opRows reads every cached row of dataset in seq order.
func opRows(t *testing.T, home, dataset string) []opRow {
	t.Helper()
	var out []opRow
	for _, m := range queryJSON(t, home, "SELECT id, _hyp_ingest_seq AS seq, _hyp_ingested_at AS at, _hyp_partition AS p FROM "+dataset+" ORDER BY seq", "--internal") {
		raw, _ := m["at"].(string)
		at, err := time.Parse(time.RFC3339Nano, raw)
		if err != nil {
			t.Fatalf("_hyp_ingested_at %v is not RFC 3339: %v", m["at"], err)
		}
		id, _ := m["id"].(float64)
		seq, _ := m["seq"].(float64)
		p, _ := m["p"].(string)
		out = append(out, opRow{id: int(id), seq: int64(seq), at: at, atRaw: raw, part: p})
	}
	return out
}

// opCount counts the rows of partition with seq in (since, until].
func opCount(rows []opRow, part string, since, until int64) int64 {
	var n int64
	for _, r := range rows {
		if r.part == part && r.seq > since && r.seq <= until {
			n++
		}
	}
	return n
}

// opSeqBefore is the largest seq of partition ingested strictly before at (0 if none).
func opSeqBefore(rows []opRow, part string, at time.Time) int64 {
	var s int64
	for _, r := range rows {
		if r.part == part && r.at.Before(at) {
			s = max(s, r.seq)
		}
	}
	return s
}

func opSeqsOf(rows []opRow, ids map[int]bool) (first, last int64, n int64) {
	for _, r := range rows {
		if !ids[r.id] {
			continue
		}
		if n == 0 || r.seq < first {
			first = r.seq
		}
		last = max(last, r.seq)
		n++
	}
	return
}

// ---------- config helpers ----------

// opSchedule gives a sink from the *SinkYAML helpers another schedule and extra keys.
func opSchedule(sinkYAML, schedule string, extra ...string) string {
	s := strings.Replace(sinkYAML, `schedule: "@every 1h"`, fmt.Sprintf("schedule: %q", schedule), 1)
	for _, e := range extra {
		s += "    " + e + "\n"
	}
	return s
}

// ---------- files on disk ----------

func opWatermarkPath(home, instance, dataset, source string) string {
	return filepath.Join(home, "sinks", instance, "watermarks", dataset, "source="+source+".json")
}

// opEditWatermark sets "seq" in a watermark file the way an operator's editor would (keeping
// every other field, replacing the file atomically) and returns what was there before.
func opEditWatermark(t *testing.T, home, instance, dataset, source string, seq int64) map[string]any {
	t.Helper()
	path := opWatermarkPath(home, instance, dataset, source)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read watermark file: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var before map[string]any
	if err := dec.Decode(&before); err != nil {
		t.Fatalf("watermark file %s is not JSON: %v\n%s", path, err, b)
	}
	if _, ok := before["seq"]; !ok {
		t.Fatalf("watermark file %s has no \"seq\": %s", path, b)
	}
	edited := map[string]any{}
	for k, v := range before {
		edited[k] = v
	}
	edited["seq"] = seq
	out, _ := json.MarshalIndent(edited, "", "  ")
	tmp := path + ".operator-edit"
	if err := os.WriteFile(tmp, append(out, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return before
}

// opJSONLFile is one exported jsonl.gz file of a local-fs sink.
type opJSONLFile struct {
	rel         string
	first, last int64
	rows        []exportedRow
	stamp       string // size and mtime
}

// opJSONLFiles decodes every finished file under root. Unlike checkBlobFiles it allows
// overlapping files: a rewind exports rows again by design.
func opJSONLFiles(t *testing.T, root string) []opJSONLFile {
	t.Helper()
	snap := localSnapshot(t, root)
	var out []opJSONLFile
	for _, bf := range localFiles(t, root) {
		m := partName.FindStringSubmatch(filepath.Base(bf.rel))
		if m == nil || m[3] != "jsonl.gz" {
			t.Errorf("%s is not a part-<first>-<last>.jsonl.gz file", bf.rel)
			continue
		}
		rows, err := decodeJSONLGz(bf.data)
		if err != nil {
			t.Errorf("%s: %v", bf.rel, err)
			continue
		}
		first, _ := strconv.ParseInt(m[1], 10, 64)
		last, _ := strconv.ParseInt(m[2], 10, 64)
		out = append(out, opJSONLFile{rel: bf.rel, first: first, last: last, rows: rows, stamp: snap[filepath.Join(root, filepath.FromSlash(bf.rel))]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].first < out[j].first })
	return out
}

// ---------- continuous ingest ----------

// opClients keep ingesting into sources until halted, riding out daemon restarts: a
// request that fails is not retried with the same ids (it may or may not have been stored);
// its ids are remembered as maybe, and the cache decides.
type opClients struct {
	f       *feeder
	dataset string
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	maybe   map[int]bool
	ok      int
	failed  int
	once    sync.Once
}

func opStartClients(t *testing.T, f *feeder, addr, dataset string, sources []string, n int, every time.Duration) *opClients {
	c := &opClients{f: f, dataset: dataset, stop: make(chan struct{}), maybe: map[int]bool{}}
	client := &http.Client{Timeout: 15 * time.Second}
	for _, src := range sources {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			tk := time.NewTicker(every)
			defer tk.Stop()
			for {
				select {
				case <-c.stop:
					return
				case <-tk.C:
				}
				f.mu.Lock()
				from := f.next
				f.next += n
				f.mu.Unlock()
				resp, err := client.Post("http://"+addr+"/v1/ingest/"+dataset, "application/x-ndjson", bytes.NewReader(rows(from, n, src)))
				var m map[string]any
				code := 0
				if err == nil {
					code = resp.StatusCode
					_ = json.NewDecoder(resp.Body).Decode(&m)
					resp.Body.Close()
				}
				acc, _ := m["accepted"].(float64)
				if err == nil && code == 200 && int(acc) == n {
					f.mu.Lock()
					if f.want[dataset] == nil {
						f.want[dataset] = map[int]bool{}
					}
					for i := from; i < from+n; i++ {
						f.want[dataset][i] = true
					}
					f.pending += int64(n)
					f.mu.Unlock()
					c.mu.Lock()
					c.ok++
					c.mu.Unlock()
					continue
				}
				c.mu.Lock()
				c.failed++
				for i := from; i < from+n; i++ {
					c.maybe[i] = true
				}
				c.mu.Unlock()
			}
		}()
	}
	t.Cleanup(c.halt)
	return c
}

func (c *opClients) halt() {
	c.once.Do(func() { close(c.stop) })
	c.wg.Wait()
}

// truth halts the clients and returns the ids the cache of home holds for the dataset,
// after checking that every acknowledged id is there exactly once and nothing else is
// (extra ids may only come from requests whose answer was lost). extra are further
// acknowledged sets (other feeders) of the same dataset.
func (c *opClients) truth(t *testing.T, home string, extra ...map[string]map[int]bool) map[string]map[int]bool {
	t.Helper()
	c.halt()
	c.f.mu.Lock()
	acked := unionWant(append([]map[string]map[int]bool{c.f.want}, extra...)...)[c.dataset]
	c.f.mu.Unlock()
	seen := map[int]int{}
	for _, m := range queryJSON(t, home, "SELECT id FROM "+c.dataset) {
		id, ok := m["id"].(float64)
		if !ok {
			t.Fatalf("cached row without a numeric id: %v", m)
		}
		seen[int(id)]++
	}
	cached := map[int]bool{}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("the cache holds id %d %d times", id, n)
		}
		if !acked[id] && !c.maybe[id] {
			t.Errorf("the cache holds id %d that no client sent", id)
		}
		cached[id] = true
	}
	for id := range acked {
		if !cached[id] {
			t.Errorf("acknowledged id %d is not in the cache", id)
		}
	}
	t.Logf("clients: %d requests acknowledged, %d failed (daemon restarts); %d rows cached", c.ok, c.failed, len(cached))
	return map[string]map[int]bool{c.dataset: cached}
}

// opStallNext makes the next request through px stall (px.stallFor) before it passes, and
// returns how many requests px had seen before it.
func opStallNext(px *faultProxy) int {
	px.mu.Lock()
	defer px.mu.Unlock()
	n := len(px.reqs)
	plan := make([]string, n+1)
	for i := range n {
		plan[i] = "pass"
	}
	plan[n] = "stall"
	px.plan = plan
	return n
}

// opAwaitRequest waits until px has seen more than n requests.
func opAwaitRequest(t *testing.T, px *faultProxy, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for len(px.log()) <= n {
		if time.Now().After(deadline) {
			t.Fatalf("no request reached the central within 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// opStalled checks that request n through px is the stalled one, so the step around it
// really raced an export in flight.
func opStalled(t *testing.T, px *faultProxy, n int) {
	t.Helper()
	q := px.log()[n]
	if q.fault != "stall" || q.seqRange == "" {
		t.Fatalf("test setup: request %d through the proxy was %+v, want the stalled unit", n, q)
	}
	if q.status != 0 {
		t.Fatalf("test setup: the stalled unit %s was answered (%d) before the step finished; the stall was too short on this machine", q.seqRange, q.status)
	}
}

// opAwaitDuplicates waits until the server has counted exactly want more duplicate rows of
// dataset than before, failing on more.
func opAwaitDuplicates(t *testing.T, srvAddr, dataset string, before float64, want int64, what string, explain func() string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		dup, _ := opMetric(t, srvAddr, "hyp_server_rows_total", `dataset="`+dataset+`"`, `result="duplicate"`)
		if int64(dup-before) == want {
			return
		}
		if int64(dup-before) > want || time.Now().After(deadline) {
			t.Fatalf("%s: the central counted %v duplicate rows, want exactly %d\n%s", what, dup-before, want, explain())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ---------- metrics ----------

// opMetric is the value of the sample of name whose labels include every k="v" in labels;
// found is false when there is none.
func opMetric(t *testing.T, addr, name string, labels ...string) (v float64, found bool) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		all := true
		for _, l := range labels {
			if !strings.Contains(line[:i], l) {
				all = false
				break
			}
		}
		if !all {
			continue
		}
		x, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		v += x
		found = true
	}
	return v, found
}

// ---------- 1. the seed scenario ----------

// TestSeedScenarioWithholdReleaseRewind is seed 003 end to end: a forward sink withholds
// source claude (drop but advance) while other sources keep flowing; the withhold is lifted;
// the operator rewinds claude to just before its first withheld row, by wall-clock time,
// while the daemon runs; every row then reaches the central exactly once.
func TestSeedScenarioWithholdReleaseRewind(t *testing.T) {
	t.Parallel()
	// The operator changes withhold_sources either by restarting the daemon or, without
	// dropping a client connection, by SIGHUP.
	for _, how := range []string{"restart", "sighup"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			seedScenario(t, how == "sighup")
		})
	}
}

func seedScenario(t *testing.T, viaSIGHUP bool) {
	srvHome, srvAddr, tokens := newServerHome(t)
	startHypServer(t, srvHome, srvAddr, tokens)
	home, addr := t.TempDir(), freePort(t)
	base := opSchedule(forwardSinkYAML("central", "http://"+srvAddr, tokens), "@every 300ms")
	withholding := base + "    withhold_sources: [claude]\n"
	const claude = "source=claude"

	writeDaemonYAML(t, home, addr, "", base)
	d := startHypDaemon(t, home, addr)
	others := newFeeder(0)
	cl := opStartClients(t, others, addr, "logs", []string{"web", "db"}, 10, 100*time.Millisecond)
	claudeRows := newFeeder(1_000_000)

	// Phase A: before the withhold, claude's rows go out like any other.
	claudeRows.ingest(t, addr, "logs", "claude", 25)
	phaseA := unionWant(claudeRows.want)["logs"]
	opWait(t, home, "central", 30*time.Second, "claude's first 25 rows exported", func(st opSinkStatus) bool {
		p, ok := st.part("central", "logs", claude)
		return ok && p.caughtUp() && p.ExportedRows == 25
	})

	reconfigure := func(yaml string, withheld bool) {
		t.Helper()
		writeDaemonYAML(t, home, addr, "", yaml)
		if !viaSIGHUP {
			d.stop(t)
			d = startHypDaemon(t, home, addr)
			return
		}
		if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		opWait(t, home, "central", 30*time.Second, fmt.Sprintf("SIGHUP applied (claude withheld %v)", withheld), func(st opSinkStatus) bool {
			p, ok := st.part("central", "logs", claude)
			return ok && p.Withheld == withheld
		})
	}

	// Phase B: claude is withheld; the clients keep sending.
	reconfigure(withholding, true)
	for range 3 {
		claudeRows.ingest(t, addr, "logs", "claude", 30)
	}
	phaseB := map[int]bool{}
	for id := range claudeRows.want["logs"] {
		if !phaseA[id] {
			phaseB[id] = true
		}
	}
	st := opWait(t, home, "central", 30*time.Second, "claude's 90 withheld rows skipped and advanced past", func(st opSinkStatus) bool {
		p, ok := st.part("central", "logs", claude)
		return ok && p.caughtUp() && p.WithheldRows == 90
	})
	p, _ := st.part("central", "logs", claude)
	if !p.Withheld || p.ExportedRows != 25 || p.LagRows != 0 {
		t.Errorf("withheld claude: withheld %v exported_rows %d lag_rows %d, want true 25 0", p.Withheld, p.ExportedRows, p.LagRows)
	}
	for _, q := range st.parts("central") {
		if q.Partition != claude && (q.Withheld || q.WithheldRows != 0) {
			t.Errorf("%s is not withheld but status says withheld %v withheld_rows %d", q.Partition, q.Withheld, q.WithheldRows)
		}
	}
	headB := p.HeadSeq
	if v, ok := opMetric(t, addr, "hyp_sink_watermark_seq", `sink="central"`, `dataset="logs"`, `partition="source=claude"`); !ok || int64(v) != headB {
		t.Errorf("hyp_sink_watermark_seq for claude = %v (present %v), want the head %d", v, ok, headB)
	}
	if v, ok := opMetric(t, addr, "hyp_sink_lag_rows", `sink="central"`, `dataset="logs"`, `partition="source=claude"`); !ok || v != 0 {
		t.Errorf("hyp_sink_lag_rows for claude = %v (present %v), want 0", v, ok)
	}
	if s := opStatusOf(t, home); len(s.Sinks) != 1 || s.Sinks[0].WithheldRows != 90 {
		t.Errorf("hyp status: want sink central with withheld_rows 90, got %+v", s.Sinks)
	}
	onCentral := map[int]int{}
	for _, id := range serverIDs(t, srvHome, []string{"logs"})["logs"] {
		onCentral[id]++
	}
	for id := range phaseB {
		if onCentral[id] > 0 {
			t.Fatalf("withheld claude id %d reached the central", id)
		}
	}
	for id := range phaseA {
		if onCentral[id] != 1 {
			t.Errorf("claude id %d from before the withhold is on the central %d times, want 1", id, onCentral[id])
		}
	}

	// Compaction swaps the files under the position index before the operator asks.
	if r := runHyp(t, home, time.Minute, "cache", "compact", "--json"); r.code != 0 {
		t.Fatalf("compact: %s", r)
	}
	// T is the ingest time of the first withheld row: the rewind must land on the last row
	// exported before it, so exactly the withheld rows go out again.
	cached := opRows(t, home, "logs")
	var firstB opRow
	for _, r := range cached {
		if phaseB[r.id] {
			firstB = r
			break
		}
	}
	if firstB.atRaw == "" {
		t.Fatal("no withheld claude row in the cache")
	}
	_, lastA, _ := opSeqsOf(cached, phaseA)
	if want := opSeqBefore(cached, claude, firstB.at); want != lastA {
		t.Fatalf("test setup: the last claude seq before %s is %d, the last exported one %d", firstB.atRaw, want, lastA)
	}
	T := firstB.atRaw
	checkPlan := func(where string, res opRewindResult, dry, withheld bool) {
		t.Helper()
		if res.Instance != "central" || res.DryRun != dry || len(res.Changes) != 1 {
			t.Fatalf("%s: want one change on central with dry_run %v: %+v", where, dry, res)
		}
		c := res.Changes[0]
		if c.Dataset != "logs" || c.Partition != claude || c.FromSeq != headB || c.ToSeq != lastA ||
			c.RowsToExport != int64(len(phaseB)) || c.RowsToSkip != 0 || c.Missing != nil || c.Withheld != withheld {
			t.Errorf("%s: change %+v, want logs %s from %d to %d, rows_to_export %d, rows_to_skip 0, no missing, withheld %v",
				where, c, claude, headB, lastA, len(phaseB), withheld)
		}
	}
	// While still withheld, the plan warns the rows would be skipped again.
	res, r := opRewind(t, home, "central", "--partition", "claude", "--to-time", T, "--dry-run", "--json")
	if r.code != 0 {
		t.Fatalf("dry run while withheld: %s", r)
	}
	checkPlan("dry run while withheld", res, true, true)

	// Release: the config without the withhold; the clients keep sending.
	reconfigure(base, false)
	before := opSinkStatusOf(t, home, "central")
	pb, _ := before.part("central", "logs", claude)
	if pb.Withheld || pb.WatermarkSeq != headB || pb.LastRewind != nil {
		t.Errorf("after release, before the rewind: withheld %v watermark %d last_rewind %+v; want false %d none", pb.Withheld, pb.WatermarkSeq, pb.LastRewind, headB)
	}
	res, r = opRewind(t, home, "central", "--partition", "claude", "--to-time", T, "--dry-run", "--json")
	if r.code != 0 {
		t.Fatalf("dry run: %s", r)
	}
	checkPlan("dry run", res, true, false)
	after := opSinkStatusOf(t, home, "central")
	if pa, _ := after.part("central", "logs", claude); pa.WatermarkSeq != headB || pa.LastRewind != nil || pa.Generation != pb.Generation {
		t.Errorf("a dry run changed the watermark: before %+v after %+v", pb, pa)
	}

	res, r = opRewind(t, home, "central", "--partition", "claude", "--to-time", T, "--json")
	if r.code != 0 {
		t.Fatalf("rewind: %s", r)
	}
	checkPlan("rewind", res, false, false)
	st = opSinkStatusOf(t, home, "central")
	p, _ = st.part("central", "logs", claude)
	if p.LastRewind == nil || p.LastRewind.To != lastA || p.LastRewind.From != headB || p.LastRewind.By == "" || !strings.Contains(p.LastRewind.Target, "time") {
		t.Errorf("sink status after the rewind: last_rewind %+v, want from %d to %d by someone, target a time", p.LastRewind, headB, lastA)
	}
	if p.Generation <= pb.Generation || p.WatermarkSeq < lastA {
		t.Errorf("sink status after the rewind: generation %d (was %d), watermark %d (rewound to %d)", p.Generation, pb.Generation, p.WatermarkSeq, lastA)
	}

	// Phase C: claude flows normally again.
	claudeRows.ingest(t, addr, "logs", "claude", 20)
	opWait(t, home, "central", 30*time.Second, "claude re-exported and caught up", func(st opSinkStatus) bool {
		p, ok := st.part("central", "logs", claude)
		return ok && p.caughtUp() && p.ExportedRows == 25+90+20
	})
	want := cl.truth(t, home, claudeRows.want)
	if viaSIGHUP && cl.failed > 0 {
		t.Errorf("%d client requests failed although the daemon was only sent SIGHUP", cl.failed)
	}
	opAllCaughtUp(t, home, "central", 30*time.Second)
	checkServer(t, "after release and rewind", srvHome, want)
	st = opSinkStatusOf(t, home, "central")
	p, _ = st.part("central", "logs", claude)
	if p.LastRewind == nil || p.LastRewind.To != lastA || p.WatermarkSeq != p.HeadSeq || p.WithheldRows != 90 {
		t.Errorf("final claude status: %+v", p)
	}
}

// opPair is a daemon with a forward sink "central" (through a fault proxy to a real
// `hyp server`) and a local-fs jsonl sink "files".
type opPair struct {
	srvHome, srvAddr string
	px               *faultProxy
	home, addr, root string
}

func opStartCentralAndFiles(t *testing.T, centralSchedule, filesSchedule string) opPair {
	t.Helper()
	srvHome, srvAddr, tokens := newServerHome(t)
	startHypServer(t, srvHome, srvAddr, tokens)
	// A stalled unit is held 4s: long enough for a CLI step under a loaded 2-core machine,
	// short of the sender's 10s request timeout.
	px := &faultProxy{target: "http://" + srvAddr, client: &http.Client{Timeout: time.Minute}, stallFor: 4 * time.Second}
	ps := httptest.NewServer(px)
	t.Cleanup(ps.Close)
	home, addr := t.TempDir(), freePort(t)
	root := filepath.Join(t.TempDir(), "exports")
	writeDaemonYAML(t, home, addr, "",
		opSchedule(forwardSinkYAML("central", ps.URL, tokens), centralSchedule),
		opSchedule(localSinkYAML("files", "jsonl", root), filesSchedule))
	startHypDaemon(t, home, addr)
	return opPair{srvHome: srvHome, srvAddr: srvAddr, px: px, home: home, addr: addr, root: root}
}

// ---------- 2. rewinds racing ticks ----------

// TestRewindsDuringTicksAllTakeEffect fires 100 rewinds of every kind at two sinks (50 each,
// both at once, with compactions) that tick every 100-250ms while rows keep arriving: each one shows in the
// next `sink status` (no export in flight overwrote it), and in the end every row reached
// the files at least once and the central exactly once.
func TestRewindsDuringTicksAllTakeEffect(t *testing.T) {
	t.Parallel()
	e := opStartCentralAndFiles(t, "@every 250ms", "@every 100ms")
	srvHome, srvAddr, px, home, addr, root := e.srvHome, e.srvAddr, e.px, e.home, e.addr, e.root
	f := newFeeder(0)
	start := time.Now()
	cl := opStartClients(t, f, addr, "logs", []string{"web", "db"}, 10, 200*time.Millisecond)

	type timed struct {
		instance, partition string
		at                  time.Time
		raw                 string
		toSeq               int64
	}
	var mu sync.Mutex
	var timedRewinds []timed
	skipped := 0

	// One worker per sink, at the same time: 50 rewinds each, every kind of target, each
	// checked against the next `sink status` of that sink (only its worker moves it).
	worker := func(t *testing.T, inst string, seed uint64) {
		gen := map[string]int64{}
		wm := map[string]int64{}
		observe := func(st opSinkStatus) {
			for _, p := range st.parts(inst) {
				if p.Generation < gen[p.Partition] {
					t.Errorf("%s %s: generation went back from %d to %d", inst, p.Partition, gen[p.Partition], p.Generation)
				}
				gen[p.Partition], wm[p.Partition] = p.Generation, p.WatermarkSeq
			}
		}
		observe(opWait(t, home, inst, 30*time.Second, inst+" exported something of web and db", func(st opSinkStatus) bool {
			w, _ := st.part(inst, "logs", "source=web")
			d, _ := st.part(inst, "logs", "source=db")
			return w.WatermarkSeq > 0 && d.WatermarkSeq > 0
		}))
		rng := rand.New(rand.NewPCG(seed, 11))
		pastTime := func() (time.Time, string) {
			// Somewhere in the first half of the run so far, at µs precision as the cache keeps.
			at := start.Add(time.Duration(rng.Int64N(int64(time.Since(start)/2) + 1))).UTC().Truncate(time.Microsecond)
			return at, at.Format(time.RFC3339Nano)
		}
		for i := range 50 {
			var args []string
			var at time.Time
			var raw string
			switch i % 6 {
			case 0:
				args = []string{"--partition", "web", "--to-seq", strconv.FormatInt(rng.Int64N(wm["source=web"]+1), 10)}
			case 1:
				args = []string{"--to-earliest"}
			case 2:
				at, raw = pastTime()
				args = []string{"--to-time", raw}
			case 3:
				args = []string{"--dataset", "logs", "--partition", "source=db", "--to-seq", strconv.FormatInt(rng.Int64N(wm["source=db"]+1), 10)}
			case 4:
				at, raw = pastTime()
				args = []string{"--partition", "web", "--to-time", raw}
			case 5:
				args = []string{"--by-duration", fmt.Sprintf("%dms", time.Since(start).Milliseconds()/2+1)}
			}
			res, r := opRewind(t, home, append(append([]string{inst}, args...), "--json")...)
			if r.code != 0 {
				t.Fatalf("rewind %d: %s", i, r)
			}
			if res.Instance != inst || res.DryRun || len(res.Changes) == 0 {
				t.Fatalf("rewind %d: %+v\n%s", i, res, r)
			}
			st := opSinkStatusOf(t, home, inst)
			for _, c := range res.Changes {
				p, ok := st.part(inst, c.Dataset, c.Partition)
				switch {
				case !ok:
					t.Errorf("rewind %d (%v): sink status has no %s", i, args, c.Partition)
				case p.LastRewind == nil || p.LastRewind.To != c.ToSeq || p.LastRewind.From != c.FromSeq:
					t.Errorf("rewind %d (%s %v) of %s reported %d -> %d, but the next sink status shows last_rewind %+v: the rewind was lost", i, inst, args, c.Partition, c.FromSeq, c.ToSeq, p.LastRewind)
				case p.Generation <= gen[c.Partition]:
					t.Errorf("rewind %d (%s %v) of %s: generation %d, before it %d", i, inst, args, c.Partition, p.Generation, gen[c.Partition])
				case p.WatermarkSeq < c.ToSeq:
					t.Errorf("rewind %d (%s %v) of %s: watermark %d is below the rewind's %d", i, inst, args, c.Partition, p.WatermarkSeq, c.ToSeq)
				}
				mu.Lock()
				if c.ToSeq > c.FromSeq {
					skipped++
					t.Logf("rewind %d (%s %v) of %s moved forward %d -> %d (the sink lagged behind the target)", i, inst, args, c.Partition, c.FromSeq, c.ToSeq)
				}
				if raw != "" {
					timedRewinds = append(timedRewinds, timed{inst, c.Partition, at, raw, c.ToSeq})
				}
				mu.Unlock()
			}
			observe(st)
		}
	}
	t.Run("rewinds", func(t *testing.T) {
		for i, inst := range []string{"files", "central"} {
			t.Run(inst, func(t *testing.T) {
				t.Parallel()
				worker(t, inst, uint64(7+i))
			})
		}
		t.Run("compactions", func(t *testing.T) {
			t.Parallel()
			for range 4 {
				time.Sleep(2 * time.Second) // pacing only
				if r := runHyp(t, home, time.Minute, "cache", "compact", "--json"); r.code != 0 {
					t.Errorf("compact during rewinds: %s", r)
				}
			}
		})
	})
	want := cl.truth(t, home)
	if skipped > 0 {
		// A forward move skips rows on purpose; put them back for the final check.
		for _, inst := range []string{"files", "central"} {
			if _, r := opRewind(t, home, inst, "--to-earliest", "--json"); r.code != 0 {
				t.Fatalf("final rewind: %s", r)
			}
		}
	}
	opAllCaughtUp(t, home, "files", 30*time.Second)
	opAllCaughtUp(t, home, "central", 30*time.Second)

	cached := opRows(t, home, "logs")
	for _, tr := range timedRewinds {
		if w := opSeqBefore(cached, tr.partition, tr.at); w != tr.toSeq {
			t.Errorf("%s --to-time %s on %s went to seq %d; the largest seq ingested before it is %d", tr.instance, tr.raw, tr.partition, tr.toSeq, w)
		}
	}
	checkServer(t, "after 100 rewinds", srvHome, want)
	got := map[int]int{}
	for _, bf := range opJSONLFiles(t, root) {
		for _, r := range bf.rows {
			if !strings.HasPrefix(bf.rel, "logs/_hyp_source="+r.source+"/") {
				t.Errorf("%s holds a row of source %q", bf.rel, r.source)
			}
			got[r.id]++
		}
	}
	var missing, extra []int
	for id := range want["logs"] {
		if got[id] == 0 {
			missing = append(missing, id)
		}
	}
	for id := range got {
		if !want["logs"][id] {
			extra = append(extra, id)
		}
	}
	if len(missing)+len(extra) > 0 {
		t.Errorf("local-fs files after 100 rewinds: %d ids missing %v, %d unexpected %v", len(missing), sample(missing), len(extra), sample(extra))
	}

	// A rewind while a unit is in flight (the proxy holds it 2s before the central gets it):
	// the unit's own watermark write must not overwrite the rewind, so every row above the
	// rewind's seq, the in-flight ones included, is sent again and counted as a duplicate.
	p0, _ := opSinkStatusOf(t, home, "central").part("central", "logs", "source=web")
	X := p0.WatermarkSeq / 2
	dup0, _ := opMetric(t, srvAddr, "hyp_server_rows_total", `dataset="logs"`, `result="duplicate"`)
	n := opStallNext(px)
	late := newFeeder(5_000_000)
	late.ingest(t, addr, "logs", "web", 20)
	opAwaitRequest(t, px, n)
	res, r := opRewind(t, home, "central", "--partition", "web", "--to-seq", strconv.FormatInt(X, 10), "--json")
	if r.code != 0 || len(res.Changes) != 1 || res.Changes[0].ToSeq != X {
		t.Fatalf("rewind during an in-flight unit: %s", r)
	}
	if p, _ := opSinkStatusOf(t, home, "central").part("central", "logs", "source=web"); p.LastRewind == nil || p.LastRewind.To != X {
		t.Errorf("right after the rewind during an in-flight unit, last_rewind is %+v", p.LastRewind)
	}
	opStalled(t, px, n)
	p1, _ := opAllCaughtUp(t, home, "central", 30*time.Second).part("central", "logs", "source=web")
	if p1.LastRewind == nil || p1.LastRewind.To != X {
		t.Errorf("after the in-flight unit finished, last_rewind is %+v, want to_seq %d", p1.LastRewind, X)
	}
	wantDup := opCount(opRows(t, home, "logs"), "source=web", X, p1.HeadSeq)
	opAwaitDuplicates(t, srvAddr, "logs", dup0, wantDup, fmt.Sprintf("rewind to %d of web during an in-flight unit", X), func() string {
		b, _ := os.ReadFile(opWatermarkPath(home, "central", "logs", "web"))
		return "watermark file now:\n" + string(b)
	})
	checkServer(t, "after a rewind during an in-flight unit", srvHome, unionWant(want, late.want))
}

// ---------- 3. hand edits ----------

// TestHandEditedWatermarkIsHonoured lowers "seq" in watermark files by hand while the
// daemon ticks every 200ms and rows keep arriving: the daemon adopts each edit, never
// writes a stale position over it, and exports the rows above it again.
func TestHandEditedWatermarkIsHonoured(t *testing.T) {
	t.Parallel()
	e := opStartCentralAndFiles(t, "@every 200ms", "@every 200ms")
	srvHome, srvAddr, px, home, addr, root := e.srvHome, e.srvAddr, e.px, e.home, e.addr, e.root
	f := newFeeder(0)
	cl := opStartClients(t, f, addr, "logs", []string{"web"}, 10, 100*time.Millisecond)

	// An idle partition (dataset audit) exported in four units to the central.
	g := newFeeder(1_000_000)
	for i := range 4 {
		g.ingest(t, addr, "audit", "idle", 25)
		opWait(t, home, "central", 30*time.Second, "the idle partition exported", func(st opSinkStatus) bool {
			p, ok := st.part("central", "audit", "source=idle")
			return ok && p.caughtUp() && p.ExportedRows == int64(25*(i+1))
		})
	}
	// The busy web partition has a few files on the local-fs sink.
	webDir := filepath.Join(root, "logs", "_hyp_source=web")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if es, _ := os.ReadDir(webDir); len(es) >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the files sink did not write 4 files of source web within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// 1. The idle partition on the central: lower the watermark to the middle; the rows
	// above it go out again, and the ledger counts exactly those as duplicates.
	idleRows := opRows(t, home, "audit")
	if len(idleRows) != 100 {
		t.Fatalf("audit holds %d rows, want 100", len(idleRows))
	}
	S := idleRows[49].seq
	dup0, _ := opMetric(t, srvAddr, "hyp_server_rows_total", `dataset="audit"`, `result="duplicate"`)
	prev := opEditWatermark(t, home, "central", "audit", "idle", S)
	st := opSinkStatusOf(t, home, "central")
	p, _ := st.part("central", "audit", "source=idle")
	prevGen, _ := strconv.ParseInt(fmt.Sprint(prev["generation"]), 10, 64)
	if p.WatermarkSeq != S && p.WatermarkSeq != p.HeadSeq {
		t.Errorf("right after the edit to %d the idle partition's watermark is %d (head %d)", S, p.WatermarkSeq, p.HeadSeq)
	}
	if p.Generation <= prevGen {
		t.Errorf("after the edit the generation is %d, the file had %d: the edit was not adopted as a new state", p.Generation, prevGen)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		dup, _ := opMetric(t, srvAddr, "hyp_server_rows_total", `dataset="audit"`, `result="duplicate"`)
		if dup-dup0 == 50 {
			break
		}
		if dup-dup0 > 50 || time.Now().After(deadline) {
			b, _ := os.ReadFile(opWatermarkPath(home, "central", "audit", "idle"))
			t.Fatalf("after lowering the idle watermark to %d the central counted %v duplicates, want exactly the 50 rows above it; watermark file now:\n%s", S, dup-dup0, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	p, _ = opWait(t, home, "central", 30*time.Second, "the idle partition caught up again", func(st opSinkStatus) bool {
		p, ok := st.part("central", "audit", "source=idle")
		return ok && p.caughtUp()
	}).part("central", "audit", "source=idle")
	if p.ExportedRows != 150 {
		t.Errorf("idle partition exported_rows %d after re-exporting 50 of 100, want 150", p.ExportedRows)
	}

	// 2. The busy web partition on the files sink: lower the watermark to the end of the
	// second file; the rows of every later file must appear again in files written after
	// the edit, and no row at or below the edit.
	files := opJSONLFiles(t, webDir)
	if len(files) < 4 {
		t.Fatalf("want at least 4 web files, have %d", len(files))
	}
	S = files[1].last
	before := map[string]string{}
	redo := map[int]bool{}
	for _, bf := range files {
		before[bf.rel] = bf.stamp
		if bf.first > S {
			for _, r := range bf.rows {
				redo[r.id] = true
			}
		}
	}
	opEditWatermark(t, home, "files", "logs", "web", S)
	st = opSinkStatusOf(t, home, "files")
	p, _ = st.part("files", "logs", "source=web")
	if p.WatermarkSeq < S {
		t.Errorf("right after the edit to %d the web watermark is %d", S, p.WatermarkSeq)
	}
	newFiles := func() []opJSONLFile {
		var out []opJSONLFile
		for _, bf := range opJSONLFiles(t, webDir) {
			if before[bf.rel] != bf.stamp {
				out = append(out, bf)
			}
		}
		return out
	}
	if p.WatermarkSeq > S {
		// Only legitimate if it re-exported from S already.
		var from int64 = -1
		for _, bf := range newFiles() {
			if from < 0 || bf.first < from {
				from = bf.first
			}
		}
		if from != files[2].first {
			t.Errorf("right after the edit to %d the watermark is %d, but no file re-exported from seq %d (new files start at %d)", S, p.WatermarkSeq, files[2].first, from)
		}
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		got := map[int]bool{}
		for _, bf := range newFiles() {
			if bf.first <= S {
				t.Fatalf("after the edit to %d the files sink wrote %s, which starts at or below it", S, bf.rel)
			}
			for _, r := range bf.rows {
				got[r.id] = true
			}
		}
		var missing []int
		for id := range redo {
			if !got[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(opWatermarkPath(home, "files", "logs", "web"))
			t.Fatalf("30s after lowering the web watermark to %d, %d of the %d rows above it were not exported again (e.g. %v); watermark file now:\n%s", S, len(missing), len(redo), sample(missing), b)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// 3. The busy web partition on the central, mid-flight: everything at or below the
	// watermark it had when edited, and above the edit, comes again as duplicates.
	webCentral := opSinkStatusOf(t, home, "central")
	pw, _ := webCentral.part("central", "logs", "source=web")
	S = pw.WatermarkSeq / 2
	dup0, _ = opMetric(t, srvAddr, "hyp_server_rows_total", `dataset="logs"`, `result="duplicate"`)
	opEditWatermark(t, home, "central", "logs", "web", S)
	cached := opRows(t, home, "logs")
	wantDup := opCount(cached, "source=web", S, pw.WatermarkSeq)
	deadline = time.Now().Add(30 * time.Second)
	for {
		dup, _ := opMetric(t, srvAddr, "hyp_server_rows_total", `dataset="logs"`, `result="duplicate"`)
		if int64(dup-dup0) >= wantDup {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(opWatermarkPath(home, "central", "logs", "web"))
			t.Fatalf("after lowering the central's busy web watermark from %d to %d the central counted %v duplicates, want at least %d; watermark file now:\n%s", pw.WatermarkSeq, S, dup-dup0, wantDup, b)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// 4. The idle partition's file removed by hand: the daemon starts it over from seq 0
	// (it does not write back what it remembered), and the central counts all 100 rows again.
	dup0, _ = opMetric(t, srvAddr, "hyp_server_rows_total", `dataset="audit"`, `result="duplicate"`)
	if err := os.Remove(opWatermarkPath(home, "central", "audit", "idle")); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		dup, _ := opMetric(t, srvAddr, "hyp_server_rows_total", `dataset="audit"`, `result="duplicate"`)
		if dup-dup0 == 100 {
			break
		}
		if dup-dup0 > 100 || time.Now().After(deadline) {
			b, _ := os.ReadFile(opWatermarkPath(home, "central", "audit", "idle"))
			t.Fatalf("after removing the idle watermark file the central counted %v duplicates, want all 100 rows; watermark file now:\n%s", dup-dup0, b)
		}
		time.Sleep(100 * time.Millisecond)
	}

	want := cl.truth(t, home)
	opAllCaughtUp(t, home, "central", 30*time.Second)
	opAllCaughtUp(t, home, "files", 30*time.Second)
	checkServer(t, "after hand edits", srvHome, unionWant(want, g.want))

	// 5. A hand edit while a unit is in flight (the proxy holds it 2s before the central gets
	// it): the unit's own watermark write must not overwrite the edit, so the 20 old rows
	// above the edit and the 20 in-flight ones are all sent again.
	S = idleRows[79].seq
	dup0, _ = opMetric(t, srvAddr, "hyp_server_rows_total", `dataset="audit"`, `result="duplicate"`)
	n := opStallNext(px)
	g.ingest(t, addr, "audit", "idle", 20)
	opAwaitRequest(t, px, n)
	opEditWatermark(t, home, "central", "audit", "idle", S)
	opStalled(t, px, n)
	p, _ = opAllCaughtUp(t, home, "central", 30*time.Second).part("central", "audit", "source=idle")
	opAwaitDuplicates(t, srvAddr, "audit", dup0, opCount(opRows(t, home, "audit"), "source=idle", S, p.HeadSeq),
		fmt.Sprintf("hand edit of the idle watermark to %d during an in-flight unit", S), func() string {
			b, _ := os.ReadFile(opWatermarkPath(home, "central", "audit", "idle"))
			return "watermark file now:\n" + string(b)
		})
	checkServer(t, "after a hand edit during an in-flight unit", srvHome, unionWant(want, g.want))
}

// ---------- 4. retention against a stalled sink ----------

// TestStalledSinkHoldsRetentionAndMaxAgeGapIsExact: a forward sink whose central is down
// holds its rows from a 1s retention while a working local-fs sink exports; then max_age
// forces them out, and the stalled sink records exactly the lost seq range as a gap, counted
// in the metric, which a rewind then refuses to cross unless told to.
func TestStalledSinkHoldsRetentionAndMaxAgeGapIsExact(t *testing.T) {
	t.Parallel()
	srvHome, srvAddr, tokens := newServerHome(t)
	srv := startHypServer(t, srvHome, srvAddr, tokens)
	home, addr := t.TempDir(), freePort(t)
	root := filepath.Join(t.TempDir(), "exports")
	sinks := []string{forwardSinkYAML("central", "http://"+srvAddr, tokens), localSinkYAML("files", "jsonl", root)}
	writeDaemonYAML(t, home, addr, "1s\n    hold_for_sinks: true", sinks...)
	d := startHypDaemon(t, home, addr)

	f1, f2, f3 := newFeeder(0), newFeeder(100_000), newFeeder(200_000)
	f1.ingest(t, addr, "logs", "web", 100)
	f1.ingest(t, addr, "logs", "db", 50)
	requireRun(t, home, "", 300) // both sinks
	srv.stop(t)                  // the central goes down
	f2.ingest(t, addr, "logs", "web", 60)
	f2.ingest(t, addr, "logs", "db", 40)
	requireRun(t, home, "files", 100)

	rows0 := opRows(t, home, "logs")
	type exp struct {
		p1Last    int64 // the stalled sink's watermark: the last phase-1 seq
		p2First   int64
		p2Last    int64
		p1, p2    int64
		p2FirstAt time.Time
	}
	want := map[string]*exp{}
	for _, src := range []string{"web", "db"} {
		part := "source=" + src
		e := &exp{}
		_, e.p1Last, e.p1 = opSeqsOf(filterPart(rows0, part), f1.want["logs"])
		e.p2First, e.p2Last, e.p2 = opSeqsOf(filterPart(rows0, part), f2.want["logs"])
		for _, r := range rows0 {
			if r.seq == e.p2First {
				e.p2FirstAt = r.at
			}
		}
		want[part] = e
	}
	st := opSinkStatusOf(t, home, "")
	for part, e := range want {
		if p, _ := st.part("central", "logs", part); p.WatermarkSeq != e.p1Last || p.LagRows != e.p2 {
			t.Fatalf("stalled central on %s: watermark %d lag %d, want %d %d", part, p.WatermarkSeq, p.LagRows, e.p1Last, e.p2)
		}
		if p, _ := st.part("files", "logs", part); !p.caughtUp() {
			t.Fatalf("files on %s not caught up: %+v", part, p)
		}
	}

	// Past the 1s retention every row has expired; phase 1 (exported by both) may go,
	// phase 2 is held for the stalled central.
	checkHeld := func(where string, pr opPrune) bool {
		t.Helper()
		ok := true
		for _, p := range pr.Partitions {
			e := want[p.Partition]
			if p.Dataset != "logs" || e == nil {
				t.Errorf("%s: unexpected partition %s %s", where, p.Dataset, p.Partition)
				continue
			}
			if p.HeldRows != e.p2 {
				ok = false
				continue
			}
			if p.ThroughSeq != e.p1Last || p.DeletedRows != e.p1 || !slices.Equal(p.HeldFor, []string{"central"}) ||
				p.UnexportedDeletedRows != 0 || len(p.ForcedLosses) != 0 {
				t.Errorf("%s %s: through_seq %d deleted %d held %d for %v, unexported_deleted %d losses %v; want through %d, deleted %d, held %d for [central], no loss",
					where, p.Partition, p.ThroughSeq, p.DeletedRows, p.HeldRows, p.HeldFor, p.UnexportedDeletedRows, p.ForcedLosses, e.p1Last, e.p1, e.p2)
			}
		}
		return ok && len(pr.Partitions) == 2
	}
	deadline := time.Now().Add(30 * time.Second)
	for !checkHeld("prune --dry-run", opPruneRun(t, home, true)) {
		if time.Now().After(deadline) {
			t.Fatalf("prune --dry-run never held the stalled sink's rows: %+v", opPruneRun(t, home, true))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if pr := opPruneRun(t, home, false); !checkHeld("prune", pr) {
		t.Fatalf("prune: %+v", pr)
	}
	rows1 := opRows(t, home, "logs")
	for part, e := range want {
		if n := int64(len(filterPart(rows1, part))); n != e.p2 || opCount(rows1, part, e.p1Last, e.p2Last) != e.p2 {
			t.Errorf("after the prune %s caches %d rows, want exactly the %d the central has not exported", part, n, e.p2)
		}
	}
	if v, _ := opMetric(t, addr, "hyp_retention_deleted_rows_total", `dataset="logs"`); v != 150 {
		t.Errorf("hyp_retention_deleted_rows_total = %v, want 150", v)
	}
	st = opSinkStatusOf(t, home, "central")
	for part, e := range want {
		p, _ := st.part("central", "logs", part)
		if p.WatermarkSeq != e.p1Last || p.LagRows != e.p2 || len(p.Gaps) != 0 || p.OldestUnexportedAgeSeconds <= 0 {
			t.Errorf("stalled central on %s after the prune: %+v", part, p)
		}
		if p.OldestUnexportedAt == nil || !p.OldestUnexportedAt.Equal(e.p2FirstAt) {
			t.Errorf("stalled central on %s: oldest_unexported_at %v, want %v (the first row above its watermark)", part, p.OldestUnexportedAt, e.p2FirstAt)
		}
		if v, ok := opMetric(t, addr, "hyp_sink_lag_rows", `sink="central"`, `partition="`+part+`"`); !ok || int64(v) != e.p2 {
			t.Errorf("hyp_sink_lag_rows central %s = %v, want %d", part, v, e.p2)
		}
		if v, ok := opMetric(t, addr, "hyp_sink_oldest_unexported_age_seconds", `sink="central"`, `partition="`+part+`"`); !ok || v <= 0 {
			t.Errorf("hyp_sink_oldest_unexported_age_seconds central %s = %v, want > 0", part, v)
		}
	}

	// max_age 3s overrides the hold: once phase 2 is older than that, it goes, and the
	// central records exactly that range. Fresh rows (phase 3) stay.
	d.stop(t)
	writeDaemonYAML(t, home, addr, "1s\n    hold_for_sinks: true\n    max_age: 3s", sinks...)
	startHypDaemon(t, home, addr)
	deadline = time.Now().Add(30 * time.Second)
	for {
		pr := opPruneRun(t, home, true)
		var forced int64
		for _, p := range pr.Partitions {
			forced += p.UnexportedDeletedRows
		}
		if forced == 100 {
			break
		}
		if time.Now().After(deadline) || forced > 100 {
			t.Fatalf("prune --dry-run with max_age 3s: %d unexported rows would go, want the 100 of phase 2: %+v", forced, pr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st := opSinkStatusOf(t, home, "central"); len(st.parts("central")) != 2 {
		t.Fatalf("central status: %+v", st)
	} else {
		for _, p := range st.parts("central") {
			if len(p.Gaps) != 0 {
				t.Errorf("a dry-run prune recorded a gap: %+v", p)
			}
		}
	}
	f3.ingest(t, addr, "logs", "web", 30)
	pr := opPruneRun(t, home, false)
	if len(pr.Partitions) != 2 {
		t.Errorf("prune with max_age: want both partitions: %+v", pr)
	}
	for _, p := range pr.Partitions {
		e := want[p.Partition]
		if e == nil {
			t.Errorf("prune touched %s", p.Partition)
			continue
		}
		wl := []opLoss{{Sink: "central", From: e.p2First, To: e.p2Last, Rows: e.p2}}
		if p.ThroughSeq != e.p2Last || p.DeletedRows != e.p2 || p.UnexportedDeletedRows != e.p2 || !slices.Equal(p.ForcedLosses, wl) {
			t.Errorf("prune with max_age %s: through %d deleted %d unexported_deleted %d losses %+v; want through %d, %d deleted, all unexported, losses %+v",
				p.Partition, p.ThroughSeq, p.DeletedRows, p.UnexportedDeletedRows, p.ForcedLosses, e.p2Last, e.p2, wl)
		}
	}
	st = opSinkStatusOf(t, home, "")
	for part, e := range want {
		p, _ := st.part("central", "logs", part)
		if len(p.Gaps) != 1 || p.Gaps[0].From != e.p2First || p.Gaps[0].To != e.p2Last || p.Gaps[0].Rows != e.p2 || p.Gaps[0].Reason == "" || p.Gaps[0].At == nil {
			t.Errorf("central %s: gaps %+v, want exactly one: seq %d..%d, %d rows, with a reason and a time", part, p.Gaps, e.p2First, e.p2Last, e.p2)
		}
		if fp, _ := st.part("files", "logs", part); len(fp.Gaps) != 0 {
			t.Errorf("files %s had exported everything but shows gaps %+v", part, fp.Gaps)
		}
	}
	if v, _ := opMetric(t, addr, "hyp_retention_unexported_deleted_rows_total", `sink="central"`, `dataset="logs"`); v != 100 {
		t.Errorf("hyp_retention_unexported_deleted_rows_total{sink=central} = %v, want 100", v)
	}
	if v, _ := opMetric(t, addr, "hyp_retention_unexported_deleted_rows_total", `sink="files"`); v != 0 {
		t.Errorf("hyp_retention_unexported_deleted_rows_total{sink=files} = %v, want 0", v)
	}
	for _, s := range opStatusOf(t, home).Sinks {
		if s.Instance == "central" && (s.Gaps != 2 || s.GapRows != 100) {
			t.Errorf("hyp status: central gaps %d gap_rows %d, want 2 and 100", s.Gaps, s.GapRows)
		}
		if s.Instance == "files" && (s.Gaps != 0 || s.GapRows != 0) {
			t.Errorf("hyp status: files gaps %d gap_rows %d, want 0", s.Gaps, s.GapRows)
		}
	}

	// A rewind below what retention removed is refused, names the range, changes nothing.
	before := opSinkStatusOf(t, home, "central")
	res, r := opRewind(t, home, "central", "--to-seq", "0", "--json")
	if r.code != 1 {
		t.Fatalf("rewind --to-seq 0 across removed rows: want exit 1: %s", r)
	}
	if res.DryRun || len(res.Changes) != 2 {
		t.Errorf("refused rewind plan: %+v", res)
	}
	for _, c := range res.Changes {
		e := want[c.Partition]
		if e == nil {
			continue
		}
		if c.FromSeq != e.p1Last || c.ToSeq != 0 || c.Missing == nil || *c.Missing != (opSeqRange{1, e.p1Last}) || c.RowsToExport != 0 {
			t.Errorf("refused rewind of %s: %+v (missing %+v), want from %d to 0, missing 1..%d, nothing to export", c.Partition, c, c.Missing, e.p1Last, e.p1Last)
		}
		if !strings.Contains(r.stderr, fmt.Sprintf("seq 1..%d", e.p1Last)) {
			t.Errorf("refusal does not name the missing range seq 1..%d of %s: %s", e.p1Last, c.Partition, r.stderr)
		}
	}
	afterRefusal := opSinkStatusOf(t, home, "central")
	for _, p := range before.parts("central") {
		q, _ := afterRefusal.part("central", p.Dataset, p.Partition)
		if q.WatermarkSeq != p.WatermarkSeq || q.Generation != p.Generation || q.LastRewind != nil {
			t.Errorf("a refused rewind changed %s: before %+v after %+v", p.Partition, p, q)
		}
	}
	res, r = opRewind(t, home, "central", "--to-seq", "0", "--allow-gap", "--json")
	if r.code != 0 || len(res.Changes) != 2 {
		t.Fatalf("rewind --allow-gap: %s", r)
	}
	st = opSinkStatusOf(t, home, "central")
	for _, p := range st.parts("central") {
		if p.WatermarkSeq != 0 || p.LastRewind == nil || p.LastRewind.To != 0 || len(p.Gaps) != 1 {
			t.Errorf("after rewind --allow-gap, %s: %+v", p.Partition, p)
		}
	}

	// The central comes back: it gets phase 3; phase 2 is the recorded gap; nothing twice.
	startHypServer(t, srvHome, srvAddr, tokens)
	requireRun(t, home, "central", 30)
	checkServer(t, "after the gap", srvHome, unionWant(f1.want, f3.want))
	requireRun(t, home, "files", 30)
	all := unionWant(f1.want, f2.want, f3.want)
	checkExactlyOnce(t, "files (local-fs)", checkBlobFiles(t, "files", localFiles(t, root), "jsonl.gz"), all)
}

func filterPart(rows []opRow, part string) []opRow {
	var out []opRow
	for _, r := range rows {
		if r.part == part {
			out = append(out, r)
		}
	}
	return out
}

// ---------- 5. usage and exit codes ----------

// opKeys checks that m is a JSON object holding every key.
func opKeys(t *testing.T, where string, v any, keys ...string) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Errorf("%s: %v is not a JSON object", where, v)
		return nil
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s: no key %q in %v", where, k, m)
		}
	}
	return m
}

// opNumbers checks that every *_seq value (and every count) anywhere in v is a JSON number.
func opNumbers(t *testing.T, where string, v any) {
	t.Helper()
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if strings.HasSuffix(k, "_seq") || strings.HasSuffix(k, "_rows") || k == "rows" || k == "rows_to_export" || k == "rows_to_skip" || k == "generation" {
				if _, ok := val.(json.Number); !ok {
					t.Errorf("%s: %q is %v (%T), want a JSON number", where, k, val, val)
				}
			}
			opNumbers(t, where+"."+k, val)
		}
	case []any:
		for i, val := range x {
			opNumbers(t, fmt.Sprintf("%s[%d]", where, i), val)
		}
	}
}

func opAny(t *testing.T, r cliResult) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, r)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON document:\n%s", r)
	}
	return v
}

// TestOperatorVerbsUsageAndExitCodes runs every operator verb with --json without and with
// a daemon: the keys of SPEC 7, seqs as numbers, exit 2 for usage errors naming the
// problem, exit 1 for a refused rewind (which still prints its plan and changes nothing).
func TestOperatorVerbsUsageAndExitCodes(t *testing.T) {
	t.Parallel()
	home, addr := t.TempDir(), freePort(t)
	root := filepath.Join(t.TempDir(), "exports")
	tokens := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokens, []byte("t0ken\n"), 0o600)
	writeDaemonYAML(t, home, addr, "1s",
		localSinkYAML("files", "jsonl", root)+"    datasets: [logs]\n",
		forwardSinkYAML("central", "http://"+freePort(t), tokens)+"    datasets: [audit]\n") // a central nobody answers
	in := filepath.Join(t.TempDir(), "in.ndjson")
	ingest := func(ds string, data []byte) {
		t.Helper()
		os.WriteFile(in, data, 0o644)
		if r := runHyp(t, home, time.Minute, "ingest", ds, in); r.code != 0 {
			t.Fatalf("ingest: %s", r)
		}
	}
	ingest("logs", append(rows(0, 30, "web"), rows(30, 20, "db")...))
	ingest("audit", rows(100, 10, "auth"))
	requireRun(t, home, "files", 50)
	phase1 := opRows(t, home, "logs")
	pruned := map[string]int64{}
	for _, r := range phase1 {
		pruned[r.part] = max(pruned[r.part], r.seq)
	}
	// Past the 1s retention the exported logs rows go; audit is held for the central.
	var deleted int64
	deadline := time.Now().Add(30 * time.Second)
	for deleted < 50 {
		for _, p := range opPruneRun(t, home, false).Partitions {
			if p.Dataset == "audit" && p.DeletedRows > 0 {
				t.Fatalf("prune deleted audit rows the central never exported: %+v", p)
			}
			if p.Dataset == "logs" {
				deleted += p.DeletedRows
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prune deleted %d of the 50 exported logs rows within 30s", deleted)
		}
		time.Sleep(200 * time.Millisecond)
	}
	ingest("logs", append(rows(200, 10, "web"), rows(210, 5, "db")...))
	cached := opRows(t, home, "logs")
	head := map[string]int64{}
	firstAt := map[string]opRow{}
	for _, r := range cached {
		head[r.part] = max(head[r.part], r.seq)
		if _, ok := firstAt[r.part]; !ok {
			firstAt[r.part] = r
		}
	}
	parts := []string{"source=db", "source=web"}

	type target func(part string) int64
	seqTarget := func(n int64) target { return func(p string) int64 { return min(n, head[p]) } }
	earliest := func(p string) int64 { return pruned[p] }
	latest := func(p string) int64 { return head[p] }

	// checkRewind holds a rewind's output and effect to the plan computed from the cache:
	// from = the watermark before, to = the target, rows counted from the cached rows, and
	// missing = what retention removed between them.
	checkRewind := func(t *testing.T, r cliResult, pre opSinkStatus, onlyParts []string, to target, dry, refused bool) {
		t.Helper()
		v := opAny(t, r)
		opNumbers(t, "rewind", v)
		m := opKeys(t, "rewind", v, "instance", "dry_run", "changes")
		if m == nil {
			return
		}
		for i, c := range m["changes"].([]any) {
			opKeys(t, fmt.Sprintf("rewind.changes[%d]", i), c, "dataset", "partition", "from_seq", "to_seq", "rows_to_export", "rows_to_skip")
		}
		var res opRewindResult
		opDecode(t, r, &res)
		if res.Instance != "files" || res.DryRun != dry {
			t.Errorf("rewind: instance %q dry_run %v, want files %v", res.Instance, res.DryRun, dry)
		}
		var got []string
		for _, c := range res.Changes {
			got = append(got, c.Partition)
			p, _ := pre.part("files", "logs", c.Partition)
			from, want := p.WatermarkSeq, to(c.Partition)
			var exp, skip int64
			var missing *opSeqRange
			if want < from {
				exp = opCount(cached, c.Partition, want, from)
				if gone := min(from, pruned[c.Partition]); want < gone {
					missing = &opSeqRange{want + 1, gone}
				}
			} else {
				skip = opCount(cached, c.Partition, from, want)
			}
			if c.Dataset != "logs" || c.FromSeq != from || c.ToSeq != want || c.RowsToExport != exp || c.RowsToSkip != skip ||
				(missing == nil) != (c.Missing == nil) || (missing != nil && *missing != *c.Missing) {
				t.Errorf("rewind of %s: %+v missing %+v; want from %d to %d, rows_to_export %d, rows_to_skip %d, missing %+v", c.Partition, c, c.Missing, from, want, exp, skip, missing)
			}
			if refused && missing != nil && !strings.Contains(r.stderr, fmt.Sprintf("seq %d..%d", missing.First, missing.Last)) {
				t.Errorf("the refusal does not name the missing range %d..%d: %s", missing.First, missing.Last, r.stderr)
			}
		}
		if !slices.Equal(got, onlyParts) {
			t.Errorf("rewind changed partitions %v, want %v", got, onlyParts)
		}
		post := opSinkStatusOf(t, home, "")
		for _, p := range pre.parts("files") {
			q, _ := post.part("files", p.Dataset, p.Partition)
			var ch *opChange
			for i := range res.Changes {
				if res.Changes[i].Partition == p.Partition {
					ch = &res.Changes[i]
				}
			}
			if dry || refused || ch == nil {
				if q.WatermarkSeq != p.WatermarkSeq || q.Generation != p.Generation {
					t.Errorf("%s changed %s: watermark %d -> %d, generation %d -> %d", strings.Join(r.args, " "), p.Partition, p.WatermarkSeq, q.WatermarkSeq, p.Generation, q.Generation)
				}
				continue
			}
			if q.WatermarkSeq != ch.ToSeq || q.LastRewind == nil || q.LastRewind.To != ch.ToSeq || q.LastRewind.From != ch.FromSeq || q.Generation <= p.Generation {
				t.Errorf("after %s, %s: watermark %d last_rewind %+v generation %d (was %d); want %d -> %d", strings.Join(r.args, " "), p.Partition, q.WatermarkSeq, q.LastRewind, q.Generation, p.Generation, ch.FromSeq, ch.ToSeq)
			}
		}
	}

	type tcase struct {
		name string
		args []string
		code int
		msg  string // exits other than 0 name this
		// rewind cases
		rewind  bool
		parts   []string
		to      target
		dry     bool
		refused bool
		// other --json cases
		check func(t *testing.T, r cliResult, daemon bool)
	}
	statusCheck := func(t *testing.T, r cliResult, daemon bool) {
		v := opAny(t, r)
		opNumbers(t, "status", v)
		m := opKeys(t, "status", v, "home", "daemon", "datasets", "sinks")
		if m == nil {
			return
		}
		dm := opKeys(t, "status.daemon", m["daemon"], "running", "listen")
		if dm != nil && (dm["running"] != daemon || dm["listen"] != addr) {
			t.Errorf("status.daemon = %v, want running %v listen %s", dm, daemon, addr)
		}
		sinks, _ := m["sinks"].([]any)
		if len(sinks) != 2 {
			t.Errorf("status lists %d sinks, want 2", len(sinks))
		}
		for i, s := range sinks {
			opKeys(t, fmt.Sprintf("status.sinks[%d]", i), s, "instance", "type", "partitions", "lag_rows", "exported_rows",
				"oldest_unexported_age_seconds", "last_export_at", "gaps", "gap_rows", "withheld_rows", "quarantined", "errors")
		}
	}
	sinkStatusCheck := func(instances ...string) func(t *testing.T, r cliResult, daemon bool) {
		return func(t *testing.T, r cliResult, daemon bool) {
			v := opAny(t, r)
			opNumbers(t, "sink status", v)
			m := opKeys(t, "sink status", v, "sinks")
			if m == nil {
				return
			}
			sinks, _ := m["sinks"].([]any)
			var names []string
			for i, s := range sinks {
				sm := opKeys(t, fmt.Sprintf("sinks[%d]", i), s, "instance", "type", "partitions")
				if sm == nil {
					continue
				}
				names = append(names, fmt.Sprint(sm["instance"]))
				ps, _ := sm["partitions"].([]any)
				for j, p := range ps {
					opKeys(t, fmt.Sprintf("sinks[%d].partitions[%d]", i, j), p, "dataset", "partition", "watermark_seq", "head_seq", "lag_rows",
						"exported_rows", "oldest_unexported_at", "oldest_unexported_age_seconds", "last_export_at", "last_error", "gaps",
						"quarantined", "withheld", "withheld_rows", "in_flight", "last_rewind", "generation")
				}
			}
			if !slices.Equal(names, instances) {
				t.Errorf("sink status lists %v, want %v", names, instances)
			}
			var st opSinkStatus
			opDecode(t, r, &st)
			for _, in := range instances {
				var got []string
				for _, p := range st.parts(in) {
					got = append(got, p.Dataset+"/"+p.Partition)
					if p.HeadSeq != head[p.Partition] && p.Dataset == "logs" {
						t.Errorf("%s %s: head_seq %d, want %d", in, p.Partition, p.HeadSeq, head[p.Partition])
					}
					if p.LagRows != opCount(cached, p.Partition, p.WatermarkSeq, p.HeadSeq) && p.Dataset == "logs" {
						t.Errorf("%s %s: lag_rows %d, want the %d cached rows above watermark %d", in, p.Partition, p.LagRows, opCount(cached, p.Partition, p.WatermarkSeq, p.HeadSeq), p.WatermarkSeq)
					}
				}
				wantParts := map[string][]string{"files": {"logs/source=db", "logs/source=web"}, "central": {"audit/source=auth"}}[in]
				if !slices.Equal(got, wantParts) {
					t.Errorf("sink status of %s covers %v, want %v", in, got, wantParts)
				}
			}
		}
	}
	pruneCheck := func(t *testing.T, r cliResult, daemon bool) {
		v := opAny(t, r)
		opNumbers(t, "prune", v)
		m := opKeys(t, "prune", v, "dry_run", "partitions")
		if m == nil {
			return
		}
		ps, _ := m["partitions"].([]any)
		for i, p := range ps {
			opKeys(t, fmt.Sprintf("prune.partitions[%d]", i), p, "dataset", "partition", "through_seq", "deleted_rows", "held_rows", "held_for", "unexported_deleted_rows", "forced_losses")
		}
	}
	firstWeb := firstAt["source=web"]
	cases := []tcase{
		{name: "status", args: []string{"status", "--json"}, check: statusCheck},
		{name: "sink status", args: []string{"sink", "status", "--json"}, check: sinkStatusCheck("central", "files")},
		{name: "sink status files", args: []string{"sink", "status", "files", "--json"}, check: sinkStatusCheck("files")},
		{name: "prune dry run", args: []string{"cache", "prune", "--dry-run", "--json"}, check: pruneCheck},
		{name: "dry run earliest", args: []string{"sink", "rewind", "files", "--to-earliest", "--dry-run", "--json"}, rewind: true, parts: parts, to: earliest, dry: true},
		{name: "dry run to-seq web", args: []string{"sink", "rewind", "files", "--partition", "source=web", "--to-seq", strconv.FormatInt(pruned["source=web"], 10), "--dry-run", "--json"},
			rewind: true, parts: []string{"source=web"}, to: seqTarget(pruned["source=web"]), dry: true},
		{name: "dry run to-time", args: []string{"sink", "rewind", "files", "--dataset", "logs", "--partition", "web", "--to-time", firstWeb.atRaw, "--dry-run", "--json"},
			rewind: true, parts: []string{"source=web"}, to: func(string) int64 { return pruned["source=web"] }, dry: true},
		// Every row stamped in the first cached web row's microsecond was ingested before T
		// when T is 500ns after it: RFC 3339 allows any precision, and those rows are
		// strictly before T (rows of one request share their ingest time).
		{name: "dry run to-time sub-microsecond", args: []string{"sink", "rewind", "files", "--partition", "web", "--to-time", firstWeb.at.Add(500 * time.Nanosecond).Format(time.RFC3339Nano), "--dry-run", "--json"},
			rewind: true, parts: []string{"source=web"}, to: func(string) int64 { return opSeqBefore(cached, "source=web", firstWeb.at.Add(time.Microsecond)) }, dry: true},
		{name: "dry run to-seq above head", args: []string{"sink", "rewind", "files", "--to-seq", "999999999", "--dry-run", "--json"}, rewind: true, parts: parts, to: latest, dry: true},
		{name: "latest", args: []string{"sink", "rewind", "files", "--to-latest", "--json"}, rewind: true, parts: parts, to: latest},
		{name: "earliest", args: []string{"sink", "rewind", "files", "--to-earliest", "--json"}, rewind: true, parts: parts, to: earliest},
		{name: "refused to-seq 0", args: []string{"sink", "rewind", "files", "--partition", "web", "--to-seq", "0", "--json"}, code: 1, msg: "--allow-gap",
			rewind: true, parts: []string{"source=web"}, to: seqTarget(0), refused: true},
		{name: "refused dry run by-duration", args: []string{"sink", "rewind", "files", "--by-duration", "1h", "--dry-run", "--json"}, code: 1, msg: "--allow-gap",
			rewind: true, parts: parts, to: seqTarget(0), dry: true, refused: true},
		{name: "allow gap", args: []string{"sink", "rewind", "files", "--partition", "web", "--to-seq", "0", "--allow-gap", "--json"}, rewind: true, parts: []string{"source=web"}, to: seqTarget(0)},
		{name: "to-seq db", args: []string{"sink", "rewind", "files", "--partition", "source=db", "--to-seq", strconv.FormatInt(head["source=db"]-1, 10), "--json"},
			rewind: true, parts: []string{"source=db"}, to: seqTarget(head["source=db"] - 1)},

		{name: "no target", args: []string{"sink", "rewind", "files"}, code: 2, msg: "one of"},
		{name: "no target json", args: []string{"sink", "rewind", "files", "--json"}, code: 2, msg: "one of"},
		{name: "two targets", args: []string{"sink", "rewind", "files", "--to-seq", "1", "--to-earliest"}, code: 2, msg: "one of"},
		{name: "time and duration", args: []string{"sink", "rewind", "files", "--to-time", "2026-01-01T00:00:00Z", "--by-duration", "1h"}, code: 2, msg: "one of"},
		{name: "earliest and latest", args: []string{"sink", "rewind", "files", "--to-earliest", "--to-latest", "--json"}, code: 2, msg: "one of"},
		{name: "unknown sink", args: []string{"sink", "rewind", "nosuch", "--to-latest", "--json"}, code: 2, msg: "nosuch"},
		{name: "no instance", args: []string{"sink", "rewind", "--to-latest"}, code: 2},
		{name: "two instances", args: []string{"sink", "rewind", "files", "central", "--to-latest"}, code: 2},
		{name: "dataset not cached", args: []string{"sink", "rewind", "files", "--dataset", "nope", "--to-latest"}, code: 2, msg: "nope"},
		{name: "dataset not covered", args: []string{"sink", "rewind", "files", "--dataset", "audit", "--to-latest"}, code: 2, msg: "audit"},
		{name: "unknown partition", args: []string{"sink", "rewind", "files", "--partition", "nope", "--to-latest"}, code: 2, msg: "nope"},
		{name: "unknown partition name", args: []string{"sink", "rewind", "files", "--partition", "source=nope", "--to-latest", "--json"}, code: 2, msg: "nope"},
		{name: "partition of an uncovered dataset", args: []string{"sink", "rewind", "files", "--partition", "auth", "--to-latest"}, code: 2, msg: "auth"},
		{name: "bad time", args: []string{"sink", "rewind", "files", "--to-time", "yesterday"}, code: 2, msg: "yesterday"},
		{name: "bad duration", args: []string{"sink", "rewind", "files", "--by-duration", "soon"}, code: 2, msg: "soon"},
		{name: "negative duration", args: []string{"sink", "rewind", "files", "--by-duration", "-5m"}, code: 2, msg: "-5m"},
		{name: "negative seq", args: []string{"sink", "rewind", "files", "--to-seq", "-1"}, code: 2, msg: "-1"},
		{name: "seq not a number", args: []string{"sink", "rewind", "files", "--to-seq", "ten"}, code: 2, msg: "ten"},
		{name: "unknown flag", args: []string{"sink", "rewind", "files", "--to-latest", "--since", "1h"}, code: 2, msg: "since"},
		{name: "sink status unknown", args: []string{"sink", "status", "nosuch", "--json"}, code: 2, msg: "nosuch"},
		{name: "sink status two args", args: []string{"sink", "status", "files", "central"}, code: 2},
		{name: "status extra arg", args: []string{"status", "now", "--json"}, code: 2},
	}
	sameWatermarks := func(t *testing.T, where string, pre, post opSinkStatus) {
		t.Helper()
		for _, in := range []string{"files", "central"} {
			for _, p := range pre.parts(in) {
				if q, _ := post.part(in, p.Dataset, p.Partition); q.WatermarkSeq != p.WatermarkSeq || q.Generation != p.Generation {
					t.Errorf("%s changed %s %s: watermark %d -> %d, generation %d -> %d", where, in, p.Partition, p.WatermarkSeq, q.WatermarkSeq, p.Generation, q.Generation)
				}
			}
		}
	}
	for _, daemon := range []bool{false, true} {
		mode := "without daemon"
		var d *hypProc
		if daemon {
			mode = "with daemon"
			d = startHypDaemon(t, home, addr)
		}
		// Usage errors change nothing: the watermarks before the first of them and after
		// the last are the same.
		var beforeUsage *opSinkStatus
		for _, tc := range cases {
			if tc.code == 2 && beforeUsage == nil {
				st := opSinkStatusOf(t, home, "")
				beforeUsage = &st
			}
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				var pre opSinkStatus
				if tc.rewind {
					pre = opSinkStatusOf(t, home, "")
				}
				r := runHyp(t, home, time.Minute, tc.args...)
				if r.code != tc.code {
					t.Fatalf("want exit %d: %s", tc.code, r)
				}
				if tc.code != 0 && tc.msg != "" && !strings.Contains(r.stderr, tc.msg) {
					t.Errorf("the message does not name %q: %s", tc.msg, r)
				}
				switch {
				case tc.rewind:
					checkRewind(t, r, pre, tc.parts, tc.to, tc.dry, tc.refused)
				case tc.check != nil:
					tc.check(t, r, daemon)
				}
			})
		}
		if beforeUsage != nil {
			sameWatermarks(t, mode+": the usage errors", *beforeUsage, opSinkStatusOf(t, home, ""))
		}
		if d != nil {
			d.stop(t)
		}
	}
}
