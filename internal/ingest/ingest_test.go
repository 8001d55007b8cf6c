package ingest

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/rowform"
)

// call is one store call as the fake saw it; body and rows are copies, since the handler
// reuses its buffers.
type call struct {
	method  string
	dataset string
	source  string
	body    string
	rows    []rowform.Row
}

// fakeStore records calls. Unless err is set, it accepts every non-blank line (or row)
// and numbers them from firstSeq, like the cache would.
type fakeStore struct {
	mu       sync.Mutex
	calls    []call
	err      error
	firstSeq int64
}

func (s *fakeStore) Ingest(dataset, source string, body []byte) (cache.Result, error) {
	n := 0
	for line := range bytes.Lines(body) {
		if len(bytes.TrimSpace(line)) > 0 {
			n++
		}
	}
	return s.record(call{method: "Ingest", dataset: dataset, source: source, body: string(body)}, n)
}

func (s *fakeStore) IngestRowGroups(dataset string, groups []rowform.RowGroup) (cache.Result, error) {
	c := call{method: "IngestRowGroups", dataset: dataset}
	for _, g := range groups {
		body := g.Body
		for range g.Rows {
			n := binary.LittleEndian.Uint32(body) // the row form's frame: u32 length, row
			c.rows = append(c.rows, rowform.Row{Source: g.Source, Line: bytes.Clone(body[4 : 4+n])})
			body = body[4+n:]
		}
	}
	return s.record(c, len(c.rows))
}

func (s *fakeStore) record(c call, n int) (cache.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
	if s.err != nil || n == 0 {
		return cache.Result{}, s.err
	}
	return cache.Result{Accepted: n, FirstSeq: s.firstSeq, LastSeq: s.firstSeq + int64(n) - 1}, nil
}

func (s *fakeStore) recorded() []call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]call(nil), s.calls...)
}

type testHandler struct {
	http.Handler
	store *fakeStore
	reg   *prometheus.Registry
	logs  *bytes.Buffer
}

func newTestHandler(t testing.TB, maxBody int64, edit func(*Options)) *testHandler {
	t.Helper()
	th := &testHandler{store: &fakeStore{firstSeq: 41}, reg: prometheus.NewRegistry(), logs: new(bytes.Buffer)}
	opts := Options{
		MaxBodyBytes: maxBody,
		Registerer:   th.reg,
		Gatherer:     th.reg,
		Logger:       slog.New(slog.NewTextHandler(th.logs, nil)),
	}
	if edit != nil {
		edit(&opts)
	}
	h, err := NewHandler(th.store, opts)
	if err != nil {
		t.Fatal(err)
	}
	th.Handler = h
	return th
}

func (th *testHandler) do(method, target, contentType, encoding string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, bytes.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if encoding != "" {
		req.Header.Set("Content-Encoding", encoding)
	}
	rec := httptest.NewRecorder()
	th.ServeHTTP(rec, req)
	return rec
}

func gzipped(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// gzipBomb is members gzip members of 1 MiB of zeros each, which gzip.Reader reads as one
// stream: members MiB of output from about members KiB of input.
func gzipBomb(t testing.TB, members int) []byte {
	member := gzipped(t, make([]byte, 1<<20))
	return bytes.Repeat(member, members)
}

// checkError fails unless rec holds a JSON error reply of the given status and kind.
func checkError(t *testing.T, rec *httptest.ResponseRecorder, status int, kind string) map[string]any {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d; body %s", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct == protobufType {
		return checkStatus(t, rec, kind)
	} else if ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("error body is not a JSON object: %v: %s", err, rec.Body)
	}
	if got["error"] != kind {
		t.Errorf("error kind %v, want %q; body %s", got["error"], kind, rec.Body)
	}
	if msg, _ := got["message"].(string); msg == "" {
		t.Errorf("error body has no message: %s", rec.Body)
	}
	return got
}

