package forward

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeClock stands in for Now and Sleep: a Sleep records the wait and moves the clock, so
// tests assert the delays Send chose without waiting for them.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	slept []time.Duration
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)}
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Sleep records every wait Send asks for, even on a cancelled ctx, so a test can tell that
// Send did not plan a retry after the caller gave up.
func (f *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slept = append(f.slept, d)
	if err := ctx.Err(); err != nil {
		return err
	}
	f.now = f.now.Add(d)
	return nil
}

func (f *fakeClock) Slept() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.slept)
}

// reply is one scripted answer. retryAfter gets the fake clock's time so HTTP-dates can be
// relative to it.
type reply struct {
	status     int
	retryAfter func(now time.Time) string
	body       string
}

func ra(v string) func(time.Time) string { return func(time.Time) string { return v } }

func raDate(d time.Duration) func(time.Time) string {
	return func(now time.Time) string { return now.Add(d).UTC().Format(http.TimeFormat) }
}

// recorded is what the server saw of one request.
type recorded struct {
	method string
	path   string
	header http.Header
	body   []byte
}

// server answers with replies in order, repeating the last one once the script runs out.
type server struct {
	*httptest.Server
	mu   sync.Mutex
	seen []recorded
}

func (s *server) requests() []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

// record notes a request and returns its 0-based index.
func (s *server) record(r *http.Request) int {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, recorded{method: r.Method, path: r.URL.Path, header: r.Header.Clone(), body: body})
	return len(s.seen) - 1
}

