package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReloadIcebergMaintain: `hyp daemon` on SIGHUP applies a change to an iceberg sink's
// maintain block, logs it as applied and maintains on the new schedule; a change it cannot
// apply (the warehouse) is logged as needing a restart, naming the key.
func TestReloadIcebergMaintain(t *testing.T) {
	t.Parallel()
	home, addr := t.TempDir(), freePort(t)
	lakeDir := t.TempDir()
	catalogDB, warehouse := filepath.Join(lakeDir, "catalog.db"), filepath.Join(lakeDir, "warehouse")
	lakeYAML := func(warehouse, maintain string) string {
		return icebergSinkYAML("lake", "sqlite://"+catalogDB, warehouse) + "    maintain: " + maintain + "\n"
	}
	writeDaemonYAML(t, home, addr, "", lakeYAML(warehouse, `{schedule: "@every 1h"}`))
	d := startHypDaemon(t, home, addr)
	defer d.stop(t)
	f := newFeeder(0)
	f.ingest(t, addr, "logs", "web", 20)
	requireRun(t, home, "lake", f.take())

	hup := func(yaml string, want ...string) {
		t.Helper()
		writeDaemonYAML(t, home, addr, "", yaml)
		if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitLog(t, d, 30*time.Second, want...)
	}
	hup(lakeYAML(warehouse, `{schedule: "@every 1s", compact: true, retain_last: 1}`),
		`msg="config reloaded" applied="sink lake: maintain.schedule \"@every 1h\" -> \"@every 1s\""`,
		`msg="config reloaded" applied="sink lake: maintain.compact false -> true"`,
		`msg="config reloaded" applied="sink lake: maintain.retain_last 10 -> 1"`)
	waitLog(t, d, 30*time.Second, `msg="table upkeep" sink=lake table=hyp.logs`)
	hup(lakeYAML(filepath.Join(lakeDir, "elsewhere"), `{schedule: "@every 1s", compact: true, retain_last: 1}`),
		`msg="config change needs a restart; not applied" change="sink lake: warehouse changed"`)
	checkLakeView(t, "after reloads", readLakeTable(t, sqliteLake(catalogDB), "logs"), f.want)
}

// waitLog waits until the process's output holds every line fragment in want.
func waitLog(t *testing.T, p *hypProc, within time.Duration, want ...string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		out := p.out.String()
		missing := ""
		for _, w := range want {
			if !strings.Contains(out, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s logged no %s within %v:\n%s", p.name, missing, within, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
