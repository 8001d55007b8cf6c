package forward

import (
	"bytes"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Compression is how a chunk's body travels (SPEC 3 `compression`, SPEC 5 Content-Encoding).
// The zero value sends the body as it is.
type Compression int

const (
	None Compression = iota
	Gzip
	Zstd
)

// ParseCompression reads a sink's `compression` value.
func ParseCompression(s string) (Compression, error) {
	switch s {
	case "none":
		return None, nil
	case "gzip":
		return Gzip, nil
	case "zstd":
		return Zstd, nil
	}
	return None, fmt.Errorf("compression %q: want gzip, zstd or none", s)
}

func (c Compression) String() string {
	switch c {
	case Gzip:
		return "gzip"
	case Zstd:
		return "zstd"
	}
	return "none"
}

// Levels. A forward tick must keep up with ingest on the same machine, so both favour
// speed: NDJSON rows of one partition repeat their keys and most of their values, and even
// gzip's fastest level shrinks them more than tenfold (BenchmarkCompress). On these bodies
// zstd's fastest level is both faster and tighter than its default (~30% and ~5%) and packs
// more than twice as tight as gzip.
const (
	gzipLevel = gzip.BestSpeed
	zstdLevel = zstd.SpeedFastest
	// zstdWindow keeps every frame decodable by a receiver that holds to RFC 9659's 8 MiB
	// window limit for the zstd content coding, as `hyp server` does.
	zstdWindow = 4 << 20
)

// compressor turns bodies into their wire form. It is safe for concurrent use: the zstd
// encoder's EncodeAll is, and gzip writers are pooled, each used by one call at a time.
type compressor struct {
	kind  Compression
	zstd  *zstd.Encoder
	gzips sync.Pool
}

func newCompressor(kind Compression) (*compressor, error) {
	c := &compressor{kind: kind}
	switch kind {
	case None:
	case Gzip:
		c.gzips.New = func() any {
			// The level is a valid constant, so NewWriterLevel cannot fail.
			w, _ := gzip.NewWriterLevel(nil, gzipLevel)
			return w
		}
	case Zstd:
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstdLevel), zstd.WithWindowSize(zstdWindow))
		if err != nil {
			return nil, fmt.Errorf("forward: zstd encoder: %w", err)
		}
		c.zstd = enc
	default:
		return nil, fmt.Errorf("forward: unknown compression %d", kind)
	}
	return c, nil
}

// encoding is the Content-Encoding the compressed body is sent with, "" for none.
func (c *compressor) encoding() string {
	if c.kind == None {
		return ""
	}
	return c.kind.String()
}

// compress returns body's wire form; with None it is body itself.
func (c *compressor) compress(body []byte) ([]byte, error) {
	switch c.kind {
	case Gzip:
		var out bytes.Buffer
		out.Grow(len(body)/4 + 64)
		w := c.gzips.Get().(*gzip.Writer)
		defer func() {
			w.Reset(io.Discard) // so the pooled writer does not keep the body alive
			c.gzips.Put(w)
		}()
		w.Reset(&out)
		if _, err := w.Write(body); err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		return out.Bytes(), nil
	case Zstd:
		return c.zstd.EncodeAll(body, make([]byte, 0, len(body)/4+64)), nil
	}
	return body, nil
}
