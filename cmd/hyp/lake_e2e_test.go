package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hyp-project/hyp/internal/lake"
	"github.com/hyp-project/hyp/internal/testutil/lakeread"
	"github.com/hyp-project/hyp/internal/testutil/miniotest"
	"github.com/hyp-project/hyp/internal/testutil/pgtest"
)

// lakeGateway is one machine of the two-gateway test: its home, its clients and its daemon.
type lakeGateway struct {
	name, home, addr string
	f                *feeder
	c                *opClients
	d                *hypProc
}

// lakeSinkStatus is `sink status --json` of an iceberg sink, with its tables.
type lakeSinkStatus struct {
	Sinks []struct {
		Partitions []opPartStatus `json:"partitions"`
		Tables     []struct {
			Table        string `json:"table"`
			LastCommitID string `json:"last_commit_id"`
			Error        string `json:"error"`
		} `json:"tables"`
	} `json:"sinks"`
}

// errors lists every error the status shows, on a partition or a table.
func (s lakeSinkStatus) errors() []string {
	var out []string
	for _, x := range s.Sinks {
		for _, p := range x.Partitions {
			if p.LastError != "" {
				out = append(out, p.Partition+": "+p.LastError)
			}
		}
		for _, tb := range x.Tables {
			if tb.Error != "" {
				out = append(out, tb.Table+": "+tb.Error)
			}
		}
	}
	return out
}

func lakeStatusOf(t *testing.T, home string) lakeSinkStatus {
	t.Helper()
	r := runHyp(t, home, time.Minute, "sink", "status", "lake", "--json")
	if r.code != 0 {
		t.Fatalf("sink status: %s", r)
	}
	var st lakeSinkStatus
	opDecode(t, r, &st)
	return st
}

