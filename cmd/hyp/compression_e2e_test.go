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
)

// TestForwardCompressions holds SPEC 3's `compression` to what it promises, through the built
// binary: with each of none, gzip and zstd a backlog of several units reaches a real `hyp
// server` exactly once, every request names its coding in Content-Encoding (none sends
// none), and `sink run --json` reports as `bytes` exactly the body bytes the server was sent.
// A proxy in front of the server counts those bytes as they arrive.
func TestForwardCompressions(t *testing.T) {
	t.Parallel()
	srvHome, srvAddr, tokens := newServerHome(t)
	startHypServer(t, srvHome, srvAddr, tokens)
	target, err := url.Parse("http://" + srvAddr)
	if err != nil {
		t.Fatal(err)
	}
	const batches, perBatch = 5, 5000 // 25,000 rows: three units of the forward sink's 10,000
	f := newFeeder(0)
	perRow := map[string]float64{}
	for _, comp := range []string{"none", "gzip", "zstd"} {
		var mu sync.Mutex
		var wire int64
		encodings := map[string]int{}
		proxy := httputil.NewSingleHostReverseProxy(target)
		front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			mu.Lock()
			wire += int64(len(body))
			encodings[r.Header.Get("Content-Encoding")]++
			mu.Unlock()
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
			proxy.ServeHTTP(w, r)
		}))
		t.Cleanup(front.Close)

		home, addr := t.TempDir(), freePort(t)
		writeDaemonYAML(t, home, addr, "", forwardSinkYAML("central", front.URL, tokens)+"    compression: "+comp+"\n")
		d := startHypDaemon(t, home, addr)
		for range batches {
			f.ingest(t, addr, "logs", "web-"+comp, perBatch)
		}
		res := requireRun(t, home, "central", batches*perBatch)
		d.stop(t)
		rows, sent, units := res.totals()
		mu.Lock()
		if sent != wire {
			t.Errorf("%s: sink run reports %d bytes, the server was sent %d", comp, sent, wire)
		}
		wantEncoding := comp
		if comp == "none" {
			wantEncoding = ""
		}
		if len(encodings) != 1 || encodings[wantEncoding] != units || units < 3 {
			t.Errorf("%s: requests by Content-Encoding %v, want all %d units (at least 3) with %q", comp, encodings, units, wantEncoding)
		}
		mu.Unlock()
		perRow[comp] = float64(sent) / float64(rows)
	}
	checkServer(t, "every compression", srvHome, f.want)
	for _, comp := range []string{"gzip", "zstd"} {
		if perRow[comp] > perRow["none"]/4 {
			t.Errorf("%s sent %.1f bytes a row, none %.1f: want it at least 4 times smaller", comp, perRow[comp], perRow["none"])
		}
	}
	t.Logf("wire bytes a row: %v", perRow)
}
