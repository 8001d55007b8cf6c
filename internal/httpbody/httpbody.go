// Package httpbody owns what hyp's two HTTP receivers (the ingest API and `hyp server`)
// share at the edge: reading a request body within a size limit, before and after gzip or
// zstd decompression; bounding what requests cost a listener (a per-listener Budget of bytes
// held at once, bodies and what handlers decode from them through a request's Meter, and a
// Pace that cuts off a client sending too slowly, both applied by Guard);
// and the JSON error reply every non-200 answer carries. It never looks inside a body, and
// never sizes a buffer from what a client declares (Content-Length): buffers grow only
// with bytes that actually arrived.
package httpbody

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Error is a non-200 reply: Status and the JSON body {"error":Kind,"line":Line,
// "message":Msg}, line omitted when 0. Clients branch on Kind, never on the message.
type Error struct {
	Status int
	Kind   string
	Line   int
	Msg    string
	// RetryAfter, when positive, is sent as the Retry-After header (seconds).
	RetryAfter int
}

func (e *Error) Error() string { return e.Kind + ": " + e.Msg }

type errorBody struct {
	Error   string `json:"error"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message,omitempty"`
}

// WriteError sends e and returns its status.
func WriteError(w http.ResponseWriter, e *Error) int {
	// Marshal cannot fail on strings and an int; invalid UTF-8 in a message (a quoted bad
	// name) is replaced, so the body is always valid JSON.
	b, _ := json.Marshal(errorBody{Error: e.Kind, Line: e.Line, Message: e.Msg})
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	return WriteJSON(w, e.Status, append(b, '\n'))
}

// WriteJSON sends an already encoded JSON body and returns status.
func WriteJSON(w http.ResponseWriter, status int, b []byte) int {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b) // a client that hung up learns the outcome from its retry
	return status
}

// maxPooledBuffer caps the buffers kept for reuse: typical requests fit well below it, and
// an occasional huge one should not pin its buffer in the pool.
const maxPooledBuffer = 4 << 20

var buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Release returns a buffer from Read to the pool; b must not be used afterwards.
func Release(b *bytes.Buffer) {
	if b.Cap() > maxPooledBuffer {
		return
	}
	b.Reset()
	buffers.Put(b)
}

// gunzipper bundles what decompressing a body needs. Both parts are pooled together: the
// flate state behind gzip.Reader is tens of kilobytes, and gzip.Reader.Reset would allocate
// a fresh bufio.Reader for every body that is not already a flate.Reader. The reader is
// klauspost's, a quarter faster than the standard library's on a forward unit's Arrow body
// (2.5 against 3.4 ms for 1.5 MB); FuzzReadBody holds it to the standard library's
// verdicts.
type gunzipper struct {
	br *bufio.Reader
	zr gzip.Reader
}

var gunzippers = sync.Pool{New: func() any { return &gunzipper{br: bufio.NewReader(nil)} }}

var errTooLarge = errors.New("body too large")