func newServer(t *testing.T, h func(s *server, i int, w http.ResponseWriter, r *http.Request)) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h(s, s.record(r), w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func scriptServer(t *testing.T, clock *fakeClock, replies ...reply) *server {
	return newServer(t, func(_ *server, i int, w http.ResponseWriter, _ *http.Request) {
		rp := replies[min(i, len(replies)-1)]
		if rp.retryAfter != nil {
			w.Header().Set("Retry-After", rp.retryAfter(clock.Now()))
		}
		w.WriteHeader(rp.status)
		_, _ = io.WriteString(w, rp.body)
	})
}

func testChunk() Chunk {
	body := `{"msg":"a","_hyp_ingest_seq":11,"_hyp_ingested_at":"2025-06-01T11:00:00Z"}` + "\n" +
		`{"msg":"b","_hyp_ingest_seq":12,"_hyp_ingested_at":"2025-06-01T11:00:01Z"}` + "\n" +
		`{"msg":"c","_hyp_ingest_seq":13,"_hyp_ingested_at":"2025-06-01T11:00:02Z"}` + "\n"
	return Chunk{Dataset: "logs", Partition: "source=web", FirstSeq: 11, LastSeq: 13, Rows: 3, Body: []byte(body)}
}

func newTestClient(t *testing.T, url string, clock *fakeClock, logs io.Writer, mod func(*Options)) *Client {
	t.Helper()
	if logs == nil {
		logs = io.Discard
	}
	o := Options{URLs: []string{url}, Token: "s3cret", Gateway: "gw-1", Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Now: clock.Now, Sleep: clock.Sleep}
	if mod != nil {
		mod(&o)
	}
	c, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// kind names the one outcome an error stands for, so every case checks that it is exactly
// that kind and none of the others.
func kind(err error) string {
	var pe *PoisonError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &pe):
		return "poison"
	case errors.Is(err, ErrRetryable):
		return "retryable"
	case errors.Is(err, ErrUnauthorized):
		return "unauthorized"
	case errors.Is(err, ErrTooLarge):
		return "too_large"
	case errors.Is(err, ErrUnsupportedEncoding):
		return "unsupported_encoding"
	case errors.Is(err, ErrTLSRequired):
		return "tls_required"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "other"
}

func TestSendOutcomes(t *testing.T) {
	ok := reply{status: 200, body: `{"accepted":3,"duplicates":0}`}
	ms := time.Millisecond
	type tc struct {
		name     string
		replies  []reply
		maxWait  time.Duration
		want     string
		wantAck  Ack
		wantIn   []string // substrings of the error
		wantReqs int
		wantWait []time.Duration
		wantLog  string
	}
	cases := []tc{
		{name: "200", replies: []reply{ok}, want: "ok", wantAck: Ack{3, 0}, wantReqs: 1},
		{name: "200 with extra keys", replies: []reply{{status: 200, body: `{"accepted":1,"duplicates":2,"ledger":{"x":[1]},"v":"2"}`}},
			want: "ok", wantAck: Ack{1, 2}, wantReqs: 1},
		{name: "200 with counts not adding up", replies: []reply{{status: 200, body: `{"accepted":1,"duplicates":0}`}},
			want: "ok", wantAck: Ack{1, 0}, wantReqs: 1, wantLog: "do not add up"},
		{name: "200 malformed body is still an ack", replies: []reply{{status: 200, body: `<html>ok</html>`}, ok},
			want: "ok", wantAck: Ack{3, 0}, wantReqs: 1, wantLog: "malformed 200 body"},
		{name: "200 empty body is still an ack", replies: []reply{{status: 200}, ok},
			want: "ok", wantAck: Ack{3, 0}, wantReqs: 1, wantLog: "malformed 200 body"},
		{name: "401", replies: []reply{{status: 401, body: `{"error":"bad_token"}`}, ok},
			want: "unauthorized", wantIn: []string{"401", "bad_token", "token_file"}, wantReqs: 1},
		{name: "403", replies: []reply{{status: 403}, ok},
			want: "unauthorized", wantIn: []string{"403", "token_file"}, wantReqs: 1},
		{name: "400", replies: []reply{{status: 400, body: "{\"error\":\"bad_json\",\"line\":2}\n"}, ok},
			want: "poison", wantIn: []string{"400", "bad_json"}, wantReqs: 1},
		{name: "422", replies: []reply{{status: 422, body: `{"error":"bad_seq"}`}, ok},
			want: "poison", wantIn: []string{"422", "bad_seq"}, wantReqs: 1},
		{name: "413", replies: []reply{{status: 413, body: `{"error":"too_large"}`}, ok},
			want: "too_large", wantIn: []string{"413", "split"}, wantReqs: 1},
		{name: "415", replies: []reply{{status: 415, body: `{"error":"unsupported_encoding"}`}, ok},
			want: "unsupported_encoding", wantIn: []string{"415", "unsupported_encoding", "compression"}, wantReqs: 1},
		{name: "Retry-After seconds", replies: []reply{{status: 503, retryAfter: ra("3")}, ok},
			want: "ok", wantAck: Ack{3, 0}, wantReqs: 2, wantWait: []time.Duration{3 * time.Second}},
		{name: "Retry-After HTTP-date", replies: []reply{{status: 429, retryAfter: raDate(7 * time.Second)}, ok},
			want: "ok", wantAck: Ack{3, 0}, wantReqs: 2, wantWait: []time.Duration{7 * time.Second}},
		{name: "Retry-After 0 falls back to the ladder", replies: []reply{{status: 503, retryAfter: ra("0")}, ok},
			want: "ok", wantAck: Ack{3, 0}, wantReqs: 2, wantWait: []time.Duration{250 * ms}},
		{name: "Retry-After garbage falls back to the ladder", replies: []reply{{status: 503, retryAfter: ra("soon")}, ok},
			want: "ok", wantAck: Ack{3, 0}, wantReqs: 2, wantWait: []time.Duration{250 * ms}},
		{name: "Retry-After negative falls back to the ladder", replies: []reply{{status: 429, retryAfter: ra("-5")}, ok},
			want: "ok", wantAck: Ack{3, 0}, wantReqs: 2, wantWait: []time.Duration{250 * ms}},
		{name: "Retry-After past date falls back to the ladder", replies: []reply{{status: 503, retryAfter: raDate(-time.Minute)}, ok},
			want: "ok", wantAck: Ack{3, 0}, wantReqs: 2, wantWait: []time.Duration{250 * ms}},
		{name: "Retry-After capped at MaxWait", replies: []reply{{status: 503, retryAfter: ra("3600")}, ok},
			want: "ok", wantAck: Ack{3, 0}, wantReqs: 2, wantWait: []time.Duration{60 * time.Second}},
		{name: "ladder advances only when it is used",
			replies: []reply{{status: 503, retryAfter: ra("x")}, {status: 503, retryAfter: ra("4")}, {status: 502}, {status: 504}, ok},
			want:    "ok", wantAck: Ack{3, 0}, wantReqs: 5, wantWait: []time.Duration{250 * ms, 4 * time.Second, 500 * ms, time.Second}},
		{name: "ladder repeats its last step", maxWait: time.Hour,
			replies: []reply{{status: 503}, {status: 503}, {status: 503}, {status: 503}, {status: 503}, {status: 503}, {status: 503}, {status: 503}, {status: 503}, ok},
			want:    "ok", wantAck: Ack{3, 0}, wantReqs: 10,
			wantWait: []time.Duration{250 * ms, 500 * ms, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, 30 * time.Second, 30 * time.Second}},
		{name: "MaxWait exhausted", maxWait: 2 * time.Second, replies: []reply{{status: 503, body: `{"error":"overloaded"}`}},
			want: "retryable", wantIn: []string{"503", "overloaded", "4 attempts"}, wantReqs: 4,
			wantWait: []time.Duration{250 * ms, 500 * ms, time.Second}},
		{name: "Retry-After beyond what is left of MaxWait", maxWait: 10 * time.Second, replies: []reply{{status: 429, retryAfter: ra("8")}},
			want: "retryable", wantIn: []string{"429", "2 attempts"}, wantReqs: 2, wantWait: []time.Duration{8 * time.Second}},
	}
	// Every retryable status, and the ones SPEC 5 does not name, takes one ladder step.
	for _, st := range []int{429, 500, 502, 503, 504, 404, 409, 302, 201, 204} {
		cases = append(cases, tc{name: "retry " + strconv.Itoa(st), replies: []reply{{status: st}, ok},
			want: "ok", wantAck: Ack{3, 0}, wantReqs: 2, wantWait: []time.Duration{250 * ms}})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			srv := scriptServer(t, clock, tc.replies...)
			var logs bytes.Buffer
			c := newTestClient(t, srv.URL, clock, &logs, func(o *Options) { o.MaxWait = tc.maxWait })
			rc, err := c.Send(context.Background(), testChunk())
			if got := kind(err); got != tc.want {
				t.Fatalf("outcome %s (err %v), want %s", got, err, tc.want)
			}
			if ack := rc.Ack; ack != tc.wantAck {
				t.Errorf("ack %+v, want %+v", ack, tc.wantAck)
			}
			for _, s := range tc.wantIn {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			if tc.want == "poison" {
				var pe *PoisonError
				errors.As(err, &pe)
				if pe.Status != tc.replies[0].status || pe.Body != strings.TrimSpace(tc.replies[0].body) {
					t.Errorf("poison %+v, want status %d body %q", pe, tc.replies[0].status, tc.replies[0].body)
				}
			}
			if n := len(srv.requests()); n != tc.wantReqs {
				t.Errorf("%d requests, want %d", n, tc.wantReqs)
			}
			if got := clock.Slept(); !slices.Equal(got, tc.wantWait) {
				t.Errorf("waits %v, want %v", got, tc.wantWait)
			}
			if tc.wantLog != "" && !strings.Contains(logs.String(), tc.wantLog) {
				t.Errorf("log %q does not mention %q", logs.String(), tc.wantLog)
			}
		})
	}
}

