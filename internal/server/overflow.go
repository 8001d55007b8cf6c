package server

import (
	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/jsonrow"
)

// overflowCheck validates a forwarded row's own `_hyp_overflow` (SPEC 5): the fields its
// sender's cache kept beyond the column cap, one JSON object. A sender's export carries the
// column as a string holding that object's text (the cache stores it as a string column,
// and NDJSON writes a string column as a JSON string); a sender may as well send the object
// itself. Both are kept, and the server's cache merges the fields it overflows itself into
// that object (columns.OverflowColumn). Anything else (a number, an array, a string that is
// not exactly one object) could only be stored by dropping it or by misreading it as
// fields, so it is refused.
//
// It is kept per parse piece: its scanner cannot be the one walking the row's fields.
type overflowCheck struct {
	sc   jsonrow.Scanner
	text []byte // the decoded string
}

func (o *overflowCheck) check(f jsonrow.Field) error {
	switch f.Kind {
	case jsonrow.Object:
		return nil // validated with the row
	case jsonrow.String:
		var err error
		if o.text, err = jsonrow.AppendString(o.text[:0], f.Raw); err == nil {
			err = o.sc.Object(o.text, nil)
		}
		if err != nil {
			return rowError("bad_field", "%s is a string that does not hold exactly one JSON object (%v): %.60s", columns.OverflowColumn, err, f.Raw)
		}
		return nil
	}
	return rowError("bad_field", "%s must be a JSON object, or a string holding one, got a %s", columns.OverflowColumn, f.Kind)
}
