package httpbody

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"testing"

	kgzip "github.com/klauspost/compress/gzip"
)

// stdGunzip is gunzip as it was on compress/gzip: the reference FuzzGunzip holds gunzip to,
// and the baseline BenchmarkGunzip measures it against.
func stdGunzip(dst *bytes.Buffer, src io.Reader, limit int64, zr *gzip.Reader, br *bufio.Reader) error {
	br.Reset(src)
	if err := zr.Reset(br); err != nil {
		if err == io.EOF {
			return nil
		}
		return err
	}
	_, err := dst.ReadFrom(io.LimitReader(zr, limit))
	return err
}

func unkept(r io.Reader) io.Reader { return r }

// chunked hands out at most n bytes a read, as a slow connection would.
type chunked struct {
	r io.Reader
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(p) > c.n {
		p = p[:c.n]
	}
	return c.r.Read(p)
}

// gzipMember is one member written by hand, for the header fields compress/gzip's Writer
// never sets (FHCRC) or sets only one way; deflated is the raw deflate stream of data.
func gzipMember(name, comment string, extra []byte, hcrc bool, flgExtra byte, deflated, data []byte) []byte {
	h := []byte{0x1f, 0x8b, 8, flgExtra, 1, 2, 3, 4, 0, 255}
	if extra != nil {
		h[3] |= gzipFlagExtra
		h = binary.LittleEndian.AppendUint16(h, uint16(len(extra)))
		h = append(h, extra...)
	}
	if name != "" {
		h[3] |= gzipFlagName
		h = append(append(h, name...), 0)
	}
	if comment != "" {
		h[3] |= gzipFlagComment
		h = append(append(h, comment...), 0)
	}
	if hcrc {
		h[3] |= gzipFlagHdrCrc
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

// gzipSeeds are bodies of the shapes FuzzGunzip starts from: every header field, several
// members, each encoder block type, and damaged copies of them.
func gzipSeeds(t testing.TB) [][]byte {
	rows := forwardUnit(200)
	small := []byte("hello, hello, hello\n")
	deflated := gzipped(t, small, kgzip.BestSpeed)
	raw := deflated[10 : len(deflated)-8] // klauspost writes a bare 10-byte header
	full := gzipMember("name.ndjson", "a comment", []byte("ab\x00\x04data"), true, 0, raw, small)
	bodies := [][]byte{
		{},
		gzipped(t, nil, kgzip.DefaultCompression),
		gzipped(t, small, kgzip.NoCompression),
		gzipped(t, small, kgzip.HuffmanOnly),
		gzipped(t, rows, kgzip.BestSpeed),
		gzipped(t, rows, kgzip.BestCompression),
		full,
		gzipMember("n\xe9", "", nil, false, 0xe0, raw, small), // Latin-1 name, reserved flags
		gzipMember("", "", []byte{}, true, 0, raw, small),
		gzipMember(string(bytes.Repeat([]byte("n"), maxGzipString-1)), "", nil, false, 0, raw, small),
		gzipMember(string(bytes.Repeat([]byte("n"), maxGzipString)), "", nil, false, 0, raw, small),
		append(bytes.Clone(full), gzipped(t, rows[:1000], kgzip.BestSpeed)...),
		append(gzipped(t, nil, kgzip.BestSpeed), full...),
		append(bytes.Clone(full), 0),
		append(bytes.Clone(full), "garbage"...),
		append(bytes.Clone(full), 0x1f, 0x8b),
		append(bytes.Clone(full), full[:10]...),
		[]byte("not gzip at all"),
	}
	for i := range len(full) {
		bodies = append(bodies, full[:i])
	}
	for _, at := range []int{len(full) - 8, len(full) - 5, len(full) - 4, len(full) - 1} {
		bad := bytes.Clone(full)
		bad[at] ^= 1 // CRC-32, then ISIZE
		bodies = append(bodies, bad)
	}
	badHcrc := bytes.Clone(full)
	badHcrc[bytes.Index(full, []byte("a comment"))+len("a comment")+1] ^= 1
	return append(bodies, badHcrc)
}

func TestReadGzip(t *testing.T) {
	rows := forwardUnit(1000)
	one := gzipped(t, rows, kgzip.BestSpeed)
	small := []byte("hello, hello, hello\n")
	deflated := gzipped(t, small, kgzip.BestSpeed)
	fields := gzipMember("name", "comment", []byte("xy"), true, 0, deflated[10:len(deflated)-8], small)
	badCRC := bytes.Clone(one)
	badCRC[len(badCRC)-8] ^= 1
	for _, tc := range []struct {
		name     string
		body     []byte
		max      int64
		want     []byte // when the read succeeds
		wantKind string
	}{
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf, rerr := readCoded(tc.body, "gzip", tc.max)
			checkRead(t, buf, rerr, tc.want, tc.wantKind)
		})
	}
}

