package ingest

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
)

// replyError is a non-200 reply: status and the JSON body {"error":kind,"line":line,
// "message":msg}, line omitted when 0.
type replyError struct {
	status int
	kind   string
	line   int
	msg    string
}

type errorBody struct {
	Error   string `json:"error"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message,omitempty"`
}

func writeError(w http.ResponseWriter, e *replyError) int {
	// Marshal cannot fail on a struct of strings and an int; invalid UTF-8 in a message
	// (say, a quoted bad dataset name) is replaced, so the body is always valid JSON.
	b, _ := json.Marshal(errorBody{Error: e.kind, Line: e.line, Message: e.msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	_, _ = w.Write(append(b, '\n'))
	return e.status
}

// maxPooledBuffer caps the buffers kept for reuse. Typical requests (1,000 rows of a few
// hundred bytes, or an OTLP batch) fit well below it; an occasional huge request should not
// pin its buffer in the pool for every P.
const maxPooledBuffer = 4 << 20

var buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func putBuffer(b *bytes.Buffer) {
	if b.Cap() > maxPooledBuffer {
		return
	}
	b.Reset()
	buffers.Put(b)
}

// gunzipper bundles what decompressing a body needs. Both parts are pooled together: the
// flate state behind gzip.Reader is tens of kilobytes, and gzip.Reader.Reset would allocate
// a fresh bufio.Reader for every body that is not already a flate.Reader.
type gunzipper struct {
	br *bufio.Reader
	zr gzip.Reader
}

var gunzippers = sync.Pool{New: func() any { return &gunzipper{br: bufio.NewReader(nil)} }}

// errTooLarge marks a body that sent more than the limit.
var errTooLarge = errors.New("body too large")

// bodyReader limits the raw body and remembers why it stopped, so a failure while
// decompressing can be blamed on the right party: the size limit, the connection, or (when
// it recorded nothing) the gzip stream itself.
type bodyReader struct {
	r    io.Reader
	left int64
	err  error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	// Allow one byte past the limit: reading it is how an oversized body is told apart from
	// one that is exactly at the limit.
	if int64(len(p)) > b.left {
		p = p[:b.left+1]
	}
	n, err := b.r.Read(p)
	if int64(n) > b.left {
		b.err = errTooLarge
		return 0, b.err
	}
	b.left -= int64(n)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// readBody returns the request body, decompressed, in a pooled buffer the caller releases
// with putBuffer. Both the body as sent and its decompressed form are limited to maxBody,
// and decompression stops at maxBody+1 bytes, so a gzip bomb costs at most that.
func (h *handler) readBody(r *http.Request) (*bytes.Buffer, *replyError) {
	gz, rerr := contentEncoding(r.Header)
	if rerr != nil {
		return nil, rerr
	}
	if r.ContentLength > h.maxBody {
		return nil, h.tooLarge
	}
	buf := buffers.Get().(*bytes.Buffer)
	body := &bodyReader{r: r.Body, left: h.maxBody}
	var err error
	if gz {
		err = gunzip(buf, body, h.maxBody+1)
	} else {
		if r.ContentLength > 0 {
			// The extra MinRead keeps ReadFrom from growing (and copying) the buffer just to
			// find EOF after the last byte.
			buf.Grow(int(r.ContentLength) + bytes.MinRead)
		}
		_, err = buf.ReadFrom(body)
	}
	switch {
	case errors.Is(body.err, errTooLarge):
		rerr = h.tooLarge
	case body.err != nil:
		rerr = &replyError{status: http.StatusBadRequest, kind: "bad_body", msg: "reading the body: " + body.err.Error()}
	case err != nil:
		rerr = &replyError{status: http.StatusBadRequest, kind: "bad_gzip", msg: "decompressing the body: " + err.Error()}
	case int64(buf.Len()) > h.maxBody:
		rerr = h.tooLarge
	}
	if rerr != nil {
		putBuffer(buf)
		return nil, rerr
	}
	return buf, nil
}

// gunzip decompresses src into dst, stopping after limit bytes of output.
func gunzip(dst *bytes.Buffer, src io.Reader, limit int64) error {
	g := gunzippers.Get().(*gunzipper)
	defer func() {
		g.br.Reset(nil) // so the pool does not keep the request body alive
		gunzippers.Put(g)
	}()
	g.br.Reset(src)
	if err := g.zr.Reset(g.br); err != nil {
		if err == io.EOF {
			// An empty body is an empty request, whatever its declared encoding.
			return nil
		}
		return err
	}
	_, err := dst.ReadFrom(io.LimitReader(&g.zr, limit))
	return err
}

// contentEncoding reports whether the body is gzip-compressed. Only a single gzip coding
// (or none) is accepted: stacked codings are not something OTLP or NDJSON clients send.
func contentEncoding(header http.Header) (gzipped bool, _ *replyError) {
	values := header.Values("Content-Encoding")
	if len(values) == 0 {
		return false, nil
	}
	if len(values) == 1 {
		switch v := strings.TrimSpace(values[0]); {
		case v == "", strings.EqualFold(v, "identity"):
			return false, nil
		case strings.EqualFold(v, "gzip"), strings.EqualFold(v, "x-gzip"):
			return true, nil
		}
	}
	return false, &replyError{
		status: http.StatusUnsupportedMediaType, kind: "unsupported_encoding",
		msg: "Content-Encoding " + strings.Join(values, ", ") + " is not supported; use gzip or none",
	}
}
