package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hyp-project/hyp/internal/testutil/pgtest"
)

// replica is one `hyp server` in cluster mode started by a test.
type replica struct {
	home, listen, tokens string
	proc                 *hypProc
}

func (r *replica) start(t *testing.T, env ...string) {
	t.Helper()
	r.proc = startHyp(t, "replica "+filepath.Base(r.home), env, r.listen,
		"server", "--home", r.home, "--listen", r.listen, "--token-file", r.tokens)
}

func newReplica(t *testing.T, pgURI, warehouse, tokens string) *replica {
	t.Helper()
	r := &replica{home: t.TempDir(), listen: freePort(t), tokens: tokens}
	cfg := fmt.Sprintf("ingest:\n  listen: %s\nsinks: {}\nserver:\n  cluster:\n    postgres: %q\n    commit_interval: 300ms\n"+
		"    lake:\n      catalog: {type: sql, uri: %q}\n      warehouse: %q\n", freePort(t), pgURI, pgURI, warehouse)
	if err := os.WriteFile(filepath.Join(r.home, "hyp.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return r
}

type clusterStatusJSON struct {
	Committer string `json:"committer"`
	Replicas  []struct {
		ID    string `json:"id"`
		Alive bool   `json:"alive"`
	} `json:"replicas"`
	Gateways []struct {
		Gateway    string `json:"gateway"`
		RowsStored int64  `json:"rows_stored"`
		RowsStaged int64  `json:"rows_staged"`
	} `json:"gateways"`
}

func clusterStatus(t *testing.T, r *replica) clusterStatusJSON {
	t.Helper()
	res := runHyp(t, r.home, time.Minute, "server", "status", "--json")
	if res.code != 0 {
		t.Fatalf("server status: %s", res)
	}
	var st clusterStatusJSON
	if err := json.Unmarshal([]byte(res.stdout), &st); err != nil {
		t.Fatalf("server status output: %v\n%s", err, res)
	}
	return st
}

// settled waits until a committer has committed everything staged, with gateways known.
func settled(t *testing.T, r *replica, gateways int) clusterStatusJSON {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		st := clusterStatus(t, r)
		staged := int64(0)
		for _, g := range st.Gateways {
			staged += g.RowsStaged
		}
		if staged == 0 && st.Committer != "" && len(st.Gateways) == gateways {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster did not commit everything staged: %+v", st)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// pidOf reads the process id out of a replica id (host-pid-random).
func pidOf(id string) int {
	parts := strings.Split(id, "-")
	if len(parts) < 3 {
		return 0
	}
	pid, _ := strconv.Atoi(parts[len(parts)-2])
	return pid
}

// TestClusterReplicasExactlyOnce: two replicas share one PostgreSQL database and one lake;
// two gateways forward to both (a url list). One replica is killed -9 after staging a chunk's files but
// before recording them, and the committer is killed -9 after a lake commit it had not yet
// marked, then at an arbitrary instant; each comes back. The table ends with every
// acknowledged row once, from both gateways, and `server status` names a committer, with
// nothing left staged.
func TestClusterReplicasExactlyOnce(t *testing.T) {
	t.Parallel()
	pg := pgtest.Start(t)
	warehouse := filepath.Join(t.TempDir(), "lake")
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("cluster-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rs := []*replica{newReplica(t, pg.URI(), warehouse, tokens), newReplica(t, pg.URI(), warehouse, tokens)}
	rs[0].start(t, "HYP_FAILPOINT=cluster-after-stage:2")
	rs[1].start(t)

	type gateway struct {
		home, addr string
		f          *feeder
	}
	var gws []gateway
	for i, r := range rs {
		g := gateway{home: t.TempDir(), addr: freePort(t), f: newFeeder(i * 1_000_000)}
		// Each gateway lists both replicas, its own first: a replica that is down fails over.
		other := rs[1-i]
		writeDaemonYAML(t, g.home, g.addr, "", fmt.Sprintf("  central:\n    type: forward\n    url: [%q, %q]\n    token_file: %q\n    schedule: \"@every 1h\"\n",
			"http://"+r.listen, "http://"+other.listen, tokens))
		startHypDaemon(t, g.home, g.addr)
		gws = append(gws, g)
	}
	feed := func(n int) {
		for _, g := range gws {
			for _, s := range []string{"web", "db", "edge"} {
				g.f.ingest(t, g.addr, "logs", s, n)
			}
		}
	}
	drain := func(where string) {
		t.Helper()
		for _, g := range gws {
			if _, r := sinkRun(t, g.home, "central", 2*time.Minute); r.code != 0 {
				if _, r = sinkRun(t, g.home, "central", 2*time.Minute); r.code != 0 {
					t.Fatalf("%s: sink run: %s", where, r)
				}
			}
		}
	}

	// The second chunk replica 0 stages kills it before PostgreSQL records the files.
	feed(200)
	sinkRun(t, gws[0].home, "central", 2*time.Minute)
	if ps := rs[0].proc.waitExit(t, time.Minute); !ps.Sys().(syscall.WaitStatus).Signaled() {
		t.Fatalf("replica 0 ended with %v, want SIGKILL at its failpoint:\n%s", ps, rs[0].proc.out)
	}
	rs[0].start(t)
	drain("after the staging kill")

	// The committer dies right after a lake commit it has not marked: with replica 0 alone
	// it is the committer, and its successor must find that commit in the table. Nothing
	// may be staged before, or that is what it commits before it is even ready.
	settled(t, rs[1], 2)
	for _, r := range rs {
		r.proc.kill9()
	}
	rs[0].start(t, "HYP_FAILPOINT=cluster-after-lake-commit:1")
	gws[0].f.ingest(t, gws[0].addr, "logs", "web", 150)
	// Staged rows left from before may be what it commits first; then it is gone before
	// this run ends, and the rows of the run arrive after the restart.
	sinkRun(t, gws[0].home, "central", 2*time.Minute)
	if ps := rs[0].proc.waitExit(t, time.Minute); !ps.Sys().(syscall.WaitStatus).Signaled() {
		t.Fatalf("replica 0 ended with %v, want SIGKILL after its lake commit:\n%s", ps, rs[0].proc.out)
	}
	for _, r := range rs {
		r.start(t)
	}

	// Rows keep coming while the committer is killed at an arbitrary instant.
	for round := range 3 {
		feed(100)
		drain(fmt.Sprintf("round %d", round))
		st := clusterStatus(t, rs[round%2])
		for _, r := range rs {
			if st.Committer != "" && pidOf(st.Committer) == r.proc.cmd.Process.Pid {
				time.Sleep(time.Duration(round) * 150 * time.Millisecond)
				r.proc.kill9()
				r.start(t)
			}
		}
	}
	feed(50)
	drain("last round")

	st := settled(t, rs[0], 2)
	want := unionWant(gws[0].f.want, gws[1].f.want)
	stored := int64(0)
	for _, g := range st.Gateways {
		stored += g.RowsStored
	}
	if total := int64(len(want["logs"])); stored != total {
		t.Errorf("server status counts %d rows stored, want %d", stored, total)
	}

	reader := t.TempDir()
	lakeSink := fmt.Sprintf("  lake:\n    type: iceberg\n    catalog: {type: sql, uri: %q}\n    warehouse: %q\n    schedule: \"@every 1h\"\n", pg.URI(), warehouse)
	writeDaemonYAML(t, reader, freePort(t), "", lakeSink)
	var ids []int
	gwSeen := map[string]bool{}
	for _, row := range queryJSON(t, reader, "SELECT id, _hyp_gateway AS gw FROM logs", "--sink", "lake", "--internal") {
		ids = append(ids, int(row["id"].(float64)))
		gwSeen[row["gw"].(string)] = true
	}
	if !checkExactlyOnce(t, "cluster lake", map[string][]int{"logs": ids}, want) {
		t.FailNow()
	}
	if len(gwSeen) != 2 {
		t.Errorf("_hyp_gateway values %v, want both gateways", gwSeen)
	}
}
