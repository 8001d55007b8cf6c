package httpbody

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// Budget caps the bytes that the requests of one listener hold in memory at once: the body
// as read, or its decompressed form when it is compressed, and what a handler decodes from
// it (rows, a decoder's working memory), charged through the request's Meter before it is
// allocated. Without it a few hundred concurrent large bodies cost gigabytes, and so does a
// tiny OTLP body whose one resource every decoded row repeats; with it, a request whose next
// bytes would go beyond the cap is refused with a retryable 503 instead, and one that would
// hold more than the whole cap by itself with a 413. The body's buffers grow by doubling,
// so the memory they take is at most about twice what is counted.
//
// A Budget belongs to one listener (make one per http.Server) and is safe for concurrent use.
type Budget struct {
	limit   int64
	held    atomic.Int64
	refused atomic.Uint64
}

// NewBudget returns a budget of limit bytes; limit must be positive.
func NewBudget(limit int64) (*Budget, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("httpbody: body budget must be positive, got %d", limit)
	}
	return &Budget{limit: limit}, nil
}

// Limit is the cap in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// Held is the number of body bytes the listener's requests hold now.
func (b *Budget) Held() int64 { return b.held.Load() }

// Refused counts the requests refused because the budget was spent.
func (b *Budget) Refused() uint64 { return b.refused.Load() }

// lease is one request's share of a Budget. Only the request's handler goroutine uses it.
type lease struct {
	b       *Budget
	held    int64
	refused bool
}

// take charges n more bytes, or reports false (and charges nothing) when they would go
// beyond the budget. A request is counted as refused once, however often it asks.
func (l *lease) take(n int) bool {
	if l.b.held.Add(int64(n)) > l.b.limit {
		l.b.held.Add(-int64(n))
		if !l.refused {
			l.refused = true
			l.b.refused.Add(1)
		}
		return false
	}
	l.held += int64(n)
	return true
}

// Meter is one request's account with its listener's Budget for memory beyond the body:
// what a handler builds from the body. The zero Meter (a request not served through
// Guard) charges nothing and never refuses. Only the request's handler goroutine uses it.
type Meter struct{ l *lease }

// MeterOf is r's Meter.
func MeterOf(r *http.Request) Meter {
	l, _ := r.Context().Value(leaseKey{}).(*lease)
	return Meter{l: l}
}

// Charge takes n more bytes for the request before the caller allocates them, or returns
// the *Error to answer with instead: 413 decoded_too_large when the request would hold more
// than the whole budget by itself (it can never fit), 503 unavailable with Retry-After when
// the listener's requests hold the budget now. What was charged is given back when the
// request ends.
func (m Meter) Charge(n int) error {
	if m.l == nil || n <= 0 {
		return nil
	}
	if m.l.alone(n) {
		return DecodedTooLarge(m.l.b.Limit())
	}
	if !m.l.take(n) {
		return budgetSpent(m.l.b)
	}
	return nil
}

// Release gives back n of the bytes the request charged, memory it no longer holds (rows
// a handler stored and let go) before the request ends.
func (m Meter) Release(n int) {
	if m.l == nil || n <= 0 {
		return
	}
	n = int(min(int64(n), m.l.held))
	m.l.held -= int64(n)
	m.l.b.held.Add(-int64(n))
}

// ReleaseAllBut gives back everything the request holds beyond keep bytes: what it still
// holds once it let go of all but its body as sent.
func (m Meter) ReleaseAllBut(keep int) {
	if m.l != nil {
		m.Release(int(m.l.held) - keep)
	}
}

// alone reports whether n more bytes would take the request past the whole budget by
// itself: it can never fit, so waiting for others to finish would not help.
func (l *lease) alone(n int) bool { return l.held+int64(n) > l.b.limit }

