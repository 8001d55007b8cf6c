package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/hyp-project/hyp/internal/cluster"
	"github.com/hyp-project/hyp/internal/control"
	"github.com/hyp-project/hyp/internal/home"
	"github.com/hyp-project/hyp/internal/testutil/lakeread"
	"github.com/hyp-project/hyp/internal/testutil/listening"
)

// clusterBench is issue 13's scale figure: gateways machines (each a daemon with a home of
// its own, a backlog of rows ingested before) forward at once to one, then to two `hyp
// server` replicas in cluster mode over one PostgreSQL and a MinIO warehouse on this machine,
// each replica pinned to a core of its own with taskset. It prints rows/s stored, the
// largest commit lag seen, rows stored twice (read back by lakeread), the CPU seconds of the
// replicas and of the daemons, and, with two replicas, how long the cluster goes without a
// committer when the committer is killed -9.
//
// With jsonPath set it also writes the figures there, one clusterFigure per replica count,
// for bench/table.py.
func clusterBench(bin, minioBin string, gateways, rows int, groupBytes int64, jsonPath string) error {
	var figs []clusterFigure
	for _, replicas := range []int{1, 2} {
		fig, err := clusterRun(bin, minioBin, gateways, rows, replicas, groupBytes)
		if err != nil {
			return fmt.Errorf("%d replicas: %w", replicas, err)
		}
		figs = append(figs, fig)
	}
	if jsonPath == "" {
		return nil
	}
	b, err := json.MarshalIndent(figs, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(jsonPath, append(b, '\n'), 0o644)
}

// clusterCommitInterval is the replicas' commit_interval: issue 28 bounds the commit lag by
// twice it.
const clusterCommitInterval = 5 * time.Second

// clusterFigure is one run of the cluster figure.
type clusterFigure struct {
	Gateways          int     `json:"gateways"`
	Replicas          int     `json:"replicas"`
	Rows              int64   `json:"rows"`
	RowsPerSecond     float64 `json:"rows_per_s"`
	MaxCommitLagS     float64 `json:"max_commit_lag_s"`
	CommitIntervalS   float64 `json:"commit_interval_s"`
	StoredTwice       int     `json:"stored_twice"`
	StagedFilesPer1M  float64 `json:"staged_files_per_million_rows"`
	ReplicaCPUPer1M   float64 `json:"replica_cpu_s_per_million_rows"`
	GatewayCPUSeconds float64 `json:"gateway_cpu_s"`
}

func clusterRun(bin, minioBin string, gateways, rows, replicas int, groupBytes int64) (fig clusterFigure, err error) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "hyp-bench-cluster-")
	if err != nil {
		return fig, err
	}
	keep := false // a run that does not finish keeps its directory (the processes' logs)
	defer func() {
		if !keep {
			os.RemoveAll(dir)
		}
	}()
	pgURI, stopPG, err := startPostgres()
	if err != nil {
		return fig, err
	}
	defer stopPG()
	endpoint, stopMinIO, err := startMinIO(minioBin, filepath.Join(dir, "minio"))
	if err != nil {
		return fig, err
	}
	defer stopMinIO()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("bench-token\n"), 0o600); err != nil {
		return fig, err
	}

	// The backlog first, with no sink, so every gateway starts forwarding at once later.
	homes := make([]string, gateways)
	err = parallel(gateways, 8, func(i int) error {
		homes[i] = filepath.Join(dir, fmt.Sprintf("gw-%02d", i))
		if err := os.Mkdir(homes[i], 0o700); err != nil {
			return err
		}
		d, err := gatewayDaemon(bin, homes[i], "sinks: {}\n")
		if err != nil {
			return err
		}
		defer d.term()
		hc := &http.Client{}
		for from := 0; from < rows; from += 1000 {
			if err := postLogs(hc, d.addr, "?source=app", body(from, min(1000, rows-from))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fig, fmt.Errorf("ingest the backlog: %w", err)
	}

	var rs []*proc
	var urls []string
	for i := range replicas {
		home := filepath.Join(dir, fmt.Sprintf("replica-%d", i))
		os.Mkdir(home, 0o700)
		p, err := startOnFreePort(func(addr string) (*exec.Cmd, error) {
			cfg := fmt.Sprintf("ingest:\n  listen: %s\nsinks: {}\nserver:\n  cluster:\n    postgres: %q\n    commit_interval: %s\n    group_bytes: %d\n    lake:\n"+
				"      catalog: {type: sql, uri: %q}\n      warehouse: s3://bench/lake\n      s3: {region: us-east-1, endpoint: %q, force_path_style: true}\n",
				freeAddr(), pgURI, clusterCommitInterval, groupBytes, pgURI, endpoint)
			if err := os.WriteFile(filepath.Join(home, "hyp.yaml"), []byte(cfg), 0o600); err != nil {
				return nil, err
			}
			return exec.Command("taskset", "-c", strconv.Itoa(i%2), bin, "server", "--home", home, "--listen", addr, "--token-file", tokens), nil
		})
		if err != nil {
			return fig, err
		}
		defer p.term()
		rs = append(rs, p)
		urls = append(urls, strconv.Quote("http://"+p.addr))
	}

	// Every gateway is up before any forwards (their schedule never fires): then each is
	// asked for a run at once, over its control socket, so the window measures what the
	// replicas store while 50 senders send, not how the gateways' start-ups line up. They
	// send zstd bodies, as README advises between hyp nodes (with gzip, the default for
	// other receivers, the replica spends a tenth more CPU a row and stores a tenth fewer
	// rows a second: PERFORMANCE-LOG.md, 2026-12-08).
	ds := make([]*proc, gateways)
	err = parallel(gateways, 8, func(i int) error {
		list := append(append([]string{}, urls[i%replicas:]...), urls[:i%replicas]...)
		sinks := fmt.Sprintf("sinks:\n  central:\n    type: forward\n    url: [%s]\n    token_file: %q\n    compression: zstd\n    schedule: \"@every 8760h\"\n", strings.Join(list, ", "), tokens)
		var err error
		ds[i], err = gatewayDaemon(bin, homes[i], sinks)
		return err
	})
	for _, d := range ds {
		if d != nil {
			defer d.term()
		}
	}
	if err != nil {
		return fig, fmt.Errorf("start the gateways: %w", err)
	}
	clients := make([]*control.Client, gateways)
	for i, h := range homes {
		if clients[i], err = control.Dial(ctx, home.Socket(h)); err != nil {
			return fig, fmt.Errorf("gateway %s: %w", h, err)
		}
	}
	var idleCPU time.Duration // the gateways' start-ups, before any run
	for _, d := range ds {
		idleCPU += d.cpu()
	}
	start := time.Now()
	var runs errgroup.Group
	runCtx, cancelRuns := context.WithCancel(ctx)
	for _, c := range clients {
		runs.Go(func() error {
			res, err := c.RunSinks(runCtx, "central")
			for _, r := range res {
				if err == nil && r.Status != "ok" {
					err = fmt.Errorf("sink run: %+v", r)
				}
			}
			return err
		})
	}
	defer func() {
		if err != nil {
			cancelRuns() // a run that cannot finish must not hold the failed figure up
		}
		defer cancelRuns()
		if rerr := runs.Wait(); rerr != nil && err == nil {
			err = fmt.Errorf("a gateway's run: %w", rerr)
		}
	}()

	total := int64(gateways * rows)
	var first, stored, committed time.Time
	maxLag := 0.0
	var last cluster.Report
	for committed.IsZero() {
		// A run takes well under a minute here; one that has not finished in three is stuck,
		// and what it was doing is worth more than waiting longer.
		if time.Since(start) > 3*time.Minute {
			keep = true
			return fig, fmt.Errorf("not everything stored and committed after 3 minutes; the processes' logs are in %s (stderr.log in each home); %s",
				dir, stuck(last, homes, int64(rows)))
		}
		// Every 50 ms: the window is a few seconds, and each poll's error is up to one
		// interval at each end of it.
		time.Sleep(50 * time.Millisecond)
		rep, err := cluster.Status(ctx, pgURI)
		if err != nil {
			continue
		}
		last = rep
		var s, staged int64
		for _, g := range rep.Gateways {
			s += g.RowsStored
			staged += g.RowsStaged
			maxLag = max(maxLag, g.CommitLagSeconds)
		}
		now := time.Now()
		if s > 0 && first.IsZero() {
			first = now
		}
		if s >= total && stored.IsZero() {
			stored = now
		}
		if !stored.IsZero() && staged == 0 {
			committed = now
		}
	}
	var replicaCPU, gatewayCPU time.Duration
	for _, p := range rs {
		replicaCPU += p.cpu()
	}
	for _, d := range ds {
		gatewayCPU += d.cpu()
	}

	lakeRows, twice, err := lakeDuplicates(ctx, pgURI, endpoint)
	if err != nil {
		return fig, err
	}
	files, groups, err := stagedFiles(ctx, pgURI)
	if err != nil {
		return fig, err
	}
	window := stored.Sub(first)
	fig = clusterFigure{Gateways: gateways, Replicas: replicas, Rows: total, RowsPerSecond: float64(total) / window.Seconds(),
		MaxCommitLagS: maxLag, CommitIntervalS: clusterCommitInterval.Seconds(), StoredTwice: twice,
		StagedFilesPer1M: float64(files) * 1e6 / float64(total), ReplicaCPUPer1M: replicaCPU.Seconds() * 1e6 / float64(total),
		GatewayCPUSeconds: gatewayCPU.Seconds()}
	fmt.Printf("cluster: %d gateways x %d rows, zstd bodies -> %d replica(s) (taskset one core each), MinIO + PostgreSQL: %.0f rows/s stored (%d rows in %s from the first stored row; %s from the runs asked), all committed %s later, largest commit lag %.1fs; lake holds %d rows, %d stored twice; %d staged data files (%.1f per 1M rows) from %d groups; CPU: replicas %.1fs (%.2f per 1M rows), gateways %.1fs (%.1fs of it in the runs)\n",
		gateways, rows, replicas, float64(total)/window.Seconds(), total, window.Round(time.Millisecond), stored.Sub(start).Round(time.Millisecond),
		committed.Sub(stored).Round(time.Millisecond), maxLag, lakeRows, twice, files, float64(files)*1e6/float64(total), groups,
		replicaCPU.Seconds(), replicaCPU.Seconds()*1e6/float64(total), gatewayCPU.Seconds(), (gatewayCPU - idleCPU).Seconds())
	if replicas > 1 {
		d, err := committerFailover(ctx, pgURI, rs)
		if err != nil {
			return fig, err
		}
		fmt.Printf("cluster: the committer killed -9: another replica held the committer lock %s later\n", d.Round(time.Millisecond))
	}
	return fig, nil
}

// committerFailover kills the committer among rs and times until another replica holds
// the lock.
func committerFailover(ctx context.Context, pgURI string, rs []*proc) (time.Duration, error) {
	rep, err := cluster.Status(ctx, pgURI)
	if err != nil {
		return 0, err
	}
	var victim *proc
	for _, p := range rs {
		if strings.Contains(rep.Committer, fmt.Sprintf("-%d-", p.pid())) {
			victim = p
		}
	}
	if victim == nil {
		return 0, fmt.Errorf("no replica is the committer (%q)", rep.Committer)
	}
	victim.cmd.Process.Kill()
	<-victim.done
	killed := time.Now()
	for time.Since(killed) < time.Minute {
		if rep, err := cluster.Status(ctx, pgURI); err == nil && rep.Committer != "" && !strings.Contains(rep.Committer, fmt.Sprintf("-%d-", victim.pid())) {
			return time.Since(killed), nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, fmt.Errorf("no new committer a minute after the kill")
}

// lakeDuplicates reads the lake table back and counts its rows and the (gateway, seq) pairs
// it holds more than once.
func lakeDuplicates(ctx context.Context, pgURI, endpoint string) (rows, twice int, err error) {
	client, err := s3Client(ctx, endpoint)
	if err != nil {
		return 0, 0, err
	}
	tbl, err := lakeread.Read(ctx, lakeread.Options{Catalog: pgURI, Namespace: "hyp", S3: client}, "logs")
	if err != nil {
		return 0, 0, err
	}
	all, err := tbl.Rows(ctx, "_hyp_gateway", "_hyp_ingest_seq")
	if err != nil {
		return 0, 0, err
	}
	seen := map[string]bool{}
	for _, r := range all {
		k := fmt.Sprint(r[0], "/", r[1])
		if seen[k] {
			twice++
		}
		seen[k] = true
	}
	return len(all), twice, nil
}

// stagedFiles counts the data files the replicas staged (each a file Iceberg readers pay for
// until upkeep compacts it) and the stages they came in.
func stagedFiles(ctx context.Context, pgURI string) (files, stages int, err error) {
	conn, err := pgx.Connect(ctx, pgURI)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(ctx)
	err = conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT stage) FROM hyp_staged`).Scan(&files, &stages)
	return files, stages, err
}

// gatewayDaemon starts a daemon on home with gateway_id its base name and the given sinks.
func gatewayDaemon(bin, home, sinks string) (*proc, error) {
	return startOnFreePort(func(addr string) (*exec.Cmd, error) {
		cfg := fmt.Sprintf("gateway_id: %s\ningest:\n  listen: %s\n%s", filepath.Base(home), addr, sinks)
		if err := os.WriteFile(filepath.Join(home, "hyp.yaml"), []byte(cfg), 0o600); err != nil {
			return nil, err
		}
		return exec.Command(bin, "daemon", "--home", home), nil
	})
}

// errExited is a process that ended while it was being started: most often a listener
// address freeAddr handed out that something else took first (the port is free only when
// freeAddr looked), while another process answered the health check on it. Before this was
// checked, a gateway that never started left the cluster figure waiting for its rows.
var errExited = errors.New("the process exited while starting")

// startOnFreePort starts the process cmdFor makes for a fresh address (it writes whatever
// config names other addresses afresh too), again on another one when it exits while
// starting.
func startOnFreePort(cmdFor func(addr string) (*exec.Cmd, error)) (*proc, error) {
	var err error
	for range 3 {
		addr := freeAddr()
		var cmd *exec.Cmd
		if cmd, err = cmdFor(addr); err != nil {
			return nil, err
		}
		var p *proc
		if p, err = startProc(cmd, addr); !errors.Is(err, errExited) {
			return p, err
		}
	}
	return nil, err
}

// proc is a hyp process of the bench, healthy on addr.
type proc struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{} // closed once the process has ended
	once sync.Once
}

// stuck says what a run that did not finish had not done: the committer, each gateway (its
// home's base name, its gateway_id) the cluster never heard from, and each one short of its
// rows or with rows staged but not committed.
func stuck(rep cluster.Report, homes []string, rows int64) string {
	out := fmt.Sprintf("committer %q", rep.Committer)
	heard := map[string]bool{}
	for _, g := range rep.Gateways {
		heard[g.Gateway] = true
		if g.RowsStored < rows || g.RowsStaged > 0 {
			out += fmt.Sprintf("; %s stored %d, staged %d, last seen %s", g.Gateway, g.RowsStored, g.RowsStaged, g.LastSeen.Format(time.RFC3339Nano))
		}
	}
	for _, home := range homes {
		if name := filepath.Base(home); !heard[name] {
			out += "; " + name + " never sent"
		}
	}
	return out
}

// startProc starts cmd, its stderr (the process's log) going to stderr.log beside its home's
// hyp.yaml, and waits until it answers on addr.
func startProc(cmd *exec.Cmd, addr string) (*proc, error) {
	home := cmd.Args[slices.Index(cmd.Args, "--home")+1]
	logf, err := os.OpenFile(filepath.Join(home, "stderr.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, addr: addr, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	if err := waitHTTP("http://" + addr + "/healthz"); err != nil {
		p.term()
		return nil, err
	}
	// The health check may have been answered by whoever holds addr: the process is started
	// once it is the one listening there.
	for deadline := time.Now().Add(10 * time.Second); !listening.On(cmd.Process.Pid, addr); {
		select {
		case <-p.done:
			return nil, fmt.Errorf("%s on %s: %w (see %s)", filepath.Base(cmd.Path), addr, errExited, logf.Name())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.term()
			return nil, fmt.Errorf("%s answers on %s but is not seen listening there (see %s)", filepath.Base(cmd.Path), addr, logf.Name())
		}
	}
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// term stops the process with SIGTERM (it drains) and waits, once.
func (p *proc) term() {
	p.once.Do(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		<-p.done
	})
}

// cpu is the user+system CPU time the process has used so far.
func (p *proc) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid()))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name; utime and stime are the 14th and 15th.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// parallel runs fn(0..n-1) at most width at a time and returns the first error.
func parallel(n, width int, fn func(int) error) error {
	var g errgroup.Group
	g.SetLimit(width)
	for i := range n {
		g.Go(func() error { return fn(i) })
	}
	return g.Wait()
}
