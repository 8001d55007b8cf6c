package otlp

import (
	"encoding/base64"
	"encoding/hex"
	"math"
	"strconv"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/hyp-project/hyp/internal/rowjson"
)

// jsonWriter appends JSON to a byte slice. It is hand-rolled rather than
// encoding/json over structs so that key order follows the code (stable
// output), optional keys are simply not written, and attribute values can be
// streamed from pdata without building intermediate maps.
//
// Separators need no bookkeeping: a ',' is due exactly when the previous
// byte is not the '{' or '[' that opened the current container.
type jsonWriter struct {
	b []byte
}

func (w *jsonWriter) reset() { w.b = w.b[:0] }

func (w *jsonWriter) sep() {
	if n := len(w.b); n > 0 && w.b[n-1] != '{' && w.b[n-1] != '[' {
		w.b = append(w.b, ',')
	}
}

func (w *jsonWriter) beginObject() { w.b = append(w.b, '{') }
func (w *jsonWriter) endObject()   { w.b = append(w.b, '}') }
func (w *jsonWriter) beginArray()  { w.b = append(w.b, '[') }
func (w *jsonWriter) endArray()    { w.b = append(w.b, ']') }

// key writes the separator and the key of the next object member.
func (w *jsonWriter) key(k string) {
	w.sep()
	w.str(k)
	w.b = append(w.b, ':')
}

func (w *jsonWriter) str(s string) {
	w.b = rowjson.AppendString(w.b, s)
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

func (w *jsonWriter) timeField(k string, ts pcommon.Timestamp) {
	if ts == 0 {
		return
	}
	w.key(k)
	// Not ts.AsTime(): it converts through int64 and turns timestamps past
	// 2262 into dates before 1970; splitting keeps them monotonic.
	t := time.Unix(int64(ts/1e9), int64(ts%1e9)).UTC()
	w.b = append(w.b, '"')
	w.b = t.AppendFormat(w.b, time.RFC3339Nano)
	w.b = append(w.b, '"')
}

func (w *jsonWriter) traceIDField(k string, id pcommon.TraceID) {
	if !id.IsEmpty() {
		w.hexField(k, id[:])
	}
}

func (w *jsonWriter) spanIDField(k string, id pcommon.SpanID) {
	if !id.IsEmpty() {
		w.hexField(k, id[:])
	}
}

func (w *jsonWriter) hexField(k string, id []byte) {
	w.key(k)
	w.b = append(w.b, '"')
	w.b = hex.AppendEncode(w.b, id)
	w.b = append(w.b, '"')
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

func (w *jsonWriter) attrsField(k string, m pcommon.Map) {
	if m.Len() > 0 {
		w.key(k)
		w.mapValue(m)
	}
}

func (w *jsonWriter) uintsField(k string, s pcommon.UInt64Slice) {
	w.key(k)
	w.beginArray()
	for _, v := range s.All() {
		w.sep()
		w.uintVal(v)
	}
	w.endArray()
}

func (w *jsonWriter) floatsField(k string, s pcommon.Float64Slice) {
	w.key(k)
	w.beginArray()
	for _, v := range s.All() {
		w.sep()
		w.floatVal(v)
	}
	w.endArray()
}

func (w *jsonWriter) value(v pcommon.Value) {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		w.str(v.Str())
	case pcommon.ValueTypeBool:
		w.boolVal(v.Bool())
	case pcommon.ValueTypeInt:
		w.intVal(v.Int())
	case pcommon.ValueTypeDouble:
		w.floatVal(v.Double())
	case pcommon.ValueTypeBytes:
		raw := v.Bytes().AsRaw()
		w.b = append(w.b, '"')
		w.b = base64.StdEncoding.AppendEncode(w.b, raw)
		w.b = append(w.b, '"')
	case pcommon.ValueTypeMap:
		w.mapValue(v.Map())
	case pcommon.ValueTypeSlice:
		w.beginArray()
		for _, e := range v.Slice().All() {
			w.sep()
			w.value(e)
		}
		w.endArray()
	default:
		w.b = append(w.b, "null"...)
	}
}

// mapValue writes m as an object. Keys repeated in m (which OTLP forbids but
// the wire format allows) are written once, with their first value.
func (w *jsonWriter) mapValue(m pcommon.Map) {
	// Attribute lists are usually short, and for those rescanning the
	// earlier entries is cheaper than allocating a set.
	var seen map[string]struct{}
	if m.Len() > linearDedupMax {
		seen = make(map[string]struct{}, m.Len())
	}
	w.beginObject()
	i := -1
	for k, v := range m.All() {
		i++
		if seen != nil {
			if _, dup := seen[k]; dup {
				continue
			}
			seen[k] = struct{}{}
		} else if hasKeyBefore(m, k, i) {
			continue
		}
		w.key(k)
		w.value(v)
	}
	w.endObject()
}

const linearDedupMax = 16

// hasKeyBefore reports whether one of the first n entries of m has key k.
func hasKeyBefore(m pcommon.Map, k string, n int) bool {
	j := 0
	for e := range m.All() {
		if j == n {
			return false
		}
		if e == k {
			return true
		}
		j++
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
