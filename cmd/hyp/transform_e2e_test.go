package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// These tests hold sinks' transforms (SPEC 3, issue 29) to their promises through the built
// binary: a shaped export is exactly once through kill -9, a transform that is not row-wise
// is refused before anything runs, a sink added later shapes the whole cached history its
// own way, and `hyp sink preview` shows the shape without moving anything.

// specTransform is SPEC 3's example: drop a column, mask tokens, drop debug rows.
const specTransform = `SELECT * EXCLUDE (secret) REPLACE (regexp_replace(msg, 'tok-[0-9]+', 'tok-***') AS msg) FROM rows WHERE level <> 'debug'`

// shapedRows are n rows from id from: every third one a debug row, each with a secret and
// a token in its message.
func shapedRows(from, n int, source string) []byte {
	var b bytes.Buffer
	levels := []string{"info", "debug", "warn"}
	for i := from; i < from+n; i++ {
		fmt.Fprintf(&b, `{"id":%d,"source":%q,"level":%q,"msg":"login tok-%d ok","secret":"pw-%d"}`+"\n", i, source, levels[i%3], 1000+i, i)
	}
	return b.Bytes()
}

func transformSinkYAML(name, format, root, schedule, tf string) string {
	return opSchedule(localSinkYAML(name, format, root), schedule, "transform: "+strconv.Quote(tf))
}

// parquetRows reads every Parquet file under root with arrow-go's reader (not hyp's writer)
// and returns each file's column names and its rows as JSON-ready values.
func parquetRows(t *testing.T, root string) (cols map[string][]string, rows []map[string]any) {
	t.Helper()
	cols = map[string][]string{}
	for _, f := range localFiles(t, root) {
		pr, err := file.NewParquetReader(bytes.NewReader(f.data))
		if err != nil {
			t.Fatalf("%s: %v", f.rel, err)
		}
		fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
		if err != nil {
			t.Fatalf("%s: %v", f.rel, err)
		}
		tbl, err := fr.ReadTable(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", f.rel, err)
		}
		sc := tbl.Schema()
		base := len(rows)
		for i := 0; i < int(tbl.NumRows()); i++ {
			rows = append(rows, map[string]any{"_file": f.rel})
		}
		for c, fld := range sc.Fields() {
			cols[f.rel] = append(cols[f.rel], fld.Name)
			i := base
			for _, chunk := range tbl.Column(c).Data().Chunks() {
				for j := 0; j < chunk.Len(); j++ {
					if !chunk.IsNull(j) {
						rows[i][fld.Name] = chunk.GetOneForMarshal(j)
					}
					i++
				}
			}
		}
		tbl.Release()
		pr.Close()
	}
	return cols, rows
}

// checkShaped checks rows exported through specTransform: no secret column anywhere, no
// debug row, every token masked; it returns how many times each id was exported.
func checkShaped(t *testing.T, where string, cols map[string][]string, rows []map[string]any) map[int]int {
	t.Helper()
	for f, cs := range cols {
		if slices.Contains(cs, "secret") {
			t.Errorf("%s: %s has a secret column: %v", where, f, cs)
		}
		if !slices.Contains(cs, "_hyp_ingest_seq") || !slices.Contains(cs, "_hyp_ingested_at") {
			t.Errorf("%s: %s lacks the internal columns: %v", where, f, cs)
		}
	}
	token := regexp.MustCompile(`tok-[0-9]`)
	seen := map[int]int{}
	bad := 0
	// A shaped file is named after the seqs of the rows it holds.
	span := map[string][2]int64{}
	for _, r := range rows {
		f, seq := r["_file"].(string), int64(toFloat(r["_hyp_ingest_seq"]))
		sp, ok := span[f]
		if !ok {
			sp = [2]int64{seq, seq}
		}
		span[f] = [2]int64{min(sp[0], seq), max(sp[1], seq)}
	}
	for f, sp := range span {
		m := partName.FindStringSubmatch(filepath.Base(f))
		if m == nil || m[1] != fmt.Sprintf("%020d", sp[0]) || m[2] != fmt.Sprintf("%020d", sp[1]) {
			t.Errorf("%s: %s holds seqs %d..%d, its name says otherwise", where, f, sp[0], sp[1])
		}
	}
	for _, r := range rows {
		id := int(toFloat(r["id"]))
		seen[id]++
		msg, _ := r["msg"].(string)
		if r["level"] == "debug" || token.MatchString(msg) || !strings.Contains(msg, "tok-***") {
			if bad++; bad <= 5 {
				t.Errorf("%s: row not shaped: %v", where, r)
			}
		}
	}
	return seen
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case int64:
		return float64(x)
	case json.Number:
		f, _ := x.Float64()
		return f
	}
	return -1
}