func TestSendRequest(t *testing.T) {
	for _, tc := range []struct{ base, wantPath string }{
		{"", "/v1/ingest/logs"},
		{"/", "/v1/ingest/logs"},
		{"/central", "/central/v1/ingest/logs"},
		{"/central/", "/central/v1/ingest/logs"},
	} {
		t.Run(tc.base, func(t *testing.T) {
			clock := newFakeClock()
			srv := scriptServer(t, clock, reply{status: 200, body: `{"accepted":3,"duplicates":0}`})
			c := newTestClient(t, srv.URL+tc.base, clock, nil, nil)
			ch := testChunk()
			if _, err := c.Send(context.Background(), ch); err != nil {
				t.Fatal(err)
			}
			reqs := srv.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			r := reqs[0]
			if r.method != http.MethodPost || r.path != tc.wantPath {
				t.Errorf("%s %s, want POST %s", r.method, r.path, tc.wantPath)
			}
			want := map[string]string{
				"Authorization":   "Bearer s3cret",
				"Content-Type":    "application/x-ndjson",
				"X-Hyp-Gateway":   "gw-1",
				"X-Hyp-Partition": "source=web",
				"X-Hyp-Batch-Id":  BatchID("gw-1", "", "logs", "source=web", 11, 13),
				"X-Hyp-Seq-Range": "11-13",
				"Content-Length":  strconv.Itoa(len(ch.Body)),
			}
			for k, v := range want {
				if got := r.header.Values(k); len(got) != 1 || got[0] != v {
					t.Errorf("header %s = %q, want [%q]", k, got, v)
				}
			}
			if got := r.header.Values("X-Hyp-Incarnation"); len(got) != 0 {
				t.Errorf("X-Hyp-Incarnation %q from a cache of the incarnation \"\", want none", got)
			}
			if r.header.Get("Content-Encoding") != "" {
				t.Errorf("Content-Encoding %q, want none", r.header.Get("Content-Encoding"))
			}
			if !bytes.Equal(r.body, ch.Body) {
				t.Errorf("body %q, want %q", r.body, ch.Body)
			}
		})
	}
}

