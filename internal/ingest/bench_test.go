package ingest

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/rowform"
)

const benchRows = 1000

// nopStore acknowledges every request without looking at it, so the benchmark measures the
// handler and the HTTP stack only.
type nopStore struct{}

func (nopStore) Ingest(string, string, []byte) (cache.Result, error) {
	return cache.Result{Accepted: benchRows, FirstSeq: 1, LastSeq: benchRows}, nil
}

func (nopStore) IngestRowGroups(string, []rowform.RowGroup) (cache.Result, error) {
	return cache.Result{}, nil
}

// benchBody is benchRows NDJSON rows of about 200 bytes each.
func benchBody() []byte {
	var b bytes.Buffer
	for i := range benchRows {
		fmt.Fprintf(&b, `{"ts":"2026-11-30T09:13:39.%06dZ","level":"info","source":"web-%d","msg":"GET /api/v1/items/%d served","status":200,"bytes":%d,"user":"u%05d","pad":"%s"}`+"\n",
			i, i%4, i, 1000+i, i, strings.Repeat("x", 40))
	}
	return b.Bytes()
}

// BenchmarkIngestNDJSON posts 1,000-row requests from parallel clients, directly to the
// handler and over loopback HTTP, plain and gzip, and reports rows/s.
func BenchmarkIngestNDJSON(b *testing.B) {
	plain := benchBody()
	compressed := gzipped(b, plain)
	for _, transport := range []string{"handler", "http"} {
		for _, enc := range []struct {
			name, encoding string
			body           []byte
		}{{"plain", "", plain}, {"gzip", "gzip", compressed}} {
			b.Run(transport+"/"+enc.name, func(b *testing.B) {
				reg := prometheus.NewRegistry()
				h, err := NewHandler(nopStore{}, Options{MaxBodyBytes: 16 << 20, Registerer: reg, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				post := handlerPost(h)
				if transport == "http" {
					srv := httptest.NewServer(h)
					defer srv.Close()
					post = httpPost(srv)
				}
				b.SetBytes(int64(len(plain)))
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if code := post(enc.encoding, enc.body); code != http.StatusOK {
							b.Errorf("status %d", code)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)*benchRows/b.Elapsed().Seconds(), "rows/s")
			})
		}
	}
}

// BenchmarkIngestOTLP posts 1,000-record OTLP logs requests shaped like the load
// generator's (a 150-byte body and an id attribute per record) straight to the handler from
// parallel clients, protobuf and JSON, and reports records/s: decoding and the handler, with
// a store that takes the rows without looking at them.
func BenchmarkIngestOTLP(b *testing.B) {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "loadgen")
	sl := rl.ScopeLogs().AppendEmpty()
	sl.Scope().SetName("loadgen")
	for i := range benchRows {
		lr := sl.LogRecords().AppendEmpty()
		lr.SetTimestamp(pcommon.Timestamp(1764600000e9 + i))
		lr.SetSeverityNumber(plog.SeverityNumberInfo)
		lr.SetSeverityText("INFO")
		lr.Body().SetStr(fmt.Sprintf("event id=L-%010d %s", i, strings.Repeat("x", 130)))
		lr.Attributes().PutStr("id", fmt.Sprintf("L-%010d", i))
	}
	req := plogotlp.NewExportRequestFromLogs(ld)
	for _, enc := range []struct {
		name, contentType string
		body              []byte
	}{{"protobuf", "application/x-protobuf", marshal(b, req.MarshalProto)}, {"json", "application/json", marshal(b, req.MarshalJSON)}} {
		b.Run(enc.name, func(b *testing.B) {
			h, err := NewHandler(nopStore{}, Options{MaxBodyBytes: 16 << 20, Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(enc.body)))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r := httptest.NewRequest("POST", "/v1/logs", bytes.NewReader(enc.body))
					r.Header.Set("Content-Type", enc.contentType)
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, r)
					if rec.Code != http.StatusOK {
						b.Errorf("status %d: %s", rec.Code, rec.Body)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)*benchRows/b.Elapsed().Seconds(), "records/s")
		})
	}
}

func handlerPost(h http.Handler) func(encoding string, body []byte) int {
	return func(encoding string, body []byte) int {
		req := httptest.NewRequest("POST", "/v1/ingest/bench", bytes.NewReader(body))
		if encoding != "" {
			req.Header.Set("Content-Encoding", encoding)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
}

func httpPost(srv *httptest.Server) func(encoding string, body []byte) int {
	client := srv.Client()
	url := srv.URL + "/v1/ingest/bench"
	return func(encoding string, body []byte) int {
		req, err := http.NewRequest("POST", url, bytes.NewReader(body))
		if err != nil {
			return 0
		}
		if encoding != "" {
			req.Header.Set("Content-Encoding", encoding)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0
		}
		// Drain so the connection is reused, as a real client's would be.
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
}
