package server

import (
	"mime"
	"net/http"

	"github.com/hyp-project/hyp/internal/httpbody"
)

// arrowContentType is an Arrow IPC stream body's Content-Type (SPEC 5). Any other body is
// read as NDJSON, as it always was: senders from before Arrow bodies send
// application/x-ndjson, and some none at all.
const arrowContentType = "application/vnd.apache.arrow.stream"

// rowsIn is a request body as the rows it holds, in either format.
type rowsIn interface {
	// rows is how many rows the body holds, for the rate limiter, before they are checked.
	rows() int
	// cost is what parse allocates beyond what it charges the meter itself, for the
	// handler to charge first.
	cost(incarnation string) int
	// parse checks the rows and returns them in form (parseRows).
	parse(first, last int64, form rowForm, incarnation string, m httpbody.Meter) (*chunk, *httpbody.Error)
}

// readRows reads body by h's Content-Type. An Arrow body is scanned at once (scanArrow),
// which refuses a malformed stream, or one that decodes beyond maxBody (413), before any of
// it is decoded.
func readRows(h http.Header, body []byte, maxBody int64) (rowsIn, *httpbody.Error) {
	if mt, _, err := mime.ParseMediaType(h.Get("Content-Type")); err == nil && mt == arrowContentType {
		sc, rerr := scanArrow(body, maxBody)
		return arrowIn{body: body, scan: sc}, rerr
	}
	return ndjsonIn(body), nil
}

type ndjsonIn []byte

func (b ndjsonIn) rows() int                   { return countRows(b) }
func (b ndjsonIn) cost(incarnation string) int { return parseCost(b, incarnation) }
func (b ndjsonIn) parse(first, last int64, form rowForm, incarnation string, _ httpbody.Meter) (*chunk, *httpbody.Error) {
	return parseRows(b, first, last, form, incarnation)
}

type arrowIn struct {
	body []byte
	scan arrowScan
}

func (a arrowIn) rows() int         { return a.scan.rows }
func (a arrowIn) cost(_ string) int { return arrowCost(a.scan) }
func (a arrowIn) parse(first, last int64, form rowForm, incarnation string, m httpbody.Meter) (*chunk, *httpbody.Error) {
	return parseArrow(a.body, a.scan, first, last, form, incarnation, m)
}