// DecodedTooLarge is the reply to a request that needs more than limit bytes, a listener's
// whole budget, once decompressed and decoded.
func DecodedTooLarge(limit int64) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Kind: "decoded_too_large",
		Msg: fmt.Sprintf("the request needs more than the receiver's %d bytes of memory for requests once decompressed and decoded (its body, its rows and the decoder's memory); send fewer records in a request", limit)}
}

// budgetSpent is the reply to a request refused because the listener's budget is held.
func budgetSpent(b *Budget) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Kind: "unavailable", RetryAfter: 1,
		Msg: fmt.Sprintf("the receiver holds its limit of %d bytes of requests in memory; retry", b.Limit())}
}

// release gives back everything the request took.
func (l *lease) release() {
	l.b.held.Add(-l.held)
	l.held = 0
}

type leaseKey struct{}

// errOverBudget stops reading a body whose bytes would go beyond the listener's budget;
// errAloneOverBudget one whose bytes would go beyond it by themselves.
var (
	errOverBudget      = errors.New("the listener's body budget is spent")
	errAloneOverBudget = errors.New("the body is larger than the listener's whole budget")
)

// charged counts what Read keeps of a body against the request's lease.
type charged struct {
	r io.Reader
	l *lease
}

func (c *charged) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 && c.l.alone(n) {
		return 0, errAloneOverBudget
	}
	if n > 0 && !c.l.take(n) {
		return 0, errOverBudget
	}
	return n, err
}

// Pace is how slowly a body may arrive: within Grace of the request's start plus one
// second for every MinRate bytes received so far. A client that stops sending is cut off
// after Grace; one that trickles is cut off as soon as it falls behind MinRate on average.
type Pace struct {
	Grace   time.Duration
	MinRate int64 // bytes per second; must be positive
}

// Guard returns next wrapped so that every request it serves reads its body through Read
// within budget and at pace p. The budget a request took is given back when next returns,
// on every path (a panic included), so a refused, failed or aborted request leaks nothing.
func Guard(next http.Handler, budget *Budget, p Pace) (http.Handler, error) {
	if budget == nil {
		return nil, errors.New("httpbody: nil budget")
	}
	if p.Grace <= 0 || p.MinRate <= 0 {
		return nil, fmt.Errorf("httpbody: pace needs a positive grace and minimum rate, got %s and %d bytes/s", p.Grace, p.MinRate)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l := &lease{b: budget}
		defer l.release()
		if r.Body != nil && r.Body != http.NoBody {
			start := time.Now()
			rc := http.NewResponseController(w)
			// A writer without deadlines (a test recorder) has no connection to cut off,
			// so its body is read as it comes.
			if rc.SetReadDeadline(start.Add(p.Grace)) == nil {
				r.Body = &pacedBody{ReadCloser: r.Body, rc: rc, start: start, pace: p}
			}
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), leaseKey{}, l)))
	}), nil
}

// pacedBody moves the connection's read deadline forward as body bytes arrive.
type pacedBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	start    time.Time
	pace     Pace
	received int64
}

func (b *pacedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.received += int64(n)
	switch {
	case err == io.EOF:
		// The whole body is in. Once it is, net/http watches the connection for the client
		// going away, and a deadline passing there would cancel the request's context while
		// the handler still works on it. (net/http clears the deadline itself when it starts
		// watching, but does not document it.)
		_ = b.rc.SetReadDeadline(time.Time{})
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
		err = fmt.Errorf("%w: %d bytes arrived in %s, slower than %d bytes/s after a %s grace: %w",
			errTooSlow, b.received, time.Since(b.start).Round(time.Millisecond), b.pace.MinRate, b.pace.Grace, err)
	case n > 0:
		// The deadline only moves forward, so a body stays within its allowance: the grace
		// plus the time MinRate needs for what arrived.
		allowance := time.Duration(float64(b.received) / float64(b.pace.MinRate) * float64(time.Second))
		_ = b.rc.SetReadDeadline(b.start.Add(b.pace.Grace + allowance))
	}
	return n, err
}

// errTooSlow marks a body cut off for arriving too slowly.
var errTooSlow = errors.New("body too slow")
