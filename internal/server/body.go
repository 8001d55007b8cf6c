package server

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/hyp-project/hyp/internal/jsonrow"
)

// replyError is a non-200 reply: status and the JSON body {"error":kind,"line":line,
// "message":msg}, line omitted when 0. Senders branch on kind, never on the message.
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
	// Marshal cannot fail on strings and an int; invalid UTF-8 from a quoted header value
	// is replaced, so the body is always valid JSON.
	b, _ := json.Marshal(errorBody{Error: e.kind, Line: e.line, Message: e.msg})
	return writeJSON(w, e.status, append(b, '\n'))
}

func writeJSON(w http.ResponseWriter, status int, b []byte) int {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b) // a sender that hung up learns the outcome from its retry
	return status
}

// errTooLarge marks a body that sent more than the limit.
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

// readBody returns the request body, decompressed when Content-Encoding is gzip. The body
// as sent and its decompressed form are both limited to max, and decompression stops at
// max+1 bytes, so a gzip bomb costs at most that.
func readBody(r *http.Request, max int64) ([]byte, *replyError) {
	gz, rerr := gzipped(r.Header)
	if rerr != nil {
		return nil, rerr
	}
	tooLarge := &replyError{status: http.StatusRequestEntityTooLarge, kind: "too_large",
		msg: "the body exceeds the server's limit (after decompression, if compressed); send smaller chunks"}
	if r.ContentLength > max {
		return nil, tooLarge
	}
	raw := &limitedReader{r: r.Body, left: max}
	var buf bytes.Buffer
	var err error
	if gz {
		var zr *gzip.Reader
		if zr, err = gzip.NewReader(raw); err == nil {
			_, err = buf.ReadFrom(io.LimitReader(zr, max+1))
		} else if err == io.EOF {
			err = nil // an empty body is an empty chunk, whatever its declared encoding
		}
	} else {
		if r.ContentLength > 0 {
			buf.Grow(int(r.ContentLength) + bytes.MinRead)
		}
		_, err = buf.ReadFrom(raw)
	}
	switch {
	case errors.Is(raw.err, errTooLarge), int64(buf.Len()) > max:
		return nil, tooLarge
	case raw.err != nil:
		return nil, &replyError{status: http.StatusBadRequest, kind: "bad_body", msg: "reading the body: " + raw.err.Error()}
	case err != nil:
		return nil, &replyError{status: http.StatusBadRequest, kind: "bad_gzip", msg: "decompressing the body: " + err.Error()}
	}
	return buf.Bytes(), nil
}

// gzipped reports whether the body is gzip-compressed; only gzip or no coding is accepted.
func gzipped(h http.Header) (bool, *replyError) {
	values := h.Values("Content-Encoding")
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

// countRows counts the non-blank lines of an NDJSON body, which is what the rate limiter
// charges before the rows are validated.
func countRows(body []byte) int {
	n := 0
	_ = jsonrow.Lines(body, func(int, []byte) error { n++; return nil })
	return n
}

// retryAfterSeconds rounds a wait up to whole seconds, at least 1: Retry-After has no
// smaller unit, and 0 would tell the sender to fall back to its own backoff.
func retryAfterSeconds(d time.Duration) int64 {
	return max(1, int64(math.Ceil(d.Seconds())))
}
