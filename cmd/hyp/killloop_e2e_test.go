package main

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestKillNineAtRandomInstants kills the daemon with SIGKILL at random instants while
// clients ingest, the cache flushes every 200 ms, both sinks tick every 300 ms and a
// compaction is asked for every 150 ms; then it lets the sinks catch up. Every row
// acknowledged with 200 reaches both destinations exactly once; a row whose request got no
// answer (the daemon died under it) reaches each at most once (SPEC 9.1). HYP_KILL_LOOPS
// sets the number of kills (20 here, 200 in make soak).
func TestKillNineAtRandomInstants(t *testing.T) {
	t.Parallel()
	loops := 20
	if v, err := strconv.Atoi(os.Getenv("HYP_KILL_LOOPS")); err == nil && v > 0 {
		loops = v
	}
	rng := seededRand(t)

	srvHome, srvAddr, tokens := newServerHome(t)
	startHypServer(t, srvHome, srvAddr, tokens)
	home, addr := t.TempDir(), freePort(t)
	root := filepath.Join(t.TempDir(), "exports")
	sinks := "sinks:\n" + opSchedule(forwardSinkYAML("central", "http://"+srvAddr, tokens), "@every 300ms") +
		opSchedule(localSinkYAML("files", "parquet", root), "@every 300ms")
	cfg := "ingest:\n  listen: " + addr + "\ncache:\n  flush_interval: 200ms\n" + sinks
	if err := os.WriteFile(filepath.Join(home, "hyp.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	book := newAckBook()
	for range loops {
		d := startHypDaemon(t, home, addr)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		book.clients(&wg, stop, addr, 20, rows)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(150 * time.Millisecond):
					runHypQuiet(home, "cache", "compact")
				}
			}
		}()
		time.Sleep(time.Duration(150+rng.IntN(1200)) * time.Millisecond)
		d.kill9()
		close(stop)
		wg.Wait()
	}
	d := startHypDaemon(t, home, addr)
	defer d.stop(t)
	requireRun(t, home, "", -1)
	requireRun(t, home, "", -1)
	check := func(where string, got []int) {
		t.Helper()
		seen := map[int]int{}
		for _, id := range got {
			seen[id]++
		}
		bad := 0
		for id, n := range seen {
			if n > 1 || (!book.acked[id] && !book.maybe[id]) {
				if bad++; bad <= 5 {
					t.Errorf("%s: id %d stored %d times (acknowledged %v, unanswered %v)", where, id, n, book.acked[id], book.maybe[id])
				}
			}
		}
		for id := range book.acked {
			if seen[id] == 0 {
				if bad++; bad <= 5 {
					t.Errorf("%s: acknowledged id %d is missing", where, id)
				}
			}
		}
	}
	check("server", serverIDs(t, srvHome, []string{"logs"})["logs"])
	check("local-fs", checkBlobFiles(t, "local-fs", localFiles(t, root), "parquet")["logs"])
	t.Logf("%d kills, %d rows acknowledged, %d unanswered", loops, len(book.acked), len(book.maybe))
}

// ackBook is what clients ingesting through kills were told: ids acknowledged with 200, and
// ids whose request got no answer (the daemon died under it: stored or not).
type ackBook struct {
	mu           sync.Mutex
	acked, maybe map[int]bool
	next         int
}

func newAckBook() *ackBook { return &ackBook{acked: map[int]bool{}, maybe: map[int]bool{}} }

// clients starts one client per source ("web", "db"), each posting body(from, n, source)
// with fresh ids to addr's logs dataset until stop closes, and books every answer.
func (b *ackBook) clients(wg *sync.WaitGroup, stop chan struct{}, addr string, n int, body func(from, n int, source string) []byte) {
	for c, src := range []string{"web", "db"} {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				b.mu.Lock()
				from := b.next
				b.next += n
				b.mu.Unlock()
				code, _, err := post(addr, "/v1/ingest/logs", body(from, n, src))
				b.mu.Lock()
				for id := from; id < from+n; id++ {
					switch {
					case err == nil && code == 200:
						b.acked[id] = true
					case err != nil:
						b.maybe[id] = true
					}
				}
				b.mu.Unlock()
				time.Sleep(time.Duration(10+c*7) * time.Millisecond)
			}
		})
	}
}

// runHypQuiet runs a CLI command whose outcome does not matter (the daemon may be dying).
func runHypQuiet(home string, args ...string) {
	cmd := exec.Command(hypBin, append(args, "--home", home)...)
	cmd.Env = baseEnv()
	_ = cmd.Run()
}

// seededRand is a random source for a test's kill instants, its seed logged so a failure
// can be replayed.
func seededRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, seed))
}
