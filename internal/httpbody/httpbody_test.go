package httpbody

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzReadBody feeds arbitrary bodies, compressed or not, to the body reader: it must
// return the body as sent (or inflated), and never more than the limit.
func FuzzReadBody(f *testing.F) {
	gz := func(b []byte) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(b)
		_ = zw.Close()
		return buf.Bytes()
	}
	f.Add([]byte("{}\n"), false, uint16(100))
	f.Add(gz([]byte("{}\n")), true, uint16(100))
	f.Add(gz(bytes.Repeat([]byte("x"), 5000)), true, uint16(100))
	f.Add([]byte("not gzip"), true, uint16(100))
	f.Add([]byte{}, true, uint16(1))
	f.Fuzz(func(t *testing.T, body []byte, compressed bool, limit uint16) {
		max := int64(limit) + 1
		r := httptest.NewRequest(http.MethodPost, "/v1/ingest/logs", bytes.NewReader(body))
		if compressed {
			r.Header.Set("Content-Encoding", "gzip")
		}
		buf, rerr := Read(r, max, &Error{Status: http.StatusRequestEntityTooLarge, Kind: "too_large"})
		if rerr != nil {
			if rerr.Kind == "too_large" && !compressed && int64(len(body)) <= max {
				t.Fatalf("%d bytes refused as over the %d-byte limit", len(body), max)
			}
			return
		}
		got := buf.Bytes()
		defer Release(buf)
		if int64(len(got)) > max {
			t.Fatalf("returned %d bytes, over the %d-byte limit", len(got), max)
		}
		want := body
		if compressed && len(body) > 0 {
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				t.Fatalf("accepted a body gzip refuses: %v", err)
			}
			if want, err = io.ReadAll(zr); err != nil {
				t.Fatalf("accepted a body gzip refuses: %v", err)
			}
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("read %q, want %q", got, want)
		}
	})
}
