package forward

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// flight counts requests in flight per batch id across every replica of a test, and
// remembers the most it ever saw for one batch: more than one means a chunk was in flight
// to two replicas at once.
type flight struct {
	mu   sync.Mutex
	now  map[string]int
	most int
}

func newFlight() *flight { return &flight{now: map[string]int{}} }

// enter counts one request of batch and returns what ends it (idempotent).
func (f *flight) enter(batch string) func() {
	f.mu.Lock()
	f.now[batch]++
	f.most = max(f.most, f.now[batch])
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			f.now[batch]--
			f.mu.Unlock()
		})
	}
}

func (f *flight) max() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.most
}

// countingTransport counts, on the client's side, a request as in flight from RoundTrip
// until its body is closed: it covers the cases a server cannot see end (a timed-out
// attempt whose handler notices the cancel only later).
type countingTransport struct {
	base http.RoundTripper
	fl   *flight
}

func (ct countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	leave := ct.fl.enter(r.Header.Get("X-Hyp-Batch-Id"))
	resp, err := ct.base.RoundTrip(r)
	if err != nil {
		leave()
		return nil, err
	}
	resp.Body = leaveOnClose{resp.Body, leave}
	return resp, nil
}

type leaveOnClose struct {
	io.ReadCloser
	leave func()
}

func (l leaveOnClose) Close() error {
	defer l.leave()
	return l.ReadCloser.Close()
}

// replicaSpec builds one replica of a test: its URL, and its server if it has one.
type replicaSpec func(t *testing.T, clock *fakeClock, fl *flight) (string, *server)

// answers is a replica answering with replies in order, each request counted in flight
// (server side) while its handler runs.
func answers(replies ...reply) replicaSpec {
	return func(t *testing.T, clock *fakeClock, fl *flight) (string, *server) {
		s := newServer(t, func(_ *server, i int, w http.ResponseWriter, r *http.Request) {
			defer fl.enter(r.Header.Get("X-Hyp-Batch-Id"))()
			rp := replies[min(i, len(replies)-1)]
			if rp.retryAfter != nil {
				w.Header().Set("Retry-After", rp.retryAfter(clock.Now()))
			}
			w.WriteHeader(rp.status)
			_, _ = io.WriteString(w, rp.body)
		})
		return s.URL, s
	}
}

// down is a replica nobody listens for: every attempt is refused.
func down() replicaSpec {
	return func(t *testing.T, _ *fakeClock, _ *flight) (string, *server) {
		s := httptest.NewServer(http.NotFoundHandler())
		s.Close()
		return s.URL, nil
	}
}

// stalls is a replica that never answers; the client's request timeout ends each attempt.
func stalls() replicaSpec {
	return func(t *testing.T, _ *fakeClock, _ *flight) (string, *server) {
		release := make(chan struct{})
		s := newServer(t, func(_ *server, _ int, _ http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		})
		t.Cleanup(func() { close(release) }) // before srv.Close, which waits for handlers
		return s.URL, s
	}
}

// inFlight is what a test counts: on the replicas' side and, separately, on the client's.
type inFlight struct{ server, client *flight }

func newInFlight() inFlight { return inFlight{newFlight(), newFlight()} }

// max is the most requests of one chunk either side saw in flight at once.
func (f inFlight) max() int { return max(f.server.max(), f.client.max()) }

