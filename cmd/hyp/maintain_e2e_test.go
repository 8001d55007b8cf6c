package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type maintainJSON struct {
	Sinks []struct {
		Instance string `json:"instance"`
		Tables   []struct {
			Table            string `json:"table"`
			SnapshotsExpired int    `json:"snapshots_expired"`
			FilesBefore      int    `json:"files_before"`
			FilesAfter       int    `json:"files_after"`
			OrphansRemoved   int    `json:"orphans_removed"`
		} `json:"tables"`
		Error string `json:"error"`
	} `json:"sinks"`
}

// TestSinkMaintainWhileDaemonRuns: several ticks leave many small files and snapshots;
// `hyp sink maintain --compact` through the running daemon leaves fewer of both and the
// same rows, and later exports still put every row in the table once.
func TestSinkMaintainWhileDaemonRuns(t *testing.T) {
	t.Parallel()
	home, addr := t.TempDir(), freePort(t)
	lakeDir := t.TempDir()
	catalogDB, warehouse := filepath.Join(lakeDir, "catalog.db"), filepath.Join(lakeDir, "warehouse")
	lakeYAML := icebergSinkYAML("lake", "sqlite://"+catalogDB, warehouse) + "    maintain: {expire_older_than: 1s, retain_last: 2}\n"
	blobYAML := fmt.Sprintf("  files:\n    type: blob\n    format: jsonl\n    destination: {type: local-fs, path: %q}\n    schedule: \"@every 1h\"\n", filepath.Join(home, "exports"))
	writeDaemonYAML(t, home, addr, "", lakeYAML, blobYAML)
	f := newFeeder(0)
	d := startHypDaemon(t, home, addr)
	defer d.stop(t)
	for range 5 {
		for _, s := range []string{"web", "db"} {
			f.ingest(t, addr, "logs", s, 30)
		}
		requireRun(t, home, "lake", f.take())
	}
	before := readLakeTable(t, sqliteLake(catalogDB), "logs")
	checkExactlyOnce(t, "before maintain", map[string][]int{"logs": before.ids}, f.want)
	const rowsSQL = "SELECT count(*) AS n, count(DISTINCT _hyp_source || '/' || CAST(_hyp_ingest_seq AS VARCHAR)) AS d FROM logs"
	rowsBefore := queryJSON(t, home, rowsSQL, "--sink", "lake", "--internal")
	time.Sleep(1100 * time.Millisecond) // every snapshot older than expire_older_than

	dry := runHyp(t, home, time.Minute, "sink", "maintain", "lake", "--compact", "--dry-run", "--json")
	if dry.code != 0 {
		t.Fatalf("maintain --dry-run: %s", dry)
	}
	if v := readLakeTable(t, sqliteLake(catalogDB), "logs"); len(v.Snapshots) != len(before.Snapshots) || len(v.Files) != len(before.Files) {
		t.Fatalf("a dry run changed the table: %d -> %d snapshots, %d -> %d files", len(before.Snapshots), len(v.Snapshots), len(before.Files), len(v.Files))
	}
	r := runHyp(t, home, time.Minute, "sink", "maintain", "lake", "--compact", "--json")
	if r.code != 0 {
		t.Fatalf("maintain: %s", r)
	}
	var rep, dryRep maintainJSON
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("maintain --json: %v\n%s", err, r)
	}
	if err := json.Unmarshal([]byte(dry.stdout), &dryRep); err != nil {
		t.Fatalf("maintain --dry-run --json: %v\n%s", err, dry)
	}
	if len(rep.Sinks) != 1 || rep.Sinks[0].Instance != "lake" || len(rep.Sinks[0].Tables) != 1 {
		t.Fatalf("maintain report %s", r.stdout)
	}
	tr := rep.Sinks[0].Tables[0]
	if tr.Table != "hyp.logs" || tr.FilesBefore != len(before.Files) || tr.FilesAfter >= tr.FilesBefore || tr.SnapshotsExpired != len(before.Snapshots)-2 {
		t.Errorf("maintain report %+v; table had %d files and %d snapshots", tr, len(before.Files), len(before.Snapshots))
	}
	if fmt.Sprint(dryRep.Sinks) != fmt.Sprint(rep.Sinks) {
		t.Errorf("the dry run reported %+v, the run %+v", dryRep.Sinks, rep.Sinks)
	}
	after := readLakeTable(t, sqliteLake(catalogDB), "logs")
	if len(after.Files) != tr.FilesAfter || len(after.Files) >= len(before.Files) || len(after.Snapshots) >= len(before.Snapshots) {
		t.Errorf("after maintain: %d files, %d snapshots; before %d, %d", len(after.Files), len(after.Snapshots), len(before.Files), len(before.Snapshots))
	}
	checkExactlyOnce(t, "after maintain", map[string][]int{"logs": after.ids}, f.want)
	if rowsAfter := queryJSON(t, home, rowsSQL, "--sink", "lake", "--internal"); fmt.Sprint(rowsAfter) != fmt.Sprint(rowsBefore) {
		t.Errorf("rows before maintain %v, after %v", rowsBefore, rowsAfter)
	}

	for range 2 {
		for _, s := range []string{"web", "db", "api"} {
			f.ingest(t, addr, "logs", s, 20)
		}
		requireRun(t, home, "lake", f.take())
	}
	final := readLakeTable(t, sqliteLake(catalogDB), "logs")
	checkExactlyOnce(t, "exports after maintain", map[string][]int{"logs": final.ids}, f.want)
	for _, p := range final.Duplicates {
		t.Errorf("data file %s referenced more than once", p)
	}

	for _, bad := range []string{"files", "nosuch"} {
		if r := runHyp(t, home, time.Minute, "sink", "maintain", bad); r.code != 2 || !strings.Contains(r.stderr, bad) {
			t.Errorf("maintain %s: %s, want exit 2 naming it", bad, r)
		}
	}
	// Every iceberg sink, for humans.
	if r := runHyp(t, home, time.Minute, "sink", "maintain"); r.code != 0 || !strings.Contains(r.stdout, "hyp.logs") || strings.Contains(r.stdout, "files") {
		t.Errorf("maintain of every sink: %s", r)
	}
}