// checkStatus checks a protobuf error reply: a google.rpc.Status whose message begins with
// the error kind (any kind when kind is ""), returned as checkError's map ("error",
// "message", "code").
func checkStatus(t *testing.T, rec *httptest.ResponseRecorder, kind string) map[string]any {
	t.Helper()
	var st statuspb.Status
	if err := proto.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatalf("error body is not a google.rpc.Status: %v: %q", err, rec.Body)
	}
	gotKind, msg, _ := strings.Cut(st.GetMessage(), ": ")
	if kind != "" && gotKind != kind || msg == "" {
		t.Errorf("Status message %q, want %q and a message", st.GetMessage(), kind+": ...")
	}
	if want := grpcCode(rec.Code); st.GetCode() != want {
		t.Errorf("Status code %d for HTTP %d, want %d", st.GetCode(), rec.Code, want)
	}
	return map[string]any{"error": gotKind, "message": msg, "code": st.GetCode()}
}

func TestIngest(t *testing.T) {
	const limit = 64 << 10
	lines := "{\"msg\":\"a\"}\n{\"msg\":\"b\"}\n{\"msg\":\"c\"}\n"
	atLimit := bytes.Repeat([]byte("x"), limit)
	tests := []struct {
		name     string
		method   string
		target   string
		encoding string
		body     []byte
		chunked  bool  // no Content-Length, as with Transfer-Encoding: chunked
		storeErr error // returned by the store

		wantCode  int
		wantBody  string // exact, for 200 replies
		wantKind  string // error kind, for other replies
		wantLine  int    // error line; 0 means the key must be absent
		wantStore *call  // the one expected store call; nil means none
	}{
		{
			name: "accepted with string seqs", method: "POST", target: "/v1/ingest/app", body: []byte(lines),
			wantCode:  200,
			wantBody:  `{"accepted":3,"first_seq":"41","last_seq":"43"}` + "\n",
			wantStore: &call{method: "Ingest", dataset: "app", body: lines},
		},
		{
			name: "source query passed through", method: "POST", target: "/v1/ingest/app?source=web%201", body: []byte(lines),
			wantCode:  200,
			wantBody:  `{"accepted":3,"first_seq":"41","last_seq":"43"}` + "\n",
			wantStore: &call{method: "Ingest", dataset: "app", source: "web 1", body: lines},
		},
		{
			name: "gzip", method: "POST", target: "/v1/ingest/app", encoding: "gzip", body: gzipped(t, []byte(lines)),
			wantCode:  200,
			wantBody:  `{"accepted":3,"first_seq":"41","last_seq":"43"}` + "\n",
			wantStore: &call{method: "Ingest", dataset: "app", body: lines},
		},
		{
			name: "gzip chunked, coding name in any case", method: "POST", target: "/v1/ingest/app", encoding: "GZip",
			body: gzipped(t, []byte(lines)), chunked: true,
			wantCode:  200,
			wantBody:  `{"accepted":3,"first_seq":"41","last_seq":"43"}` + "\n",
			wantStore: &call{method: "Ingest", dataset: "app", body: lines},
		},
		{
			name: "identity encoding", method: "POST", target: "/v1/ingest/app", encoding: "identity", body: []byte(lines),
			wantCode:  200,
			wantBody:  `{"accepted":3,"first_seq":"41","last_seq":"43"}` + "\n",
			wantStore: &call{method: "Ingest", dataset: "app", body: lines},
		},
		{
			name: "empty body has no seqs", method: "POST", target: "/v1/ingest/app",
			wantCode:  200,
			wantBody:  `{"accepted":0}` + "\n",
			wantStore: &call{method: "Ingest", dataset: "app"},
		},
		{
			name: "empty gzip body", method: "POST", target: "/v1/ingest/app", encoding: "gzip", chunked: true,
			wantCode:  200,
			wantBody:  `{"accepted":0}` + "\n",
			wantStore: &call{method: "Ingest", dataset: "app"},
		},
		{
			name: "body exactly at the limit", method: "POST", target: "/v1/ingest/app", body: atLimit, chunked: true,
			wantCode:  200,
			wantBody:  `{"accepted":1,"first_seq":"41","last_seq":"41"}` + "\n",
			wantStore: &call{method: "Ingest", dataset: "app", body: string(atLimit)},
		},
		{
			name: "gzip decompressing to exactly the limit", method: "POST", target: "/v1/ingest/app", encoding: "gzip",
			body:      gzipped(t, atLimit),
			wantCode:  200,
			wantBody:  `{"accepted":1,"first_seq":"41","last_seq":"41"}` + "\n",
			wantStore: &call{method: "Ingest", dataset: "app", body: string(atLimit)},
		},
		{
			name: "Content-Length over the limit", method: "POST", target: "/v1/ingest/app", body: append(atLimit, '\n'),
			wantCode: 413, wantKind: "body_too_large",
		},
		{
			name: "chunked body over the limit", method: "POST", target: "/v1/ingest/app", body: append(atLimit, '\n'), chunked: true,
			wantCode: 413, wantKind: "body_too_large",
		},
		{
			name: "gzip decompressing past the limit", method: "POST", target: "/v1/ingest/app", encoding: "gzip",
			body:     gzipped(t, append(atLimit, '\n')),
			wantCode: 413, wantKind: "body_too_large",
		},
		{
			name: "gzip bomb", method: "POST", target: "/v1/ingest/app", encoding: "gzip", body: gzipBomb(t, 4),
			wantCode: 413, wantKind: "body_too_large",
		},
		{
			name: "bad gzip", method: "POST", target: "/v1/ingest/app", encoding: "gzip", body: []byte(lines),
			wantCode: 400, wantKind: "bad_gzip",
		},
		{
			name: "truncated gzip", method: "POST", target: "/v1/ingest/app", encoding: "gzip",
			body:     gzipped(t, []byte(lines))[:20],
			wantCode: 400, wantKind: "bad_gzip",
		},
		{
			name: "unsupported encoding", method: "POST", target: "/v1/ingest/app", encoding: "br", body: []byte(lines),
			wantCode: 415, wantKind: "unsupported_encoding",
		},
		{
			name: "stacked encodings", method: "POST", target: "/v1/ingest/app", encoding: "gzip, gzip", body: []byte(lines),
			wantCode: 415, wantKind: "unsupported_encoding",
		},
		{
			name: "input error with a line", method: "POST", target: "/v1/ingest/app", body: []byte(lines),
			storeErr: &cache.InputError{Kind: "bad_json", Line: 2, Msg: "unexpected end of object"},
			wantCode: 400, wantKind: "bad_json", wantLine: 2,
			wantStore: &call{method: "Ingest", dataset: "app", body: lines},
		},
		{
			name: "input error without a line", method: "POST", target: "/v1/ingest/app?source=%01", body: []byte(lines),
			storeErr: &cache.InputError{Kind: "bad_source", Msg: "source contains control character U+0001"},
			wantCode: 400, wantKind: "bad_source",
			wantStore: &call{method: "Ingest", dataset: "app", source: "\x01", body: lines},
		},
		{
			name: "storage failure", method: "POST", target: "/v1/ingest/app", body: []byte(lines),
			storeErr: errors.New("disk full"),
			wantCode: 500, wantKind: "storage_error",
			wantStore: &call{method: "Ingest", dataset: "app", body: lines},
		},
		{
			name: "bad dataset", method: "POST", target: "/v1/ingest/Bad-Name", body: []byte(lines),
			wantCode: 400, wantKind: "bad_dataset",
		},
		{
			name: "empty dataset", method: "POST", target: "/v1/ingest/", body: []byte(lines),
			wantCode: 400, wantKind: "bad_dataset",
		},
		{
			name: "wrong method", method: "GET", target: "/v1/ingest/app",
			wantCode: 405, wantKind: "method_not_allowed",
		},
		{
			name: "path below a dataset", method: "POST", target: "/v1/ingest/app/more", body: []byte(lines),
			wantCode: 404, wantKind: "not_found",
		},
		{
			name: "unknown path", method: "GET", target: "/nope",
			wantCode: 404, wantKind: "not_found",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			th := newTestHandler(t, limit, nil)
			th.store.err = tc.storeErr
			req := httptest.NewRequest(tc.method, tc.target, bytes.NewReader(tc.body))
			if tc.encoding != "" {
				req.Header.Set("Content-Encoding", tc.encoding)
			}
			if tc.chunked {
				req.ContentLength = -1
			}
			rec := httptest.NewRecorder()
			th.ServeHTTP(rec, req)

			if tc.wantCode == 200 {
				if rec.Code != 200 || rec.Body.String() != tc.wantBody {
					t.Fatalf("got %d %q, want 200 %q", rec.Code, rec.Body, tc.wantBody)
				}
				if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type %q, want application/json", ct)
				}
			} else {
				got := checkError(t, rec, tc.wantCode, tc.wantKind)
				line, hasLine := got["line"]
				switch {
				case tc.wantLine == 0 && hasLine:
					t.Errorf("line %v present, want it omitted", line)
				case tc.wantLine != 0 && line != float64(tc.wantLine):
					t.Errorf("line %v, want %d", line, tc.wantLine)
				}
			}
			if tc.wantCode == 405 && rec.Header().Get("Allow") != "POST" {
				t.Errorf("Allow %q, want POST", rec.Header().Get("Allow"))
			}

			calls := th.store.recorded()
			switch {
			case tc.wantStore == nil && len(calls) > 0:
				t.Errorf("store called %d times, want never", len(calls))
			case tc.wantStore != nil && len(calls) != 1:
				t.Errorf("store called %d times, want once", len(calls))
			case tc.wantStore != nil:
				c := calls[0]
				if c.method != tc.wantStore.method || c.dataset != tc.wantStore.dataset || c.source != tc.wantStore.source || c.body != tc.wantStore.body {
					t.Errorf("store got %s(%q, %q, %d bytes), want %s(%q, %q, %d bytes)",
						c.method, c.dataset, c.source, len(c.body),
						tc.wantStore.method, tc.wantStore.dataset, tc.wantStore.source, len(tc.wantStore.body))
				}
			}
			if tc.wantKind == "storage_error" && !strings.Contains(th.logs.String(), "disk full") {
				t.Errorf("storage failure not logged; log: %s", th.logs)
			}
		})
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// TestGzipBombStopsAtLimit checks that decompression stops just past the limit instead of
// inflating the whole bomb: 256 MiB of output would take visible time and memory.
func TestGzipBombStopsAtLimit(t *testing.T) {
	const limit = 1 << 20
	bomb := gzipBomb(t, 256)
	if len(bomb) > limit {
		t.Fatalf("bomb is %d bytes compressed, must be under the %d-byte limit to test decompression", len(bomb), limit)
	}
	th := newTestHandler(t, limit, nil)
	body := &countingReader{r: bytes.NewReader(bomb)}
	req := httptest.NewRequest("POST", "/v1/ingest/app", body)
	req.Header.Set("Content-Encoding", "gzip")
	req.ContentLength = int64(len(bomb))
	rec := httptest.NewRecorder()
	th.ServeHTTP(rec, req)
	checkError(t, rec, 413, "body_too_large")
	// Two members inflate past the limit; allow for bufio's read-ahead.
	if body.n > 64<<10 {
		t.Errorf("read %d of %d compressed bytes; decompression did not stop at the limit", body.n, len(bomb))
	}
	if n := len(th.store.recorded()); n != 0 {
		t.Errorf("store called %d times", n)
	}
}

