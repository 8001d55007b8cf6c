package otlp

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"math"
	"strconv"
	"time"
	"unsafe"

	"github.com/hyp-project/hyp/internal/rowform"
	"github.com/hyp-project/hyp/internal/rowjson"
)

// jsonWriter appends JSON to a byte slice. It is hand-rolled rather than
// encoding/json over structs so that key order follows the code (stable
// output), optional keys are simply not written, and attribute values can be
// streamed from the decoded request without building intermediate maps.
//
// Separators need no bookkeeping: a ',' is due exactly when the previous
// byte is not the '{' or '[' that opened the current container.
//
// With fields set, the writer frames a row's top-level members in the cache's row form
// (rowform.BeginField) instead of writing the row's braces, separators and keys as JSON: the
// row is written as its members, never as an object, and the cache stores it without
// parsing it. Values, nested ones included, are JSON either way.
type jsonWriter struct {
	b      []byte
	fields bool
	depth  int // containers open within the row
	at     int // where the open member's frame starts (fields); 0 when none is open
	// sec is the second whose text, up to the fraction, is in secText: the records of a
	// request mostly share their second, and formatting the date is most of a timestamp's
	// cost.
	sec     uint64
	secText []byte
}

func (w *jsonWriter) reset() { w.b = w.b[:0] }

func (w *jsonWriter) sep() {
	if w.fields && w.depth == 0 {
		return
	}
	if n := len(w.b); n > 0 && w.b[n-1] != '{' && w.b[n-1] != '[' {
		w.b = append(w.b, ',')
	}
}

func (w *jsonWriter) beginObject() { w.b = append(w.b, '{'); w.depth++ }
func (w *jsonWriter) endObject()   { w.b = append(w.b, '}'); w.depth-- }
func (w *jsonWriter) beginArray()  { w.b = append(w.b, '['); w.depth++ }
func (w *jsonWriter) endArray()    { w.b = append(w.b, ']'); w.depth-- }

// key writes the separator and the key of the next object member, or, for a row's
// member when framing fields, ends the member before and starts its frame.
func (w *jsonWriter) key(k string) {
	if w.fields && w.depth == 0 {
		w.endField()
		w.b, w.at = rowform.BeginField(w.b, k)
		return
	}
	w.sep()
	w.str(k)
	w.b = append(w.b, ':')
}

// endField completes the open member's frame, if any.
func (w *jsonWriter) endField() {
	if w.at > 0 {
		rowform.EndField(w.b, w.at)
		w.at = 0
	}
}

func (w *jsonWriter) str(s string) {
	if plainASCII(s) {
		w.quoted(s)
		return
	}
	w.b = rowjson.AppendString(w.b, s)
}

// quoted writes s, which is plain ASCII (plainASCII), as a JSON string.
func (w *jsonWriter) quoted(s string) {
	w.b = append(w.b, '"')
	w.b = append(w.b, s...)
	w.b = append(w.b, '"')
}

func (w *jsonWriter) intVal(v int64) { w.b = strconv.AppendInt(w.b, v, 10) }

func (w *jsonWriter) uintVal(v uint64) { w.b = strconv.AppendUint(w.b, v, 10) }

func (w *jsonWriter) floatVal(f float64) { w.b = appendFloat(w.b, f) }

func (w *jsonWriter) boolVal(v bool) { w.b = strconv.AppendBool(w.b, v) }

func (w *jsonWriter) strField(k, v string) {
	if v != "" {
		w.key(k)
		w.str(v)
	}
}

func (w *jsonWriter) intField(k string, v int64) {
	w.key(k)
	w.intVal(v)
}

func (w *jsonWriter) uintField(k string, v uint64) {
	w.key(k)
	w.uintVal(v)
}

// nonZeroField is for counters and flags where 0 means "nothing to say".
func (w *jsonWriter) nonZeroField(k string, v uint64) {
	if v != 0 {
		w.uintField(k, v)
	}
}

func (w *jsonWriter) floatField(k string, v float64) {
	w.key(k)
	w.floatVal(v)
}

func (w *jsonWriter) boolField(k string, v bool) {
	w.key(k)
	w.boolVal(v)
}

// bytesField is strField for a view into the request.
func (w *jsonWriter) bytesField(k string, v []byte) {
	if len(v) != 0 {
		w.key(k)
		w.bytesStr(v)
	}
}

// bytesStr writes v as a JSON string without copying it into a Go string
// first: AppendString only reads it, and v is not modified meanwhile.
func (w *jsonWriter) bytesStr(v []byte) {
	w.str(unsafe.String(unsafe.SliceData(v), len(v)))
}

func (w *jsonWriter) timeField(k string, ts uint64) {
	if ts == 0 {
		return
	}
	w.key(k)
	w.b = append(w.b, '"')
	w.b = w.appendTime(w.b, ts)
	w.b = append(w.b, '"')
}