// limitedReader limits the raw body and remembers why it stopped, so a failure while
// decompressing is blamed on the right party: the size limit, the connection, or (when it
// recorded nothing) the gzip stream itself.
type limitedReader struct {
	r    io.Reader
	left int64
	err  error
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	// Reading one byte past the limit is how a body over it is told apart from one exactly
	// at it.
	if int64(len(p)) > l.left {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	if int64(n) > l.left {
		l.err = errTooLarge
		return 0, l.err
	}
	l.left -= int64(n)
	if err != nil && err != io.EOF {
		l.err = err
	}
	return n, err
}

// Limits bound one request body.
type Limits struct {
	// Sent bounds the body as it arrives (its Content-Length or chunks); over it the reply
	// is TooLarge. Must be positive.
	Sent     int64
	TooLarge *Error
	// Decoded bounds a compressed body's decompressed form; over it the reply is
	// DecodedTooLarge. 0 means Sent, and so does anything below Sent: decompressing never
	// has to fit in less than the body as sent.
	Decoded         int64
	DecodedTooLarge *Error
}

// decoded is the limit on the decompressed form and the reply over it.
func (l Limits) decoded() (int64, *Error) {
	if l.Decoded <= l.Sent || l.DecodedTooLarge == nil {
		return l.Sent, l.TooLarge
	}
	return l.Decoded, l.DecodedTooLarge
}

// Read returns the request body, decompressed when Content-Encoding is gzip or zstd, in a
// pooled buffer the caller hands back with Release. The body as sent is limited to
// lim.Sent and its decompressed form to lim.Decoded, and decompression stops one byte past
// that, so a compression bomb costs at most the limit. Any other coding is 415
// unsupported_encoding.
//
// Under Guard the bytes kept are charged to the listener's Budget as they arrive (a spent
// budget is a 503 with Retry-After) and a body slower than the Pace is a 408; the buffer
// never grows ahead of the bytes received, whatever Content-Length claims.
func Read(r *http.Request, lim Limits) (*bytes.Buffer, *Error) {
	buf, _, rerr := read(r, lim, false)
	return buf, rerr
}

// ReadKeepingSent is Read that also keeps a compressed body as sent, in a second pooled
// buffer (nil for a body sent uncompressed), charged like the first, so that a caller for
// which the decompressed body is too large to take whole can decompress it again as a
// stream (Reopen). When the decompressed body goes beyond the limits or the budget, sent
// is still returned with the refusal.
func ReadKeepingSent(r *http.Request, lim Limits) (body, sent *bytes.Buffer, rerr *Error) {
	return read(r, lim, true)
}

func read(r *http.Request, lim Limits, keepSent bool) (*bytes.Buffer, *bytes.Buffer, *Error) {
	cd, rerr := contentCoding(r.Header)
	if rerr != nil {
		return nil, nil, rerr
	}
	if r.ContentLength > lim.Sent {
		return nil, nil, lim.TooLarge
	}
	maxOut, outTooLarge := lim.decoded()
	l, _ := r.Context().Value(leaseKey{}).(*lease)
	keep := func(src io.Reader) io.Reader {
		if l == nil {
			return src
		}
		return &charged{r: src, l: l}
	}
	buf := buffers.Get().(*bytes.Buffer)
	raw := &limitedReader{r: r.Body, left: lim.Sent}
	var src io.Reader = raw
	var sent *bytes.Buffer
	sentWhole := false
	var err error
	if keepSent && cd != identity {
		sent = buffers.Get().(*bytes.Buffer)
		_, err = sent.ReadFrom(keep(raw))
		sentWhole = err == nil
		src = bytes.NewReader(sent.Bytes())
	}
	switch {
	case err != nil:
	case cd == gzipCoding:
		err = gunzip(buf, src, maxOut+1, keep)
	case cd == zstdCoding:
		err = unzstd(r.Context(), buf, src, maxOut+1, keep)
	default:
		_, err = buf.ReadFrom(keep(src))
	}
	var waited *decoderWait
	decodedTooBig := false // the body as sent was taken whole; only its decompressed form was not
	switch {
	case errors.Is(raw.err, errTooLarge):
		rerr = lim.TooLarge
	case int64(buf.Len()) > maxOut:
		rerr, decodedTooBig = outTooLarge, sentWhole
	case errors.Is(err, errAloneOverBudget):
		rerr, decodedTooBig = DecodedTooLarge(l.b.Limit()), sentWhole
	case errors.Is(err, errOverBudget):
		rerr = budgetSpent(l.b)
	case errors.Is(raw.err, errTooSlow):
		rerr = &Error{Status: http.StatusRequestTimeout, Kind: "body_timeout", Msg: "reading the body: " + raw.err.Error()}
	case raw.err != nil:
		rerr = &Error{Status: http.StatusBadRequest, Kind: "bad_body", Msg: "reading the body: " + raw.err.Error()}
	case errors.As(err, &waited):
		rerr = &Error{Status: http.StatusServiceUnavailable, Kind: "unavailable", RetryAfter: 1, Msg: waited.Error()}
	case err != nil:
		rerr = &Error{Status: http.StatusBadRequest, Kind: "bad_" + cd.String(), Msg: "decompressing the body: " + err.Error()}
	}
	if rerr != nil {
		Release(buf)
		if sent != nil && !decodedTooBig {
			Release(sent)
			sent = nil
		}
		if decodedTooBig && l != nil {
			// The request keeps only the body as sent; what its decompressed form took
			// goes back, for the caller to take it again in pieces.
			Meter{l}.ReleaseAllBut(sent.Len())
		}
		return nil, sent, rerr
	}
	return buf, sent, nil
}

// Reopen decompresses sent, a body ReadKeepingSent kept, as r's Content-Encoding says, as
// a stream: nothing of the decompressed body is held beyond what the caller reads. The
// caller bounds how much it reads (the limits of Read do not apply) and calls done when
// finished.
func Reopen(r *http.Request, sent []byte) (rd io.Reader, done func(), err error) {
	cd, rerr := contentCoding(r.Header)
	if rerr != nil {
		return nil, nil, rerr
	}
	switch cd {
	case gzipCoding:
		zr, err := gzip.NewReader(bytes.NewReader(sent))
		if err != nil {
			return nil, nil, err
		}
		return zr, func() {}, nil
	case zstdCoding:
		d, err := zstd.NewReader(bytes.NewReader(sent), zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(zstdMaxWindow))
		if err != nil {
			return nil, nil, err
		}
		return d, d.Close, nil
	}
	return bytes.NewReader(sent), func() {}, nil
}

// gunzip decompresses src into dst, stopping after limit bytes of output; keep wraps the
// output stream, which is what dst holds.
func gunzip(dst *bytes.Buffer, src io.Reader, limit int64, keep func(io.Reader) io.Reader) error {
	g := gunzippers.Get().(*gunzipper)
	defer func() {
		g.br.Reset(nil) // so the pool does not keep the request body alive
		gunzippers.Put(g)
	}()
	g.br.Reset(src)
	if _, err := g.br.Peek(1); err == io.EOF {
		// An empty body is an empty request, whatever its declared encoding.
		return nil
	}
	if err := g.zr.Reset(g.br); err != nil {
		if err == io.EOF {
			// klauspost's reader reports a header cut short as the end of the input: with
			// bytes there, it is a truncated body.
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	_, err := dst.ReadFrom(keep(io.LimitReader(&g.zr, limit)))
	return err
}

// coding is a body's Content-Encoding.
type coding int

const (
	identity coding = iota
	gzipCoding
	zstdCoding
)

func (c coding) String() string {
	switch c {
	case gzipCoding:
		return "gzip"
	case zstdCoding:
		return "zstd"
	}
	return "identity"
}

// contentCoding reads Content-Encoding. Only a single coding (or none) is accepted: stacked
// codings are not something OTLP, NDJSON or hyp senders use.
func contentCoding(h http.Header) (coding, *Error) {
	values := h.Values("Content-Encoding")
	if len(values) == 0 {
		return identity, nil
	}
	if len(values) == 1 {
		switch v := strings.TrimSpace(values[0]); {
		case v == "", strings.EqualFold(v, "identity"):
			return identity, nil
		case strings.EqualFold(v, "gzip"), strings.EqualFold(v, "x-gzip"):
			return gzipCoding, nil
		case strings.EqualFold(v, "zstd"):
			return zstdCoding, nil
		}
	}
	return identity, &Error{
		Status: http.StatusUnsupportedMediaType, Kind: "unsupported_encoding",
		Msg: "Content-Encoding " + strings.Join(values, ", ") + " is not supported; use gzip, zstd or none",
	}
}

// decoderWait is a request that gave up waiting for a decoder (the client went away or its
// deadline passed): nothing is wrong with its body.
type decoderWait struct{ err error }

func (e *decoderWait) Error() string { return "waiting for a zstd decoder: " + e.err.Error() }
func (e *decoderWait) Unwrap() error { return e.err }