// cluster starts specs and a client sending to them in that order.
func cluster(t *testing.T, clock *fakeClock, both inFlight, mod func(*Options), specs ...replicaSpec) (*Client, []string, []*server) {
	t.Helper()
	fl := both.server
	urls := make([]string, len(specs))
	srvs := make([]*server, len(specs))
	for i, sp := range specs {
		urls[i], srvs[i] = sp(t, clock, fl)
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(base.CloseIdleConnections)
	c := newTestClient(t, urls[0], clock, nil, func(o *Options) {
		o.URLs = urls
		o.HTTPClient = &http.Client{Transport: countingTransport{base: base, fl: both.client}}
		if mod != nil {
			mod(o)
		}
	})
	return c, urls, srvs
}

func requestCounts(srvs []*server) []int {
	n := make([]int, len(srvs))
	for i, s := range srvs {
		if s != nil {
			n[i] = len(s.requests())
		}
	}
	return n
}

func TestSendFailover(t *testing.T) {
	ok := reply{status: 200, body: `{"accepted":3,"duplicates":0}`}
	ms := time.Millisecond
	for _, tc := range []struct {
		name          string
		replicas      []replicaSpec
		mod           func(*Options)
		want          string
		wantIn        []string
		wantReqs      []int // per replica; a down one always shows 0
		wantWait      []time.Duration
		wantCurrent   int
		wantFailovers uint64
		wantUp        []int // per replica: -1 never tried, 0 down, 1 up
	}{
		{name: "healthy first replica takes it", replicas: []replicaSpec{answers(ok), answers(ok)},
			want: "ok", wantReqs: []int{1, 0}, wantCurrent: 0, wantUp: []int{1, -1}},
		{name: "first down, second gets it at once", replicas: []replicaSpec{down(), answers(ok)},
			want: "ok", wantReqs: []int{0, 1}, wantCurrent: 1, wantFailovers: 1, wantUp: []int{0, 1}},
		{name: "503 Retry-After 30 on one, the other gets it at once",
			replicas: []replicaSpec{answers(reply{status: 503, retryAfter: ra("30")}, ok), answers(ok)},
			want:     "ok", wantReqs: []int{1, 1}, wantCurrent: 1, wantFailovers: 1, wantUp: []int{0, 1}},
		{name: "429 moves on", replicas: []replicaSpec{answers(reply{status: 429, retryAfter: raDate(time.Minute)}, ok), answers(ok)},
			want: "ok", wantReqs: []int{1, 1}, wantCurrent: 1, wantFailovers: 1, wantUp: []int{0, 1}},
		{name: "502 moves on", replicas: []replicaSpec{answers(reply{status: 502}, ok), answers(ok)},
			want: "ok", wantReqs: []int{1, 1}, wantCurrent: 1, wantFailovers: 1, wantUp: []int{0, 1}},
		{name: "504 moves on", replicas: []replicaSpec{answers(reply{status: 504}, ok), answers(ok)},
			want: "ok", wantReqs: []int{1, 1}, wantCurrent: 1, wantFailovers: 1, wantUp: []int{0, 1}},
		{name: "timeout moves on", replicas: []replicaSpec{stalls(), answers(ok)},
			mod:  func(o *Options) { o.RequestTimeout = 50 * ms },
			want: "ok", wantReqs: []int{1, 1}, wantCurrent: 1, wantFailovers: 1, wantUp: []int{0, 1}},
		{name: "401 is the central's answer: no failover", replicas: []replicaSpec{answers(reply{status: 401, body: `{"error":"bad_token"}`}), answers(ok)},
			want: "unauthorized", wantIn: []string{"401", "bad_token", "token_file", "replica "}, wantReqs: []int{1, 0}, wantCurrent: 0, wantUp: []int{1, -1}},
		{name: "403 no failover", replicas: []replicaSpec{answers(reply{status: 403}), answers(ok)},
			want: "unauthorized", wantReqs: []int{1, 0}, wantCurrent: 0, wantUp: []int{1, -1}},
		{name: "400 poison no failover", replicas: []replicaSpec{answers(reply{status: 400, body: `{"error":"bad_json"}`}), answers(ok)},
			want: "poison", wantReqs: []int{1, 0}, wantCurrent: 0, wantUp: []int{1, -1}},
		{name: "422 poison no failover", replicas: []replicaSpec{answers(reply{status: 422}), answers(ok)},
			want: "poison", wantReqs: []int{1, 0}, wantCurrent: 0, wantUp: []int{1, -1}},
		{name: "413 no failover", replicas: []replicaSpec{answers(reply{status: 413}), answers(ok)},
			want: "too_large", wantReqs: []int{1, 0}, wantCurrent: 0, wantUp: []int{1, -1}},
		{name: "415 no failover", replicas: []replicaSpec{answers(reply{status: 415}), answers(ok)},
			want: "unsupported_encoding", wantReqs: []int{1, 0}, wantCurrent: 0, wantUp: []int{1, -1}},
		{name: "a refusal after a failover ends Send there", replicas: []replicaSpec{down(), answers(reply{status: 401})},
			want: "unauthorized", wantReqs: []int{0, 1}, wantCurrent: 1, wantFailovers: 1, wantUp: []int{0, 1}},
		{name: "round robin past two down replicas", replicas: []replicaSpec{down(), down(), answers(ok)},
			want: "ok", wantReqs: []int{0, 0, 1}, wantCurrent: 2, wantFailovers: 2, wantUp: []int{0, 0, 1}},
		// Once every replica has failed, the ladder paces the rotation as it paces one.
		{name: "all down: ErrRetryable after the ladder", replicas: []replicaSpec{down(), down()},
			mod:  func(o *Options) { o.MaxWait = time.Second },
			want: "retryable", wantIn: []string{"4 attempts", "replica "}, wantReqs: []int{0, 0},
			wantWait: []time.Duration{250 * ms, 500 * ms}, wantCurrent: 1, wantFailovers: 3, wantUp: []int{0, 0}},
		{name: "all busy: the earliest Retry-After is waited for",
			replicas: []replicaSpec{answers(reply{status: 503, retryAfter: ra("30")}, ok), answers(reply{status: 503, retryAfter: ra("10")}, ok)},
			want:     "ok", wantReqs: []int{1, 2}, wantWait: []time.Duration{10 * time.Second}, wantCurrent: 1, wantFailovers: 1, wantUp: []int{0, 1}},
		{name: "all failing without Retry-After: ladder, rotating",
			replicas: []replicaSpec{answers(reply{status: 500}, reply{status: 500}, ok), answers(reply{status: 500})},
			mod:      func(o *Options) { o.Cooldown = time.Hour },
			want:     "ok", wantReqs: []int{3, 2}, wantWait: []time.Duration{250 * ms, 500 * ms, time.Second}, wantCurrent: 0, wantFailovers: 4, wantUp: []int{1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			fl := newInFlight()
			c, urls, srvs := cluster(t, clock, fl, tc.mod, tc.replicas...)
			_, err := c.Send(context.Background(), testChunk())
			if got := kind(err); got != tc.want {
				t.Fatalf("outcome %s (err %v), want %s", got, err, tc.want)
			}
			for _, s := range tc.wantIn {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			if got := requestCounts(srvs); !slices.Equal(got, tc.wantReqs) {
				t.Errorf("requests per replica %v, want %v", got, tc.wantReqs)
			}
			if got := clock.Slept(); !slices.Equal(got, tc.wantWait) {
				t.Errorf("waits %v, want %v", got, tc.wantWait)
			}
			if m := fl.max(); m > 1 {
				t.Errorf("%d requests of one chunk in flight at once, want at most 1", m)
			}
			st := c.State()
			if st.Current != urls[tc.wantCurrent] || st.Failovers != tc.wantFailovers {
				t.Errorf("current %s after %d failovers, want %s after %d", st.Current, st.Failovers, urls[tc.wantCurrent], tc.wantFailovers)
			}
			for i, r := range st.Replicas {
				got := -1
				if r.Attempted {
					got = 0
					if r.Up {
						got = 1
					}
				}
				if r.URL != urls[i] || got != tc.wantUp[i] {
					t.Errorf("replica %d %s: state %d, want %s %d", i, r.URL, got, urls[i], tc.wantUp[i])
				}
			}
			if tc.want == "retryable" && !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("err %v does not wrap the last failure (ECONNREFUSED)", err)
			}
		})
	}
}

// TestSendSticky holds that the replica that answered stays current: later chunks go
// there even once the replica failed over from is healthy again, and a failover later
// skips a replica still cooling down.
func TestSendSticky(t *testing.T) {
	ok := reply{status: 200, body: `{"accepted":3,"duplicates":0}`}
	clock := newFakeClock()
	fl := newInFlight()
	c, urls, srvs := cluster(t, clock, fl, nil,
		answers(reply{status: 503}, ok),                       // A: fails the first chunk, healthy after
		answers(ok, ok, ok, reply{status: 503}),               // B: takes three chunks, then fails
		answers(reply{status: 503, retryAfter: ra("30")}, ok)) // C: busy once
	send := func(want int) {
		t.Helper()
		if _, err := c.Send(context.Background(), testChunk()); err != nil {
			t.Fatal(err)
		}
		if got := c.State().Current; got != urls[want] {
			t.Fatalf("current %s, want %s", got, urls[want])
		}
	}
	send(1) // A 503 -> B
	send(1)
	send(1)
	if got := requestCounts(srvs); !slices.Equal(got, []int{1, 3, 0}) {
		t.Fatalf("requests per replica %v, want [1 3 0]: B should have kept every chunk", got)
	}
	// B fails: C, next in the rotation and ready, is asked at once. C answers 503 with
	// Retry-After 30 while A is still cooling down, so no replica is ready: a ladder step
	// paces the next attempt, to A, whose wait ends first.
	send(0)
	if got := requestCounts(srvs); !slices.Equal(got, []int{2, 4, 1}) {
		t.Errorf("requests per replica %v, want [2 4 1]", got)
	}
	if got := clock.Slept(); !slices.Equal(got, []time.Duration{250 * time.Millisecond}) {
		t.Errorf("waits %v, want one ladder step (A cooling, B and C failed)", got)
	}
	clock.mu.Lock()
	clock.now = clock.now.Add(time.Minute) // every cool-down and Retry-After is over
	clock.mu.Unlock()
	send(0)
	send(0)
	if got := requestCounts(srvs); !slices.Equal(got, []int{4, 4, 1}) {
		t.Errorf("requests per replica %v, want [4 4 1]", got)
	}
	if st := c.State(); st.Failovers != 3 {
		t.Errorf("%d failovers, want 3 (A->B, B->C, C->A)", st.Failovers)
	}
	if m := fl.max(); m > 1 {
		t.Errorf("%d requests of one chunk in flight at once", m)
	}
}

// TestSendCooldownSkipsFailedReplica: a replica that just failed is passed over while
// another is ready, even when the rotation reaches it first.
func TestSendCooldownSkipsFailedReplica(t *testing.T) {
	ok := reply{status: 200, body: `{"accepted":3,"duplicates":0}`}
	clock := newFakeClock()
	fl := newInFlight()
	c, urls, srvs := cluster(t, clock, fl, nil,
		answers(reply{status: 503}, ok), // A
		answers(ok),                     // B
		answers(reply{status: 502}, ok)) // C
	// Chunk 1: A fails, B takes it. Chunk 2 is sent with C current (set by hand: no
	// short script reaches it with A still cooling): C fails, and the rotation from C
	// reaches A (cooling) before B (ready).
	if _, err := c.Send(context.Background(), testChunk()); err != nil {
		t.Fatal(err)
	}
	c.reps.mu.Lock()
	c.reps.cur = 2
	c.reps.mu.Unlock()
	if _, err := c.Send(context.Background(), testChunk()); err != nil {
		t.Fatal(err)
	}
	if got := requestCounts(srvs); !slices.Equal(got, []int{1, 2, 1}) {
		t.Errorf("requests per replica %v, want [1 2 1]: A must be skipped while cooling", got)
	}
	if st := c.State(); st.Current != urls[1] {
		t.Errorf("current %s, want %s", st.Current, urls[1])
	}
	if len(clock.Slept()) != 0 {
		t.Errorf("waits %v, want none: B was ready", clock.Slept())
	}
}

// TestSendConcurrentChunksNeverDoubleFlight runs many Sends at once through replicas that
// fail often: each chunk must still be in flight to at most one replica at any moment.
func TestSendConcurrentChunksNeverDoubleFlight(t *testing.T) {
	clock := newFakeClock()
	fl := newInFlight()
	var specs []replicaSpec
	for range 3 {
		specs = append(specs, func(t *testing.T, _ *fakeClock, fl *flight) (string, *server) {
			s := newServer(t, func(_ *server, i int, w http.ResponseWriter, r *http.Request) {
				defer fl.enter(r.Header.Get("X-Hyp-Batch-Id"))()
				if i%3 != 2 {
					w.WriteHeader(503)
					return
				}
				_, _ = io.WriteString(w, `{"accepted":3,"duplicates":0}`)
			})
			return s.URL, s
		})
	}
	c, _, _ := cluster(t, clock, fl, func(o *Options) { o.MaxWait = time.Hour }, specs...)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for k := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch := testChunk()
			ch.FirstSeq, ch.LastSeq = int64(100*k+1), int64(100*k+3) // a batch id of its own
			if _, err := c.Send(context.Background(), ch); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if m := fl.max(); m > 1 {
		t.Errorf("%d requests of one chunk in flight at once, want at most 1", m)
	}
}

func TestNewReplicas(t *testing.T) {
	for _, tc := range []struct {
		name    string
		urls    []string
		wantErr string
	}{
		{"two", []string{"http://a:1", "https://b:2/hyp"}, ""},
		{"none", nil, "no url"},
		{"same replica twice", []string{"http://a:1/", "http://b:1", "http://a:1"}, `"http://a:1" names the same replica as "http://a:1/"`},
		{"one bad among good", []string{"http://a:1", "ftp://b"}, "scheme"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Options{URLs: tc.urls, Token: "t", Gateway: "g"})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("New: %v, want an error mentioning %q", err, tc.wantErr)
			}
		})
	}
	if _, err := New(Options{URLs: []string{"http://a"}, Token: "t", Gateway: "g", Cooldown: -time.Second}); err == nil || !strings.Contains(err.Error(), "cooldown") {
		t.Errorf("negative cooldown: %v, want an error naming it", err)
	}
}
