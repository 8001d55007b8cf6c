package httpbody

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// zstdMaxWindow is the largest window a zstd body may ask for. A frame names its window
// and the decoder allocates it up front, so without this cap a few bytes could make each
// request cost gigabytes; 8 MiB is what RFC 9659 requires of every zstd content-coding
// decoder and allows every encoder, so a conforming sender never hits it.
const zstdMaxWindow = 8 << 20

// zstdDecoders bounds the zstd decoders that exist at once: each holds up to about
// zstdMaxWindow of history, which no Budget counts, and decoding is CPU-bound, so more of
// them than cores would only add memory.
var zstdDecoders = max(4, runtime.GOMAXPROCS(0))

// zstdPool hands out decoders, at most zstdDecoders of them at once. A decoder is taken
// only once the compressed body is in memory, so a slow client never holds one.
var zstdPool = struct {
	slots chan struct{}
	free  sync.Pool
}{slots: make(chan struct{}, zstdDecoders)}

// unzstd reads the zstd body src whole, then decompresses it into dst, stopping after limit
// bytes of output; keep wraps both streams, so the compressed copy and the output are
// charged while they are held. Reading first means a decoder is held only while it works.
func unzstd(ctx context.Context, dst *bytes.Buffer, src io.Reader, limit int64, keep func(io.Reader) io.Reader) error {
	in := buffers.Get().(*bytes.Buffer)
	defer Release(in)
	if _, err := in.ReadFrom(keep(src)); err != nil {
		return err
	}
	if in.Len() == 0 {
		// An empty body is an empty request, whatever its declared encoding.
		return nil
	}
	select {
	case zstdPool.slots <- struct{}{}:
	case <-ctx.Done():
		return &decoderWait{ctx.Err()}
	}
	defer func() { <-zstdPool.slots }()
	d, _ := zstdPool.free.Get().(*zstd.Decoder)
	if d == nil {
		var err error
		// Concurrency 1 decodes in the calling goroutine, with no goroutines of its own to
		// leak from a pool; low memory keeps the history at the window plus one block.
		if d, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(zstdMaxWindow)); err != nil {
			return err
		}
	}
	defer func() {
		_ = d.Reset(nil) // so the pool does not keep the body alive; nil input cannot fail
		zstdPool.free.Put(d)
	}()
	// A bytes.Reader, not the buffer: given a *bytes.Buffer the decoder decodes in one go
	// into a buffer sized from the frame's declared content size.
	if err := d.Reset(bytes.NewReader(in.Bytes())); err != nil {
		return err
	}
	_, err := dst.ReadFrom(keep(io.LimitReader(d, limit)))
	if errors.Is(err, zstd.ErrWindowSizeExceeded) || errors.Is(err, zstd.ErrDecoderSizeExceeded) {
		return fmt.Errorf("a frame needs a window over the %d MiB that RFC 9659 allows: %w", zstdMaxWindow>>20, err)
	}
	return err
}
