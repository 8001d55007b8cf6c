package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFlippedLogByteCostsOneRequest is the measurement from outside: 50
// acknowledged requests of 100 rows wait in the log (flush interval 1 h) when the daemon
// is killed, one byte in the middle of the segment is flipped, and after the restart every
// other row is there exactly once, `cache status` names the missing seqs as a loss, and
// the damaged bytes are still on disk.
func TestFlippedLogByteCostsOneRequest(t *testing.T) {
	t.Parallel()
	home, addr := t.TempDir(), freePort(t)
	cfg := "ingest:\n  listen: " + addr + "\ncache:\n  flush_interval: 1h\nsinks: {}\n"
	if err := os.WriteFile(filepath.Join(home, "hyp.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startHypDaemon(t, home, addr)
	type req struct{ first, last int64 }
	var reqs []req
	for i := range 50 {
		m := mustPost(t, addr, "/v1/ingest/logs?source=web", rows(i*100, 100, "web"), http.StatusOK)
		first, _ := strconv.ParseInt(m["first_seq"].(string), 10, 64)
		last, _ := strconv.ParseInt(m["last_seq"].(string), 10, 64)
		reqs = append(reqs, req{first, last})
	}
	d.kill9()

	segs, _ := filepath.Glob(filepath.Join(home, "cache", "_wal", "*.wal"))
	var seg string
	var size int64
	for _, s := range segs {
		if st, err := os.Stat(s); err == nil && st.Size() > size {
			seg, size = s, st.Size()
		}
	}
	b, err := os.ReadFile(seg)
	if err != nil || size < 100_000 {
		t.Fatalf("log segment %s: %d bytes, %v", seg, size, err)
	}
	at := len(b) / 2
	b[at] ^= 0x40
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}

	d = startHypDaemon(t, home, addr)
	defer d.stop(t)
	ids := map[int]int{}
	for _, r := range opRows(t, home, "logs") {
		ids[r.id]++
	}
	r := runHyp(t, home, time.Minute, "cache", "status", "--json")
	var st struct {
		Losses []struct {
			FromSeq int64  `json:"from_seq"`
			ToSeq   int64  `json:"to_seq"`
			KeptAt  string `json:"kept_at"`
		} `json:"losses"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 0 {
		t.Fatalf("cache status: %v %s", err, r)
	}
	if len(st.Losses) != 1 {
		t.Fatalf("losses %+v, want one", st.Losses)
	}
	loss := st.Losses[0]
	missing := 0
	for i, q := range reqs {
		for id := i * 100; id < i*100+100; id++ {
			switch n := ids[id]; {
			case n > 1:
				t.Errorf("id %d stored %d times", id, n)
			case n == 0:
				missing++
				seq := q.first + int64(id-i*100)
				if seq < loss.FromSeq || seq > loss.ToSeq {
					t.Errorf("id %d (seq %d) is missing outside the loss %d..%d", id, seq, loss.FromSeq, loss.ToSeq)
				}
			}
		}
	}
	if missing == 0 || missing > 100 {
		t.Errorf("%d rows missing, want those of the one request the byte hit", missing)
	}
	if kept, err := os.ReadFile(loss.KeptAt); err != nil || len(kept) != len(b) || kept[at] != b[at] {
		t.Errorf("the damaged bytes are not kept at %s: %v", loss.KeptAt, err)
	}
}

// TestCacheRepairSetsAsideADamagedFile: a cache data file with damaged bytes breaks the
// reads of its partition; `hyp cache repair --dry-run` names it and changes nothing;
// `hyp cache repair` keeps it aside and records its rows as lost, and queries work again.
func TestCacheRepairSetsAsideADamagedFile(t *testing.T) {
	t.Parallel()
	home, addr := newHome(t)
	d := startHypDaemon(t, home, addr)
	defer d.stop(t)
	mustPost(t, addr, "/v1/ingest/logs?source=web", rows(0, 100, "web"), http.StatusOK)
	if r := runHyp(t, home, time.Minute, "cache", "status", "--json"); r.code != 0 { // flushes
		t.Fatalf("cache status: %s", r)
	}
	mustPost(t, addr, "/v1/ingest/logs?source=web", rows(100, 50, "web"), http.StatusOK)
	mustPost(t, addr, "/v1/ingest/logs?source=db", rows(1000, 20, "db"), http.StatusOK)
	if r := runHyp(t, home, time.Minute, "cache", "status", "--json"); r.code != 0 {
		t.Fatalf("cache status: %s", r)
	}
	files, _ := filepath.Glob(filepath.Join(home, "cache", "logs", "source=web", "gen-*", "data", "*.parquet"))
	if len(files) != 2 {
		t.Fatalf("data files %v, want 2", files)
	}
	victim := files[0]
	for _, f := range files[1:] {
		if st1, st2 := mustStat(t, f), mustStat(t, victim); st1.ModTime().Before(st2.ModTime()) {
			victim = f
		}
	}
	b, _ := os.ReadFile(victim)
	for i := 4; i < len(b)-8; i += 2 {
		b[i] ^= 0x5a
	}
	if err := os.WriteFile(victim, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runHyp(t, home, time.Minute, "query", "sql", "SELECT count(*) FROM logs"); r.code == 0 {
		t.Fatalf("a query over the damaged file succeeded: %s", r)
	}
	type repairOut struct {
		DryRun bool `json:"dry_run"`
		Files  []struct {
			File    string `json:"file"`
			KeptAt  string `json:"kept_at"`
			FromSeq int64  `json:"from_seq"`
			ToSeq   int64  `json:"to_seq"`
			Rows    int64  `json:"rows"`
		} `json:"files"`
	}
	var plan, done repairOut
	r := runHyp(t, home, time.Minute, "cache", "repair", "--dry-run", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &plan); r.code != 0 || err != nil || !plan.DryRun || len(plan.Files) != 1 || plan.Files[0].File != victim {
		t.Fatalf("repair --dry-run: %v %s", err, r)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("a dry run moved the file: %v", err)
	}
	r = runHyp(t, home, time.Minute, "cache", "repair", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &done); r.code != 0 || err != nil || len(done.Files) != 1 || done.Files[0].Rows != 100 {
		t.Fatalf("repair: %v %s", err, r)
	}
	if kept, err := os.ReadFile(done.Files[0].KeptAt); err != nil || len(kept) != len(b) {
		t.Errorf("damaged file not kept at %q: %v", done.Files[0].KeptAt, err)
	}
	got := queryJSON(t, home, "SELECT count(*) AS n FROM logs")
	if len(got) != 1 || got[0]["n"] != float64(70) {
		t.Errorf("after repair: %v, want the 70 rows of the intact files", got)
	}
	r = runHyp(t, home, time.Minute, "cache", "status", "--json")
	type seqRange struct {
		FromSeq int64 `json:"from_seq"`
		ToSeq   int64 `json:"to_seq"`
	}
	var st struct {
		Losses []seqRange `json:"losses"`
	}
	want := seqRange{done.Files[0].FromSeq, done.Files[0].ToSeq}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Losses) != 1 || st.Losses[0] != want {
		t.Errorf("cache status losses: %v %s", err, r)
	}
}

// newestMetadataFile is the highest vN.metadata.json of a partition's table.
func newestMetadataFile(t *testing.T, home, partition string) string {
	t.Helper()
	ms, _ := filepath.Glob(filepath.Join(home, "cache", "logs", partition, "gen-*", "metadata", "v*.metadata.json"))
	newest, best := "", -1
	for _, m := range ms {
		if v, err := strconv.Atoi(regexp.MustCompile(`^v([0-9]+)\.`).FindStringSubmatch(filepath.Base(m))[1]); err == nil && v > best {
			newest, best = m, v
		}
	}
	if newest == "" {
		t.Fatalf("no metadata file for %s", partition)
	}
	return newest
}

type cacheStatusOut struct {
	Datasets []struct {
		Dataset    string `json:"dataset"`
		Partitions []struct {
			Partition string `json:"partition"`
			Rows      int64  `json:"rows"`
			Error     string `json:"error"`
		} `json:"partitions"`
	} `json:"datasets"`
	Losses []json.RawMessage `json:"losses"`
}

func cacheStatus(t *testing.T, home string) cacheStatusOut {
	t.Helper()
	r := runHyp(t, home, time.Minute, "cache", "status", "--json")
	var st cacheStatusOut
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 0 {
		t.Fatalf("cache status: %v %s", err, r)
	}
	return st
}

// TestLostNewestMetadataKeepsEveryRow is the measurement from outside: three
// flushes of one partition are committed (and their log released), the newest metadata
// file of its table is deleted, and after a restart every acknowledged row is there
// exactly once and nothing is recorded as lost.
func TestLostNewestMetadataKeepsEveryRow(t *testing.T) {
	t.Parallel()
	home, addr := newHome(t)
	d := startHypDaemon(t, home, addr)
	for i := range 3 {
		mustPost(t, addr, "/v1/ingest/logs?source=web", rows(i*100, 100, "web"), http.StatusOK)
		cacheStatus(t, home) // flushes
	}
	mustPost(t, addr, "/v1/ingest/logs?source=db", rows(1000, 20, "db"), http.StatusOK)
	d.stop(t)
	if err := os.Remove(newestMetadataFile(t, home, "source=web")); err != nil {
		t.Fatal(err)
	}

	d = startHypDaemon(t, home, addr)
	defer d.stop(t)
	ids := map[int]int{}
	for _, r := range opRows(t, home, "logs") {
		ids[r.id]++
	}
	for _, id := range append(seqIDs(0, 300), seqIDs(1000, 20)...) {
		if ids[id] != 1 {
			t.Errorf("id %d stored %d times", id, ids[id])
		}
	}
	if len(ids) != 320 {
		t.Errorf("%d ids, want 320", len(ids))
	}
	if st := cacheStatus(t, home); len(st.Losses) != 0 {
		t.Errorf("losses %s", st.Losses)
	}
}

func seqIDs(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

// TestUnreadableTableFailsOnlyItsPartition: with the daemon running, one partition's table
// on disk becomes unreadable (its newest metadata file garbled). `cache status` and
// `status` still report every other partition and show that one with an error naming the
// file; a query, which the daemon answers from the files it holds in memory (the running
// cache lists what a query pins), still sees every row; and a restart, which keeps the
// garbled file aside, loses no row.
func TestUnreadableTableFailsOnlyItsPartition(t *testing.T) {
	t.Parallel()
	home, addr := newHome(t)
	d := startHypDaemon(t, home, addr)
	mustPost(t, addr, "/v1/ingest/logs?source=web", rows(0, 100, "web"), http.StatusOK)
	mustPost(t, addr, "/v1/ingest/logs?source=db", rows(1000, 20, "db"), http.StatusOK)
	cacheStatus(t, home)
	mustPost(t, addr, "/v1/ingest/logs?source=web", rows(100, 50, "web"), http.StatusOK)
	cacheStatus(t, home)
	bad := newestMetadataFile(t, home, "source=web")
	if err := os.WriteFile(bad, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}

	st := cacheStatus(t, home)
	got := map[string]string{}
	for _, ds := range st.Datasets {
		for _, p := range ds.Partitions {
			got[p.Partition] = p.Error
			if p.Partition == "source=db" && (p.Rows != 20 || p.Error != "") {
				t.Errorf("db partition %+v", p)
			}
		}
	}
	if !strings.Contains(got["source=web"], bad) {
		t.Errorf("web partition error %q, want one naming %s", got["source=web"], bad)
	}
	if _, ok := got["source=db"]; !ok {
		t.Errorf("db partition missing: %+v", st)
	}
	if r := runHyp(t, home, time.Minute, "status", "--json"); r.code != 0 || !strings.Contains(r.stdout, "source=db") || !strings.Contains(r.stdout, filepath.Base(bad)) {
		t.Errorf("status: %s", r)
	}
	if r := runHyp(t, home, time.Minute, "cache", "status"); r.code != 0 || !strings.Contains(r.stdout, "UNREADABLE") || !strings.Contains(r.stdout, bad) {
		t.Errorf("cache status: %s", r)
	}
	if n := queryJSON(t, home, "SELECT count(*) AS n FROM logs"); len(n) != 1 || n[0]["n"] != float64(170) {
		t.Errorf("query over the partition whose table file is unreadable on disk: %v, want all 170 rows", n)
	}
	n := queryJSON(t, home, "SELECT count(*) AS n FROM logs WHERE _hyp_partition = 'source=db'", "--internal")
	if len(n) != 1 || n[0]["n"] != float64(20) {
		t.Errorf("db partition query: %v", n)
	}

	d.stop(t)
	d = startHypDaemon(t, home, addr)
	defer d.stop(t)
	n = queryJSON(t, home, "SELECT count(*) AS n FROM logs")
	if len(n) != 1 || n[0]["n"] != float64(170) {
		t.Errorf("after restart: %v, want all 170 rows", n)
	}
	if st := cacheStatus(t, home); len(st.Losses) != 0 {
		t.Errorf("losses %s", st.Losses)
	}
}

func mustStat(t *testing.T, p string) os.FileInfo {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestFlippedWatermarkByteStopsOnlyItsPartition flips a byte in the middle of one
// partition's watermark file while the daemon is down. After the restart that partition
// exports nothing (never everything again from the start) and says why in `sink status`,
// the other partition goes on; putting the file back resumes it with every row exported
// exactly once.
func TestFlippedWatermarkByteStopsOnlyItsPartition(t *testing.T) {
	t.Parallel()
	home, addr, root := t.TempDir(), freePort(t), t.TempDir()
	cfg := fmt.Sprintf("ingest:\n  listen: %s\ncache:\n  flush_interval: 200ms\nsinks:\n  files:\n    type: blob\n    format: jsonl\n    destination: {type: local-fs, path: %s}\n    schedule: \"@every 200ms\"\n", addr, root)
	if err := os.WriteFile(filepath.Join(home, "hyp.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startHypDaemon(t, home, addr)
	mustPost(t, addr, "/v1/ingest/logs?source=web", rows(0, 100, "web"), http.StatusOK)
	mustPost(t, addr, "/v1/ingest/logs?source=api", rows(1000, 100, "api"), http.StatusOK)
	opAllCaughtUp(t, home, "files", 30*time.Second)
	d.stop(t)

	wm := opWatermarkPath(home, "files", "logs", "web")
	good, err := os.ReadFile(wm)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("watermark file:\n%s", good)
	// The byte flipped is the first '"' after the middle: the file no longer parses. (A flip
	// inside a value can still parse, and then it is an edit, honoured as operators' edits
	// are.)
	bad := bytes.Clone(good)
	i := len(bad)/2 + bytes.IndexByte(bad[len(bad)/2:], '"')
	bad[i] ^= 0x5a
	if err := os.WriteFile(wm, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	d = startHypDaemon(t, home, addr)
	defer d.stop(t)
	mustPost(t, addr, "/v1/ingest/logs?source=web", rows(100, 50, "web"), http.StatusOK)
	mustPost(t, addr, "/v1/ingest/logs?source=api", rows(1100, 50, "api"), http.StatusOK)
	opWait(t, home, "files", 30*time.Second, "api exported and web stopped with an error naming its watermark", func(st opSinkStatus) bool {
		api, _ := st.part("files", "logs", "source=api")
		web, _ := st.part("files", "logs", "source=web")
		return api.caughtUp() && api.ExportedRows == 150 && strings.Contains(web.LastError, "source=web.json")
	})
	if r := runHyp(t, home, time.Minute, "status", "--json"); r.code != 0 {
		t.Errorf("hyp status with a damaged watermark: %s", r)
	}
	if got := len(exportedIDs(t, root, "web")); got != 100 {
		t.Errorf("with its watermark damaged, web has %d rows exported, want the 100 from before", got)
	}

	if err := os.WriteFile(wm, good, 0o600); err != nil {
		t.Fatal(err)
	}
	opAllCaughtUp(t, home, "files", 30*time.Second)
	for src, want := range map[string]int{"web": 150, "api": 150} {
		if ids := exportedIDs(t, root, src); len(ids) != want {
			t.Errorf("%s: %d distinct rows exported, want %d", src, len(ids), want)
		}
	}
}

// exportedIDs reads the ids of every row of source src in a local jsonl.gz export of logs,
// failing on any id exported twice.
func exportedIDs(t *testing.T, root, src string) map[int]bool {
	t.Helper()
	ids := map[int]bool{}
	eachExportedRow(t, filepath.Join(root, "logs", "_hyp_source="+src), func(id int, _ map[string]any) {
		if ids[id] {
			t.Fatalf("%s: id %d exported twice", src, id)
		}
		ids[id] = true
	})
	return ids
}
