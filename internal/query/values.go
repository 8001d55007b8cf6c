package query

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	duckdb "github.com/duckdb/duckdb-go/v2"
)

// The driver hands values over as Go values whose type alone is ambiguous
// (time.Time for DATE, TIME and TIMESTAMP; []byte for BLOB and UUID; a Go map
// for a STRUCT, losing field order), so rendering is driven by the column's
// DuckDB type.

// isNested reports whether values of info render as JSON text even in the
// text formats.
func isNested(info duckdb.TypeInfo) bool {
	if info.Alias() == "JSON" {
		return true
	}
	switch info.InternalType() {
	case duckdb.TYPE_LIST, duckdb.TYPE_ARRAY, duckdb.TYPE_STRUCT, duckdb.TYPE_MAP:
		return true
	}
	return false
}

// textValue renders v for the table and csv formats; null reports SQL NULL,
// which includes a UNION whose member is NULL.
func textValue(info duckdb.TypeInfo, v any) (text string, null bool, err error) {
	if v == nil {
		return "", true, nil
	}
	if u, ok := v.(duckdb.Union); ok {
		member, err := unionMember(info, u)
		if err != nil {
			return "", false, err
		}
		return textValue(member, u.Value)
	}
	if isNested(info) {
		b, err := appendJSON(nil, info, v)
		return string(b), false, err
	}
	s, _ := scalar(info, v)
	return s, false, nil
}

