package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// pb appends a length-delimited protobuf field.
func pb(dst []byte, num int, payload []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(num)<<3|2)
	dst = binary.AppendUvarint(dst, uint64(len(payload)))
	return append(dst, payload...)
}

// wideResourceBody is an OTLP export request of n empty records (log records, spans or
// gauge points) under one resource whose attribute holds attrBytes: every row the daemon
// decodes repeats it. It is written by hand so that the bodies are exactly what an
// attacker would send.
func wideResourceBody(path string, n, attrBytes int) []byte {
	attr := pb(pb(nil, 1, []byte("big")), 2, pb(nil, 1, bytes.Repeat([]byte("x"), attrBytes)))
	resource := pb(nil, 1, pb(nil, 1, attr))
	records := bytes.Repeat([]byte{0x12, 0x00}, n) // field 2 of the scope message, empty
	var scope []byte
	if path == "/v1/metrics" {
		points := bytes.Repeat([]byte{0x0a, 0x00}, n) // Gauge.data_points
		metric := pb(pb(nil, 1, []byte("m")), 5, points)
		scope = pb(nil, 2, metric)
	} else {
		scope = records
	}
	return pb(nil, 1, append(resource, pb(nil, 2, scope)...))
}

// emptyRecordsBody is a request of one resource and one scope of n empty records, two bytes
// of body each.
func emptyRecordsBody(n int) []byte {
	return pb(nil, 1, pb(nil, 2, bytes.Repeat([]byte{0x12, 0x00}, n)))
}

func gz(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// postOTLP sends a gzipped protobuf body and returns the status and the reply.
func postOTLP(addr, path string, body []byte) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// peakRSS is a process's peak resident set (VmHWM) in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// TestSmallBodiesCannotCostGigabytes sends the bodies that killed the daemon before its
// budget covered decoded rows (issue 24): a few hundred bytes whose rows repeat a 64 KiB
// resource 100,000 times (6.5 GB of rows) on every OTLP signal, and three 16 MiB bodies of
// empty records at once (each decoding into about 2 GB of model). Each is answered 200,
// 400, 413 or 503; the daemon stays up within 300 MiB at its peak; a normal request is
// stored after them.
func TestSmallBodiesCannotCostGigabytes(t *testing.T) {
	home, addr := newHome(t)
	d := startDaemon(t, home, addr)
	answered := func(what string, code int, reply string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v (daemon: %s)", what, err, d.stderr)
		}
		switch code {
		case 200, 400, 413, 503:
		default:
			t.Errorf("%s: %d %s", what, code, reply)
		}
		t.Logf("%s: %d %.160s", what, code, reply)
	}
	for _, path := range []string{"/v1/logs", "/v1/traces", "/v1/metrics"} {
		body := gz(t, wideResourceBody(path, 100_000, 64<<10))
		code, reply, err := postOTLP(addr, path, body)
		answered(fmt.Sprintf("%s, %d bytes of 64 KiB resource and 100,000 empty records", path, len(body)), code, reply, err)
	}
	empty := gz(t, emptyRecordsBody(8<<20-16))
	for _, path := range []string{"/v1/logs", "/v1/traces"} {
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Go(func() {
				code, reply, err := postOTLP(addr, path, empty)
				answered(fmt.Sprintf("%s, %d bytes of 8M empty records (%d of 3 at once)", path, len(empty), i+1), code, reply, err)
			})
		}
		wg.Wait()
	}
	if peak := peakRSS(t, d.cmd.Process.Pid); peak > 300<<20 {
		t.Errorf("the daemon's peak RSS was %d MiB, want at most 300", peak>>20)
	} else {
		t.Logf("peak RSS %d MiB", peak>>20)
	}
	if code, m, err := post(addr, "/v1/ingest/after", rows(0, 10, "web")); err != nil || code != 200 {
		t.Fatalf("a normal request after the attack: %d %v %v (daemon: %s)", code, m, err, d.stderr)
	}
	if got := queryJSON(t, home, "select count(*) as n from after"); len(got) != 1 || fmt.Sprint(got[0]["n"]) != "10" {
		t.Fatalf("count after the attack: %v", got)
	}
}
