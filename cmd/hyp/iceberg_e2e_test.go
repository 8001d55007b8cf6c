package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hyp-project/hyp/internal/lake"
	"github.com/hyp-project/hyp/internal/testutil/lakeread"
)

// icebergSinkYAML is an iceberg sink with the sql catalog at uri (sqlite:// or postgres://).
func icebergSinkYAML(name, uri, warehouse string) string {
	return fmt.Sprintf("  %s:\n    type: iceberg\n    catalog: {type: sql, uri: %q}\n    warehouse: %q\n    namespace: hyp\n    schedule: \"@every 1h\"\n",
		name, uri, warehouse)
}

// lakeView is what a reader that shares no code with hyp's writer (lakeread) finds in the
// table: its metadata, manifests and live files, and the id and _hyp_gateway of every row.
type lakeView struct {
	*lakeread.Table
	ids      []int
	gateways map[string]bool
}

// sqliteLake is where an iceberg sink with the sqlite catalog catalogDB keeps its tables.
func sqliteLake(catalogDB string) lakeread.Options {
	return lakeread.Options{Catalog: "sqlite://" + catalogDB, Namespace: "hyp"}
}

func readLakeTable(t *testing.T, o lakeread.Options, dataset string) lakeView {
	t.Helper()
	ctx := context.Background()
	tbl, err := lakeread.Read(ctx, o, dataset)
	if err != nil {
		t.Fatalf("read table hyp.%s: %v", dataset, err)
	}
	rows, err := tbl.Rows(ctx, "id", lake.GatewayColumn)
	if err != nil {
		t.Fatalf("rows of hyp.%s: %v", dataset, err)
	}
	v := lakeView{Table: tbl, gateways: map[string]bool{}}
	for _, r := range rows {
		id, ok := r[0].(int64)
		gw, _ := r[1].(string)
		if !ok {
			t.Fatalf("hyp.%s: row %v has no integer id", dataset, r)
		}
		v.ids = append(v.ids, int(id))
		v.gateways[gw] = true
	}
	return v
}

// checkLakeView holds the table to SPEC 6b: every wanted row once, no data file referenced
// twice, hyp's markers on every snapshot that adds rows (upkeep's only move them), and _hyp_gateway naming exactly gateways (with
// none given: one machine, whatever its name).
func checkLakeView(t *testing.T, where string, v lakeView, want map[string]map[int]bool, gateways ...string) {
	t.Helper()
	ok := checkExactlyOnce(t, where, map[string][]int{"logs": v.ids}, want)
	for _, f := range v.Duplicates {
		ok = false
		t.Errorf("%s: data file %s referenced more than once", where, f)
	}
	marked := 0
	for _, s := range v.Snapshots {
		switch {
		case s.Summary["operation"] == "replace":
			// Upkeep (a compaction, a manifest merge) moves rows between files, never adds any.
			if s.SummaryInt("added-records") != s.SummaryInt("deleted-records") {
				t.Errorf("%s: upkeep snapshot %d added %d rows and removed %d", where, s.ID, s.SummaryInt("added-records"), s.SummaryInt("deleted-records"))
			}
			marked++
		case s.Summary[lake.PropCommitID] != "" && s.Summary[lake.PropGateway] != "" && s.Summary[lake.PropUnits] != "":
			marked++
		}
	}
	if marked != len(v.Snapshots) {
		ok = false
		t.Errorf("%s: %d of %d snapshots carry hyp's markers", where, marked, len(v.Snapshots))
	}
	var got []string
	for gw := range v.gateways {
		got = append(got, gw)
	}
	slices.Sort(got)
	if (len(gateways) == 0 && len(got) != 1) || (len(gateways) > 0 && !slices.Equal(got, gateways)) {
		ok = false
		t.Errorf("%s: _hyp_gateway values %v, want %v (this machine's only when none named)", where, got, gateways)
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
	writeDaemonYAML(t, home, addr, "", icebergSinkYAML("lake", "sqlite://"+catalogDB, warehouse))
	f := newFeeder(0)
	feed := func(n int) {
		for _, s := range []string{"web", "db"} {
			f.ingest(t, addr, "logs", s, n)
		}
	}

	d := startHypDaemon(t, home, addr)
	feed(100)
	requireRun(t, home, "lake", f.take())
	v := readLakeTable(t, sqliteLake(catalogDB), "logs")
	checkLakeView(t, "first run", v, f.want)
	if len(v.Snapshots) != 1 {
		t.Fatalf("one run made %d snapshots, want 1 for both partitions", len(v.Snapshots))
	}
	requireNoopRun(t, home, "lake")
	if v := readLakeTable(t, sqliteLake(catalogDB), "logs"); len(v.Snapshots) != 1 {
		t.Fatalf("a run with no new rows committed (%d snapshots)", len(v.Snapshots))
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
		checkLakeView(t, where, readLakeTable(t, sqliteLake(catalogDB), "logs"), f.want)
		before := len(readLakeTable(t, sqliteLake(catalogDB), "logs").Snapshots)
		requireNoopRun(t, home, "lake")
		if after := len(readLakeTable(t, sqliteLake(catalogDB), "logs").Snapshots); after != before {
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
