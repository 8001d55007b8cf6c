package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"
)

// TestForwardArrowThenNDJSONExactlyOnce holds SPEC 5's two wire formats to one ledger,
// through the built binary: a backlog of several units forwarded with `format: arrow` (the
// default, said explicitly) reaches a real `hyp server` as gzip Arrow IPC bodies, every row
// once; the daemon restarted with `format: ndjson` and its sink rewound to the earliest row
// sends every unit again as NDJSON, and the server stores none of it again, since units,
// seq ranges and batch ids do not depend on the format.
func TestForwardArrowThenNDJSONExactlyOnce(t *testing.T) {
	t.Parallel()
	srvHome, srvAddr, tokens := newServerHome(t)
	startHypServer(t, srvHome, srvAddr, tokens)
	target, err := url.Parse("http://" + srvAddr)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	types := map[string]int{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		types[r.Header.Get("Content-Type")+" "+r.Header.Get("Content-Encoding")]++
		mu.Unlock()
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	seen := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		out := types
		types = map[string]int{}
		return out
	}

	const batches, perBatch = 5, 5000 // 25,000 rows in two partitions: three units of 10,000 rows at most
	home, addr := t.TempDir(), freePort(t)
	sink := func(format string) string {
		return forwardSinkYAML("central", front.URL, tokens) + "    format: " + format + "\n"
	}
	writeDaemonYAML(t, home, addr, "", sink("arrow"))
	d := startHypDaemon(t, home, addr)
	f := newFeeder(0)
	for i := range batches {
		f.ingest(t, addr, "logs", []string{"web", "db"}[i%2], perBatch)
	}
	_, _, units := requireRun(t, home, "central", batches*perBatch).totals()
	if got := seen(); len(got) != 1 || got["application/vnd.apache.arrow.stream gzip"] != units || units < 3 {
		t.Errorf("requests by type and encoding %v, want all %d units (at least 3) as gzip Arrow", got, units)
	}
	checkServer(t, "forwarded as arrow", srvHome, f.want)
	d.stop(t)

	writeDaemonYAML(t, home, addr, "", sink("ndjson"))
	d = startHypDaemon(t, home, addr)
	if r := runHyp(t, home, time.Minute, "sink", "rewind", "central", "--to-earliest"); r.code != 0 {
		t.Fatalf("rewind: %s", r)
	}
	_, _, units = requireRun(t, home, "central", batches*perBatch).totals()
	if got := seen(); len(got) != 1 || got["application/x-ndjson gzip"] != units {
		t.Errorf("after the rewind: requests by type and encoding %v, want all %d units as gzip NDJSON", got, units)
	}
	d.stop(t)
	checkServer(t, "forwarded again as ndjson", srvHome, f.want)
}