// TestSendRetriesSameRequest holds the dedupe contract: a retry is byte-for-byte the same
// request, so the server's ledger recognises it.
func TestSendRetriesSameRequest(t *testing.T) {
	clock := newFakeClock()
	srv := scriptServer(t, clock, reply{status: 503}, reply{status: 200, body: `{"accepted":0,"duplicates":3}`})
	c := newTestClient(t, srv.URL, clock, nil, nil)
	if _, err := c.Send(context.Background(), testChunk()); err != nil {
		t.Fatal(err)
	}
	reqs := srv.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	for _, k := range []string{"X-Hyp-Batch-Id", "X-Hyp-Seq-Range", "X-Hyp-Partition", "Authorization"} {
		if a, b := reqs[0].header.Get(k), reqs[1].header.Get(k); a != b {
			t.Errorf("%s changed between attempts: %q then %q", k, a, b)
		}
	}
	if !bytes.Equal(reqs[0].body, reqs[1].body) {
		t.Error("body changed between attempts")
	}
}

// hijack takes the connection from the server so a test can break it at a chosen byte.
func hijack(t *testing.T, w http.ResponseWriter) net.Conn {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
	}
	return conn
}

func TestSendBrokenConnection(t *testing.T) {
	for _, tc := range []struct {
		name     string
		first    func(t *testing.T, w http.ResponseWriter)
		wantReqs int
		wantAck  Ack
		wantLog  string
	}{
		{name: "reset before any answer", wantReqs: 2, wantAck: Ack{3, 0}, first: func(t *testing.T, w http.ResponseWriter) {
			conn := hijack(t, w)
			_ = conn.(*net.TCPConn).SetLinger(0) // close with RST, not FIN
			_ = conn.Close()
		}},
		{name: "EOF inside the status line", wantReqs: 2, wantAck: Ack{3, 0}, first: func(t *testing.T, w http.ResponseWriter) {
			conn := hijack(t, w)
			_, _ = io.WriteString(conn, "HTTP/1.1 20")
			_ = conn.Close()
		}},
		{name: "EOF inside a 503 body", wantReqs: 2, wantAck: Ack{3, 0}, first: func(t *testing.T, w http.ResponseWriter) {
			conn := hijack(t, w)
			_, _ = io.WriteString(conn, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 100\r\n\r\n{\"err")
			_ = conn.Close()
		}},
		// The status line already said the rows are durable: re-sending would break
		// "never re-send after a 200".
		{name: "EOF inside a 200 body", wantReqs: 1, wantAck: Ack{3, 0}, wantLog: "malformed 200 body", first: func(t *testing.T, w http.ResponseWriter) {
			conn := hijack(t, w)
			_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"accepted\":3,")
			_ = conn.Close()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, func(_ *server, i int, w http.ResponseWriter, _ *http.Request) {
				if i == 0 {
					tc.first(t, w)
					return
				}
				_, _ = io.WriteString(w, `{"accepted":3,"duplicates":0}`)
			})
			clock := newFakeClock()
			var logs bytes.Buffer
			c := newTestClient(t, srv.URL, clock, &logs, nil)
			rc, err := c.Send(context.Background(), testChunk())
			if err != nil {
				t.Fatal(err)
			}
			if ack := rc.Ack; ack != tc.wantAck {
				t.Errorf("ack %+v, want %+v", ack, tc.wantAck)
			}
			if n := len(srv.requests()); n != tc.wantReqs {
				t.Errorf("%d requests, want %d", n, tc.wantReqs)
			}
			if tc.wantLog != "" && !strings.Contains(logs.String(), tc.wantLog) {
				t.Errorf("log %q does not mention %q", logs.String(), tc.wantLog)
			}
		})
	}
}