// maxShortOnTruncation is the most a truncated body yields through compress/flate beyond
// what it yields through klauspost's flate: 10 bits decoded as 5 length-258 matches of 2
// bits each.
const maxShortOnTruncation = 5 * 258

// FuzzGunzip holds gunzip to compress/gzip: the same bodies accepted, with the same bytes
// out, and the same refused, whatever the limit and however the body arrives.
func FuzzGunzip(f *testing.F) {
	for i, b := range gzipSeeds(f) {
		f.Add(b, false, uint32(1<<20), uint16(4096))
		f.Add(b, false, uint32(i*7), uint16(1+i%5))
	}
	for _, level := range []int{kgzip.NoCompression, kgzip.HuffmanOnly, kgzip.BestSpeed, kgzip.BestCompression} {
		for _, n := range []int{1, 30, 300} {
			b := gzipped(f, forwardUnit(n), level)
			f.Add(b[10:len(b)-8], true, uint32(1<<20), uint16(4096))
		}
	}
	var zr gzip.Reader
	br := bufio.NewReader(nil)
	f.Fuzz(func(t *testing.T, body []byte, deflated bool, limit uint32, chunk uint16) {
		if deflated {
			// A mutated deflate stream almost never matches a gzip trailer, which would hide
			// how the two inflaters differ behind a checksum error: give it the trailer of
			// what compress/flate makes of it.
			var data bytes.Buffer
			_, _ = data.ReadFrom(io.LimitReader(flate.NewReader(bytes.NewReader(body)), 1<<20))
			body = gzipMember("", "", nil, false, 0, body, data.Bytes())
		}
		src := func() io.Reader { return &chunked{r: bytes.NewReader(body), n: int(chunk) + 1} }
		var want, got bytes.Buffer
		werr := stdGunzip(&want, src(), int64(limit), &zr, br)
		gerr := gunzip(&got, src(), int64(limit), unkept)
		// Output at the limit is refused for its size (Read's tooLarge) whatever error
		// came with it.
		atLimit := int64(want.Len()) == int64(limit)
		if ((werr == nil) == (gerr == nil) || atLimit) && bytes.Equal(got.Bytes(), want.Bytes()) {
			return
		}
		// The one difference allowed: inside a non-final dynamic block, klauspost's inflater
		// asks for 10 bits more than compress/flate before it decodes a symbol (room for the
		// smallest next block), so where the body ends there it gives up to 10 bits sooner.
		// What compress/gzip read in between, up to the limit, gunzip never returns.
		short := want.Len() - got.Len()
		if errors.Is(gerr, io.ErrUnexpectedEOF) && (werr != nil || atLimit) &&
			short > 0 && short <= maxShortOnTruncation && bytes.Equal(got.Bytes(), want.Bytes()[:got.Len()]) {
			return
		}
		t.Fatalf("compress/gzip read %d bytes (%v), gunzip %d (%v)", want.Len(), werr, got.Len(), gerr)
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
// forwarder does) the way compress/gzip did and the way gunzip does; MB/s is of output.
func BenchmarkGunzip(b *testing.B) {
	rows := forwardUnit(10000)
	body := gzipped(b, rows, kgzip.BestSpeed)
	b.Logf("%d rows, %d bytes, %d compressed (%.1f bytes a row)", 10000, len(rows), len(body), float64(len(body))/10000)
	var out bytes.Buffer
	run := func(b *testing.B, decode func() error) {
		b.SetBytes(int64(len(rows)))
		for b.Loop() {
			out.Reset()
			if err := decode(); err != nil || out.Len() != len(rows) {
				b.Fatalf("read %d bytes: %v", out.Len(), err)
			}
		}
	}
	b.Run("compress-gzip", func(b *testing.B) {
		var zr gzip.Reader
		br := bufio.NewReader(nil)
		run(b, func() error { return stdGunzip(&out, bytes.NewReader(body), 1<<30, &zr, br) })
	})
	b.Run("gunzip", func(b *testing.B) {
		run(b, func() error { return gunzip(&out, bytes.NewReader(body), 1<<30, unkept) })
	})
}
