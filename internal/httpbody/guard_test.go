package httpbody

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

var testTooLarge = &Error{Status: http.StatusRequestEntityTooLarge, Kind: "too_large"}

// readHandler reads the body with Read and answers its error, or 200 with the body's length.
// hold, when not nil, keeps the request (and the budget it took) until it is closed.
func readHandler(max int64, hold chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		buf, rerr := Read(r, Limits{Sent: max, TooLarge: testTooLarge})
		if rerr != nil {
			WriteError(w, rerr)
			return
		}
		defer Release(buf)
		if hold != nil {
			<-hold
		}
		WriteJSON(w, http.StatusOK, fmt.Appendf(nil, "{\"len\":%d}\n", buf.Len()))
	}
}

func guard(t *testing.T, h http.Handler, b *Budget, p Pace) http.Handler {
	t.Helper()
	g, err := Guard(h, b, p)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func newBudget(t *testing.T, limit int64) *Budget {
	t.Helper()
	b, err := NewBudget(limit)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var roomyPace = Pace{Grace: time.Minute, MinRate: 1}

func serve(h http.Handler, body []byte, gz bool) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/v1/ingest/logs", bytes.NewReader(body))
	if gz {
		r.Header.Set("Content-Encoding", "gzip")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

func errorKind(t *testing.T, body []byte) string {
	t.Helper()
	var e struct{ Error string }
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("reply %q is not JSON: %v", body, err)
	}
	return e.Error
}

// TestBudgetRefusesBeyondCap: while one request holds most of the budget, the next is a
// 503 unavailable with Retry-After; once the first is done its bytes are back.
func TestBudgetRefusesBeyondCap(t *testing.T) {
	b := newBudget(t, 1000)
	hold := make(chan struct{})
	holding := guard(t, readHandler(1<<20, hold), b, roomyPace)
	h := guard(t, readHandler(1<<20, nil), b, roomyPace)

	first := make(chan *httptest.ResponseRecorder)
	go func() { first <- serve(holding, bytes.Repeat([]byte("a"), 700), false) }()
	for b.Held() != 700 {
		time.Sleep(time.Millisecond)
	}
	rec := serve(h, bytes.Repeat([]byte("b"), 400), false)
	if rec.Code != http.StatusServiceUnavailable || errorKind(t, rec.Body.Bytes()) != "unavailable" {
		t.Fatalf("over the budget: %d %s, want 503 unavailable", rec.Code, rec.Body)
	}
	if got := rec.Header().Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q, want 1", got)
	}
	if b.Refused() != 1 {
		t.Errorf("refused %d, want 1", b.Refused())
	}
	if b.Held() != 700 {
		t.Errorf("held %d after the refusal, want the first request's 700", b.Held())
	}
	if rec := serve(h, bytes.Repeat([]byte("c"), 300), false); rec.Code != http.StatusOK {
		t.Errorf("a body that fits: %d %s", rec.Code, rec.Body)
	}
	close(hold)
	if rec := <-first; rec.Code != http.StatusOK {
		t.Errorf("first request: %d %s", rec.Code, rec.Body)
	}
	if b.Held() != 0 {
		t.Errorf("held %d after every request ended, want 0", b.Held())
	}
}

// TestBudgetCountsDecompressedBytes: a small gzip body that inflates beyond the whole
// budget is refused for good (413; a 503 would be retried forever), though it is far under
// the size limit, and takes nothing from the budget.
func TestBudgetCountsDecompressedBytes(t *testing.T) {
	b := newBudget(t, 1000)
	h := guard(t, readHandler(1<<20, nil), b, roomyPace)
	z := gzipped(t, bytes.Repeat([]byte("x"), 5000), gzip.DefaultCompression)
	rec := serve(h, z, true)
	if rec.Code != http.StatusRequestEntityTooLarge || errorKind(t, rec.Body.Bytes()) != "decoded_too_large" {
		t.Fatalf("%d-byte gzip body of 5000 bytes, budget 1000: %d %s, want 413 decoded_too_large", len(z), rec.Code, rec.Body)
	}
	if b.Held() != 0 {
		t.Errorf("held %d after the refusal, want 0", b.Held())
	}
}

// TestDecodedLimit: Limits.Sent bounds the body as sent and Limits.Decoded its decompressed
// form, each answered with its own reply.
func TestDecodedLimit(t *testing.T) {
	decodedTooLarge := &Error{Status: http.StatusRequestEntityTooLarge, Kind: "decoded_too_large"}
	plain := bytes.Repeat([]byte("x"), 5000)
	z := gzipped(t, plain, gzip.DefaultCompression)
	for _, tc := range []struct {
		name     string
		lim      Limits
		body     []byte
		gz       bool
		wantCode int
		wantKind string
	}{
		{"compressed under Sent, decompressed under Decoded", Limits{Sent: 1000, Decoded: 5000}, z, true, 200, ""},
		{"compressed under Sent, decompressed over Decoded", Limits{Sent: 1000, Decoded: 4999}, z, true, 413, "decoded_too_large"},
		{"no Decoded: Sent bounds both", Limits{Sent: 1000}, z, true, 413, "too_large"},
		{"Decoded below Sent: Sent bounds both", Limits{Sent: 5000, Decoded: 10}, z, true, 200, ""},
		{"plain body over Sent, under Decoded", Limits{Sent: 4999, Decoded: 1 << 20}, plain, false, 413, "too_large"},
		{"compressed body over Sent", Limits{Sent: int64(len(z)) - 1, Decoded: 1 << 20}, z, true, 413, "too_large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.lim.TooLarge = testTooLarge
			if tc.lim.Decoded > 0 {
				tc.lim.DecodedTooLarge = decodedTooLarge
			}
			r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(tc.body))
			if tc.gz {
				r.Header.Set("Content-Encoding", "gzip")
			}
			buf, rerr := Read(r, tc.lim)
			switch {
			case tc.wantCode == 200 && rerr != nil:
				t.Fatalf("refused: %v", rerr)
			case tc.wantCode == 200 && !bytes.Equal(buf.Bytes(), plain):
				t.Fatalf("read %d bytes, want the %d decompressed", buf.Len(), len(plain))
			case tc.wantCode != 200 && (rerr == nil || rerr.Status != tc.wantCode || rerr.Kind != tc.wantKind):
				t.Fatalf("got %v, want %d %s", rerr, tc.wantCode, tc.wantKind)
			}
		})
	}
}

