package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	_ "github.com/duckdb/duckdb-go/v2"
	_ "modernc.org/sqlite"
)

func icebergSinkYAML(name, catalogDB, warehouse string) string {
	return fmt.Sprintf("  %s:\n    type: iceberg\n    catalog: {type: sql, uri: %q}\n    warehouse: %q\n    namespace: hyp\n    schedule: \"@every 1h\"\n",
		name, "sqlite://"+catalogDB, warehouse)
}

// lakeView is what a reader that shares no code with hyp's writer finds in the table: the
// catalog row read with plain SQL, the metadata file with encoding/json, the manifests with
// iceberg-go's Avro reader and the rows with DuckDB.
type lakeView struct {
	ids        []int
	gateways   map[string]bool
	files      map[string]int // data file -> times the current snapshot references it
	snapshots  int
	hypCommits int // snapshots carrying hyp.commit-id
}

func readLakeTable(t *testing.T, catalogDB, dataset string) lakeView {
	t.Helper()
	cat, err := sql.Open("sqlite", "file:"+catalogDB+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	var loc string
	if err := cat.QueryRow(`SELECT metadata_location FROM iceberg_tables WHERE table_namespace = 'hyp' AND table_name = ?`, dataset).Scan(&loc); err != nil {
		t.Fatalf("catalog row of hyp.%s: %v", dataset, err)
	}
	var md struct {
		Current   *int64 `json:"current-snapshot-id"`
		Snapshots []struct {
			ID           int64             `json:"snapshot-id"`
			ManifestList string            `json:"manifest-list"`
			Summary      map[string]string `json:"summary"`
		} `json:"snapshots"`
	}
	if err := json.Unmarshal(readURI(t, loc), &md); err != nil {
		t.Fatalf("metadata %s: %v", loc, err)
	}
	v := lakeView{gateways: map[string]bool{}, files: map[string]int{}, snapshots: len(md.Snapshots)}
	var list string
	for _, s := range md.Snapshots {
		if s.Summary["hyp.commit-id"] != "" && s.Summary["hyp.gateway"] != "" && s.Summary["hyp.units"] != "" {
			v.hypCommits++
		}
		if md.Current != nil && s.ID == *md.Current {
			list = s.ManifestList
		}
	}
	if list == "" {
		return v
	}
	manifests, err := iceberg.ReadManifestList(strings.NewReader(string(readURI(t, list))))
	if err != nil {
		t.Fatalf("manifest list %s: %v", list, err)
	}
	var paths []string
	for _, m := range manifests {
		entries, err := iceberg.ReadManifest(m, strings.NewReader(string(readURI(t, m.FilePath()))), true)
		if err != nil {
			t.Fatalf("manifest %s: %v", m.FilePath(), err)
		}
		for _, e := range entries {
			p := e.DataFile().FilePath()
			if v.files[p]++; v.files[p] == 1 {
				paths = append(paths, "'"+strings.ReplaceAll(localPath(t, p), "'", "''")+"'")
			}
		}
	}
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rs, err := db.Query(fmt.Sprintf(`SELECT id, _hyp_gateway FROM read_parquet([%s])`, strings.Join(paths, ",")))
	if err != nil {
		t.Fatalf("duckdb read_parquet: %v", err)
	}
	defer rs.Close()
	for rs.Next() {
		var id int
		var gw string
		if err := rs.Scan(&id, &gw); err != nil {
			t.Fatal(err)
		}
		v.ids = append(v.ids, id)
		v.gateways[gw] = true
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return v
}

func localPath(t *testing.T, uri string) string {
	t.Helper()
	u, err := url.Parse(uri)
	if err != nil || (u.Scheme != "file" && u.Scheme != "") {
		t.Fatalf("table file %q is not local", uri)
	}
	return u.Path
}

func readURI(t *testing.T, uri string) []byte {
	t.Helper()
	b, err := os.ReadFile(localPath(t, uri))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func checkLakeView(t *testing.T, where string, v lakeView, want map[string]map[int]bool) {
	t.Helper()
	ok := checkExactlyOnce(t, where, map[string][]int{"logs": v.ids}, want)
	for f, n := range v.files {
		if n != 1 {
			ok = false
			t.Errorf("%s: data file %s referenced %d times", where, f, n)
		}
	}
	if v.hypCommits != v.snapshots {
		ok = false
		t.Errorf("%s: %d of %d snapshots carry hyp's markers", where, v.hypCommits, v.snapshots)
	}
	if len(v.gateways) != 1 {
		ok = false
		t.Errorf("%s: _hyp_gateway values %v, want this machine's only", where, v.gateways)
	}
	if !ok {
		t.FailNow()
	}
}

// TestIcebergSinkExactlyOnceAcrossKillNine drives the CLI: a daemon ingests, the iceberg
// sink exports, the daemon is killed -9 at every step of a table commit, restarted with new
// rows waiting, and the table read back by an independent reader holds every acknowledged
// row once.
func TestIcebergSinkExactlyOnceAcrossKillNine(t *testing.T) {
	t.Parallel()
	home, addr := t.TempDir(), freePort(t)
	lakeDir := t.TempDir()
	catalogDB, warehouse := filepath.Join(lakeDir, "catalog.db"), filepath.Join(lakeDir, "warehouse")
	writeDaemonYAML(t, home, addr, "", icebergSinkYAML("lake", catalogDB, warehouse))
	f := newFeeder(0)
	feed := func(n int) {
		for _, s := range []string{"web", "db"} {
			f.ingest(t, addr, "logs", s, n)
		}
	}

	d := startHypDaemon(t, home, addr)
	feed(100)
	requireRun(t, home, "lake", f.take())
	v := readLakeTable(t, catalogDB, "logs")
	checkLakeView(t, "first run", v, f.want)
	if v.snapshots != 1 {
		t.Fatalf("one run made %d snapshots, want 1 for both partitions", v.snapshots)
	}
	requireNoopRun(t, home, "lake")
	if v := readLakeTable(t, catalogDB, "logs"); v.snapshots != 1 {
		t.Fatalf("a run with no new rows committed (%d snapshots)", v.snapshots)
	}
	st := runHyp(t, home, time.Minute, "sink", "status", "lake", "--json")
	if st.code != 0 || !strings.Contains(st.stdout, `"last_commit_id"`) {
		t.Fatalf("sink status shows no table commit: %s", st)
	}
	d.stop(t)

	for _, where := range []string{"after-intent:1", "after-intent:2", "after-ship:1", "after-ship:2", "after-watermark:1"} {
		d := startHypDaemon(t, home, addr, "HYP_FAILPOINT="+where)
		feed(70)
		runIntoFailpoint(t, home, "lake", where, d)
		d = startHypDaemon(t, home, addr)
		feed(40) // new rows arrive before the retry
		f.take()
		requireRun(t, home, "lake", -1)
		checkLakeView(t, where, readLakeTable(t, catalogDB, "logs"), f.want)
		before := readLakeTable(t, catalogDB, "logs").snapshots
		requireNoopRun(t, home, "lake")
		if after := readLakeTable(t, catalogDB, "logs").snapshots; after != before {
			t.Fatalf("%s: a run with no new rows committed (%d -> %d snapshots)", where, before, after)
		}
		d.stop(t)
	}

	// The same read-only SQL runs over the sink's table: every row there once, the gateway
	// and source columns filled.
	res := queryJSON(t, home, "SELECT count(*) AS n, count(DISTINCT id) AS d, count(DISTINCT _hyp_source) AS s, min(_hyp_partition) AS p FROM logs WHERE _hyp_gateway IS NOT NULL", "--sink", "lake", "--internal")
	if want := len(f.want["logs"]); len(res) != 1 || fmt.Sprint(res[0]["n"]) != fmt.Sprint(want) || fmt.Sprint(res[0]["d"]) != fmt.Sprint(want) ||
		fmt.Sprint(res[0]["s"]) != "2" || res[0]["p"] != "hyp.logs" {
		t.Fatalf("query --sink lake: %v, want %d distinct rows from 2 sources", res, want)
	}
	if r := runHyp(t, home, time.Minute, "query", "sql", "SELECT 1", "--sink", "nosuch"); r.code != 2 {
		t.Errorf("query --sink nosuch: %s, want exit 2", r)
	}
}

func TestIcebergSinkConfigErrors(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "hyp.yaml"), []byte("sinks:\n  lake:\n    type: iceberg\n    catalog: {type: hadoop}\n    warehouse: s3://bucket/lake\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runHyp(t, home, time.Minute, "sink", "status")
	if r.code != 2 || !strings.Contains(r.stdout+r.stderr, "hadoop catalog cannot be used with an s3:// warehouse") {
		t.Fatalf("config validate of a hadoop catalog on s3: %s", r)
	}
}
