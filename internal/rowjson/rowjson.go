// Package rowjson owns the turning of cached Arrow rows back into JSON objects, one row at a
// time, for the forward sink body and the jsonl.gz blob format, and of the values of an
// Arrow body `hyp server` stores as JSON text (KindOf, AppendString, AppendFloat,
// AppendTimestamp; SameAsText says when that text means the value itself, so the batch may
// be stored as it came), so both wire formats store the same rows. It never decides which
// rows to send, never adds or drops columns (internal columns are ordinary columns here),
// and never allocates per row beyond the caller's buffer.
package rowjson

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Encoder appends rows of record batches with one fixed schema as JSON objects.
// It holds no per-row state, so one Encoder may serve concurrent callers.
type Encoder struct {
	cols []column
}

type column struct {
	// key is the pre-escaped `"name":` so a row costs no key escaping.
	key  []byte
	kind Kind
	// unit converts timestamp values to seconds and nanoseconds.
	perSec int64
}

// Kind is the JSON form of an Arrow column of one of the types the cache produces.
type Kind uint8

const (
	KindString Kind = iota + 1
	KindLargeString
	KindInt64
	KindFloat64
	KindBool
	KindTimestamp
)

// KindOf is t's Kind and, for a timestamp, its units per second; false for a type the cache
// never produces (and so has no agreed JSON form).
func KindOf(t arrow.DataType) (k Kind, perSec int64, ok bool) {
	switch t := t.(type) {
	case *arrow.StringType:
		return KindString, 0, true
	case *arrow.LargeStringType:
		return KindLargeString, 0, true
	case *arrow.Int64Type:
		return KindInt64, 0, true
	case *arrow.Float64Type:
		return KindFloat64, 0, true
	case *arrow.BooleanType:
		return KindBool, 0, true
	case *arrow.TimestampType:
		return KindTimestamp, PerSecond(t.Unit), true
	}
	return 0, 0, false
}

// NewEncoder prepares an Encoder for schema, or says which column has a type the cache never
// produces (and so has no agreed JSON form).
func NewEncoder(schema *arrow.Schema) (*Encoder, error) {
	e := &Encoder{cols: make([]column, schema.NumFields())}
	for i, f := range schema.Fields() {
		c := column{key: append(AppendString(nil, f.Name), ':')}
		var ok bool
		if c.kind, c.perSec, ok = KindOf(f.Type); !ok {
			return nil, fmt.Errorf("column %q: type %s has no JSON encoding", f.Name, f.Type)
		}
		e.cols[i] = c
	}
	return e, nil
}

// PerSecond is how many of unit u make a second, for AppendTimestamp.
func PerSecond(u arrow.TimeUnit) int64 {
	switch u {
	case arrow.Second:
		return 1
	case arrow.Millisecond:
		return 1e3
	case arrow.Microsecond:
		return 1e6
	}
	return 1e9
}

// AppendRow appends row i of rec as one JSON object (fields in schema order, no newline) and
// returns the extended buffer. Null values leave their key out, so a reader sees the same
// object the row was ingested from. rec must have the Encoder's schema; a record of another
// shape is a programming error and panics.
func (e *Encoder) AppendRow(dst []byte, rec arrow.RecordBatch, i int) []byte {
	dst = append(dst, '{')
	first := true
	for j := range e.cols {
		c := &e.cols[j]
		arr := rec.Column(j)
		if arr.IsNull(i) {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, c.key...)
		switch c.kind {
		case KindString:
			dst = AppendString(dst, arr.(*array.String).Value(i))
		case KindLargeString:
			dst = AppendString(dst, arr.(*array.LargeString).Value(i))
		case KindInt64:
			dst = strconv.AppendInt(dst, arr.(*array.Int64).Value(i), 10)
		case KindFloat64:
			dst = AppendFloat(dst, arr.(*array.Float64).Value(i))
		case KindBool:
			dst = strconv.AppendBool(dst, arr.(*array.Boolean).Value(i))
		case KindTimestamp:
			dst = AppendTimestamp(dst, int64(arr.(*array.Timestamp).Value(i)), c.perSec)
		}
	}
	return append(dst, '}')
}

// SameAsText reports whether every value of arr means, as the JSON text this package writes
// of it, what it is: valid UTF-8 strings (the text has U+FFFD for a bad byte) and finite
// floats (null for NaN and ±Inf). A server stores a batch whose columns are not through its
// rows' text (server's passThrough, cache's addColumns).
func SameAsText(arr arrow.Array) bool {
	switch a := arr.(type) {
	case *array.String:
		n := a.Len()
		offs := a.ValueOffsets() // a slice's own, into the whole data buffer
		var data []byte
		if buf := a.Data().Buffers()[2]; buf != nil {
			data = buf.Bytes()
		}
		if !utf8.Valid(data[offs[0]:offs[n]]) {
			return false
		}
		// A value cut inside a character starts the next one with a continuation byte.
		for _, o := range offs[:n] {
			if int(o) < int(offs[n]) && data[o]&0xC0 == 0x80 {
				return false
			}
		}
	case *array.Float64:
		for i, f := range a.Float64Values() {
			if math.IsNaN(f-f) && a.IsValid(i) {
				return false
			}
		}
	}
	return true
}

// AppendFloat writes f the way encoding/json does (plain notation for ordinary magnitudes,
// exponent otherwise), except that an integral value keeps a decimal point (5.0, -0.0):
// readers that type a number by its literal, hyp server's ingest among them, would take 5
// for an integer (a long column where the gateway's is a double) and -0 for 0. NaN and
// ±Inf have no JSON form, so they become null rather than an unparsable line.
func AppendFloat(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	start := len(dst)
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'f' && !bytes.ContainsRune(dst[start:], '.') {
		dst = append(dst, ".0"...)
	}
	if format == 'e' {
		// Shorten e-09 to e-9, as encoding/json does, so both encoders agree byte for byte.
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

// AppendTimestamp writes v (in units of 1/perSec seconds since the epoch) as an RFC 3339 UTC
// string. Cached timestamps are instants whatever zone label the column carries, so UTC is
// the one honest rendering.
func AppendTimestamp(dst []byte, v, perSec int64) []byte {
	sec, frac := v/perSec, v%perSec
	t := time.Unix(sec, frac*(1e9/perSec)).UTC()
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"')
}

const hex = "0123456789abcdef"

// AppendString appends s as a JSON string. Quotes, backslashes and control characters are
// escaped; U+2028 and U+2029 are escaped too because JavaScript parsers treat them as line
// ends; invalid UTF-8 becomes U+FFFD, as encoding/json does, because JSON text must be UTF-8.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	// Most values need no escaping, or not for a while: skip the plain words first, eight
	// bytes a test, and let the byte loop carry on from there.
	start := 0
	for i := plainWords(s); i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// SWAR constants: a byte's worth of 0x01 and of 0x80 in every byte of a word.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plainWords is the length of the longest prefix of s, in whole 8-byte words, that
// AppendString copies as it is: printable ASCII other than the quote and the backslash.
func plainWords(s string) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		// A byte's high bit is set in special when it is non-ASCII, below 0x20, or equal to
		// '"' or '\\'; borrows can mark bytes after a real match, never without one.
		special := w | (w - 0x20*ones) | hasZero(w^('"'*ones)) | hasZero(w^('\\'*ones))
		if special&highs != 0 {
			break
		}
	}
	return i
}

// hasZero sets the high bit of (at least) the first zero byte of w, and of no byte when
// there is none.
func hasZero(w uint64) uint64 { return (w - ones) &^ w }
