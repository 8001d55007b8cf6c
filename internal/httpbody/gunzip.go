package httpbody

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"

	"github.com/klauspost/compress/flate"
)

// gunzipper reads a gzip body (RFC 1952): one or more members, each a header, a deflate
// stream and a CRC-32/ISIZE trailer, read as the concatenation of their contents. It takes
// exactly the bodies compress/gzip's Reader takes by default, multistream included, and
// refuses the rest (FuzzGunzip holds it to that), but inflates with klauspost's flate,
// which is faster than compress/flate. klauspost's own gzip.Reader is not used: it accepts
// a truncated header that compress/gzip refuses.
//
// It is pooled whole: the flate state is tens of kilobytes.
type gunzipper struct {
	br     *bufio.Reader
	fr     io.ReadCloser // klauspost flate, reset for every member
	digest uint32        // CRC-32 of the member's output so far
	size   uint32        // and its length, modulo 2^32 as ISIZE is
	err    error         // sticky, as compress/gzip's
	buf    [maxGzipString]byte
}

var gunzippers = sync.Pool{New: func() any {
	g := &gunzipper{br: bufio.NewReader(nil)}
	g.fr = flate.NewReader(g.br)
	return g
}}

const (
	gzipFlagHdrCrc  = 1 << 1
	gzipFlagExtra   = 1 << 2
	gzipFlagName    = 1 << 3
	gzipFlagComment = 1 << 4
	// maxGzipString bounds FNAME and FCOMMENT, NUL included, where compress/gzip does.
	maxGzipString = 512
)

var (
	errGzipHeader   = errors.New("gzip: invalid header")
	errGzipChecksum = errors.New("gzip: invalid checksum")
)

// gunzip decompresses src into dst, stopping after limit bytes of output; keep wraps the
// output stream, which is what dst holds.
func gunzip(dst *bytes.Buffer, src io.Reader, limit int64, keep func(io.Reader) io.Reader) error {
	g := gunzippers.Get().(*gunzipper)
	defer func() {
		g.br.Reset(nil) // so the pool does not keep the request body alive
		gunzippers.Put(g)
	}()
	g.br.Reset(src)
	if g.err = g.member(); g.err != nil {
		if g.err == io.EOF {
			// An empty body is an empty request, whatever its declared encoding.
			return nil
		}
		return g.err
	}
	_, err := dst.ReadFrom(keep(io.LimitReader(g, limit)))
	return err
}

// Read returns the members' contents, checking each member's trailer at its end; io.EOF
// comes only where a member ends and no byte follows.
func (g *gunzipper) Read(p []byte) (n int, err error) {
	if g.err != nil {
		return 0, g.err
	}
	for n == 0 {
		n, g.err = g.fr.Read(p)
		g.digest = crc32.Update(g.digest, crc32.IEEETable, p[:n])
		g.size += uint32(n)
		if g.err != io.EOF {
			return n, g.err
		}
		if _, err := io.ReadFull(g.br, g.buf[:8]); err != nil {
			g.err = fmt.Errorf("gzip trailer: %w", noEOF(err))
			return n, g.err
		}
		if binary.LittleEndian.Uint32(g.buf[:4]) != g.digest || binary.LittleEndian.Uint32(g.buf[4:8]) != g.size {
			g.err = errGzipChecksum
			return n, g.err
		}
		if g.err = g.member(); g.err != nil {
			return n, g.err
		}
	}
	return n, nil
}

// member reads a member's header and readies the inflater for its deflate stream. io.EOF
// means no byte was left, so no member starts: the end of the body.
func (g *gunzipper) member() error {
	h := g.buf[:10]
	if _, err := io.ReadFull(g.br, h); err != nil {
		return err
	}
	// ID1, ID2, CM (8, deflate). Reserved FLG bits and the rest are not checked, as
	// compress/gzip does not.
	if h[0] != 0x1f || h[1] != 0x8b || h[2] != 8 {
		return errGzipHeader
	}
	flg := h[3]
	crc := crc32.ChecksumIEEE(h)
	var err error
	if flg&gzipFlagExtra != 0 {
		if _, err = io.ReadFull(g.br, g.buf[:2]); err != nil {
			return noEOF(err)
		}
		crc = crc32.Update(crc, crc32.IEEETable, g.buf[:2])
		if crc, err = g.skip(crc, int(binary.LittleEndian.Uint16(g.buf[:2]))); err != nil {
			return err
		}
	}
	if flg&gzipFlagName != 0 {
		if crc, err = g.skipString(crc); err != nil {
			return err
		}
	}
	if flg&gzipFlagComment != 0 {
		if crc, err = g.skipString(crc); err != nil {
			return err
		}
	}
	if flg&gzipFlagHdrCrc != 0 {
		if _, err = io.ReadFull(g.br, g.buf[:2]); err != nil {
			return noEOF(err)
		}
		if binary.LittleEndian.Uint16(g.buf[:2]) != uint16(crc) {
			return errGzipHeader
		}
	}
	g.digest, g.size = 0, 0
	return g.fr.(flate.Resetter).Reset(g.br, nil)
}

// skip passes over n header bytes (FEXTRA), adding them to the header's CRC.
func (g *gunzipper) skip(crc uint32, n int) (uint32, error) {
	for n > 0 {
		b, err := g.br.Peek(min(n, g.br.Size()))
		crc = crc32.Update(crc, crc32.IEEETable, b)
		n -= len(b)
		_, _ = g.br.Discard(len(b)) // peeked, so there
		if err != nil {
			return crc, noEOF(err)
		}
	}
	return crc, nil
}

// skipString passes over a NUL-terminated header string (FNAME, FCOMMENT), adding it to the
// header's CRC.
func (g *gunzipper) skipString(crc uint32) (uint32, error) {
	for i := range g.buf {
		c, err := g.br.ReadByte()
		if err != nil {
			return crc, noEOF(err)
		}
		g.buf[i] = c
		if c == 0 {
			return crc32.Update(crc, crc32.IEEETable, g.buf[:i+1]), nil
		}
	}
	return crc, errGzipHeader
}

// noEOF is for reads that end inside a member: there the body is truncated.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