// runLakeUntil runs the lake sink of home until a run succeeds (a tick right after the
// catalog came back may still fail once) and, with caughtUp, every partition is at its head.
func runLakeUntil(t *testing.T, home string, caughtUp bool) {
	t.Helper()
	for try := 1; ; try++ {
		_, r := sinkRun(t, home, "lake", 2*time.Minute)
		if r.code == 0 && !caughtUp {
			return
		}
		if r.code == 0 && !slices.ContainsFunc(opSinkStatusOf(t, home, "lake").parts("lake"), func(p opPartStatus) bool { return !p.caughtUp() }) {
			return
		}
		if try >= 5 {
			t.Fatalf("%s: the lake sink is not through after %d runs: %s", home, try, r)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestLakeTwoGatewaysOneTable is the acceptance of the iceberg sink (SPEC 6b, 9.1): two
// daemons with their own gateway_id export one dataset, ingested into both all along, to
// one table with a PostgreSQL catalog and a MinIO warehouse. One of them is killed -9 at
// random instants while it exports and at the failpoints of a table commit, its cache is
// compacted while it runs, and PostgreSQL is stopped (ticks fail and say so) and started
// again. Afterwards an independent reader finds every row the caches hold exactly once,
// no data file referenced twice, both gateways in the rows and hyp's markers on every
// snapshot; a tick with nothing new commits nothing, and one after N new rows commits one
// snapshot of N rows.
func TestLakeTwoGatewaysOneTable(t *testing.T) {
	t.Parallel()
	rng := seededRand(t)

	pg := pgtest.Start(t)
	m := miniotest.Start(t)
	m.CreateBucket(t, "lake")
	table := lakeread.Options{Catalog: pg.URI(), Namespace: "hyp", S3: m.Client()}
	configure := func(g *lakeGateway, schedule string) {
		writeDaemonYAML(t, g.home, g.addr, "", opSchedule(icebergSinkYAML("lake", pg.URI(), "s3://lake/warehouse"), schedule,
			fmt.Sprintf("s3: {region: %s, endpoint: %q, force_path_style: true}", m.Region(), m.Endpoint())))
		appendYAML(t, g.home, "gateway_id: "+g.name+"\n")
	}
	start := func(g *lakeGateway, env ...string) {
		g.d = startHypDaemon(t, g.home, g.addr, append(m.Env(), env...)...)
	}
	a := &lakeGateway{name: "gw-a", f: newFeeder(0)}
	b := &lakeGateway{name: "gw-b", f: newFeeder(100_000_000)}
	schedules := map[*lakeGateway]string{a: "@every 300ms", b: "@every 700ms"}
	for _, g := range []*lakeGateway{a, b} {
		g.home, g.addr = t.TempDir(), freePort(t)
		configure(g, schedules[g])
		start(g)
		g.c = opStartClients(t, g.f, g.addr, "logs", []string{"web", "db"}, 20, 40*time.Millisecond)
	}

	// a is killed at random instants: its sink ticks every 300 ms under rows that never stop,
	// so many instants fall inside an export, before, during or after a table commit (an
	// intent left in a watermark file says the kill caught one in doubt).
	kills, inDoubt := 0, 0
	kill := func() {
		time.Sleep(time.Duration(500+rng.IntN(2000)) * time.Millisecond)
		a.d.kill9()
		kills++
		for _, src := range []string{"web", "db"} {
			if b, err := os.ReadFile(opWatermarkPath(a.home, "lake", "logs", src)); err == nil && strings.Contains(string(b), `"intent"`) {
				inDoubt++
				break
			}
		}
		start(a)
	}
	began := time.Now()
	phase := func(what string) { t.Logf("%6.1fs %s", time.Since(began).Seconds(), what) }
	maintain := func(where string) bool {
		t.Helper()
		r := runHyp(t, b.home, 3*time.Minute, "sink", "maintain", "lake", "--compact", "--json")
		var rep maintainJSON
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || len(rep.Sinks) != 1 {
			t.Fatalf("sink maintain %s: %v\n%s", where, err, r)
		}
		if r.code != 0 {
			t.Logf("sink maintain %s lost a race (exit %d): %s", where, r.code, rep.Sinks[0].Error)
		}
		return r.code == 0
	}
	maintained := 0
	for i := range 12 {
		kill()
		switch i % 4 {
		case 3:
			if r := runHyp(t, a.home, time.Minute, "cache", "compact"); r.code != 0 {
				t.Fatalf("cache compact while exporting: %s", r)
			}
		case 1:
			// Table upkeep on b races a's exports and kills: a compaction that loses the race
			// to a commit of a's is staged again or abandoned, never lost.
			if maintain("while a exports") {
				maintained++
			}
		}
	}
	phase(fmt.Sprintf("%d random kills (%d caught an export in doubt), 3 cache compactions, %d upkeeps", kills, inDoubt, maintained))
	// And at the steps of a commit: intents written, table not yet committed; committed,
	// watermarks not yet moved.
	for _, where := range []string{"after-intent:2", "after-ship:1"} {
		a.d.stop(t)
		configure(a, "@every 1h")
		start(a, "HYP_FAILPOINT="+where)
		time.Sleep(300 * time.Millisecond) // rows to export
		runIntoFailpoint(t, a.home, "lake", where, a.d)
		configure(a, schedules[a])
		start(a)
	}

	phase("failpoint kills")
	// The catalog goes down: a tick fails and says so, and the sinks catch up once it is back.
	pg.Stop()
	res, r := sinkRun(t, b.home, "lake", time.Minute)
	if r.code != 1 || len(res.Sinks) != 1 || res.Sinks[0].Status == "ok" || len(res.Sinks[0].Errors) == 0 {
		t.Fatalf("sink run with PostgreSQL down: %s", r)
	}
	if errs := lakeStatusOf(t, b.home).errors(); len(errs) == 0 {
		t.Fatalf("sink status shows no error while PostgreSQL is down")
	} else {
		t.Logf("sink status with PostgreSQL down: %v", errs)
	}
	time.Sleep(time.Duration(1000+rng.IntN(2000)) * time.Millisecond) // a's ticks fail too
	pg.Start()
	runLakeUntil(t, b.home, false)
	kill()
	phase("PostgreSQL outage, a random kill")

	// The end: clients stop, the caches say what was acknowledged, and both daemons export
	// everything on demand only.
	want := unionWant(a.c.truth(t, a.home), b.c.truth(t, b.home))
	for _, g := range []*lakeGateway{a, b} {
		g.d.stop(t)
		configure(g, "@every 1h")
		start(g)
	}
	for _, g := range []*lakeGateway{a, b} {
		runLakeUntil(t, g.home, true)
	}
	for _, g := range []*lakeGateway{a, b} {
		if errs := lakeStatusOf(t, g.home).errors(); len(errs) > 0 {
			t.Errorf("%s: sink status still shows errors after catching up: %v", g.name, errs)
		}
	}
	// Upkeep with no writer racing it must succeed, and move rows without changing them.
	if !maintain("after catching up") {
		t.Fatalf("sink maintain failed with no export running")
	}
	phase("caught up, maintained")
	v := readLakeTable(t, table, "logs")
	checkLakeView(t, "two gateways", v, want, "gw-a", "gw-b")
	checkLakeMarkers(t, v, "gw-a", "gw-b")
	t.Logf("%d rows in %d live data files, %d snapshots", len(v.ids), len(v.Files), len(v.Snapshots))

	// Nothing new: no snapshot.
	before := len(v.Snapshots)
	for _, g := range []*lakeGateway{a, b} {
		requireNoopRun(t, g.home, "lake")
	}
	if after := len(readLakeTable(t, table, "logs").Snapshots); after != before {
		t.Fatalf("runs with no new rows made snapshots: %d -> %d", before, after)
	}
	// N new rows over both partitions: one snapshot holding N rows.
	const n = 70
	a.f.ingest(t, a.addr, "logs", "web", 50)
	a.f.ingest(t, a.addr, "logs", "db", n-50)
	requireRun(t, a.home, "lake", n)
	v = readLakeTable(t, table, "logs")
	checkLakeView(t, "after N new rows", v, unionWant(want, a.f.want), "gw-a", "gw-b")
	if len(v.Snapshots) != before+1 || v.Current.SummaryInt("added-records") != n || v.Current.Summary[lake.PropGateway] != "gw-a" {
		t.Fatalf("a run after %d new rows: %d -> %d snapshots, the new one %v", n, before, len(v.Snapshots), v.Current.Summary)
	}
	var rows int64
	for _, u := range lakeUnits(t, *v.Current) {
		rows += u.Rows
	}
	if rows != n {
		t.Fatalf("the new snapshot's hyp.units hold %d rows, want %d: %s", rows, n, v.Current.Summary[lake.PropUnits])
	}
}

func lakeUnits(t *testing.T, s lakeread.Snapshot) []lake.Unit {
	t.Helper()
	var units []lake.Unit
	if err := json.Unmarshal([]byte(s.Summary[lake.PropUnits]), &units); err != nil || len(units) == 0 {
		t.Fatalf("snapshot %d: hyp.units %q: %v", s.ID, s.Summary[lake.PropUnits], err)
	}
	return units
}

// checkLakeMarkers: every snapshot but upkeep's names its gateway, a commit id and the units it
// holds, with their rows adding up to what it added; together they name gateways.
func checkLakeMarkers(t *testing.T, v lakeView, gateways ...string) {
	t.Helper()
	var seen []string
	ids := map[string]int64{}
	for _, s := range v.Snapshots {
		if s.Summary["operation"] == "replace" {
			continue // upkeep's; checkLakeView holds it to moving rows only
		}
		gw, id := s.Summary[lake.PropGateway], s.Summary[lake.PropCommitID]
		if !slices.Contains(seen, gw) {
			seen = append(seen, gw)
		}
		if prev, dup := ids[id]; dup {
			t.Errorf("commit id %s in snapshots %d and %d", id, prev, s.ID)
		}
		ids[id] = s.ID
		var rows int64
		for _, u := range lakeUnits(t, s) {
			if u.Dataset != "logs" || u.First > u.Last {
				t.Errorf("snapshot %d: unit %+v", s.ID, u)
			}
			rows += u.Rows
		}
		if added := s.SummaryInt("added-records"); added != rows {
			t.Errorf("snapshot %d of %s: hyp.units hold %d rows, the snapshot added %d", s.ID, gw, rows, added)
		}
	}
	slices.Sort(seen)
	if !slices.Equal(seen, gateways) {
		t.Errorf("snapshots name gateways %v, want %v", seen, gateways)
	}
}
