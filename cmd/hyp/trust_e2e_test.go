package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// These tests hold `hyp server` to SPEC 5's trust rules through the built binaries: a chunk
// is trusted only for what its rows show, a token bound to gateways cannot send as another,
// and a copied home never silently shares the original's gateway ledger.

// forge posts one forward chunk straight to a server, as a token holder could, and returns
// the status and the error kind of the reply.
func forge(t *testing.T, srvAddr, token, gateway, seqRange string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+srvAddr+"/v1/ingest/logs", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set("X-Hyp-Gateway", gateway)
	req.Header.Set("X-Hyp-Partition", "source=web")
	req.Header.Set("X-Hyp-Batch-Id", "forged")
	req.Header.Set("X-Hyp-Seq-Range", seqRange)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		Error string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("reply %d is not JSON: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, m.Error
}

func gatewayIDOf(t *testing.T, home string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(home, "gateway_id"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A token holder forging chunks as another gateway, with a seq range no row bounds or with
// internal fields that are not what hyp writes, is refused, and the victim keeps every row.
func TestForgedChunksCannotSilenceAGateway(t *testing.T) {
	t.Parallel()
	srvHome, srvAddr, tokens := newServerHome(t)
	startHypServer(t, srvHome, srvAddr, tokens)
	home, addr := newHome(t)
	writeDaemonYAML(t, home, addr, "", forwardSinkYAML("central", "http://"+srvAddr, tokens))
	startHypDaemon(t, home, addr)
	f := newFeeder(0)
	f.ingest(t, addr, "logs", "web", 40)
	requireRun(t, home, "central", f.take())
	victim := gatewayIDOf(t, home)

	const at = `"_hyp_ingested_at":"2026-01-02T03:04:05Z"`
	tests := []struct {
		name, seqRange, body string
		kind                 string
	}{
		{"one row declaring every seq", "0-9223372036854775807", `{"id":-1,"_hyp_ingest_seq":41,` + at + `}`, "bad_seq_range"},
		{"range past the last row", "41-9223372036854775807", `{"id":-1,"_hyp_ingest_seq":41,` + at + `}`, "bad_seq_range"},
		{"range below the first row", "1-1000", `{"id":-1,"_hyp_ingest_seq":1000,` + at + `}`, "bad_seq_range"},
		{"no rows at all", "1-9223372036854775807", "\n", "bad_seq_range"},
		{"ingest time not a time", "41-41", `{"id":-1,"_hyp_ingest_seq":41,"_hyp_ingested_at":"not-a-time"}`, "bad_ingested_at"},
		{"seq zero", "0-0", `{"id":-1,"_hyp_ingest_seq":0,` + at + `}`, "bad_seq"},
	}
	token := "s3cr3t-gateway-token"
	for _, tc := range tests {
		if code, kind := forge(t, srvAddr, token, victim, tc.seqRange, tc.body+"\n"); code != http.StatusBadRequest || kind != tc.kind {
			t.Errorf("%s: got %d %q, want 400 %q", tc.name, code, kind, tc.kind)
		}
	}
	// The victim's next rows, whose seqs every forged range covered, all arrive.
	f.ingest(t, addr, "logs", "web", 40)
	f.ingest(t, addr, "logs", "db", 10)
	requireRun(t, home, "central", f.take())
	checkServer(t, "after forged chunks", srvHome, f.want)
}

// A token bound to gateway globs may send only as those gateways (403 gateway_not_allowed
// otherwise); a malformed glob stops the server at start, naming the line.
func TestBoundTokenCannotSendAsAnotherGateway(t *testing.T) {
	t.Parallel()
	srvHome, srvAddr, tokens := newServerHome(t)
	writeFile(t, tokens, "# gateway tokens\ntok-web web-*\ntok-any\n")
	startHypServer(t, srvHome, srvAddr, tokens)
	tokWeb := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokWeb, "tok-web\n")

	f := newFeeder(0)
	homeA, addrA := newHome(t)
	writeDaemonYAML(t, homeA, addrA, "", forwardSinkYAML("central", "http://"+srvAddr, tokWeb))
	// gateway_id is a top-level key; writeDaemonYAML writes none, so it is appended.
	appendYAML(t, homeA, "gateway_id: web-1.eu\n")
	startHypDaemon(t, homeA, addrA)
	f.ingest(t, addrA, "logs", "web", 30)
	requireRun(t, homeA, "central", f.take())

	homeB, addrB := newHome(t)
	writeDaemonYAML(t, homeB, addrB, "", forwardSinkYAML("central", "http://"+srvAddr, tokWeb))
	appendYAML(t, homeB, "gateway_id: db-1\n")
	startHypDaemon(t, homeB, addrB)
	other := newFeeder(1000)
	other.ingest(t, addrB, "logs", "web", 20)
	res, r := sinkRun(t, homeB, "central", time.Minute)
	if r.code != 1 || len(res.Sinks) != 1 || res.Sinks[0].Status != "failed" || !strings.Contains(strings.Join(res.Sinks[0].Errors, " "), "gateway_not_allowed") {
		t.Fatalf("a token bound to web-* sending as db-1: %s", r)
	}
	if code, kind := forge(t, srvAddr, "tok-web", "db-1", "1-1", `{"_hyp_ingest_seq":1,"_hyp_ingested_at":"2026-01-02T03:04:05Z"}`+"\n"); code != http.StatusForbidden || kind != "gateway_not_allowed" {
		t.Fatalf("forged as db-1 with tok-web: %d %q", code, kind)
	}
	checkServer(t, "bound tokens", srvHome, f.want)

	bad := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, bad, "tok-any\ntok-web web-[\n")
	badHome, _, _ := newServerHome(t)
	r = runHyp(t, badHome, time.Minute, "server", "--listen", freePort(t), "--token-file", bad)
	if r.code == 0 || !strings.Contains(r.stderr, "line 2") || !strings.Contains(r.stderr, "web-[") {
		t.Fatalf("server with a malformed glob: %s", r)
	}
}

func appendYAML(t *testing.T, home, text string) {
	t.Helper()
	fh, err := os.OpenFile(filepath.Join(home, "hyp.yaml"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

// copyHome copies a stopped daemon's home with cp -a, as a disk image or a backup would,
// and points the copy's ingest listener at a port of its own.
func copyHome(t *testing.T, home string, sinks ...string) (string, string) {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copied-home")
	if out, err := exec.Command("cp", "-a", home, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v: %s", err, out)
	}
	addr := freePort(t)
	writeDaemonYAML(t, dst, addr, "", sinks...)
	return dst, addr
}

// A copied home with a generated gateway id sends as a new one, so every row it holds
// reaches the server, also those the original had not exported when it was copied (both
// homes hold those, and each sends its own). One whose config still names the original's
// gateway_id fails its forward sink loudly until it is given a distinct one.
func TestCopiedHomeNeverSharesTheOriginalsLedger(t *testing.T) {
	t.Parallel()
	srvHome, srvAddr, tokens := newServerHome(t)
	startHypServer(t, srvHome, srvAddr, tokens)
	central := forwardSinkYAML("central", "http://"+srvAddr, tokens)
	// want counts how often each id must be on the server.
	want := map[int]int{}
	add := func(f *feeder) {
		for id := range f.want["logs"] {
			want[id]++
		}
		f.want = map[string]map[int]bool{}
	}

	t.Run("generated id", func(t *testing.T) {
		home, addr := newHome(t)
		writeDaemonYAML(t, home, addr, "", central)
		d := startHypDaemon(t, home, addr)
		exported, shared := newFeeder(0), newFeeder(100)
		exported.ingest(t, addr, "logs", "web", 40)
		requireRun(t, home, "central", exported.take())
		shared.ingest(t, addr, "logs", "web", 20) // in both homes, exported by neither yet
		d.stop(t)
		add(exported)
		for range 2 {
			for id := range shared.want["logs"] {
				want[id]++
			}
		}

		copied, copyAddr := copyHome(t, home, central)
		d = startHypDaemon(t, home, addr)
		c := startHypDaemon(t, copied, copyAddr)
		orig, cp := newFeeder(200), newFeeder(300)
		orig.ingest(t, addr, "logs", "web", 30)
		cp.ingest(t, copyAddr, "logs", "web", 30)
		requireRun(t, home, "central", 20+orig.take())
		requireRun(t, copied, "central", 20+cp.take())
		add(orig)
		add(cp)
		if a, b := gatewayIDOf(t, home), gatewayIDOf(t, copied); a == b {
			t.Fatalf("the copy still sends as %s", a)
		}
		if out := c.out.String(); !strings.Contains(out, "copied from another path or machine") || !strings.Contains(out, "old_gateway_id") {
			t.Fatalf("the copy did not warn about its new identity:\n%s", out)
		}
		if out := d.out.String(); strings.Contains(out, "copied from another path") {
			t.Fatalf("the original thinks it was copied:\n%s", out)
		}
		checkServerCounts(t, srvHome, want)
	})

	t.Run("configured id", func(t *testing.T) {
		home, addr := newHome(t)
		writeDaemonYAML(t, home, addr, "", central)
		appendYAML(t, home, "gateway_id: golden-1\n")
		d := startHypDaemon(t, home, addr)
		f := newFeeder(1000)
		f.ingest(t, addr, "logs", "web", 25)
		requireRun(t, home, "central", f.take())
		d.stop(t)
		add(f)

		copied, copyAddr := copyHome(t, home, central)
		appendYAML(t, copied, "gateway_id: golden-1\n")
		c := startHypDaemon(t, copied, copyAddr) // the copy still captures rows
		cp := newFeeder(2000)
		cp.ingest(t, copyAddr, "logs", "web", 15)
		res, r := sinkRun(t, copied, "central", time.Minute)
		if r.code != 1 || len(res.Sinks) != 1 || res.Sinks[0].Status != "failed" || !strings.Contains(strings.Join(res.Sinks[0].Errors, " "), "gateway identity conflict") {
			t.Fatalf("a copy configured as the original's gateway: %s", r)
		}
		if out := c.out.String(); !strings.Contains(out, "gateway identity conflict") {
			t.Fatalf("the copy did not log the conflict:\n%s", out)
		}
		checkServerCounts(t, srvHome, want)

		// The operator names the copy; it then sends everything it holds.
		c.stop(t)
		writeDaemonYAML(t, copied, copyAddr, "", central)
		appendYAML(t, copied, "gateway_id: golden-2\n")
		startHypDaemon(t, copied, copyAddr)
		// The rows the original exported before the copy was made are not sent again: the
		// copy's watermarks say so.
		requireRun(t, copied, "central", cp.take())
		add(cp)
		checkServerCounts(t, srvHome, want)
	})
}

// checkServerCounts compares how often each id is stored on the server with want.
func checkServerCounts(t *testing.T, srvHome string, want map[int]int) {
	t.Helper()
	got := map[int]int{}
	for _, id := range serverIDs(t, srvHome, []string{"logs"})["logs"] {
		got[id]++
	}
	var bad bytes.Buffer
	for id, n := range want {
		if got[id] != n {
			fmt.Fprintf(&bad, " id %d stored %d times, want %d;", id, got[id], n)
		}
	}
	for id, n := range got {
		if want[id] == 0 {
			fmt.Fprintf(&bad, " id %d stored %d times, want none;", id, n)
		}
	}
	if bad.Len() > 0 {
		t.Fatalf("server rows:%s", bad.String()[:min(bad.Len(), 2000)])
	}
}
