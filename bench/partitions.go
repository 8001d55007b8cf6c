package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// daemon is bin/hyp daemon on a temporary home, with the default sink scheduled far away so
// that only the figures' own commands touch the cache.
type daemon struct {
	bin, home, addr string
	cmd             *exec.Cmd
}

func startDaemon(bin string) (*daemon, error) {
	home, err := os.MkdirTemp("", "hyp-bench-")
	if err != nil {
		return nil, err
	}
	d := &daemon{bin: bin, home: home, addr: freeAddr()}
	cfg := "ingest:\n  listen: " + d.addr + "\nsinks:\n  local-parquet:\n    type: blob\n    format: parquet\n    destination: {type: local-fs, path: " + filepath.Join(home, "exports") + "}\n    schedule: \"0 3 1 1 *\"\n"
	if err := os.WriteFile(filepath.Join(home, "hyp.yaml"), []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	d.cmd = exec.Command(bin, "daemon", "--home", home)
	d.cmd.Stderr = os.Stderr
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	if err := waitHTTP("http://" + d.addr + "/healthz"); err != nil {
		d.stop()
		return nil, err
	}
	return d, nil
}

func (d *daemon) stop() {
	if d.cmd.Process != nil {
		d.cmd.Process.Signal(os.Interrupt)
		d.cmd.Wait()
	}
	os.RemoveAll(d.home)
}

// rss reads the daemon's current and peak resident set size (KiB) from /proc.
func (d *daemon) rss() (cur, peak int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		return 0, 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			cur = n
		case "VmHWM:":
			peak = n
		}
	}
	return cur, peak
}

// hyp runs one CLI command against the daemon's home and times it.
func (d *daemon) hyp(args ...string) (string, time.Duration, error) {
	start := time.Now()
	out, err := exec.Command(d.bin, append(args, "--home", d.home)...).CombinedOutput()
	return string(out), time.Since(start), err
}

func (d *daemon) post(hc *http.Client, query string, body []byte) error {
	return postLogs(hc, d.addr, query, body)
}

// postLogs ingests an NDJSON body into dataset logs of the daemon listening on addr.
func postLogs(hc *http.Client, addr, query string, body []byte) error {
	resp, err := hc.Post("http://"+addr+"/v1/ingest/logs"+query, "application/x-ndjson", bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("ingest: HTTP %d", resp.StatusCode)
	}
	return nil
}

// trickleBench has sources partitions each receive a few rows every interval for dur, the
// many-small-commits case, and reports the daemon's peak RSS.
func trickleBench(bin string, sources int, every, dur time.Duration) error {
	d, err := startDaemon(bin)
	if err != nil {
		return err
	}
	defer d.stop()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	stop := time.Now().Add(dur)
	var wg sync.WaitGroup
	errs := make(chan error, sources)
	for s := range sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := fmt.Sprintf("?source=src-%05d", s)
			for i := 0; time.Now().Before(stop); i++ {
				if err := d.post(hc, q, body(i*3, 3)); err != nil {
					errs <- err
					return
				}
				time.Sleep(every)
			}
		}()
	}
	var peakSeen int64
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-time.After(time.Second):
		}
		cur, _ := d.rss()
		peakSeen = max(peakSeen, cur)
	}
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	if out, _, err := d.hyp("query", "sql", "SELECT count(*) AS n FROM logs", "--format", "jsonl"); err != nil {
		return fmt.Errorf("count: %v: %s", err, out)
	}
	cur, peak := d.rss()
	fmt.Printf("trickle: %d sources, 3 rows each every %s for %s (flush every 2s): peak RSS %d MiB, RSS at end %d MiB\n", sources, every, dur, max(peak, peakSeen)>>10, cur>>10)
	return nil
}

// manyBench creates sources partitions of one row each in one dataset, then times the
// commands that touch every partition.
func manyBench(bin string, sources int) error {
	d, err := startDaemon(bin)
	if err != nil {
		return err
	}
	defer d.stop()
	hc := &http.Client{}
	const perRequest = 500
	for s := 0; s < sources; s += perRequest {
		var b bytes.Buffer
		for i := s; i < min(s+perRequest, sources); i++ {
			fmt.Fprintf(&b, `{"source":"src-%05d","msg":"hello","id":%d}`+"\n", i, i)
		}
		if err := d.post(hc, "", b.Bytes()); err != nil {
			return err
		}
	}
	steps := []struct {
		label string
		args  []string
	}{
		{"first query right after ingest", []string{"query", "sql", "SELECT count(*) AS n FROM logs", "--format", "jsonl"}},
		{"query again", []string{"query", "sql", "SELECT count(*) AS n FROM logs", "--format", "jsonl"}},
		{"first sink status", []string{"sink", "status", "--json"}},
		{"sink status again", []string{"sink", "status", "--json"}},
	}
	fmt.Printf("many: %d partitions of 1 row in dataset logs\n", sources)
	for _, s := range steps {
		out, el, err := d.hyp(s.args...)
		res := strings.TrimSpace(out)
		if s.args[0] == "sink" {
			res = fmt.Sprintf("%d partitions listed", strings.Count(out, `"partition":`))
		}
		if len(res) > 200 {
			res = res[:200] + "..."
		}
		if err != nil {
			res = fmt.Sprintf("failed (%v): %s", err, res)
		}
		fmt.Printf("many: %s: %s: %s\n", s.label, el.Round(time.Millisecond), res)
	}
	cur, peak := d.rss()
	fmt.Printf("many: daemon RSS %d MiB, peak %d MiB\n", cur>>10, peak>>10)
	return nil
}
