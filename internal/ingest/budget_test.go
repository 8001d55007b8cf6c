package ingest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"

	"github.com/hyp-project/hyp/internal/httpbody"
)

// wideLogs is a protobuf logs request of n empty records under one resource with an
// attribute of attrBytes, which every decoded row repeats.
func wideLogs(t *testing.T, n, attrBytes int) []byte {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("big", strings.Repeat("x", attrBytes))
	lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
	for range n {
		lrs.AppendEmpty()
	}
	b, err := plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// guarded is the handler behind httpbody.Guard with a budget of limit bytes.
func guarded(t *testing.T, limit int64) (*testHandler, http.Handler, *httpbody.Budget) {
	budget, err := httpbody.NewBudget(limit)
	if err != nil {
		t.Fatal(err)
	}
	th := newTestHandler(t, 16<<20, func(o *Options) { o.Budget = budget })
	h, err := httpbody.Guard(th, budget, httpbody.Pace{Grace: time.Minute, MinRate: 1})
	if err != nil {
		t.Fatal(err)
	}
	return th, h, budget
}

func post(h http.Handler, path string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-protobuf")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func errorKind(t *testing.T, rec *httptest.ResponseRecorder) string {
	return checkStatus(t, rec, "")["error"].(string)
}

// TestDecodedSizeIsBudgeted: a small body whose rows repeat a 64 KiB resource 10,000 times
// (655 MB of rows) is a 413 decoded_too_large, stores nothing and leaves the budget whole;
// a request that would fit the budget but not beside what other requests hold is a 503
// with Retry-After, counted as a memory refusal; a normal request is stored after both.
func TestDecodedSizeIsBudgeted(t *testing.T) {
	th, h, budget := guarded(t, 8<<20)
	attack := wideLogs(t, 10_000, 64<<10)
	rec := post(h, "/v1/logs", attack)
	if rec.Code != http.StatusRequestEntityTooLarge || errorKind(t, rec) != "decoded_too_large" {
		t.Fatalf("the %d-byte attack body: %d %s, want 413 decoded_too_large", len(attack), rec.Code, rec.Body)
	}
	if held := budget.Held(); held != 0 {
		t.Errorf("the budget holds %d bytes after the request", held)
	}
	if calls := th.store.recorded(); len(calls) != 0 {
		t.Fatalf("the refused request reached the store: %d calls", len(calls))
	}

	// Another request holds most of the budget while this one decodes 4 MiB of rows.
	fits := wideLogs(t, 64, 64<<10)
	other := httptest.NewRequest(http.MethodPost, "/", nil)
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := httpbody.MeterOf(r).Charge(6 << 20); err != nil {
			t.Errorf("the holding request: %v", err)
		}
		rec := post(h, "/v1/logs", fits)
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || errorKind(t, rec) != "unavailable" {
			t.Errorf("a request beside a full budget: %d %s (Retry-After %q), want 503 unavailable with Retry-After",
				rec.Code, rec.Body, rec.Header().Get("Retry-After"))
		}
	})
	g, err := httpbody.Guard(inner, budget, httpbody.Pace{Grace: time.Minute, MinRate: 1})
	if err != nil {
		t.Fatal(err)
	}
	g.ServeHTTP(httptest.NewRecorder(), other)
	if budget.Refused() == 0 {
		t.Error("the 503 was not counted as a memory refusal")
	}
	metrics := th.do(http.MethodGet, "/metrics", "", "", nil).Body.String()
	if !strings.Contains(metrics, `hyp_ingest_unavailable_total{reason="memory"} 1`) {
		t.Errorf("/metrics lacks the memory refusal:\n%s", metrics)
	}

	if rec := post(h, "/v1/logs", fits); rec.Code != http.StatusOK {
		t.Fatalf("the same request once the budget is free: %d %s", rec.Code, rec.Body)
	}
	if calls := th.store.recorded(); len(calls) != 1 || len(calls[0].rows) != 64 {
		t.Fatalf("store calls %+v, want one of 64 rows", len(calls))
	}
}

// TestCompressedBodyDecodesWithinBudget: ingest.max_body_bytes bounds a body as sent. A
// gzip body under it that decompresses past it (a collector's batch of large records) is
// stored when body and rows fit the listener's budget, and refused for good (413
// decoded_too_large, never the retried 503) when they cannot fit it even alone. A body over
// the limit as sent stays a 413 body_too_large.
func TestCompressedBodyDecodesWithinBudget(t *testing.T) {
	const maxBody = 64 << 10
	budget, err := httpbody.NewBudget(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	th := newTestHandler(t, maxBody, func(o *Options) { o.Budget = budget })
	h, err := httpbody.Guard(th, budget, httpbody.Pace{Grace: time.Minute, MinRate: 1})
	if err != nil {
		t.Fatal(err)
	}
	gzPost := func(path, contentType string, body []byte) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(gzipped(t, body)))
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Content-Encoding", "gzip")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	// 40 records of 8 KB: 320 KiB decoded, 5 times the limit, a few KiB once gzipped.
	ld := plog.NewLogs()
	lrs := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
	for i := range 40 {
		lrs.AppendEmpty().Body().SetStr(strings.Repeat(string(rune('a'+i%26)), 8000))
	}
	logs, err := plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	if rec := gzPost("/v1/logs", "application/x-protobuf", logs); rec.Code != http.StatusOK {
		t.Fatalf("a %d-byte OTLP body, gzipped under the %d-byte limit: %d %s, want 200", len(logs), maxBody, rec.Code, rec.Body)
	}
	if calls := th.store.recorded(); len(calls) != 1 || len(calls[0].rows) != 40 {
		t.Fatalf("store calls %d, want one of 40 rows", len(calls))
	}
	ndjson := []byte(strings.Repeat(`{"msg":"`+strings.Repeat("x", 1000)+`"}`+"\n", 200))
	if rec := gzPost("/v1/ingest/app", "", ndjson); rec.Code != http.StatusOK {
		t.Fatalf("a %d-byte NDJSON body, gzipped under the limit: %d %s, want 200", len(ndjson), rec.Code, rec.Body)
	}
	huge := bytes.Repeat([]byte("{}\n"), 400_000) // 1.2 MB: more than the whole budget
	checkError(t, gzPost("/v1/ingest/app", "", huge), http.StatusRequestEntityTooLarge, "decoded_too_large")
	if budget.Held() != 0 {
		t.Errorf("the budget holds %d bytes after the requests", budget.Held())
	}
	checkError(t, post(h, "/v1/ingest/app", bytes.Repeat([]byte("{}\n"), maxBody/3+1)), http.StatusRequestEntityTooLarge, "body_too_large")
}

