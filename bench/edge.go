package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// edgeOptions shape the edge bench: conns connections each declaring a body of declared
// bytes, sent at rate bytes/s per connection (0: as fast as the connection takes it), for
// at most hold.
type edgeOptions struct {
	conns    int
	declared int64
	rate     int
	hold     time.Duration
}

// edgeBench measures what hostile or broken clients cost the daemon's ingest listener: it
// starts `bin daemon` on a temporary home, opens o.conns raw TCP connections that each send
// the headers of a POST /v1/ingest/logs declaring Content-Length o.declared and then the
// body at o.rate, and prints the daemon's peak RSS (VmHWM) and how the requests ended.
// Trickling (a small rate) is the slow-client attack; rate 0 is a flood of large bodies.
// The flood's body ends in a line that is not JSON, so an admitted request costs the
// daemon a full read and validation but stores nothing.
func edgeBench(bin string, o edgeOptions) error {
	home, err := os.MkdirTemp("", "hyp-edgebench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(home)
	addr := freeAddr()
	if err := os.WriteFile(filepath.Join(home, "hyp.yaml"), []byte("ingest:\n  listen: "+addr+"\nsinks: {}\n"), 0o600); err != nil {
		return err
	}
	cmd := exec.Command(bin, "daemon", "--home", home)
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	if err := waitHTTP("http://" + addr + "/healthz"); err != nil {
		return err
	}
	idle, err := procStatus(cmd.Process.Pid)
	if err != nil {
		return err
	}
	mode := fmt.Sprintf("trickling %d bytes/s each", o.rate)
	if o.rate == 0 {
		mode = "sending as fast as possible"
	}
	fmt.Printf("edge: %d connections declaring Content-Length %d, %s, for at most %s; daemon idle RSS %d MiB\n",
		o.conns, o.declared, mode, o.hold, idle.rss>>20)

	body := floodBody(o.declared)
	ctx, cancel := context.WithTimeout(context.Background(), o.hold)
	defer cancel()
	var (
		mu       sync.Mutex
		outcomes = map[string]int{}
		lasted   []time.Duration
		wg       sync.WaitGroup
	)
	start := time.Now()
	for i := 0; i < o.conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outcome, d := edgeRequest(ctx, addr, o, body)
			mu.Lock()
			outcomes[outcome]++
			lasted = append(lasted, d)
			mu.Unlock()
		}()
	}
	peakRSS := idle.rss
	sample := time.NewTicker(100 * time.Millisecond)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-sample.C:
			if st, err := procStatus(cmd.Process.Pid); err == nil {
				peakRSS = max(peakRSS, st.rss)
			}
		}
	}
	sample.Stop()
	elapsed := time.Since(start)
	st, err := procStatus(cmd.Process.Pid)
	if err != nil {
		return err
	}
	sort.Slice(lasted, func(i, j int) bool { return lasted[i] < lasted[j] })
	var names []string
	for k := range outcomes {
		names = append(names, k)
	}
	sort.Strings(names)
	var parts []string
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s: %d", k, outcomes[k]))
	}
	fmt.Printf("edge: outcomes after %s: %s\n", elapsed.Round(time.Millisecond), strings.Join(parts, ", "))
	fmt.Printf("edge: request lifetime median %s, max %s\n", lasted[len(lasted)/2].Round(time.Millisecond), lasted[len(lasted)-1].Round(time.Millisecond))
	fmt.Printf("edge: daemon peak RSS (VmHWM) %d MiB, highest sampled VmRSS %d MiB, VmRSS now %d MiB\n", st.hwm>>20, peakRSS>>20, st.rss>>20)
	return nil
}

// floodBody is a body of exactly n bytes: JSON rows, then a last line that is not JSON.
func floodBody(n int64) []byte {
	row := []byte(`{"level":"info","msg":"edge bench row","pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}` + "\n")
	b := bytes.Repeat(row, int(n)/len(row)+1)[:n]
	b[n-1] = '\n'
	if n > 1 {
		b[n-2] = '!'
	}
	return b
}

// edgeRequest sends one request as o says and returns how it ended (the status code the
// daemon answered, or what cut the connection) and how long it lasted.
func edgeRequest(ctx context.Context, addr string, o edgeOptions, body []byte) (string, time.Duration) {
	start := time.Now()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "dial error", time.Since(start)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	status := make(chan string, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			if ctx.Err() != nil {
				status <- "still open at the end"
				return
			}
			status <- "closed without reply"
			return
		}
		resp.Body.Close()
		status <- strconv.Itoa(resp.StatusCode)
	}()
	head := fmt.Sprintf("POST /v1/ingest/logs?source=edge HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-ndjson\r\nContent-Length: %d\r\n\r\n", addr, o.declared)
	if _, err := conn.Write([]byte(head)); err != nil {
		return "write error", time.Since(start)
	}
	sendBody(ctx, conn, o, body, status)
	return <-status, time.Since(start)
}

// sendBody writes the body at o.rate until it is all sent, the daemon answered (status has
// a value, which sendBody leaves there) or the connection fails.
func sendBody(ctx context.Context, conn net.Conn, o edgeOptions, body []byte, status chan string) {
	if o.rate == 0 {
		_, _ = conn.Write(body) // a refusal mid-body closes the connection; status says how it ended
		return
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	per := max(1, o.rate/10)
	for sent := 0; sent < len(body); sent += per {
		select {
		case <-ctx.Done():
			return
		case s := <-status:
			status <- s
			return
		case <-tick.C:
		}
		if _, err := conn.Write(body[sent:min(sent+per, len(body))]); err != nil {
			return
		}
	}
}

type memStatus struct{ rss, hwm int64 }

// procStatus reads VmRSS and VmHWM (peak RSS) of a process from /proc, in bytes.
func procStatus(pid int) (memStatus, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memStatus{}, fmt.Errorf("reading the daemon's memory figures: %w", err)
	}
	var st memStatus
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return memStatus{}, fmt.Errorf("parsing %s %q: %w", k, v, err)
		}
		if k == "VmRSS" {
			st.rss = kb << 10
		} else {
			st.hwm = kb << 10
		}
	}
	return st, nil
}