func TestSendConnectionRefused(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	clock := newFakeClock()
	c := newTestClient(t, url, clock, nil, func(o *Options) { o.MaxWait = time.Second })
	_, err := c.Send(context.Background(), testChunk())
	if kind(err) != "retryable" || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("err %v, want ErrRetryable wrapping ECONNREFUSED", err)
	}
	if got, want := clock.Slept(), []time.Duration{250 * time.Millisecond, 500 * time.Millisecond}; !slices.Equal(got, want) {
		t.Errorf("waits %v, want %v", got, want)
	}
}

func TestSendStalledServer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		stalls   int
		want     string
		wantReqs int
	}{
		{name: "recovers", stalls: 1, want: "ok", wantReqs: 2},
		// MaxWait 300ms fits one 250ms ladder step, not the next 500ms one.
		{name: "never answers", stalls: 1 << 30, want: "retryable", wantReqs: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			srv := newServer(t, func(_ *server, i int, w http.ResponseWriter, r *http.Request) {
				if i < tc.stalls {
					select {
					case <-r.Context().Done():
					case <-release:
					}
					return
				}
				_, _ = io.WriteString(w, `{"accepted":3,"duplicates":0}`)
			})
			t.Cleanup(func() { close(release) }) // runs before srv.Close, which waits for handlers
			clock := newFakeClock()
			c := newTestClient(t, srv.URL, clock, nil, func(o *Options) {
				o.RequestTimeout = 50 * time.Millisecond
				o.MaxWait = 300 * time.Millisecond
			})
			_, err := c.Send(context.Background(), testChunk())
			if got := kind(err); got != tc.want {
				t.Fatalf("outcome %s (err %v), want %s", got, err, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), "request timeout") {
				t.Errorf("error %q does not name the request timeout", err)
			}
			if n := len(srv.requests()); n != tc.wantReqs {
				t.Errorf("%d requests, want %d", n, tc.wantReqs)
			}
		})
	}
}