// appendTime appends ts, nanoseconds since the epoch, as time.RFC3339Nano in UTC would.
func (w *jsonWriter) appendTime(b []byte, ts uint64) []byte {
	sec, nsec := ts/1e9, ts%1e9
	if w.secText == nil || sec != w.sec {
		// Not through int64 nanoseconds: timestamps past 2262 would turn into dates
		// before 1970; splitting keeps them monotonic. A uint64 of nanoseconds ends in
		// 2554, so the year always has four digits.
		t := time.Unix(int64(sec), 0).UTC()
		w.sec, w.secText = sec, t.AppendFormat(w.secText[:0], "2006-01-02T15:04:05")
	}
	b = append(b, w.secText...)
	if nsec != 0 {
		var frac [10]byte
		frac[0] = '.'
		// The last digit alone, then pairs: five divisions instead of nine.
		frac[9] = byte('0' + nsec%10)
		nsec /= 10
		for i := 8; i > 0; i -= 2 {
			d := nsec % 100 * 2
			nsec /= 100
			frac[i-1], frac[i] = digitPairs[d], digitPairs[d+1]
		}
		n := len(frac)
		for frac[n-1] == '0' {
			n--
		}
		b = append(b, frac[:n]...)
	}
	return append(b, 'Z')
}

// digitPairs is "00" to "99", for writing two digits at a time.
const digitPairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879" +
	"8081828384858687888990919293949596979899"

// idField writes a trace or span id; an all-zero id means "not set".
func (w *jsonWriter) idField(k string, id []byte) {
	for _, c := range id {
		if c != 0 {
			w.key(k)
			w.b = append(w.b, '"')
			w.b = hex.AppendEncode(w.b, id)
			w.b = append(w.b, '"')
			return
		}
	}
}

// enumField writes a known enum value by its lowercase name and an unknown
// one (name == "") by its number, so neither is lost.
func (w *jsonWriter) enumField(k, name string, v int32) {
	w.key(k)
	if name == "" {
		w.b = append(w.b, '"')
		w.b = strconv.AppendInt(w.b, int64(v), 10)
		w.b = append(w.b, '"')
		return
	}
	w.str(name)
}

func (w *jsonWriter) uintsField(k string, s []uint64) {
	w.key(k)
	w.beginArray()
	for _, v := range s {
		w.sep()
		w.uintVal(v)
	}
	w.endArray()
}

func (w *jsonWriter) floatsField(k string, s []float64) {
	w.key(k)
	w.beginArray()
	for _, v := range s {
		w.sep()
		w.floatVal(v)
	}
	w.endArray()
}

// attrsField writes a non-empty attribute list as an object.
func (w *jsonWriter) attrsField(a *arena, k string, l list) {
	if l.head != 0 {
		w.key(k)
		w.mapValue(a, l)
	}
}

func (w *jsonWriter) value(a *arena, n *node) {
	switch n.kind {
	case kindStr:
		if n.ascii {
			w.quoted(unsafe.String(unsafe.SliceData(n.s), len(n.s)))
			return
		}
		w.bytesStr(n.s)
	case kindBool:
		w.boolVal(n.num != 0)
	case kindInt:
		w.intVal(int64(n.num))
	case kindDouble:
		w.floatVal(math.Float64frombits(n.num))
	case kindBytes:
		w.b = append(w.b, '"')
		w.b = base64.StdEncoding.AppendEncode(w.b, n.s)
		w.b = append(w.b, '"')
	case kindKvlist:
		w.mapValue(a, n.kids)
	case kindArray:
		w.beginArray()
		for i := n.kids.head; i != 0; i = a.nodes[i-1].next {
			w.sep()
			w.value(a, &a.nodes[i-1])
		}
		w.endArray()
	default:
		w.b = append(w.b, "null"...)
	}
}

// mapValue writes l as an object. Keys repeated in l (which OTLP forbids but
// the wire format allows) are written once, with their first value.
func (w *jsonWriter) mapValue(a *arena, l list) {
	n := 0
	for i := l.head; i != 0; i = a.nodes[i-1].next {
		n++
	}
	// Attribute lists are usually short, and for those rescanning the
	// earlier entries is cheaper than a set.
	long := n > linearDedupMax
	if long {
		if a.seen == nil {
			a.seen = make(map[string]struct{}, n)
		}
		clear(a.seen)
	}
	w.beginObject()
	for i := l.head; i != 0; i = a.nodes[i-1].next {
		kv := &a.nodes[i-1]
		if long {
			if _, dup := a.seen[string(kv.key)]; dup {
				continue
			}
			a.seen[string(kv.key)] = struct{}{}
		} else if hasKeyBefore(a, l, kv.key, i) {
			continue
		}
		w.key(unsafe.String(unsafe.SliceData(kv.key), len(kv.key)))
		w.value(a, kv)
	}
	w.endObject()
}

const linearDedupMax = 16

// hasKeyBefore reports whether an entry of l before node index end has key k.
func hasKeyBefore(a *arena, l list, k []byte, end int32) bool {
	for i := l.head; i != end; i = a.nodes[i-1].next {
		if bytes.Equal(a.nodes[i-1].key, k) {
			return true
		}
	}
	return false
}

func appendFloat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(b, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(b, `"-Infinity"`...)
	}
	// Same choice of notation as encoding/json: plain decimals for everyday
	// magnitudes, exponents for the very small and very large.
	format := byte('f')
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, format, -1, 64)
	for _, c := range b[start:] {
		if c == '.' || c == 'e' {
			return b
		}
	}
	return append(b, ".0"...)
}