// TestLargeRequestTakenInPieces: a gzip OTLP/protobuf request whose rows are more than the
// listener's whole budget is taken one resource at a time and stored in several appends,
// every row once; one resource over the budget is still a 413, and a request with a bad
// resource at its end is a 400 with nothing stored (the first pass checks it whole).
func TestLargeRequestTakenInPieces(t *testing.T) {
	const budgetBytes = 1 << 20
	budget, err := httpbody.NewBudget(budgetBytes)
	if err != nil {
		t.Fatal(err)
	}
	th := newTestHandler(t, 64<<10, func(o *Options) { o.Budget = budget })
	h, err := httpbody.Guard(th, budget, httpbody.Pace{Grace: time.Minute, MinRate: 1})
	if err != nil {
		t.Fatal(err)
	}
	logs := func(resources, records, bodyBytes int) []byte {
		ld := plog.NewLogs()
		for r := range resources {
			rl := ld.ResourceLogs().AppendEmpty()
			rl.Resource().Attributes().PutStr("service.name", "svc")
			lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
			for i := range records {
				lrs.AppendEmpty().Body().SetStr(strings.Repeat(string(rune('a'+(r+i)%26)), bodyBytes))
			}
		}
		b, err := plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	gzPost := func(body []byte) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/v1/logs", bytes.NewReader(gzipped(t, body)))
		req.Header.Set("Content-Type", "application/x-protobuf")
		req.Header.Set("Content-Encoding", "gzip")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	// 20 resources of 40 records of 4 KB: 3.2 MB of rows, three times the budget.
	if rec := gzPost(logs(20, 40, 4000)); rec.Code != http.StatusOK {
		t.Fatalf("a request three times the budget: %d %s, want 200", rec.Code, rec.Body)
	}
	calls := th.store.recorded()
	rows := 0
	for _, c := range calls {
		rows += len(c.rows)
	}
	if rows != 800 || len(calls) < 3 {
		t.Fatalf("%d rows in %d store calls, want 800 in several", rows, len(calls))
	}
	if budget.Held() != 0 {
		t.Errorf("the budget holds %d bytes after the request", budget.Held())
	}
	metrics := th.do(http.MethodGet, "/metrics", "", "", nil).Body.String()
	if !strings.Contains(metrics, "hyp_ingest_otlp_pieced_requests_total 1") {
		t.Errorf("/metrics lacks the pieced request")
	}

	// One resource larger than the whole budget cannot be split further.
	checkError(t, gzPost(logs(1, 400, 4000)), http.StatusRequestEntityTooLarge, "decoded_too_large")
	// A cut request: the first pass refuses it before anything is stored.
	cut := logs(20, 40, 4000)
	checkError(t, gzPost(cut[:len(cut)-10]), http.StatusBadRequest, "bad_otlp")
	if n := len(th.store.recorded()); n != len(calls) {
		t.Fatalf("refused requests reached the store: %d calls, want %d", n, len(calls))
	}
	if budget.Held() != 0 {
		t.Errorf("the budget holds %d bytes after the refusals", budget.Held())
	}
}

// TestAdmittedWaitsOnceStored: a piece the budget refuses (503) waits for it, after the
// request's held rows are stored, once part of the request is stored; before that, and for
// any other refusal, the error is the request's.
func TestAdmittedWaitsOnceStored(t *testing.T) {
	spent := fmt.Errorf("otlp: decoding: %w", &httpbody.Error{Status: http.StatusServiceUnavailable, Kind: "unavailable"})
	bad := errors.New("bad_otlp")
	for _, tc := range []struct {
		name       string
		stored     bool
		errs       []error // decode's results, in turn
		wantErr    error
		wantStores int
	}{
		{"refused twice once part is stored", true, []error{spent, spent, nil}, nil, 2},
		{"refused before anything is stored", false, []error{spent, nil}, spent, 0},
		{"another error once part is stored", true, []error{bad}, bad, 0},
		{"admitted at once", true, []error{nil}, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls, stores := 0, 0
			err := admitted(context.Background(), func() bool { return tc.stored }, func() error {
				calls++
				return tc.errs[calls-1]
			}, func() error { stores++; return nil })
			if !errors.Is(err, tc.wantErr) || stores != tc.wantStores {
				t.Fatalf("err %v after %d stores, want %v after %d", err, stores, tc.wantErr, tc.wantStores)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := admitted(ctx, func() bool { return true }, func() error { return spent }, func() error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("a request that ended while waiting: %v", err)
	}
}