// TestBudgetReleasedOnPanic: a handler that dies after reading its body gives its bytes back.
func TestBudgetReleasedOnPanic(t *testing.T) {
	b := newBudget(t, 1000)
	h := guard(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, rerr := Read(r, Limits{Sent: 1 << 20, TooLarge: testTooLarge}); rerr != nil {
			t.Errorf("read: %v", rerr)
		}
		panic(http.ErrAbortHandler)
	}), b, roomyPace)
	func() {
		defer func() { _ = recover() }()
		serve(h, bytes.Repeat([]byte("a"), 600), false)
	}()
	if b.Held() != 0 {
		t.Fatalf("held %d after a panic, want 0", b.Held())
	}
}

// rawPost sends the headers of a POST declaring length bytes over a new connection.
func rawPost(t *testing.T, addr string, length int) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST /v1/ingest/logs HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", length)
	return conn
}

func quietServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// TestPaceCutsOffTricklingBody: a client that declares a large body and sends it a few
// bytes at a time is answered 408 body_timeout once it falls behind the minimum rate,
// instead of holding its connection (and buffer) for as long as it likes.
func TestPaceCutsOffTricklingBody(t *testing.T) {
	b := newBudget(t, 1<<20)
	srv := quietServer(t, guard(t, readHandler(1<<20, nil), b, Pace{Grace: 200 * time.Millisecond, MinRate: 1000}))
	conn := rawPost(t, srv.Listener.Addr().String(), 100_000)
	reply := make(chan *http.Response, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Error(err)
		}
		reply <- resp
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case resp := <-reply:
			if resp == nil {
				return
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusRequestTimeout || errorKind(t, body) != "body_timeout" {
				t.Fatalf("trickling body: %d %s, want 408 body_timeout", resp.StatusCode, body)
			}
			if !strings.Contains(string(body), "slower than 1000 bytes/s") {
				t.Errorf("message %s does not name the minimum rate", body)
			}
			for b.Held() != 0 {
				time.Sleep(time.Millisecond) // the handler's deferred release runs after the reply
			}
			return
		case <-timeout:
			t.Fatal("a body trickling 5 bytes every 20 ms was never cut off")
		case <-tick.C:
			_, _ = conn.Write([]byte("aaaaa")) // 250 bytes/s, a quarter of the minimum rate
		}
	}
}

// TestPaceLetsAFinishedBodyOutliveItsDeadline: once the body is in, the deadline no longer
// applies, so a handler that takes longer than the body's allowance to store it still has
// a live request context and its reply reaches the client.
func TestPaceLetsAFinishedBodyOutliveItsDeadline(t *testing.T) {
	b := newBudget(t, 1<<20)
	srv := quietServer(t, guard(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf, rerr := Read(r, Limits{Sent: 1 << 20, TooLarge: testTooLarge})
		if rerr != nil {
			WriteError(w, rerr)
			return
		}
		Release(buf)
		select {
		case <-r.Context().Done():
			WriteError(w, &Error{Status: http.StatusInternalServerError, Kind: "cancelled", Msg: ctxEnded(r)})
		case <-time.After(300 * time.Millisecond):
			WriteJSON(w, http.StatusOK, []byte("{}\n"))
		}
	}), b, Pace{Grace: 50 * time.Millisecond, MinRate: 1 << 20}))
	resp, err := http.Post(srv.URL, "application/x-ndjson", strings.NewReader("{}\n"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("slow handler after a complete body: %d %s, want 200", resp.StatusCode, body)
	}
}

func ctxEnded(r *http.Request) string { return "request context ended: " + r.Context().Err().Error() }

// TestPaceAdmitsSteadyBody: a body sent faster than the minimum rate is read whole even
// when it takes longer than the grace.
func TestPaceAdmitsSteadyBody(t *testing.T) {
	b := newBudget(t, 1<<20)
	srv := quietServer(t, guard(t, readHandler(1<<20, nil), b, Pace{Grace: 200 * time.Millisecond, MinRate: 1000}))
	conn := rawPost(t, srv.Listener.Addr().String(), 1000)
	for range 10 {
		conn.Write(bytes.Repeat([]byte("a"), 100)) // 100 bytes per 50 ms: 2000 bytes/s, 500 ms in all
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "{\"len\":1000}\n" {
		t.Fatalf("steady body: %d %s, want 200 with 1000 bytes", resp.StatusCode, body)
	}
}
