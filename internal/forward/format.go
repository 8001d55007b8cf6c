package forward

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Format is how a chunk's rows are encoded on the wire (SPEC 5, Content-Type).
type Format int

const (
	// NDJSON is one JSON object per row.
	NDJSON Format = iota
	// Arrow is an Apache Arrow IPC stream of record batches.
	Arrow
)

// The Content-Types of the two formats.
const (
	ContentTypeNDJSON = "application/x-ndjson"
	ContentTypeArrow  = "application/vnd.apache.arrow.stream"
)

// ParseFormat reads a forward sink's `format` value.
func ParseFormat(s string) (Format, error) {
	switch s {
	case "arrow":
		return Arrow, nil
	case "ndjson":
		return NDJSON, nil
	}
	return NDJSON, fmt.Errorf("format %q: want arrow or ndjson", s)
}

func (f Format) String() string {
	if f == Arrow {
		return "arrow"
	}
	return "ndjson"
}

// ContentType is the Content-Type a body of format f is sent with.
func (f Format) ContentType() string {
	if f == Arrow {
		return ContentTypeArrow
	}
	return ContentTypeNDJSON
}

// refusesArrow reports whether an answer to an Arrow body says the server cannot read Arrow:
// a 415, or the 400 bad_json a server from before Arrow bodies gives, since it reads every
// body as NDJSON and an Arrow stream is never JSON. A server that reads Arrow never answers
// an Arrow body with bad_json, so this cannot mistake a real poison chunk for the format.
func refusesArrow(status int, body string) bool {
	if status == 415 {
		return true
	}
	if status != 400 || !strings.HasPrefix(body, "{") {
		return false
	}
	var e struct {
		Error string `json:"error"`
	}
	return json.Unmarshal([]byte(body), &e) == nil && e.Error == "bad_json"
}
