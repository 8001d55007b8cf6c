package forward

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

const (
	// maxSnippet bounds how much of an error body reaches errors and logs: enough for the
	// server's JSON error, not enough for a proxy's HTML page to flood `sink status`.
	maxSnippet = 1024
	// maxAckBody bounds the 200 body read; a real ack is a few dozen bytes.
	maxAckBody = 64 << 10
	// maxDrain is how much unread body is discarded so the keep-alive connection can carry
	// the next chunk; beyond it closing the connection is cheaper.
	maxDrain = 64 << 10
)

// Ack is the server's count for one chunk: rows it stored now and rows whose seq it
// already held.
type Ack struct {
	Accepted   int
	Duplicates int
}

// PoisonError is a 400 or 422: the server refuses the chunk itself, so sending it again can
// never succeed. The caller quarantines the chunk instead of retrying it forever. Send
// returns it wrapped; use errors.As.
type PoisonError struct {
	Status int
	Body   string // the server's error body, at most about 1 KiB
}

func (e *PoisonError) Error() string {
	return fmt.Sprintf("server rejected the chunk as invalid (%d): %s", e.Status, e.Body)
}

// statusError is a non-200 answer: the status line and what the server said about it.
type statusError struct {
	status string
	body   string
}

func (e *statusError) Error() string {
	if e.body == "" {
		return "server answered " + e.status
	}
	return "server answered " + e.status + ": " + e.body
}

// plainHTTPToTLS tells the 400 a TLS server gives a plain HTTP request (Go's "Client sent an
// HTTP request to an HTTPS server.", nginx's "The plain HTTP request was sent to HTTPS
// port") from hyp's refusals of a chunk, which are JSON objects.
func plainHTTPToTLS(body string) bool {
	return !strings.HasPrefix(body, "{") && strings.Contains(strings.ToLower(body), "https")
}

// parseAck reads a 200 body `{"accepted":N,"duplicates":D}`. Extra keys are allowed so the
// server can grow the ack without breaking older daemons.
func parseAck(b []byte) (Ack, error) {
	var v struct {
		Accepted   *int `json:"accepted"`
		Duplicates *int `json:"duplicates"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return Ack{}, fmt.Errorf("decoding ack: %w", err)
	}
	if v.Accepted == nil || v.Duplicates == nil {
		return Ack{}, errors.New("decoding ack: accepted or duplicates missing")
	}
	if *v.Accepted < 0 || *v.Duplicates < 0 {
		return Ack{}, fmt.Errorf("decoding ack: negative count (accepted %d, duplicates %d)", *v.Accepted, *v.Duplicates)
	}
	return Ack{Accepted: *v.Accepted, Duplicates: *v.Duplicates}, nil
}

// readSnippet returns the start of an error body as printable text. The status has already
// decided what happens, so a body that cannot be read only makes the message poorer.
func readSnippet(r io.Reader) string {
	b, err := io.ReadAll(io.LimitReader(r, maxSnippet+1))
	if err != nil && len(b) == 0 {
		return fmt.Sprintf("(body unreadable: %v)", err)
	}
	cut := len(b) > maxSnippet
	if cut {
		b = b[:maxSnippet]
	}
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
	if cut {
		s += "…"
	}
	return s
}
