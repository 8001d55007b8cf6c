package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// These tests hold the public listeners to their bounds on request bodies (README, "Request
// bodies are bounded"): a trickling body is cut off, and body bytes held at once are capped.

// openPost sends the headers of a POST declaring length bytes on a new connection, and
// returns the connection and a channel with the reply once it comes.
func openPost(t *testing.T, addr, path string, length int, header string) (net.Conn, <-chan *http.Response) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-ndjson\r\n%sContent-Length: %d\r\n\r\n", path, addr, header, length); err != nil {
		t.Fatal(err)
	}
	reply := make(chan *http.Response, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			close(reply) // the connection ended without a reply
			return
		}
		reply <- resp
	}()
	return conn, reply
}

func replyKind(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e struct{ Error string }
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("reply %d %q is not a JSON error: %v", resp.StatusCode, b, err)
	}
	return e.Error
}

// trickleUntilCut sends a byte every 200 ms on a body declaring 16 MiB and expects the
// listener to answer 408 body_timeout after its 10 s grace.
func trickleUntilCut(t *testing.T, addr, path, header string) {
	t.Helper()
	conn, reply := openPost(t, addr, path, 16<<20, header)
	start := time.Now()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case resp, ok := <-reply:
			if !ok {
				t.Fatalf("the trickling connection was closed without a reply after %s", time.Since(start))
			}
			if kind := replyKind(t, resp); resp.StatusCode != http.StatusRequestTimeout || kind != "body_timeout" {
				t.Fatalf("trickling body: %d %s, want 408 body_timeout", resp.StatusCode, kind)
			}
			if d := time.Since(start); d < 9*time.Second {
				t.Errorf("cut off after %s, inside the 10 s grace", d)
			}
			return
		case <-timeout:
			t.Fatal("a body trickling 5 bytes/s was not cut off within 30 s")
		case <-tick.C:
			_, _ = conn.Write([]byte("{"))
		}
	}
}

func TestEdgeTricklingBodyIsCutOff(t *testing.T) {
	t.Parallel()
	t.Run("daemon", func(t *testing.T) {
		t.Parallel()
		home, addr := newHome(t)
		startDaemon(t, home, addr)
		trickleUntilCut(t, addr, "/v1/ingest/logs", "")
		if code, m, err := post(addr, "/v1/ingest/logs?source=after", rows(0, 3, "after")); err != nil || code != 200 {
			t.Fatalf("ingest after the cut: %d %v %v", code, m, err)
		}
	})
	t.Run("server", func(t *testing.T) {
		t.Parallel()
		home, listen, tokenFile := newServerHome(t)
		startHypServer(t, home, listen, tokenFile)
		trickleUntilCut(t, listen, "/v1/ingest/logs", "Authorization: Bearer s3cr3t-gateway-token\r\n")
	})
}

// fullBody is a valid NDJSON body of exactly n bytes (n a multiple of 1024).
func fullBody(n int) []byte {
	line := `{"p":"` + strings.Repeat("x", 1024-9) + `"}` + "\n"
	return bytes.Repeat([]byte(line), n/len(line))
}

// TestEdgeBodyBudgetAnswers503: with the default 16 MiB body limit a daemon holds at most
// 64 MiB of bodies at once. Four requests each holding all but the last byte of a 16 MiB
// body fill it; the next request is refused 503 unavailable with Retry-After, and counted;
// once one of the four completes, ingest works again.
func TestEdgeBodyBudgetAnswers503(t *testing.T) {
	t.Parallel()
	home, addr := newHome(t)
	startDaemon(t, home, addr)
	body := fullBody(16 << 20)
	type holder struct {
		conn  net.Conn
		reply <-chan *http.Response
	}
	var holders []holder
	for range 4 {
		conn, reply := openPost(t, addr, "/v1/ingest/logs?source=big", len(body), "")
		if _, err := conn.Write(body[:len(body)-1]); err != nil {
			t.Fatal(err)
		}
		holders = append(holders, holder{conn, reply})
	}

	// Only once the daemon holds the four bodies whole is the budget spent; a request sent
	// while they still arrive may take the room one of them needs, and that one is refused.
	for deadline := time.Now().Add(20 * time.Second); scrape(t, addr, "hyp_ingest_body_bytes_held") < float64(4*(len(body)-1)); {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon holds %v body bytes, want %d", scrape(t, addr, "hyp_ingest_body_bytes_held"), 4*(len(body)-1))
		}
		time.Sleep(20 * time.Millisecond)
	}
	small := rows(0, 3, "small")
	var refused *http.Response
	for deadline := time.Now().Add(20 * time.Second); refused == nil; {
		if time.Now().After(deadline) {
			t.Fatal("no request was refused while 64 MiB of bodies were held")
		}
		resp, err := http.Post("http://"+addr+"/v1/ingest/logs?source=small", "application/x-ndjson", bytes.NewReader(small))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusServiceUnavailable {
			refused = resp
			break
		}
		resp.Body.Close()
		time.Sleep(50 * time.Millisecond) // the holders' bytes are still arriving
	}
	if got := refused.Header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q, want 1", got)
	}
	if kind := replyKind(t, refused); kind != "unavailable" {
		t.Errorf("error %q, want unavailable", kind)
	}
	if got := scrape(t, addr, `hyp_ingest_unavailable_total{reason="memory"}`); got < 1 {
		t.Errorf(`hyp_ingest_unavailable_total{reason="memory"} = %v, want at least 1`, got)
	}

	if _, err := holders[0].conn.Write(body[len(body)-1:]); err != nil {
		t.Fatal(err)
	}
	resp, ok := <-holders[0].reply
	if !ok {
		t.Fatal("the completed 16 MiB request got no reply")
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("completed 16 MiB request: %d %s", resp.StatusCode, replyKind(t, resp))
	}
	resp.Body.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		code, m, err := post(addr, "/v1/ingest/logs?source=small", small)
		if err != nil {
			t.Fatal(err)
		}
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ingest after a holder finished: %d %v", code, m)
		}
		time.Sleep(50 * time.Millisecond) // its handler gives the budget back after replying
	}
}

// scrape returns the value of one series from GET /metrics, or -1 when it is absent.
func scrape(t *testing.T, addr, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return f
		}
	}
	return -1
}
