package ingest

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/rowform"
)

// fuzzStore reaches every store outcome from the fuzzed body: "BAD" is an input error,
// "FAIL" a storage failure, anything else is accepted. It panics on input the handler should
// never have passed on, which the fuzzer reports like any other panic.
type fuzzStore struct{ maxBody int64 }

func (s fuzzStore) Ingest(dataset, source string, body []byte) (cache.Result, error) {
	if int64(len(body)) > s.maxBody {
		panic(fmt.Sprintf("store got %d bytes, over the %d-byte limit", len(body), s.maxBody))
	}
	if !cache.ValidDataset(dataset) {
		panic(fmt.Sprintf("store got invalid dataset %q", dataset))
	}
	switch {
	case bytes.Contains(body, []byte("BAD")):
		return cache.Result{}, &cache.InputError{Kind: "bad_json", Line: 1, Msg: "fuzz"}
	case bytes.Contains(body, []byte("FAIL")):
		return cache.Result{}, errors.New("fuzz storage failure")
	}
	n := bytes.Count(body, []byte("\n"))
	return cache.Result{Accepted: n, FirstSeq: 1, LastSeq: int64(n)}, nil
}

func (s fuzzStore) IngestRowGroups(dataset string, groups []rowform.RowGroup) (cache.Result, error) {
	n := 0
	for _, g := range groups {
		n += g.Rows
	}
	return cache.Result{Accepted: n, FirstSeq: 1, LastSeq: int64(n)}, nil
}

// fuzzPaths are picked by the route argument; "/v1/ingest/" gets the fuzzed name appended,
// and "" is replaced by it, so arbitrary paths are reached too.
var fuzzPaths = []string{"/v1/ingest/", "/v1/logs", "/v1/traces", "/v1/metrics", "/healthz", "/metrics", ""}

// FuzzIngestHandler sends arbitrary requests to the handler. It must never panic, and every
// reply other than 200 must be a JSON object with an "error" key.
func FuzzIngestHandler(f *testing.F) {
	lines := []byte("{\"a\":1}\n{\"source\":\"web\"}\n")
	f.Add(uint8(0), "app", "", "POST", "", "", false, false, lines)
	f.Add(uint8(0), "app", "source=web", "POST", "", "", true, true, lines)
	f.Add(uint8(0), "app", "", "POST", "", "gzip", false, false, lines)
	f.Add(uint8(0), "app", "", "POST", "", "gzip", false, false, gzipBomb(f, 1))
	f.Add(uint8(0), "App!", "", "POST", "", "", false, false, []byte("BAD"))
	f.Add(uint8(0), "app", "", "POST", "", "", false, false, []byte("FAIL\n"))
	f.Add(uint8(0), "app", "", "PUT", "", "br", false, false, lines)
	f.Add(uint8(1), "", "", "POST", "application/x-protobuf", "", false, false, marshal(f, logsRequest().MarshalProto))
	f.Add(uint8(1), "", "", "POST", "application/json", "", false, true, marshal(f, logsRequest().MarshalJSON))
	f.Add(uint8(2), "", "", "POST", "application/json", "", false, false, []byte(`{"resourceSpans":[{}]}`))
	f.Add(uint8(3), "", "", "POST", "text/plain", "", false, false, []byte{0})
	f.Add(uint8(4), "", "", "GET", "", "", false, false, []byte(nil))
	f.Add(uint8(5), "", "", "GET", "", "", false, false, []byte(nil))
	f.Add(uint8(6), "/x/../v1/logs", "", "DELETE", "", "", false, false, []byte(nil))

	// A small limit, so fuzzed bodies reach it.
	const limit = 4096
	reg := prometheus.NewRegistry()
	h, err := NewHandler(fuzzStore{maxBody: limit}, Options{
		MaxBodyBytes: limit,
		Registerer:   reg,
		Gatherer:     reg,
		Logger:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		f.Fatal(err)
	}
	// One writer for all inputs: gzip.NewWriter allocates most of a megabyte, which would
	// otherwise dominate each run.
	zw := gzip.NewWriter(nil)
	f.Fuzz(func(t *testing.T, route uint8, name, query, method, contentType, encoding string, chunked, compress bool, body []byte) {
		path := fuzzPaths[int(route)%len(fuzzPaths)]
		switch path {
		case "/v1/ingest/":
			path += name
		case "":
			path = name
		}
		if compress {
			var buf bytes.Buffer
			zw.Reset(&buf)
			if _, err := zw.Write(body); err != nil {
				t.Fatal(err)
			}
			if err := zw.Close(); err != nil {
				t.Fatal(err)
			}
			body, encoding = buf.Bytes(), "gzip"
		}
		req := &http.Request{
			Method:        method,
			URL:           &url.URL{Path: path, RawQuery: query},
			Header:        http.Header{},
			Body:          io.NopCloser(bytes.NewReader(body)),
			ContentLength: int64(len(body)),
		}
		if chunked {
			req.ContentLength = -1
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if encoding != "" {
			req.Header.Set("Content-Encoding", encoding)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)

		if rec.Code == http.StatusOK {
			return
		}
		var reply map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &reply); err != nil {
			t.Fatalf("%s %q: status %d with a body that is not a JSON object: %v: %q", method, path, rec.Code, err, rec.Body)
		}
		if kind, _ := reply["error"].(string); kind == "" {
			t.Fatalf("%s %q: status %d without an error kind: %s", method, path, rec.Code, rec.Body)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("%s %q: status %d with Content-Type %q", method, path, rec.Code, ct)
		}
	})
}