// TestTransformExactlyOnceThroughKills: a blob sink with SPEC 3's transform exports every
// acknowledged non-debug row exactly once, shaped, while the daemon is killed with SIGKILL
// at random instants during ingest, flushes and ticks (HYP_KILL_LOOPS kills, 6 here).
func TestTransformExactlyOnceThroughKills(t *testing.T) {
	t.Parallel()
	loops := 6
	if v, err := strconv.Atoi(os.Getenv("HYP_KILL_LOOPS")); err == nil && v > 0 {
		loops = v
	}
	rng := seededRand(t)
	home, addr := t.TempDir(), freePort(t)
	root := filepath.Join(t.TempDir(), "exports")
	cfg := "ingest:\n  listen: " + addr + "\ncache:\n  flush_interval: 200ms\nsinks:\n" +
		transformSinkYAML("shaped", "parquet", root, "@every 300ms", specTransform)
	if err := os.WriteFile(filepath.Join(home, "hyp.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	book := newAckBook()
	for range loops {
		d := startHypDaemon(t, home, addr)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		book.clients(&wg, stop, addr, 30, shapedRows)
		time.Sleep(time.Duration(200+rng.IntN(1000)) * time.Millisecond)
		d.kill9()
		close(stop)
		wg.Wait()
	}
	d := startHypDaemon(t, home, addr)
	defer d.stop(t)
	requireRun(t, home, "", -1)
	requireRun(t, home, "", -1)

	cols, rows := parquetRows(t, root)
	seen := checkShaped(t, "shaped", cols, rows)
	bad := 0
	for id, n := range seen {
		if n > 1 || (!book.acked[id] && !book.maybe[id]) || id%3 == 1 {
			if bad++; bad <= 5 {
				t.Errorf("id %d exported %d times (acknowledged %v, unanswered %v, debug %v)", id, n, book.acked[id], book.maybe[id], id%3 == 1)
			}
		}
	}
	for id := range book.acked {
		if id%3 != 1 && seen[id] == 0 {
			if bad++; bad <= 5 {
				t.Errorf("acknowledged non-debug id %d is missing", id)
			}
		}
	}
	// Every acknowledged row counts as exported, the debug ones as filtered too.
	st := sinkStatusOf(t, home)
	var exported, filtered int64
	for _, p := range st {
		exported += p.ExportedRows
		filtered += p.FilteredRows
	}
	if exported < int64(len(book.acked)) || filtered == 0 {
		t.Errorf("status: exported %d filtered %d, want exported >= %d acknowledged and some filtered", exported, filtered, len(book.acked))
	}
	t.Logf("%d kills, %d rows acknowledged, %d unanswered, %d exported, %d filtered", loops, len(book.acked), len(book.maybe), exported, filtered)
}

type shapedPartition struct {
	Dataset      string `json:"dataset"`
	Partition    string `json:"partition"`
	ExportedRows int64  `json:"exported_rows"`
	FilteredRows int64  `json:"filtered_rows"`
	LagRows      int64  `json:"lag_rows"`
}

func sinkStatusOf(t *testing.T, home string) []shapedPartition {
	t.Helper()
	r := runHyp(t, home, time.Minute, "sink", "status", "--json")
	if r.code != 0 {
		t.Fatalf("sink status: %s", r)
	}
	var st struct {
		Sinks []struct {
			Partitions []shapedPartition `json:"partitions"`
		} `json:"sinks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("sink status: %v\n%s", err, r)
	}
	var out []shapedPartition
	for _, s := range st.Sinks {
		out = append(out, s.Partitions...)
	}
	return out
}

// TestTransformRefusedAtLoad: a transform that is not row-wise is refused by `hyp config
// validate` (exit 2, naming the key and the reason) and the daemon does not start with it.
func TestTransformRefusedAtLoad(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "exports")
	for _, tc := range []struct{ name, sql, reason string }{
		{"group by", "SELECT level, count(*) AS n FROM rows GROUP BY level", "GROUP BY"},
		{"join", "SELECT a.* FROM rows a JOIN rows b ON a.id = b.id", "join"},
		{"order by", "SELECT * FROM rows ORDER BY id", "ORDER BY"},
		{"two statements", "SELECT * FROM rows; SELECT * FROM rows", "statement"},
		{"file function", "SELECT * FROM read_csv('/etc/passwd')", "rows"},
		{"no seq", "SELECT msg FROM rows", "_hyp_ingest_seq"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home, addr := t.TempDir(), freePort(t)
			writeDaemonYAML(t, home, addr, "", transformSinkYAML("shaped", "parquet", root, "@every 1h", tc.sql))
			r := runHyp(t, home, time.Minute, "config", "validate")
			if r.code != 2 || !strings.Contains(r.stderr+r.stdout, "sinks.shaped.transform") || !strings.Contains(strings.ToLower(r.stderr+r.stdout), strings.ToLower(tc.reason)) {
				t.Errorf("config validate: %s; want exit 2 naming sinks.shaped.transform and %q", r, tc.reason)
			}
			r = runHyp(t, home, time.Minute, "daemon")
			if r.code == 0 || !strings.Contains(r.stderr, "transform") {
				t.Errorf("daemon started with a refused transform: %s", r)
			}
		})
	}
	home, addr := t.TempDir(), freePort(t)
	writeDaemonYAML(t, home, addr, "", transformSinkYAML("shaped", "parquet", root, "@every 1h", specTransform))
	if r := runHyp(t, home, time.Minute, "config", "validate"); r.code != 0 {
		t.Errorf("config validate of SPEC's example: %s", r)
	}
}

// TestTransformNewSinkShapesHistory: rows ingested and exported by one shaped sink; a second
// sink added later with another transform exports every cached row in its own shape exactly
// once, and the first sink's files are untouched. `hyp sink preview` shows each shape and
// moves nothing.
func TestTransformNewSinkShapesHistory(t *testing.T) {
	t.Parallel()
	home, addr := t.TempDir(), freePort(t)
	rootA := filepath.Join(t.TempDir(), "a")
	rootB := filepath.Join(t.TempDir(), "b")
	sinkA := transformSinkYAML("a", "parquet", rootA, "@every 1h", specTransform)
	writeDaemonYAML(t, home, addr, "", sinkA)
	d := startHypDaemon(t, home, addr)
	for i, src := range []string{"web", "db", "web"} {
		if code, m, err := post(addr, "/v1/ingest/logs", shapedRows(i*100, 100, src)); err != nil || code != 200 {
			t.Fatalf("ingest: %d %v %v", code, m, err)
		}
	}
	requireRun(t, home, "a", 300)
	colsA, rowsA := parquetRows(t, rootA)
	seenA := checkShaped(t, "a", colsA, rowsA)
	if len(seenA) != 200 {
		t.Errorf("sink a exported %d distinct ids, want the 200 non-debug ones", len(seenA))
	}
	// A dry run of a rewind says how many of the rows it would export again the transform keeps.
	r := runHyp(t, home, time.Minute, "sink", "rewind", "a", "--to-earliest", "--dry-run", "--json")
	var rw struct {
		Changes []struct {
			RowsToExport int64  `json:"rows_to_export"`
			RowsKept     *int64 `json:"rows_kept"`
		} `json:"changes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rw); r.code != 0 || err != nil {
		t.Fatalf("rewind dry run: %v %s", err, r)
	}
	var toExport, kept int64
	for _, c := range rw.Changes {
		toExport += c.RowsToExport
		if c.RowsKept != nil {
			kept += *c.RowsKept
		}
	}
	if toExport != 300 || kept != 200 {
		t.Errorf("rewind dry run: %d rows to export, %d kept; want 300 and 200\n%s", toExport, kept, r.stdout)
	}
	before := localSnapshot(t, rootA)
	d.stop(t)

	const tfB = `SELECT _hyp_ingest_seq, _hyp_ingested_at, id, upper(level) AS severity FROM rows WHERE id % 2 = 0`
	writeDaemonYAML(t, home, addr, "", sinkA, transformSinkYAML("b", "parquet", rootB, "@every 1h", tfB))
	d = startHypDaemon(t, home, addr)
	defer d.stop(t)

	r = runHyp(t, home, time.Minute, "sink", "preview", "b", "--limit", "4", "--json")
	if r.code != 0 {
		t.Fatalf("preview: %s", r)
	}
	var pv struct {
		Transform  string `json:"transform"`
		Partitions []struct {
			Dataset   string            `json:"dataset"`
			Partition string            `json:"partition"`
			RowsRead  int64             `json:"rows_read"`
			RowsKept  int64             `json:"rows_kept"`
			Columns   []string          `json:"columns"`
			Rows      []json.RawMessage `json:"rows"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &pv); err != nil {
		t.Fatalf("preview output: %v\n%s", err, r)
	}
	if pv.Transform != tfB || len(pv.Partitions) != 2 {
		t.Fatalf("preview: %s", r.stdout)
	}
	for _, p := range pv.Partitions {
		if p.RowsRead != 4 || p.RowsKept != 2 || len(p.Rows) != 2 || !slices.Equal(p.Columns, []string{"_hyp_ingest_seq", "_hyp_ingested_at", "id", "severity"}) {
			t.Errorf("preview of %s: read %d kept %d columns %v rows %s", p.Partition, p.RowsRead, p.RowsKept, p.Columns, p.Rows)
		}
		for _, row := range p.Rows {
			var m map[string]any
			if err := json.Unmarshal(row, &m); err != nil || int(m["id"].(float64))%2 != 0 || m["severity"] == nil {
				t.Errorf("preview row %s: %v", row, err)
			}
		}
	}
	requireRun(t, home, "b", 300)
	requireRun(t, home, "b", 0)
	colsB, rowsB := parquetRows(t, rootB)
	seenB := map[int]int{}
	for f, cs := range colsB {
		if !slices.Equal(cs, []string{"_hyp_ingest_seq", "_hyp_ingested_at", "id", "severity"}) {
			t.Errorf("sink b: %s has columns %v", f, cs)
		}
	}
	for _, row := range rowsB {
		id := int(toFloat(row["id"]))
		seenB[id]++
		if id%2 != 0 || row["severity"] != strings.ToUpper([]string{"info", "debug", "warn"}[id%3]) {
			t.Errorf("sink b: row not shaped: %v", row)
		}
	}
	for id := 0; id < 300; id++ {
		if want := 1 - id%2; seenB[id] != want {
			t.Errorf("sink b: id %d exported %d times, want %d", id, seenB[id], want)
		}
	}
	if after := localSnapshot(t, rootA); !maps.Equal(before, after) {
		t.Errorf("sink a's files changed when sink b was added:\nbefore %v\nafter  %v", before, after)
	}
}

// TestTransformForwardAndIceberg: a forward sink and an iceberg sink with transforms. The
// server stores only the kept rows, in the shape sent, and counts none as duplicates when
// the sink runs again; the iceberg table takes the transform's columns (a computed long
// among them) and only the kept rows.
func TestTransformForwardAndIceberg(t *testing.T) {
	t.Parallel()
	srvHome, srvAddr, tokens := newServerHome(t)
	srv := startHypServer(t, srvHome, srvAddr, tokens)
	defer srv.stop(t)
	home, addr := t.TempDir(), freePort(t)
	warehouse := filepath.Join(t.TempDir(), "warehouse")
	uri := "sqlite:///" + filepath.Join(t.TempDir(), "catalog.db")
	fwd := opSchedule(forwardSinkYAML("central", "http://"+srvAddr, tokens), "@every 1h", "transform: "+strconv.Quote(specTransform))
	ice := opSchedule(icebergSinkYAML("lake", uri, warehouse), "@every 1h",
		"transform: "+strconv.Quote(`SELECT _hyp_ingest_seq, _hyp_ingested_at, id, id * 10 AS id10, msg FROM rows WHERE level = 'warn'`))
	writeDaemonYAML(t, home, addr, "", fwd, ice)
	d := startHypDaemon(t, home, addr)
	defer d.stop(t)
	if code, m, err := post(addr, "/v1/ingest/logs", shapedRows(0, 90, "web")); err != nil || code != 200 {
		t.Fatalf("ingest: %d %v %v", code, m, err)
	}
	requireRun(t, home, "", 180) // every row counts as exported by each sink
	requireRun(t, home, "", 0)

	got := queryJSON(t, srvHome, "SELECT id, msg, level FROM logs ORDER BY id")
	if len(got) != 60 {
		t.Fatalf("server holds %d rows, want the 60 non-debug ones: %v", len(got), got)
	}
	for _, r := range got {
		id := int(r["id"].(float64))
		if id%3 == 1 || r["msg"] != "login tok-*** ok" {
			t.Errorf("server row not shaped: %v", r)
		}
	}
	if res := queryJSON(t, srvHome, "SELECT count(*) AS n FROM information_schema.columns WHERE table_name = 'logs' AND column_name = 'secret'"); res[0]["n"] != float64(0) {
		t.Errorf("the server has a secret column: %v", res)
	}

	lake := queryJSON(t, home, "SELECT id, id10, msg FROM logs ORDER BY id", "--sink", "lake")
	if len(lake) != 30 {
		t.Fatalf("iceberg table holds %d rows, want the 30 warn ones: %v", len(lake), lake)
	}
	for _, r := range lake {
		id := int(r["id"].(float64))
		if id%3 != 2 || r["id10"] != float64(id*10) {
			t.Errorf("iceberg row not shaped: %v", r)
		}
	}
}