func logsRequest() plogotlp.ExportRequest {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "checkout")
	lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
	lrs.AppendEmpty().Body().SetStr("one")
	lrs.AppendEmpty().Body().SetStr("two")
	return plogotlp.NewExportRequestFromLogs(ld)
}

func marshal(t testing.TB, f func() ([]byte, error)) []byte {
	t.Helper()
	b, err := f()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestOTLP(t *testing.T) {
	const limit = 1 << 20
	logs := logsRequest()
	logsProto := marshal(t, logs.MarshalProto)
	logsJSON := marshal(t, logs.MarshalJSON)

	td := ptrace.NewTraces()
	td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty().SetName("GET /")
	tracesProto := marshal(t, ptraceotlp.NewExportRequestFromTraces(td).MarshalProto)

	md := pmetric.NewMetrics()
	m := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("up")
	m.SetEmptyGauge().DataPoints().AppendEmpty().SetIntValue(1)
	metricsJSON := marshal(t, pmetricotlp.NewExportRequestFromMetrics(md).MarshalJSON)

	// response is what a 200 body must decode as: the signal's export response.
	type response interface {
		UnmarshalProto([]byte) error
		UnmarshalJSON([]byte) error
	}
	tests := []struct {
		name        string
		method      string
		path        string
		contentType string
		encoding    string
		body        []byte

		wantCode    int
		wantType    string // Content-Type of a 200 reply
		wantKind    string // error kind of other replies
		wantDataset string // of the one IngestRowGroups call; "" means no call
		wantRows    int
		wantSource  string // of the first row
		resp        response
	}{
		{
			name: "logs protobuf", method: "POST", path: "/v1/logs", contentType: "application/x-protobuf", body: logsProto,
			wantCode: 200, wantType: "application/x-protobuf", wantDataset: "logs", wantRows: 2, wantSource: "checkout",
			resp: plogotlp.NewExportResponse(),
		},
		{
			name: "logs JSON", method: "POST", path: "/v1/logs", contentType: "application/json", body: logsJSON,
			wantCode: 200, wantType: "application/json", wantDataset: "logs", wantRows: 2, wantSource: "checkout",
			resp: plogotlp.NewExportResponse(),
		},
		{
			name: "logs JSON with charset, gzip", method: "POST", path: "/v1/logs", contentType: "application/json; charset=utf-8",
			encoding: "gzip", body: gzipped(t, logsJSON),
			wantCode: 200, wantType: "application/json", wantDataset: "logs", wantRows: 2, wantSource: "checkout",
			resp: plogotlp.NewExportResponse(),
		},
		{
			name: "traces protobuf", method: "POST", path: "/v1/traces", contentType: "application/x-protobuf", body: tracesProto,
			wantCode: 200, wantType: "application/x-protobuf", wantDataset: "traces", wantRows: 1, wantSource: "unknown",
			resp: ptraceotlp.NewExportResponse(),
		},
		{
			name: "metrics JSON", method: "POST", path: "/v1/metrics", contentType: "application/json", body: metricsJSON,
			wantCode: 200, wantType: "application/json", wantDataset: "metrics", wantRows: 1, wantSource: "unknown",
			resp: pmetricotlp.NewExportResponse(),
		},
		{
			name: "malformed protobuf", method: "POST", path: "/v1/logs", contentType: "application/x-protobuf", body: []byte{0xff, 0xff, 0xff},
			wantCode: 400, wantKind: "bad_otlp",
		},
		{
			name: "malformed JSON", method: "POST", path: "/v1/traces", contentType: "application/json", body: []byte(`{"resourceSpans":`),
			wantCode: 400, wantKind: "bad_otlp",
		},
		{
			name: "unsupported media type", method: "POST", path: "/v1/logs", contentType: "text/plain", body: logsJSON,
			wantCode: 415, wantKind: "unsupported_media_type",
		},
		{
			name: "no media type", method: "POST", path: "/v1/metrics", body: logsProto,
			wantCode: 415, wantKind: "unsupported_media_type",
		},
		{
			name: "bad gzip", method: "POST", path: "/v1/logs", contentType: "application/x-protobuf", encoding: "gzip", body: logsProto,
			wantCode: 400, wantKind: "bad_gzip",
		},
		{
			name: "gzip bomb", method: "POST", path: "/v1/logs", contentType: "application/x-protobuf", encoding: "gzip", body: gzipBomb(t, 2),
			wantCode: 413, wantKind: "body_too_large",
		},
		{
			name: "wrong method", method: "GET", path: "/v1/logs",
			wantCode: 405, wantKind: "method_not_allowed",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			th := newTestHandler(t, limit, nil)
			rec := th.do(tc.method, tc.path, tc.contentType, tc.encoding, tc.body)
			if tc.wantCode != 200 {
				checkError(t, rec, tc.wantCode, tc.wantKind)
			} else {
				if rec.Code != 200 {
					t.Fatalf("status %d, want 200; body %s", rec.Code, rec.Body)
				}
				if ct := rec.Header().Get("Content-Type"); ct != tc.wantType {
					t.Errorf("Content-Type %q, want %q", ct, tc.wantType)
				}
				unmarshal := tc.resp.UnmarshalProto
				if tc.wantType == "application/json" {
					unmarshal = tc.resp.UnmarshalJSON
				}
				if err := unmarshal(rec.Body.Bytes()); err != nil {
					t.Errorf("reply is not an export response: %v: %q", err, rec.Body)
				}
			}
			calls := th.store.recorded()
			if tc.wantDataset == "" {
				if len(calls) != 0 {
					t.Errorf("store called %d times, want never", len(calls))
				}
				return
			}
			if len(calls) != 1 || calls[0].method != "IngestRowGroups" {
				t.Fatalf("store calls %+v, want one IngestRowGroups", calls)
			}
			c := calls[0]
			if c.dataset != tc.wantDataset || len(c.rows) != tc.wantRows || c.rows[0].Source != tc.wantSource {
				t.Errorf("IngestRowGroups(%q, %d rows, first source %q), want (%q, %d rows, %q)",
					c.dataset, len(c.rows), c.rows[0].Source, tc.wantDataset, tc.wantRows, tc.wantSource)
			}
			for i, r := range c.rows {
				if line := rowform.RowJSON(r.Line); !json.Valid(line) {
					t.Errorf("row %d is not a JSON object in the row form: %s", i, line)
				}
			}
		})
	}
}