func TestSendCancel(t *testing.T) {
	t.Run("during wait", func(t *testing.T) {
		clock := newFakeClock()
		srv := scriptServer(t, clock, reply{status: 503, retryAfter: ra("30")})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c := newTestClient(t, srv.URL, clock, nil, func(o *Options) {
			o.Sleep = func(ctx context.Context, _ time.Duration) error {
				cancel()
				<-ctx.Done()
				return ctx.Err()
			}
		})
		_, err := c.Send(ctx, testChunk())
		if kind(err) != "canceled" {
			t.Fatalf("err %v, want context.Canceled", err)
		}
		if n := len(srv.requests()); n != 1 {
			t.Errorf("%d requests, want 1", n)
		}
	})
	t.Run("during request", func(t *testing.T) {
		entered := make(chan struct{})
		release := make(chan struct{})
		srv := newServer(t, func(_ *server, _ int, _ http.ResponseWriter, r *http.Request) {
			close(entered)
			select {
			case <-r.Context().Done():
			case <-release:
			}
		})
		t.Cleanup(func() { close(release) })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			<-entered
			cancel()
		}()
		clock := newFakeClock()
		c := newTestClient(t, srv.URL, clock, nil, nil) // default 30s RequestTimeout must not be what ends it
		_, err := c.Send(ctx, testChunk())
		if kind(err) != "canceled" {
			t.Fatalf("err %v, want context.Canceled", err)
		}
		if len(clock.Slept()) != 0 {
			t.Errorf("planned waits %v after cancel, want none", clock.Slept())
		}
	})
	t.Run("before send", func(t *testing.T) {
		clock := newFakeClock()
		srv := scriptServer(t, clock, reply{status: 200, body: `{"accepted":3,"duplicates":0}`})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		c := newTestClient(t, srv.URL, clock, nil, nil)
		if _, err := c.Send(ctx, testChunk()); kind(err) != "canceled" {
			t.Fatalf("err %v, want context.Canceled", err)
		}
		if n := len(srv.requests()); n != 0 {
			t.Errorf("%d requests, want 0", n)
		}
	})
}

func TestSleepCtx(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sleepCtx(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled sleep: %v, want context.Canceled", err)
	}
	if err := sleepCtx(context.Background(), time.Nanosecond); err != nil {
		t.Errorf("short sleep: %v", err)
	}
}

// TestSendDoesNotFollowRedirects uses a plain http.Client, whose own policy would follow
// the 307: the Client must override it.
func TestSendDoesNotFollowRedirects(t *testing.T) {
	srv := newServer(t, func(_ *server, i int, w http.ResponseWriter, r *http.Request) {
		if i == 0 {
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
			return
		}
		_, _ = io.WriteString(w, `{"accepted":3,"duplicates":0}`)
	})
	clock := newFakeClock()
	c := newTestClient(t, srv.URL, clock, nil, func(o *Options) { o.HTTPClient = &http.Client{} })
	if _, err := c.Send(context.Background(), testChunk()); err != nil {
		t.Fatal(err)
	}
	for _, r := range srv.requests() {
		if r.path != "/v1/ingest/logs" {
			t.Errorf("followed a redirect to %s %s", r.method, r.path)
		}
	}
}

func TestSendRejectsBadChunk(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Chunk)
	}{
		{"no dataset", func(c *Chunk) { c.Dataset = "" }},
		{"bare source", func(c *Chunk) { c.Partition = "web" }},
		{"gateway partition", func(c *Chunk) { c.Partition = "gateway=g/source=web" }},
		{"control character", func(c *Chunk) { c.Partition = "source=a\nb" }},
		{"descending range", func(c *Chunk) { c.FirstSeq, c.LastSeq = 13, 11 }},
		{"negative seq", func(c *Chunk) { c.FirstSeq = -1 }},
		{"no rows", func(c *Chunk) { c.Rows = 0 }},
		{"more rows than seqs", func(c *Chunk) { c.Rows = 4 }},
		{"empty body", func(c *Chunk) { c.Body = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			srv := scriptServer(t, clock, reply{status: 200, body: `{"accepted":3,"duplicates":0}`})
			c := newTestClient(t, srv.URL, clock, nil, nil)
			ch := testChunk()
			tc.mod(&ch)
			if _, err := c.Send(context.Background(), ch); kind(err) != "other" {
				t.Fatalf("err %v, want a plain invalid-chunk error", err)
			}
			if n := len(srv.requests()); n != 0 {
				t.Errorf("%d requests, want 0", n)
			}
		})
	}
}

