package httpbody

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"testing"

	kgzip "github.com/klauspost/compress/gzip"
)

// unkept is a keep that charges nothing.
func unkept(r io.Reader) io.Reader { return r }

// gzipMember is one member written by hand, for the header fields compress/gzip's Writer
// never sets (FHCRC); deflated is the raw deflate stream of data.
func gzipMember(name, comment string, extra []byte, hcrc bool, deflated, data []byte) []byte {
	h := []byte{0x1f, 0x8b, 8, 0, 1, 2, 3, 4, 0, 255}
	if extra != nil {
		h[3] |= 1 << 2 // FEXTRA
		h = binary.LittleEndian.AppendUint16(h, uint16(len(extra)))
		h = append(h, extra...)
	}
	if name != "" {
		h[3] |= 1 << 3 // FNAME
		h = append(append(h, name...), 0)
	}
	if comment != "" {
		h[3] |= 1 << 4 // FCOMMENT
		h = append(append(h, comment...), 0)
	}
	if hcrc {
		h[3] |= 1 << 1 // FHCRC
		h = binary.LittleEndian.AppendUint16(h, uint16(crc32.ChecksumIEEE(h)))
	}
	h = append(h, deflated...)
	h = binary.LittleEndian.AppendUint32(h, crc32.ChecksumIEEE(data))
	return binary.LittleEndian.AppendUint32(h, uint32(len(data)))
}

func gzipped(t testing.TB, data []byte, level int) []byte {
	t.Helper()
	var b bytes.Buffer
	zw, err := kgzip.NewWriterLevel(&b, level)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestReadGzip(t *testing.T) {
	rows := forwardUnit(1000)
	one := gzipped(t, rows, kgzip.BestSpeed)
	small := []byte("hello, hello, hello\n")
	deflated := gzipped(t, small, kgzip.BestSpeed)
	fields := gzipMember("name", "comment", []byte("xy"), true, deflated[10:len(deflated)-8], small)
	badCRC := bytes.Clone(one)
	badCRC[len(badCRC)-8] ^= 1
	checkCodedReads(t, "gzip", []codedRead{
		{name: "one member", body: one, max: 1 << 20, want: rows},
		{name: "two members", body: append(gzipped(t, rows[:100], kgzip.BestSpeed), gzipped(t, rows[100:], kgzip.BestSpeed)...), max: 1 << 20, want: rows},
		{name: "every header field", body: fields, max: 1 << 20, want: small},
		{name: "exactly at the limit", body: one, max: int64(len(rows)), want: rows},
		{name: "empty body", body: nil, max: 10, want: []byte{}},
		{name: "over the limit", body: one, max: int64(len(rows)) - 1, wantKind: "too_large"},
		{name: "compressed body over the limit", body: one, max: 10, wantKind: "too_large"},
		{name: "header cut inside FCOMMENT", body: []byte("\x1f\x8b\b0000000"), max: 1 << 20, wantKind: "bad_gzip"},
		{name: "truncated", body: one[:len(one)/2], max: 1 << 20, wantKind: "bad_gzip"},
		{name: "trailer cut", body: one[:len(one)-1], max: 1 << 20, wantKind: "bad_gzip"},
		{name: "bad checksum", body: badCRC, max: 1 << 20, wantKind: "bad_gzip"},
		{name: "trailing garbage", body: append(bytes.Clone(one), '\n'), max: 1 << 20, wantKind: "bad_gzip"},
		{name: "not gzip", body: rows, max: 1 << 20, wantKind: "bad_gzip"},
	})
}

// forwardUnit is n NDJSON rows shaped like those hyp forwards to `hyp server`.
func forwardUnit(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, `{"ts":"2026-11-30T09:00:00.%06dZ","level":"info","service":"checkout","msg":"request handled","path":"/api/v1/items/%d","status":200,"duration_ms":%d,"id":%d,"_hyp_ingest_seq":%d,"_hyp_ingested_at":"2026-11-30T09:00:01.%06dZ"}`+"\n",
			i, i%1000, i%50, i, i, i)
	}
	return b.Bytes()
}

// BenchmarkGunzip decompresses a forward unit (10,000 rows, compressed at BestSpeed as the
// forwarder does); MB/s is of output.
func BenchmarkGunzip(b *testing.B) {
	rows := forwardUnit(10000)
	body := gzipped(b, rows, kgzip.BestSpeed)
	b.Logf("%d rows, %d bytes, %d compressed (%.1f bytes a row)", 10000, len(rows), len(body), float64(len(body))/10000)
	var out bytes.Buffer
	b.SetBytes(int64(len(rows)))
	for b.Loop() {
		out.Reset()
		if err := gunzip(&out, bytes.NewReader(body), 1<<30, unkept); err != nil || out.Len() != len(rows) {
			b.Fatalf("read %d bytes: %v", out.Len(), err)
		}
	}
}
