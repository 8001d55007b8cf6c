package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hyp-project/hyp/internal/testutil/pgtest"
)

// reinstalls sends from two homes that share a gateway id, one after the other, as a
// machine does across a reinstall: a fresh home laid down with the same config (its
// configured gateway_id), and a fresh home given only a copy of the old gateway_id file.
// Each new home's seqs start at 1 again, under a new incarnation, and every row of both
// lives must be stored. It returns the rows the server must hold.
func reinstalls(t *testing.T, central string) map[string]map[int]bool {
	t.Helper()
	want := map[string]map[int]bool{"logs": {}}
	take := func(f *feeder) {
		for id := range f.want["logs"] {
			want["logs"][id] = true
		}
	}
	life := func(first int, n int, setup func(home string)) string {
		t.Helper()
		home, addr := newHome(t)
		writeDaemonYAML(t, home, addr, "", central)
		setup(home)
		d := startHypDaemon(t, home, addr)
		f := newFeeder(first)
		f.ingest(t, addr, "logs", "web", n)
		requireRun(t, home, "central", f.take())
		take(f)
		d.stop(t)
		return home
	}
	configured := func(home string) { appendYAML(t, home, "gateway_id: web-01\n") }
	old := life(0, 30, configured)
	life(1000, 10, configured) // reinstalled: same config, fresh home
	copied := life(2000, 25, func(string) {})
	life(3000, 10, func(home string) { // a fresh home given only the old gateway_id file
		b, err := os.ReadFile(filepath.Join(copied, "gateway_id"))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(home, "gateway_id"), string(b))
	})
	for _, h := range []string{old, copied} {
		b, err := os.ReadFile(filepath.Join(h, "cache", "incarnation"))
		if err != nil || len(b) < 32 {
			t.Fatalf("%s: cache/incarnation %q %v", h, b, err)
		}
	}
	return want
}

func TestReinstalledHomeKeepsEveryRow(t *testing.T) {
	t.Parallel()
	srvHome, srvAddr, tokens := newServerHome(t)
	startHypServer(t, srvHome, srvAddr, tokens)
	want := reinstalls(t, forwardSinkYAML("central", "http://"+srvAddr, tokens))
	if !checkExactlyOnce(t, "server", serverIDs(t, srvHome, []string{"logs"}), want) {
		t.FailNow()
	}
	// `hyp server status` asks the running server, which holds the ledger.
	out := runHyp(t, srvHome, time.Minute, "server", "status", "--json")
	if out.code != 0 {
		t.Fatalf("server status: %s", out)
	}
	incs := clusterIncarnations(t, out.stdout)
	if len(incs) != 2 || len(incs["web-01"]) != 2 {
		t.Fatalf("server status incarnations, want two gateways of two each:\n%s", out.stdout)
	}
	rows := 0.0
	for _, g := range incs {
		for _, inc := range g {
			rows += inc["rows"].(float64)
		}
	}
	if int(rows) != len(want["logs"]) {
		t.Fatalf("incarnations count %v rows, want %d:\n%s", rows, len(want["logs"]), out.stdout)
	}
}

func TestClusterReinstalledHomeKeepsEveryRow(t *testing.T) {
	t.Parallel()
	pg := pgtest.Start(t)
	warehouse := filepath.Join(t.TempDir(), "lake")
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, tokens, "cluster-token\n")
	r := newReplica(t, pg.URI(), localLake(pg.URI(), warehouse), tokens)
	r.start(t)
	want := reinstalls(t, forwardSinkYAML("central", "http://"+r.listen, tokens))
	st := settled(t, r, 2)

	// Each gateway lists both of its incarnations, with the rows each stored.
	out := runHyp(t, r.home, time.Minute, "server", "status", "--json")
	for _, g := range st.Gateways {
		if g.RowsStored == 0 {
			t.Errorf("gateway %s stored nothing", g.Gateway)
		}
	}
	var incs int
	for _, g := range clusterIncarnations(t, out.stdout) {
		if len(g) != 2 {
			t.Errorf("a gateway has %d incarnations, want 2:\n%s", len(g), out.stdout)
		}
		incs += len(g)
	}
	if incs != 4 {
		t.Errorf("%d incarnations in all, want 4:\n%s", incs, out.stdout)
	}

	reader := t.TempDir()
	writeDaemonYAML(t, reader, freePort(t), "", fmt.Sprintf("  lake:\n    type: iceberg\n    catalog: {type: sql, uri: %q}\n    warehouse: %q\n    schedule: \"@every 1h\"\n", pg.URI(), warehouse))
	var ids []int
	for _, row := range queryJSON(t, reader, "SELECT id FROM logs", "--sink", "lake") {
		ids = append(ids, int(row["id"].(float64)))
	}
	checkExactlyOnce(t, "cluster lake", map[string][]int{"logs": ids}, want)
}

// clusterIncarnations reads each gateway's incarnations out of `server status --json`.
func clusterIncarnations(t *testing.T, stdout string) map[string][]map[string]any {
	t.Helper()
	var st struct {
		Gateways []struct {
			Gateway      string           `json:"gateway"`
			Incarnations []map[string]any `json:"incarnations"`
		} `json:"gateways"`
	}
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		t.Fatalf("server status --json: %v\n%s", err, stdout)
	}
	out := map[string][]map[string]any{}
	for _, g := range st.Gateways {
		out[g.Gateway] = g.Incarnations
	}
	return out
}