func TestNew(t *testing.T) {
	valid := Options{URLs: []string{"https://central.example:8443/hyp"}, Token: "t", Gateway: "gw-1"}
	for _, tc := range []struct {
		name    string
		mod     func(*Options)
		wantErr string
	}{
		{"valid", func(*Options) {}, ""},
		{"http", func(o *Options) { o.URLs = []string{"http://10.0.0.1:8080"} }, ""},
		{"custom ladder", func(o *Options) { o.Ladder = []time.Duration{time.Second} }, ""},
		{"no scheme", func(o *Options) { o.URLs = []string{"central.example"} }, "scheme"},
		{"ftp", func(o *Options) { o.URLs = []string{"ftp://central.example"} }, "scheme"},
		{"no host", func(o *Options) { o.URLs = []string{"http://"} }, "no host"},
		{"query", func(o *Options) { o.URLs = []string{"http://h/?a=1"} }, "query"},
		{"empty query", func(o *Options) { o.URLs = []string{"http://h/?"} }, "query"},
		{"fragment", func(o *Options) { o.URLs = []string{"http://h/#f"} }, "fragment"},
		{"unparsable", func(o *Options) { o.URLs = []string{"http://h:port"} }, "url"},
		{"no gateway", func(o *Options) { o.Gateway = "" }, "gateway"},
		{"bad gateway", func(o *Options) { o.Gateway = "a/b" }, "gateway"},
		{"dotted gateway (SPEC 5 allows it)", func(o *Options) { o.Gateway = "web-1.eu" }, ""},
		{"no token", func(o *Options) { o.Token = "" }, "token_file"},
		{"token with newline", func(o *Options) { o.Token = "t\n" }, "token_file"},
		{"zero ladder step", func(o *Options) { o.Ladder = []time.Duration{time.Second, 0} }, "ladder step 1"},
		{"negative max wait", func(o *Options) { o.MaxWait = -time.Second }, "max wait"},
		{"negative request timeout", func(o *Options) { o.RequestTimeout = -time.Second }, "request timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := valid
			tc.mod(&o)
			_, err := New(o)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("New: %v, want an error mentioning %q", err, tc.wantErr)
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	ladder := []time.Duration{time.Second}
	c, err := New(Options{URLs: []string{"http://h/"}, Token: "t", Gateway: "g", Ladder: ladder})
	if err != nil {
		t.Fatal(err)
	}
	ladder[0] = time.Hour // the Client must not share the caller's slice
	if c.reps.rs[0].endpoint != "http://h" || c.maxWait != 60*time.Second || c.requestTimeout != 30*time.Second ||
		!slices.Equal(c.ladder, []time.Duration{time.Second}) || c.log == nil || c.now == nil || c.sleep == nil || c.http == nil {
		t.Errorf("defaults not applied: %+v", c)
	}
	c, err = New(Options{URLs: []string{"http://h"}, Token: "t", Gateway: "g"})
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second,
		5 * time.Second, 10 * time.Second, 30 * time.Second}
	if !slices.Equal(c.ladder, want) {
		t.Errorf("default ladder %v, want %v", c.ladder, want)
	}
}

// A cache's incarnation goes out as X-Hyp-Incarnation and into the batch id.
func TestSendIncarnation(t *testing.T) {
	clock := newFakeClock()
	srv := scriptServer(t, clock, reply{status: 200, body: `{"accepted":3,"duplicates":0}`})
	c := newTestClient(t, srv.URL, clock, nil, func(o *Options) { o.Incarnation = "0123abcd" })
	if _, err := c.Send(context.Background(), testChunk()); err != nil {
		t.Fatal(err)
	}
	r := srv.requests()[0]
	if got := r.header.Values("X-Hyp-Incarnation"); len(got) != 1 || got[0] != "0123abcd" {
		t.Errorf("X-Hyp-Incarnation %q", got)
	}
	if got, want := r.header.Get("X-Hyp-Batch-Id"), BatchID("gw-1", "0123abcd", "logs", "source=web", 11, 13); got != want {
		t.Errorf("X-Hyp-Batch-Id %s, want %s", got, want)
	}
}
