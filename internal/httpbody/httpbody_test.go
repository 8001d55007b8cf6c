package httpbody

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"
)

// FuzzReadBody feeds arbitrary bodies, compressed or not, to the body reader under a
// Guard: it must return the body as sent (or inflated), never more than the limit, refuse
// for the budget only a body that does not fit it, and give the budget back every time.
func FuzzReadBody(f *testing.F) {
	gz := func(b []byte) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(b)
		_ = zw.Close()
		return buf.Bytes()
	}
	f.Add([]byte("{}\n"), false, uint16(100), uint16(100))
	f.Add(gz([]byte("{}\n")), true, uint16(100), uint16(100))
	f.Add(gz(bytes.Repeat([]byte("x"), 5000)), true, uint16(100), uint16(100))
	f.Add(gz(bytes.Repeat([]byte("x"), 5000)), true, uint16(9000), uint16(1000))
	f.Add(bytes.Repeat([]byte("y"), 3000), false, uint16(9000), uint16(1000))
	f.Add([]byte("not gzip"), true, uint16(100), uint16(100))
	f.Add([]byte{}, true, uint16(1), uint16(0))
	f.Fuzz(func(t *testing.T, body []byte, compressed bool, limit, budget uint16) {
		encoding := ""
		if compressed {
			encoding = "gzip"
		}
		max := int64(limit) + 1
		got, rerr, b := readGuarded(t, body, encoding, max, int64(budget)+1)
		want := body
		if compressed && len(body) > 0 {
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err == nil {
				want, err = io.ReadAll(zr)
			}
			if err != nil {
				if rerr == nil {
					t.Fatalf("accepted a body gzip refuses: %v", err)
				}
				return
			}
		}
		if rerr != nil {
			switch {
			case rerr.Kind == "too_large" && !compressed && int64(len(body)) <= max:
				t.Fatalf("%d bytes refused as over the %d-byte limit", len(body), max)
			case rerr.Kind == "unavailable" && int64(len(want)) <= b.Limit():
				t.Fatalf("%d bytes refused as over the %d-byte budget", len(want), b.Limit())
			}
			return
		}
		if int64(len(got)) > max || int64(len(got)) > b.Limit() {
			t.Fatalf("returned %d bytes, over the %d-byte limit or the %d-byte budget", len(got), max, b.Limit())
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("read %q, want %q", got, want)
		}
	})
}

// TestReadDoesNotAllocateDeclaredLength: a request that declares 16 MiB and sends three
// bytes must cost about three bytes, not a 16 MiB buffer.
func TestReadDoesNotAllocateDeclaredLength(t *testing.T) {
	const declared = 16 << 20
	tooLarge := &Error{Status: http.StatusRequestEntityTooLarge, Kind: "too_large"}
	read := func() {
		r := httptest.NewRequest(http.MethodPost, "/v1/ingest/logs", strings.NewReader("{}\n"))
		r.ContentLength = declared
		buf, rerr := Read(r, Limits{Sent: 2 * declared, TooLarge: tooLarge})
		if rerr != nil {
			t.Fatal(rerr)
		}
		if buf.String() != "{}\n" {
			t.Fatalf("read %q", buf)
		}
		Release(buf)
	}
	read() // the pool's first buffer
	const runs = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		read()
	}
	runtime.ReadMemStats(&after)
	if perRun := (after.TotalAlloc - before.TotalAlloc) / runs; perRun > 64<<10 {
		t.Fatalf("a 3-byte body declaring %d bytes allocated %d bytes per read", declared, perRun)
	}
}

// readGuarded reads body, sent with the given Content-Encoding, through Guard and Read with
// a body limit and a budget, as a handler would, and checks that the budget is given back.
func readGuarded(t *testing.T, body []byte, encoding string, max, budget int64) (got []byte, rerr *Error, b *Budget) {
	t.Helper()
	b, err := NewBudget(budget)
	if err != nil {
		t.Fatal(err)
	}
	h, err := Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var buf *bytes.Buffer
		if buf, rerr = Read(r, Limits{Sent: max, TooLarge: &Error{Status: http.StatusRequestEntityTooLarge, Kind: "too_large"}}); rerr == nil {
			got = bytes.Clone(buf.Bytes())
			Release(buf)
		}
	}), b, Pace{Grace: time.Minute, MinRate: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/v1/ingest/logs", bytes.NewReader(body))
	if encoding != "" {
		r.Header.Set("Content-Encoding", encoding)
	}
	h.ServeHTTP(httptest.NewRecorder(), r)
	if b.Held() != 0 {
		t.Fatalf("the budget still holds %d bytes after the request", b.Held())
	}
	return got, rerr, b
}

// codedRead is a body sent with a Content-Encoding and what Read must make of it.
type codedRead struct {
	name     string
	body     []byte
	max      int64
	want     []byte // when the read succeeds
	wantKind string
}

// checkCodedReads reads each case's body, sent with encoding, and checks the outcome.
func checkCodedReads(t *testing.T, encoding string, cases []codedRead) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			buf, rerr := readCoded(tc.body, encoding, tc.max)
			checkRead(t, buf, rerr, tc.want, tc.wantKind)
		})
	}
}

// readCoded reads body, sent with the given Content-Encoding, through Read.
func readCoded(body []byte, encoding string, max int64) (*bytes.Buffer, *Error) {
	r := httptest.NewRequest(http.MethodPost, "/v1/ingest/logs", bytes.NewReader(body))
	r.Header.Set("Content-Encoding", encoding)
	return Read(r, Limits{Sent: max, TooLarge: &Error{Status: http.StatusRequestEntityTooLarge, Kind: "too_large"}})
}

// checkRead fails t unless Read returned want, or, when wantKind is set, refused with it.
func checkRead(t *testing.T, buf *bytes.Buffer, rerr *Error, want []byte, wantKind string) {
	t.Helper()
	if wantKind != "" {
		if rerr == nil {
			Release(buf)
			t.Fatalf("read succeeded, want %s", wantKind)
		}
		if rerr.Kind != wantKind {
			t.Fatalf("error %s (%s), want %s", rerr.Kind, rerr.Msg, wantKind)
		}
		return
	}
	if rerr != nil {
		t.Fatalf("error %s: %s", rerr.Kind, rerr.Msg)
	}
	defer Release(buf)
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("read %d bytes, want %d", buf.Len(), len(want))
	}
}
