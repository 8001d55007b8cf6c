package forward

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// ndjson is a unit body shaped like what a forward sink sends: log rows of one partition
// with the two internal columns.
func ndjson(rows int) []byte {
	var b bytes.Buffer
	for i := range rows {
		fmt.Fprintf(&b, `{"_hyp_ingest_seq":%d,"_hyp_ingested_at":"2026-12-01T11:16:%02d.%06dZ","duration_ms":%d,"id":%d,"level":"info","msg":"request handled","path":"/api/v1/items/%d","service":"checkout","source":"bench","status":200,"ts":"2026-11-30T09:00:00.%06dZ"}`+"\n",
			1000+i, (i/1000)%60, i%1000000, i%977, i, i%5000, i%1000000)
	}
	return b.Bytes()
}

// TestCompressRoundTrip also sends a body past 8 MiB, which a zstd frame must carry in a
// window the receiver accepts (RFC 9659's limit, decompress's WithDecoderMaxWindow).
func TestCompressRoundTrip(t *testing.T) {
	small, large := ndjson(2000), ndjson(40_000)
	if len(large) <= 8<<20 {
		t.Fatalf("the large body is %d bytes, not past 8 MiB", len(large))
	}
	for _, tc := range []struct {
		kind Compression
		body []byte
	}{{None, small}, {Gzip, small}, {Zstd, small}, {Gzip, large}, {Zstd, large}} {
		kind, body := tc.kind, tc.body
		t.Run(fmt.Sprintf("%s/%d", kind, len(body)), func(t *testing.T) {
			c, err := newCompressor(kind)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 { // the second call reuses pooled state
				wire, err := c.compress(body)
				if err != nil {
					t.Fatal(err)
				}
				got := decompress(t, c.encoding(), wire)
				if !bytes.Equal(got, body) {
					t.Fatalf("round trip changed the body (%d bytes, want %d)", len(got), len(body))
				}
			}
		})
	}
}

func decompress(t *testing.T, encoding string, wire []byte) []byte {
	t.Helper()
	switch encoding {
	case "":
		return wire
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(wire))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		return got
	case "zstd":
		zr, err := zstd.NewReader(nil, zstd.WithDecoderMaxWindow(8<<20))
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		got, err := zr.DecodeAll(wire, nil)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	t.Fatalf("unexpected Content-Encoding %q", encoding)
	return nil
}

// TestSendCompressed: the body travels in the configured coding, named by Content-Encoding,
// every retry carries the same bytes, and the receipt counts the bytes as sent; a body
// compressed ahead with Compress travels exactly as Compress returned it.
func TestSendCompressed(t *testing.T) {
	for _, tc := range []struct {
		kind  Compression
		want  string
		ahead bool
	}{{None, "", false}, {Gzip, "gzip", false}, {Zstd, "zstd", false}, {Gzip, "gzip", true}, {Zstd, "zstd", true}} {
		t.Run(fmt.Sprintf("%s/ahead=%v", tc.kind, tc.ahead), func(t *testing.T) {
			clock := newFakeClock()
			srv := scriptServer(t, clock, reply{status: 503}, reply{status: 200, body: `{"accepted":3,"duplicates":0}`})
			c := newTestClient(t, srv.URL, clock, nil, func(o *Options) { o.Compression = tc.kind })
			ch := testChunk()
			if tc.ahead {
				wire, err := c.Compress(ch.Body)
				if err != nil {
					t.Fatal(err)
				}
				ch.Wire = wire
			}
			rc, err := c.Send(context.Background(), ch)
			if err != nil {
				t.Fatal(err)
			}
			reqs := srv.requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests, want 2", len(reqs))
			}
			for _, r := range reqs {
				if got := r.header.Values("Content-Encoding"); (tc.want == "" && len(got) != 0) || (tc.want != "" && (len(got) != 1 || got[0] != tc.want)) {
					t.Errorf("Content-Encoding %q, want %q", got, tc.want)
				}
				if !bytes.Equal(r.body, reqs[0].body) {
					t.Error("a retry sent different bytes")
				}
				if tc.ahead && !bytes.Equal(r.body, ch.Wire) {
					t.Error("the request did not carry the body compressed ahead as it was")
				}
				if got := decompress(t, tc.want, r.body); !bytes.Equal(got, ch.Body) {
					t.Errorf("body decompresses to %q, want %q", got, ch.Body)
				}
			}
			if rc.WireBytes != int64(len(reqs[1].body)) {
				t.Errorf("receipt counts %d wire bytes, the request carried %d", rc.WireBytes, len(reqs[1].body))
			}
		})
	}
}

func TestParseCompression(t *testing.T) {
	for _, s := range []string{"none", "gzip", "zstd"} {
		c, err := ParseCompression(s)
		if err != nil || c.String() != s {
			t.Errorf("ParseCompression(%q) = %v, %v", s, c, err)
		}
	}
	for _, s := range []string{"", "GZIP", "br", "identity"} {
		if _, err := ParseCompression(s); err == nil {
			t.Errorf("ParseCompression(%q) accepted", s)
		}
	}
}

// BenchmarkCompress reports each compression's speed and wire bytes per row on a
// 10,000-row unit, the forward sink's unit budget.
func BenchmarkCompress(b *testing.B) {
	const rows = 10_000
	body := ndjson(rows)
	for _, kind := range []Compression{Gzip, Zstd} {
		b.Run(kind.String(), func(b *testing.B) {
			c, err := newCompressor(kind)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(body)))
			var wire []byte
			for b.Loop() {
				if wire, err = c.compress(body); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(body))/rows, "raw-B/row")
			b.ReportMetric(float64(len(wire))/rows, "wire-B/row")
		})
	}
}
