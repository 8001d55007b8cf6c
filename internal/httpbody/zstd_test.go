package httpbody

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func zstdFrame(t testing.TB, b []byte, opts ...zstd.EOption) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

// hugeWindowFrame is a frame header alone that asks for a 2 TiB window (window descriptor
// exponent 31), with no block: it costs a naive decoder the allocation, nothing else.
var hugeWindowFrame = []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0xf8}

func TestReadZstd(t *testing.T) {
	rows := []byte(strings.Repeat(`{"msg":"hello","n":1}`+"\n", 1000))
	zeros := make([]byte, 10<<20)
	checkCodedReads(t, "zstd", []codedRead{
		{name: "one frame", body: zstdFrame(t, rows), max: 1 << 20, want: rows},
		{name: "two frames", body: append(zstdFrame(t, rows[:100]), zstdFrame(t, rows[100:])...), max: 1 << 20, want: rows},
		{name: "exactly at the limit", body: zstdFrame(t, rows), max: int64(len(rows)), want: rows},
		{name: "empty body", body: nil, max: 10, want: []byte{}},
		{name: "bomb over the limit", body: zstdFrame(t, zeros), max: 1 << 20, wantKind: "too_large"},
		{name: "compressed body over the limit", body: zstdFrame(t, rows), max: 10, wantKind: "too_large"},
		{name: "window over RFC 9659", body: zstdFrame(t, zeros, zstd.WithWindowSize(16<<20)), max: 32 << 20, wantKind: "bad_zstd"},
		{name: "declared 2 TiB window", body: hugeWindowFrame, max: 1 << 20, wantKind: "bad_zstd"},
		{name: "truncated", body: zstdFrame(t, rows)[:20], max: 1 << 20, wantKind: "bad_zstd"},
		{name: "not zstd", body: rows, max: 1 << 20, wantKind: "bad_zstd"},
	})
}

// TestZstdDeclaredWindowIsNotAllocated: a frame that names a huge window must be refused
// before anything near it is allocated.
func TestZstdDeclaredWindowIsNotAllocated(t *testing.T) {
	readCoded(hugeWindowFrame, "zstd", 1<<20) // the pool's first decoder
	const runs = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		if _, rerr := readCoded(hugeWindowFrame, "zstd", 1<<20); rerr == nil || rerr.Kind != "bad_zstd" {
			t.Fatalf("got %v, want bad_zstd", rerr)
		}
	}
	runtime.ReadMemStats(&after)
	if perRun := (after.TotalAlloc - before.TotalAlloc) / runs; perRun > 1<<20 {
		t.Fatalf("a frame declaring a 2 TiB window allocated %d bytes per read", perRun)
	}
}

// FuzzReadZstdBody feeds arbitrary zstd bodies to the body reader under a Guard: what it
// returns must be what a reference decoder makes of the body, never more than the limit;
// it must refuse for the budget only a body whose compressed and decompressed forms do not
// fit it together, and give the budget back every time.
func FuzzReadZstdBody(f *testing.F) {
	f.Add(zstdFrame(f, []byte("{}\n")), uint16(100), uint16(100))
	f.Add(zstdFrame(f, bytes.Repeat([]byte("x"), 5000)), uint16(100), uint16(100))
	f.Add(zstdFrame(f, bytes.Repeat([]byte("x"), 5000)), uint16(9000), uint16(9000))
	f.Add(append(zstdFrame(f, []byte("a\n")), zstdFrame(f, []byte("b\n"))...), uint16(100), uint16(100))
	f.Add(hugeWindowFrame, uint16(100), uint16(100))
	f.Add([]byte("not zstd"), uint16(100), uint16(100))
	f.Add([]byte{}, uint16(1), uint16(0))
	// The reference decodes in memory, capped at refCap bytes: uncapped, it would allocate
	// whatever content size a frame declares.
	const refCap = 1 << 17 // above any limit the fuzzer picks
	ref, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(zstdMaxWindow), zstd.WithDecodeAllCapLimit(true))
	if err != nil {
		f.Fatal(err)
	}
	defer ref.Close()
	f.Fuzz(func(t *testing.T, body []byte, limit, budget uint16) {
		max := int64(limit) + 1
		got, rerr, b := readGuarded(t, body, "zstd", max, int64(budget)+1)
		if rerr == nil && int64(len(got)) > max {
			t.Fatalf("returned %d bytes, over the %d-byte limit", len(got), max)
		}
		want := []byte{}
		if len(body) > 0 {
			var err error
			if want, err = ref.DecodeAll(body, make([]byte, 0, refCap)); err != nil {
				if errors.Is(err, zstd.ErrDecoderSizeExceeded) && rerr != nil && rerr.Kind == "too_large" {
					return
				}
				if rerr == nil {
					t.Fatalf("accepted a body the reference decoder refuses: %v", err)
				}
				return
			}
		}
		if rerr != nil {
			switch {
			case rerr.Kind == "too_large" && int64(len(body)) <= max && int64(len(want)) <= max:
				t.Fatalf("%d bytes (%d decompressed) refused as over the %d-byte limit", len(body), len(want), max)
			case rerr.Kind == "unavailable" && int64(len(body)+len(want)) <= b.Limit():
				t.Fatalf("%d+%d bytes refused as over the %d-byte budget", len(body), len(want), b.Limit())
			case rerr.Kind == "bad_zstd":
				t.Fatalf("refused a body the reference decoder takes: %s", rerr.Msg)
			}
			return
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("read %q, want %q", got, want)
		}
	})
}
