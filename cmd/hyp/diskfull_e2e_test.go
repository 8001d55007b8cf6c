package main

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestFullDiskAnswersErrorsAndRecovers puts the home on a 48 MiB tmpfs and ingests until it
// is full: every answer is a 200 for rows that were kept or a 507/503 JSON error, the
// daemon stays up, and once space comes back ingest succeeds again without a restart; in
// the end every acknowledged row is there exactly once. It needs to mount a tmpfs (root).
func TestFullDiskAnswersErrorsAndRecovers(t *testing.T) {
	t.Parallel()
	mnt := t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=48m"); err != nil {
		t.Fatalf("mount a 48 MiB tmpfs (make test runs as root): %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	// Most of the disk, given back once it is full: enough for the flush to write the whole
	// log's rows into the tables then.
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, 38<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	home, addr := filepath.Join(mnt, "home"), freePort(t)
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := "ingest:\n  listen: " + addr + "\ncache:\n  flush_interval: 200ms\nsinks: {}\n"
	if err := os.WriteFile(filepath.Join(home, "hyp.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startHypDaemon(t, home, addr)
	defer d.stop(t)

	acked := map[int]bool{}
	next := 0
	send := func() (int, string) {
		t.Helper()
		var b bytes.Buffer
		from := next
		pad := make([]byte, 450)
		for i := 0; i < 500; i++ {
			// Random, so the cache's compressed tables fill the disk as surely as its log:
			// a flush keeping up with the senders must not keep the disk from filling.
			rand.Read(pad)
			fmt.Fprintf(&b, `{"id":%d,"pad":"%x"}`+"\n", next, pad)
			next++
		}
		code, m, err := post(addr, "/v1/ingest/logs?source=fill", b.Bytes())
		if err != nil {
			t.Fatalf("ingest on a full disk: %v (the daemon must answer)", err)
		}
		kind, _ := m["error"].(string)
		switch code {
		case http.StatusOK:
			for id := from; id < next; id++ {
				acked[id] = true
			}
		case http.StatusInsufficientStorage, http.StatusServiceUnavailable:
			if kind == "" {
				t.Fatalf("%d without a JSON error kind: %v", code, m)
			}
		default:
			t.Fatalf("ingest on a filling disk: %d %v, want 200, 507 or 503", code, m)
		}
		return code, kind
	}
	full := false
	for i := 0; i < 400 && !full; i++ {
		if code, kind := send(); code == http.StatusInsufficientStorage {
			if kind != "disk_full" {
				t.Fatalf("507 kind %q, want disk_full", kind)
			}
			full = true
		}
	}
	if !full {
		t.Fatal("the disk never filled")
	}
	for range 5 {
		send() // still full: errors, never a 200 for rows that were not kept
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("the daemon is down on a full disk: %v", err)
	}
	resp.Body.Close()

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	recovered := false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if code, _ := send(); code == http.StatusOK {
			recovered = true
			break
		}
	}
	if !recovered {
		t.Fatal("ingest did not succeed within 10 s of space coming back")
	}
	seen := map[int]int{}
	for _, r := range opRows(t, home, "logs") {
		seen[r.id]++
	}
	for id := range acked {
		if seen[id] != 1 {
			t.Fatalf("acknowledged id %d is stored %d times", id, seen[id])
		}
	}
	for id, n := range seen {
		if n > 1 {
			t.Fatalf("id %d stored %d times", id, n)
		}
	}
	t.Logf("%d rows acknowledged, %d stored", len(acked), len(seen))
}