// appendJSON appends v as JSON. Numbers keep their full precision: HUGEINT
// and DECIMAL are written as the exact numeric literal, never through float64.
func appendJSON(b []byte, info duckdb.TypeInfo, v any) ([]byte, error) {
	if v == nil {
		return append(b, "null"...), nil
	}
	if info.Alias() == "JSON" {
		// The driver has already decoded the JSON document.
		return appendMarshal(b, v)
	}
	switch d := info.Details().(type) {
	case *duckdb.ListDetails:
		return appendJSONList(b, d.Child, v)
	case *duckdb.ArrayDetails:
		return appendJSONList(b, d.Child, v)
	case *duckdb.StructDetails:
		m, ok := v.(map[string]any)
		if !ok {
			return nil, unexpectedValue(info, v)
		}
		b = append(b, '{')
		for i, e := range d.Entries {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, e.Name())
			b = append(b, ':')
			var err error
			if b, err = appendJSON(b, e.Info(), m[e.Name()]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case *duckdb.MapDetails:
		m, ok := v.(duckdb.OrderedMap)
		if !ok {
			return nil, unexpectedValue(info, v)
		}
		b = append(b, '{')
		vals := m.Values()
		for i, k := range m.Keys() {
			if i > 0 {
				b = append(b, ',')
			}
			// DuckDB rejects NULL map keys, so null is never set here.
			key, _, err := textValue(d.Key, k)
			if err != nil {
				return nil, err
			}
			b = appendJSONString(b, key)
			b = append(b, ':')
			if b, err = appendJSON(b, d.Value, vals[i]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case *duckdb.UnionDetails:
		u, ok := v.(duckdb.Union)
		if !ok {
			return nil, unexpectedValue(info, v)
		}
		member, err := unionMember(info, u)
		if err != nil {
			return nil, err
		}
		return appendJSON(b, member, u.Value)
	}
	s, literal := scalar(info, v)
	if literal {
		return append(b, s...), nil
	}
	return appendJSONString(b, s), nil
}

func appendJSONList(b []byte, child duckdb.TypeInfo, v any) ([]byte, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("query: unexpected %T value for a list", v)
	}
	b = append(b, '[')
	for i, e := range list {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendJSON(b, child, e); err != nil {
			return nil, err
		}
	}
	return append(b, ']'), nil
}

func unionMember(info duckdb.TypeInfo, u duckdb.Union) (duckdb.TypeInfo, error) {
	if d, ok := info.Details().(*duckdb.UnionDetails); ok {
		for _, m := range d.Members {
			if m.Name == u.Tag {
				return m.Type, nil
			}
		}
	}
	return nil, fmt.Errorf("query: union member %q not found in the column type", u.Tag)
}

func unexpectedValue(info duckdb.TypeInfo, v any) error {
	return fmt.Errorf("query: unexpected %T value for DuckDB type id %d", v, info.InternalType())
}

// scalar renders a non-nested, non-NULL value. literal reports that the text
// is a JSON number or boolean as it stands; anything else is a JSON string.
func scalar(info duckdb.TypeInfo, v any) (text string, literal bool) {
	switch x := v.(type) {
	case bool:
		return strconv.FormatBool(x), true
	case int8, int16, int32, int64, uint8, uint16, uint32, uint64:
		return fmt.Sprint(x), true
	case float32:
		return formatFloat(float64(x), 32)
	case float64:
		return formatFloat(x, 64)
	case *big.Int:
		return x.String(), true
	case duckdb.Decimal:
		return formatDecimal(x), true
	case string:
		return x, false
	case []byte:
		if info.InternalType() == duckdb.TYPE_UUID && len(x) == 16 {
			id := duckdb.UUID(x)
			return id.String(), false
		}
		return formatBlob(x), false
	case time.Time:
		switch info.InternalType() {
		case duckdb.TYPE_DATE:
			return x.Format(time.DateOnly), false
		case duckdb.TYPE_TIME:
			return x.Format("15:04:05.999999999"), false
		case duckdb.TYPE_TIME_TZ:
			return x.Format("15:04:05.999999999Z07:00"), false
		}
		return x.UTC().Format(time.RFC3339Nano), false
	case duckdb.Interval:
		return formatInterval(x), false
	case duckdb.Bit:
		return x.String(), false
	}
	return fmt.Sprint(v), false
}

// formatFloat writes floats the way encoding/json does (no exponent for
// ordinary magnitudes); NaN and the infinities have no JSON number form, so
// they become strings.
func formatFloat(f float64, bits int) (string, bool) {
	switch {
	case math.IsNaN(f):
		return "NaN", false
	case math.IsInf(f, 1):
		return "Infinity", false
	case math.IsInf(f, -1):
		return "-Infinity", false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	return strconv.FormatFloat(f, format, -1, bits), true
}

// formatDecimal keeps every digit of the scale, as DuckDB prints it
// (12.340, not duckdb.Decimal.String's 12.34).
func formatDecimal(d duckdb.Decimal) string {
	digits := new(big.Int).Abs(d.Value).String()
	sign := ""
	if d.Value.Sign() < 0 {
		sign = "-"
	}
	scale := int(d.Scale)
	if scale == 0 {
		return sign + digits
	}
	if len(digits) <= scale {
		digits = strings.Repeat("0", scale-len(digits)+1) + digits
	}
	return sign + digits[:len(digits)-scale] + "." + digits[len(digits)-scale:]
}

// formatBlob follows DuckDB's own BLOB text: printable ASCII as is, every
// other byte as \xHH.
func formatBlob(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		if c >= 0x20 && c < 0x7f && c != '\\' {
			sb.WriteByte(c)
			continue
		}
		fmt.Fprintf(&sb, `\x%02X`, c)
	}
	return sb.String()
}

// formatInterval follows DuckDB's INTERVAL text, e.g. "1 year 2 days 03:04:05.5".
func formatInterval(iv duckdb.Interval) string {
	var parts []string
	unit := func(n int64, name string) {
		if n == 0 {
			return
		}
		if n != 1 && n != -1 {
			name += "s"
		}
		parts = append(parts, fmt.Sprintf("%d %s", n, name))
	}
	unit(int64(iv.Months/12), "year")
	unit(int64(iv.Months%12), "month")
	unit(int64(iv.Days), "day")
	if iv.Micros != 0 || len(parts) == 0 {
		micros, sign := iv.Micros, ""
		if micros < 0 {
			micros, sign = -micros, "-"
		}
		d := time.Duration(micros) * time.Microsecond
		clock := fmt.Sprintf("%s%02d:%02d:%02d", sign, int64(d.Hours()), int64(d.Minutes())%60, int64(d.Seconds())%60)
		if frac := micros % 1e6; frac != 0 {
			clock += strings.TrimRight(fmt.Sprintf(".%06d", frac), "0")
		}
		parts = append(parts, clock)
	}
	return strings.Join(parts, " ")
}

func appendJSONString(b []byte, s string) []byte {
	// A string always marshals.
	out, _ := marshalNoHTML(s)
	return append(b, out...)
}

func appendMarshal(b []byte, v any) ([]byte, error) {
	out, err := marshalNoHTML(v)
	if err != nil {
		return nil, err
	}
	return append(b, out...), nil
}

// marshalNoHTML is json.Marshal without the \u003c-style escaping of <, > and
// &, which only matters for JSON embedded in HTML and hurts reading log text.
func marshalNoHTML(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