func TestOTLPStoreErrors(t *testing.T) {
	body := marshal(t, logsRequest().MarshalProto)
	tests := []struct {
		name     string
		err      error
		wantCode int
		wantKind string
	}{
		{"input error", &cache.InputError{Kind: "bad_dataset", Msg: "no"}, 400, "bad_dataset"},
		{"storage failure", errors.New("disk full"), 500, "storage_error"},
		{"disk full", fmt.Errorf("%w: write: no space left", cache.ErrDiskFull), 507, "disk_full"},
		{"log failed", fmt.Errorf("%w: fsync: EIO", cache.ErrUnavailable), 503, "unavailable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			th := newTestHandler(t, 1<<20, nil)
			th.store.err = tc.err
			rec := th.do("POST", "/v1/logs", "application/x-protobuf", "", body)
			checkError(t, rec, tc.wantCode, tc.wantKind)
			if tc.wantCode >= 503 && rec.Header().Get("Retry-After") == "" {
				t.Errorf("%d without Retry-After", tc.wantCode)
			}
		})
	}
}

// TestStoreUnavailableIsCounted: a request the store cannot take is counted by reason.
func TestStoreUnavailableIsCounted(t *testing.T) {
	th := newTestHandler(t, 1<<20, nil)
	th.store.err = fmt.Errorf("%w: x", cache.ErrDiskFull)
	for range 2 {
		checkError(t, th.do("POST", "/v1/ingest/app", "", "", []byte(`{"a":1}`)), 507, "disk_full")
	}
	th.store.err = fmt.Errorf("%w: x", cache.ErrUnavailable)
	checkError(t, th.do("POST", "/v1/ingest/app", "", "", []byte(`{"a":1}`)), 503, "unavailable")
	rec := th.do("GET", "/metrics", "", "", nil)
	for _, want := range []string{`hyp_ingest_unavailable_total{reason="disk_full"} 2`, `hyp_ingest_unavailable_total{reason="io_error"} 1`} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestHealthz(t *testing.T) {
	tests := []struct {
		name     string
		method   string
		ready    func() error
		wantCode int
		wantBody string // exact for 200; the error kind otherwise
	}{
		{"no readiness check", "GET", nil, 200, "{\"status\":\"ok\"}\n"},
		{"ready", "GET", func() error { return nil }, 200, "{\"status\":\"ok\"}\n"},
		{"not ready", "GET", func() error { return errors.New("the log failed: EIO") }, 503, "not_ready"},
		{"wrong method", "POST", nil, 405, "method_not_allowed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			th := newTestHandler(t, 1024, func(o *Options) { o.Ready = tc.ready })
			rec := th.do(tc.method, "/healthz", "", "", nil)
			if tc.wantCode != 200 {
				m := checkError(t, rec, tc.wantCode, tc.wantBody)
				if tc.ready != nil && m["message"] != tc.ready().Error() {
					t.Errorf("message %v, want the reason %q", m["message"], tc.ready())
				}
				return
			}
			if rec.Code != 200 || rec.Body.String() != tc.wantBody {
				t.Errorf("got %d %q, want 200 %q", rec.Code, rec.Body, tc.wantBody)
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	th := newTestHandler(t, 1024, nil)
	if rec := th.do("POST", "/v1/ingest/app", "", "", []byte("{}\n{}\n{}\n")); rec.Code != 200 {
		t.Fatalf("ingest: %d %s", rec.Code, rec.Body)
	}
	th.do("POST", "/v1/ingest/Bad-Name", "", "", []byte("{}\n"))
	th.do("POST", "/v1/ingest/app", "", "br", []byte("{}\n"))
	th.do("GET", "/nope", "", "", nil)

	rec := th.do("GET", "/metrics", "", "", nil)
	if rec.Code != 200 {
		t.Fatalf("/metrics: %d %s", rec.Code, rec.Body)
	}
	for _, want := range []string{
		`hyp_ingest_rows_total{dataset="app"} 3`,
		// Garbage dataset names are not labels.
		`hyp_ingest_rejected_total{dataset="",reason="bad_dataset"} 1`,
		`hyp_ingest_rejected_total{dataset="app",reason="unsupported_encoding"} 1`,
		`hyp_ingest_requests_total{code="200",endpoint="ingest"} 1`,
		`hyp_ingest_requests_total{code="400",endpoint="ingest"} 1`,
		`hyp_ingest_requests_total{code="404",endpoint="unknown"} 1`,
		`hyp_ingest_request_duration_seconds_count{endpoint="ingest"} 3`,
	} {
		if !strings.Contains(rec.Body.String(), want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// A 404 is not a rejected ingest request.
	if strings.Contains(rec.Body.String(), `reason="not_found"`) {
		t.Error("/metrics counts 404s as rejected requests")
	}

	checkError(t, th.do("POST", "/metrics", "", "", nil), 405, "method_not_allowed")
}

func TestMetricsWithoutGatherer(t *testing.T) {
	th := newTestHandler(t, 1024, func(o *Options) { o.Gatherer = nil })
	checkError(t, th.do("GET", "/metrics", "", "", nil), 404, "not_found")
}

func TestNewHandlerErrors(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := NewHandler(&fakeStore{}, Options{MaxBodyBytes: 1, Registerer: reg}); err != nil {
		t.Fatalf("first handler: %v", err)
	}
	tests := []struct {
		name  string
		store Store
		opts  Options
	}{
		{"nil store", nil, Options{MaxBodyBytes: 1, Registerer: prometheus.NewRegistry()}},
		{"no body limit", &fakeStore{}, Options{Registerer: prometheus.NewRegistry()}},
		{"nil registerer", &fakeStore{}, Options{MaxBodyBytes: 1}},
		{"metrics already registered", &fakeStore{}, Options{MaxBodyBytes: 1, Registerer: reg}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewHandler(tc.store, tc.opts); err == nil {
				t.Error("NewHandler succeeded")
			}
		})
	}
}

// failingReader yields its data, then fails as a dropped connection would.
type failingReader struct {
	data []byte
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

// TestBodyReadError checks that a failing connection is reported as such, not as bad gzip,
// and never reaches the store.
func TestBodyReadError(t *testing.T) {
	plain := []byte("{}\n{}\n")
	compressed := gzipped(t, plain)
	tests := []struct {
		name     string
		encoding string
		data     []byte
	}{
		{"plain", "", plain},
		{"gzip", "gzip", compressed[:len(compressed)/2]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			th := newTestHandler(t, 1024, nil)
			req := httptest.NewRequest("POST", "/v1/ingest/app", &failingReader{data: tc.data, err: io.ErrUnexpectedEOF})
			req.Header.Set("Content-Encoding", tc.encoding)
			rec := httptest.NewRecorder()
			th.ServeHTTP(rec, req)
			checkError(t, rec, 400, "bad_body")
			if n := len(th.store.recorded()); n != 0 {
				t.Errorf("store called %d times", n)
			}
		})
	}
}

// TestNewHandlerRollsBackRegistration checks that a failed NewHandler leaves the registry
// as it found it, so removing the conflict is enough for the next attempt to succeed.
func TestNewHandlerRollsBackRegistration(t *testing.T) {
	scratch, err := newMetrics(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	// The third of four collectors, so the first two must be rolled back.
	reg.MustRegister(scratch.requests)
	if _, err := NewHandler(&fakeStore{}, Options{MaxBodyBytes: 1, Registerer: reg}); err == nil {
		t.Fatal("NewHandler succeeded despite the conflicting metric")
	}
	reg.Unregister(scratch.requests)
	if _, err := NewHandler(&fakeStore{}, Options{MaxBodyBytes: 1, Registerer: reg}); err != nil {
		t.Fatalf("NewHandler after removing the conflict: %v", err)
	}
}
