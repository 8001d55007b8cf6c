package main

import (
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestForcedPruneKilledLeavesExactGaps kills the daemon inside a forced prune, once after
// the gaps are written and before the delete, once after the delete and before the gaps are
// final, then restarts it and prunes to the end: every deleted row of the sink's is in
// exactly one gap, and no gap names a row that is still cached (SPEC 9.3).
func TestForcedPruneKilledLeavesExactGaps(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"after-loss-intent", "before-settle"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			home, addr := t.TempDir(), freePort(t)
			root := filepath.Join(t.TempDir(), "exports")
			// The sink's schedule never comes: every row it covers stays unexported.
			writeDaemonYAML(t, home, addr, "1h\n    max_age: 1s", localSinkYAML("files", "jsonl", root))
			d := startHypDaemon(t, home, addr, "HYP_FAILPOINT="+step+":1")

			seqs := map[string]map[int64]bool{} // partition -> seqs acknowledged
			for i, src := range []string{"web", "db", "edge"} {
				for r := range 3 {
					m := mustPost(t, addr, "/v1/ingest/logs?source="+src, rows(i*1000+r*10, 10, src), http.StatusOK)
					first, _ := strconv.ParseInt(m["first_seq"].(string), 10, 64)
					last, _ := strconv.ParseInt(m["last_seq"].(string), 10, 64)
					part := "source=" + src
					if seqs[part] == nil {
						seqs[part] = map[int64]bool{}
					}
					for s := first; s <= last; s++ {
						seqs[part][s] = true
					}
				}
			}
			if r := runHyp(t, home, time.Minute, "cache", "status", "--json"); r.code != 0 { // flushes
				t.Fatalf("cache status: %s", r)
			}
			time.Sleep(1200 * time.Millisecond)                      // every row is past max_age
			runHyp(t, home, time.Minute, "cache", "prune", "--json") // the daemon dies inside it
			d.waitExit(t, 30*time.Second)

			d = startHypDaemon(t, home, addr)
			check := func(stage string) {
				t.Helper()
				cached := map[string]map[int64]bool{}
				for _, r := range opRows(t, home, "logs") {
					if cached[r.part] == nil {
						cached[r.part] = map[int64]bool{}
					}
					cached[r.part][r.seq] = true
				}
				st := opSinkStatusOf(t, home, "files")
				for part, all := range seqs {
					p, ok := st.part("files", "logs", part)
					if !ok {
						t.Fatalf("%s: no status for %s", stage, part)
					}
					inGaps := map[int64]int{}
					var gapRows int64
					for _, g := range p.Gaps {
						gapRows += g.Rows
						for s := g.From; s <= g.To; s++ {
							if all[s] {
								inGaps[s]++
							}
						}
					}
					var deleted int64
					for s := range all {
						switch n := inGaps[s]; {
						case cached[part][s] && n > 0:
							t.Errorf("%s %s: seq %d is cached and in a gap", stage, part, s)
						case !cached[part][s] && n != 1:
							t.Errorf("%s %s: deleted seq %d is in %d gaps, want 1", stage, part, s, n)
						}
						if !cached[part][s] {
							deleted++
						}
					}
					if gapRows != deleted {
						t.Errorf("%s %s: gaps count %d rows, %d were deleted: %+v", stage, part, gapRows, deleted, p.Gaps)
					}
				}
			}
			check("after the restart")
			if r := runHyp(t, home, time.Minute, "cache", "prune", "--json"); r.code != 0 {
				t.Fatalf("prune after the restart: %s", r)
			}
			check("after pruning to the end")
			if rows := opRows(t, home, "logs"); len(rows) != 0 {
				t.Errorf("%d rows still cached after a forced prune of all", len(rows))
			}
			d.stop(t)
		})
	}
}
