package otlp

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// jsonDecoder parses OTLP/JSON into an arena. It is strict JSON (RFC 8259),
// and within that it reads values the way pdata's iterator does, which the
// differential fuzz targets check: keys in lowerCamelCase or snake_case,
// null standing for an empty object, array or string (but not for a number,
// bool, id or bytes), 64- and 32-bit integers as numbers or decimal strings,
// doubles as numbers or strings ParseFloat accepts ("NaN" included), enums
// as numbers or their proto names, ids as hex without escapes, unknown
// members skipped, a repeated member read again (merging messages, last
// scalar wins). Errors are sticky: the first one ends the parse.
type jsonDecoder struct {
	a     *arena
	b     []byte
	i     int
	depth int
	err   error
	// ascii says the last string read is plain ASCII (plainASCII), so a string
	// value can be written without looking at it again.
	ascii bool
}

func (d *jsonDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("offset %d: "+format, append([]any{d.i}, args...)...)
	}
}

func (d *jsonDecoder) ws() {
	// Bodies from most clients have no whitespace between tokens at all.
	if d.i < len(d.b) && d.b[d.i] > ' ' {
		return
	}
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (d *jsonDecoder) peek() byte {
	d.ws()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

func (d *jsonDecoder) literal(lit string) {
	if len(d.b)-d.i >= len(lit) && string(d.b[d.i:d.i+len(lit)]) == lit {
		d.i += len(lit)
		return
	}
	d.fail("invalid literal")
}

func (d *jsonDecoder) open() bool {
	d.depth++
	if d.depth > maxJSONDepth {
		d.fail("nested deeper than %d levels", maxJSONDepth)
		return false
	}
	d.i++
	return true
}

// object starts an object; false means null (read as an empty object) or an
// error.
func (d *jsonDecoder) object() bool {
	if d.err != nil {
		return false
	}
	switch d.peek() {
	case '{':
		return d.open()
	case 'n':
		d.literal("null")
		return false
	}
	d.fail("want an object")
	return false
}

// member reads the next member's key and the colon after it; false at the
// end of the object or on error. first must start true for each object.
func (d *jsonDecoder) member(first *bool) ([]byte, bool) {
	if d.err != nil {
		return nil, false
	}
	c := d.peek()
	if c == '}' {
		d.i++
		d.depth--
		return nil, false
	}
	if !*first {
		if c != ',' {
			d.fail("want , or }")
			return nil, false
		}
		d.i++
		c = d.peek()
	}
	*first = false
	if c != '"' {
		d.fail("want a member name")
		return nil, false
	}
	k := d.rawString(true)
	if d.peek() != ':' {
		d.fail("want :")
		return nil, false
	}
	d.i++
	// An empty name is an unknown member like any other, ignored with its value (SPEC 4).
	// pdata's iterator takes it for the end of the object and drops the rest: a
	// request {"":0,"resourceLogs":[...]} would be answered 200 with nothing stored.
	return k, d.err == nil
}

// text is b as a string for parsing, without a copy.
func text(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// array starts an array; false means null (an empty array) or an error.
func (d *jsonDecoder) array() bool {
	if d.err != nil {
		return false
	}
	switch d.peek() {
	case '[':
		return d.open()
	case 'n':
		d.literal("null")
		return false
	}
	d.fail("want an array")
	return false
}

// elem reports whether another element follows.
func (d *jsonDecoder) elem(first *bool) bool {
	if d.err != nil {
		return false
	}
	c := d.peek()
	if c == ']' {
		d.i++
		d.depth--
		return false
	}
	if !*first {
		if c != ',' {
			d.fail("want , or ]")
			return false
		}
		d.i++
	}
	*first = false
	return true
}

// rawString reads a string at d.i (which is '"'). With unescape, escapes are
// undone (into the arena's scratch when there are any); without, a string
// with escapes is an error, as it is for pdata's ids and bytes.
func (d *jsonDecoder) rawString(unescape bool) []byte {
	start := d.i + 1
	j := start
	var seen uint64 // the bytes before j, OR'd: whether any is 0x80 or above
	for j+8 <= len(d.b) {
		x := binary.LittleEndian.Uint64(d.b[j:])
		if m := special(x); m != 0 {
			// The lowest flagged byte is exact (see special): go straight to it, most
			// often the closing quote, with the bytes before it counted in seen.
			k := bits.TrailingZeros64(m) >> 3
			seen |= x & (1<<(8*k) - 1)
			j += k
			break
		}
		seen |= x
		j += 8
	}
	for ; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			d.i = j + 1
			d.ascii = seen&highs == 0
			return d.b[start:j:j]
		case c == '\\':
			if !unescape {
				d.i = j
				d.fail("escape in an id or bytes value")
				return nil
			}
			d.ascii = false
			return d.unescape(start, j)
		case c < 0x20:
			d.i = j
			d.fail("control character in a string")
			return nil
		default:
			seen |= uint64(c)
		}
	}
	d.i = len(d.b)
	d.fail("unterminated string")
	return nil
}

// unescape finishes a string with escapes, the first at j, the way pdata's
// iterator decodes them: lone or mismatched surrogates become U+FFFD.
func (d *jsonDecoder) unescape(start, j int) []byte {
	a := d.a
	out := len(a.scratch)
	a.scratch = append(grow(a, a.scratch, j-start), d.b[start:j]...)
	for j < len(d.b) {
		// The most one step appends: two runes from a surrogate pair that does not
		// combine.
		a.scratch = grow(a, a.scratch, 2*utf8.UTFMax)
		c := d.b[j]
		switch {
		case c == '"':
			d.i = j + 1
			return a.scratch[out:len(a.scratch):len(a.scratch)]
		case c < 0x20:
			d.i = j
			d.fail("control character in a string")
			return nil
		case c != '\\':
			a.scratch = append(a.scratch, c)
			j++
			continue
		}
		if j+1 >= len(d.b) {
			break
		}
		j++
		switch d.b[j] {
		case '"', '\\', '/':
			a.scratch = append(a.scratch, d.b[j])
		case 'b':
			a.scratch = append(a.scratch, '\b')
		case 'f':
			a.scratch = append(a.scratch, '\f')
		case 'n':
			a.scratch = append(a.scratch, '\n')
		case 'r':
			a.scratch = append(a.scratch, '\r')
		case 't':
			a.scratch = append(a.scratch, '\t')
		case 'u':
			r, ok := hex4(d.b, j+1)
			if !ok {
				d.i = j
				d.fail("invalid \\u escape")
				return nil
			}
			j += 4
			if utf16.IsSurrogate(r) && j+6 < len(d.b) && d.b[j+1] == '\\' && d.b[j+2] == 'u' {
				if r2, ok := hex4(d.b, j+3); ok {
					if c := utf16.DecodeRune(r, r2); c != utf8.RuneError {
						a.scratch = utf8.AppendRune(a.scratch, c)
					} else {
						a.scratch = utf8.AppendRune(a.scratch, r)
						a.scratch = utf8.AppendRune(a.scratch, r2)
					}
					j += 6
					break
				}
			}
			a.scratch = utf8.AppendRune(a.scratch, r)
		default:
			d.i = j
			d.fail("invalid escape")
			return nil
		}
		j++
	}
	d.i = len(d.b)
	d.fail("unterminated string")
	return nil
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// str reads a string; null reads as "".
func (d *jsonDecoder) str() []byte {
	if d.err != nil {
		return nil
	}
	switch d.peek() {
	case '"':
		return d.rawString(true)
	case 'n':
		d.literal("null")
		d.ascii = true
		return nil
	}
	d.fail("want a string")
	return nil
}

// number reads a JSON number token.
func (d *jsonDecoder) number() []byte {
	b, start := d.b, d.i
	j := start
	if j < len(b) && b[j] == '-' {
		j++
	}
	digits := func() bool {
		k := j
		for j < len(b) && '0' <= b[j] && b[j] <= '9' {
			j++
		}
		return j > k
	}
	if j < len(b) && b[j] == '0' {
		j++
	} else if !digits() {
		d.fail("invalid number")
		return nil
	}
	if j < len(b) && b[j] == '.' {
		j++
		if !digits() {
			d.fail("invalid number")
			return nil
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if !digits() {
			d.fail("invalid number")
			return nil
		}
	}
	d.i = j
	return b[start:j]
}

// digits parses the unsigned integer tok the way pdata's iterator does,
// including its overflow check, which only notices a wrap-around that
// makes the value smaller.
func digits(tok []byte, bits int) (uint64, bool) {
	if len(tok) == 0 {
		return 0, false
	}
	for _, c := range tok {
		if c < '0' || c > '9' {
			return 0, false // a fraction, an exponent or a sign
		}
	}
	if bits == 32 {
		v := uint32(tok[0] - '0')
		for _, c := range tok[1:] {
			n := v*10 + uint32(c-'0')
			if v > math.MaxUint32/10-1 && n < v {
				return 0, false
			}
			v = n
		}
		return uint64(v), true
	}
	v := uint64(tok[0] - '0')
	for _, c := range tok[1:] {
		n := v*10 + uint64(c-'0')
		if v > math.MaxUint64/10-1 && n < v {
			return 0, false
		}
		v = n
	}
	return v, true
}

// decimal is the value of s when it is all digits; it does not check for
// overflow.
func decimal(s []byte) (uint64, bool) {
	var v uint64
	// Timestamps are 19 digits: eight at a time keeps the chain of dependent multiplies
	// short.
	for len(s) >= 8 {
		w, ok := eightDigits(binary.LittleEndian.Uint64(s))
		if !ok {
			return 0, false
		}
		v = v*1e8 + w
		s = s[8:]
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return v, true
}

// eightDigits is the value of the eight decimal digits in x (as loaded little-endian, so
// the first digit is the lowest byte), or false when a byte of x is not a digit.
func eightDigits(x uint64) (uint64, bool) {
	const mask = 0xf0f0f0f0f0f0f0f0
	// Every byte 0x30..0x39: the high nibble is 3 before and after adding 6.
	if x&mask != 0x3030303030303030 || (x+0x0606060606060606)&mask != 0x3030303030303030 {
		return 0, false
	}
	x -= 0x3030303030303030
	x = x*10 + x>>8 // pairs of digits in every other byte
	x = ((x&0x000000ff000000ff)*(100+1000000<<32) + (x>>16&0x000000ff000000ff)*(1+10000<<32)) >> 32
	return x, true
}

// integer reads a signed or unsigned integer of the given width, as a
// number or a decimal string.
func (d *jsonDecoder) integer(signed bool, bits int) uint64 {
	if d.err != nil {
		return 0
	}
	switch c := d.peek(); {
	case c == '"':
		s := d.rawString(true)
		if d.err != nil {
			return 0
		}
		if signed {
			v, err := strconv.ParseInt(text(s), 10, bits)
			if err != nil {
				d.fail("%v", err)
			}
			return uint64(v)
		}
		// Timestamps come this way. Up to 19 digits (9 for 32 bits) cannot
		// overflow, so they need none of ParseUint's checks.
		if n := len(s); n > 0 && (n <= 19 && bits == 64 || n <= 9) {
			if v, ok := decimal(s); ok {
				return v
			}
		}
		v, err := strconv.ParseUint(text(s), 10, bits)
		if err != nil {
			d.fail("%v", err)
		}
		return v
	case c == '-' || ('0' <= c && c <= '9'):
		tok := d.number()
		if d.err != nil {
			return 0
		}
		neg := signed && tok[0] == '-'
		if neg {
			tok = tok[1:]
		}
		v, ok := digits(tok, bits)
		if !ok {
			d.fail("not a %d-bit integer", bits)
			return 0
		}
		if signed {
			limit := uint64(1)<<(bits-1) - 1
			if neg {
				limit++
			}
			if v > limit {
				d.fail("integer overflow")
				return 0
			}
			if neg {
				return -v
			}
		}
		return v
	}
	d.fail("want an integer")
	return 0
}

func (d *jsonDecoder) u64() uint64 { return d.integer(false, 64) }
func (d *jsonDecoder) u32() uint32 { return uint32(d.integer(false, 32)) }
func (d *jsonDecoder) i64() int64  { return int64(d.integer(true, 64)) }
func (d *jsonDecoder) i32() int32  { return int32(d.integer(true, 32)) }

func (d *jsonDecoder) double() float64 {
	if d.err != nil {
		return 0
	}
	var s []byte
	switch c := d.peek(); {
	case c == '"':
		s = d.rawString(true)
	case c == '-' || ('0' <= c && c <= '9'):
		s = d.number()
	default:
		d.fail("want a number")
	}
	if d.err != nil {
		return 0
	}
	v, err := strconv.ParseFloat(text(s), 64)
	if err != nil {
		d.fail("%v", err)
	}
	return v
}

func (d *jsonDecoder) boolean() bool {
	if d.err != nil {
		return false
	}
	switch d.peek() {
	case 't':
		d.literal("true")
		return true
	case 'f':
		d.literal("false")
		return false
	}
	d.fail("want a bool")
	return false
}

// enum reads an enum as its number or its proto name.
func (d *jsonDecoder) enum(names map[string]int32) int32 {
	if d.err != nil {
		return 0
	}
	if d.peek() != '"' {
		return d.i32()
	}
	s := d.rawString(true)
	v, ok := names[string(s)]
	if !ok && d.err == nil {
		d.fail("unknown enum value %q", s)
	}
	return v
}

// id reads a hex trace or span id; "" leaves it all zero.
func (d *jsonDecoder) id(dst []byte) {
	clear(dst)
	if d.err != nil {
		return
	}
	if d.peek() != '"' {
		d.fail("want a hex id")
		return
	}
	s := d.rawString(false)
	if d.err != nil || len(s) == 0 {
		return
	}
	if len(s) != 2*len(dst) {
		d.fail("id of %d hex digits, want %d", len(s), 2*len(dst))
		return
	}
	if _, err := hex.Decode(dst, s); err != nil {
		d.fail("%v", err)
	}
}

// base64 reads a bytes value into the arena's scratch.
func (d *jsonDecoder) base64() []byte {
	if d.err != nil {
		return nil
	}
	if d.peek() != '"' {
		d.fail("want a base64 string")
		return nil
	}
	s := d.rawString(false)
	if d.err != nil || len(s) == 0 {
		return nil
	}
	a := d.a
	out := len(a.scratch)
	n := base64.StdEncoding.DecodedLen(len(s))
	a.scratch = append(grow(a, a.scratch, n), make([]byte, n)...)
	n, err := base64.StdEncoding.Decode(a.scratch[out:], s)
	if err != nil {
		d.fail("%v", err)
		return nil
	}
	a.scratch = a.scratch[:out+n]
	return a.scratch[out : out+n : out+n]
}

// skip passes over a value of an unknown member, checking its syntax.
func (d *jsonDecoder) skip() {
	if d.err != nil {
		return
	}
	switch c := d.peek(); {
	case c == '{':
		if !d.open() {
			return
		}
		for first := true; ; {
			if _, ok := d.member(&first); !ok {
				return
			}
			d.skip()
		}
	case c == '[':
		if !d.open() {
			return
		}
		for first := true; d.elem(&first); {
			d.skip()
		}
	case c == '"':
		d.rawString(true)
	case c == 't':
		d.literal("true")
	case c == 'f':
		d.literal("false")
	case c == 'n':
		d.literal("null")
	case c == '-' || ('0' <= c && c <= '9'):
		d.number()
	default:
		d.fail("want a value")
	}
}

func (d *jsonDecoder) decodeRequest(sig Signal) error {
	key := map[Signal][2]string{
		Logs:    {"resourceLogs", "resource_logs"},
		Traces:  {"resourceSpans", "resource_spans"},
		Metrics: {"resourceMetrics", "resource_metrics"},
	}[sig]
	if d.object() {
		for first := true; ; {
			k, ok := d.member(&first)
			if !ok {
				break
			}
			if string(k) != key[0] && string(k) != key[1] {
				d.skip()
				continue
			}
			if d.array() {
				for first := true; d.elem(&first); {
					d.resourceGroups(sig)
				}
			}
		}
	}
	if d.err == nil && d.peek() != 0 {
		d.fail("data after the request object")
	}
	return d.err
}

// scopeKeys are the member names of a Resource*'s scope groups and of a
// Scope*'s records, per signal.
var scopeKeys = map[Signal]struct{ groups, groupsSnake, deprecated, deprecatedSnake, records, recordsSnake string }{
	Logs:    {"scopeLogs", "scope_logs", "deprecatedScopeLogs", "deprecated_scope_logs", "logRecords", "log_records"},
	Traces:  {"scopeSpans", "scope_spans", "deprecatedScopeSpans", "deprecated_scope_spans", "spans", "spans"},
	Metrics: {"scopeMetrics", "scope_metrics", "deprecatedScopeMetrics", "deprecated_scope_metrics", "metrics", "metrics"},
}

func (d *jsonDecoder) resourceGroups(sig Signal) {
	a := d.a
	keys := scopeKeys[sig]
	res := int32(len(a.resources))
	a.resources = append(grow(a, a.resources, 1), list{})
	var attrs list
	if d.object() {
		for first := true; ; {
			k, ok := d.member(&first)
			if !ok {
				break
			}
			switch string(k) {
			case "resource":
				d.resource(&attrs)
			case keys.groups, keys.groupsSnake, keys.deprecated, keys.deprecatedSnake:
				n := len(a.groups)
				if d.array() {
					for first := true; d.elem(&first); {
						d.scopeGroup(sig, res)
					}
				}
				// pdata's JSON decoder keeps deprecated groups apart and
				// never uses them.
				if string(k) == keys.deprecated || string(k) == keys.deprecatedSnake {
					a.groups = a.groups[:n]
				}
			case "schemaUrl", "schema_url":
				d.str()
			default:
				d.skip()
			}
		}
	}
	a.resources[res] = attrs
}

func (d *jsonDecoder) resource(attrs *list) {
	if !d.object() {
		return
	}
	for first := true; ; {
		k, ok := d.member(&first)
		if !ok {
			return
		}
		switch string(k) {
		case "attributes":
			d.attrs(attrs)
		case "droppedAttributesCount", "dropped_attributes_count":
			d.u32()
		case "entityRefs", "entity_refs":
			if d.array() {
				for first := true; d.elem(&first); {
					d.entityRef()
				}
			}
		default:
			d.skip()
		}
	}
}

func (d *jsonDecoder) entityRef() {
	if !d.object() {
		return
	}
	for first := true; ; {
		k, ok := d.member(&first)
		if !ok {
			return
		}
		switch string(k) {
		case "schemaUrl", "schema_url", "type":
			d.str()
		case "idKeys", "id_keys", "descriptionKeys", "description_keys":
			if d.array() {
				for first := true; d.elem(&first); {
					d.str()
				}
			}
		default:
			d.skip()
		}
	}
}

func (d *jsonDecoder) scopeGroup(sig Signal, res int32) {
	a := d.a
	keys := scopeKeys[sig]
	g := group{res: res}
	count := func() int32 {
		switch sig {
		case Logs:
			return int32(len(a.logs))
		case Traces:
			return int32(len(a.spans))
		}
		return int32(len(a.metrics))
	}
	g.start = count()
	if d.object() {
		for first := true; ; {
			k, ok := d.member(&first)
			if !ok {
				break
			}
			switch string(k) {
			case "scope":
				d.scope(&g.scope)
			case keys.records, keys.recordsSnake:
				if d.array() {
					for first := true; d.elem(&first); {
						switch sig {
						case Logs:
							d.logRecord()
						case Traces:
							d.span()
						default:
							d.metric()
						}
					}
				}
			case "schemaUrl", "schema_url":
				d.str()
			default:
				d.skip()
			}
		}
	}
	g.end = count()
	a.groups = append(grow(a, a.groups, 1), g)
}

func (d *jsonDecoder) scope(s *scope) {
	if !d.object() {
		return
	}
	for first := true; ; {
		k, ok := d.member(&first)
		if !ok {
			return
		}
		switch string(k) {
		case "name":
			s.name = d.str()
		case "version":
			s.version = d.str()
		case "attributes":
			d.attrs(&s.attrs)
		case "droppedAttributesCount", "dropped_attributes_count":
			d.u32()
		default:
			d.skip()
		}
	}
}

// attrs reads an array of KeyValue and appends them to l.
func (d *jsonDecoder) attrs(l *list) {
	if !d.array() {
		return
	}
	for first := true; d.elem(&first); {
		i := d.a.newNode()
		d.a.appendTo(l, i)
		d.keyValue(i)
	}
}

func (d *jsonDecoder) keyValue(i int32) {
	if !d.object() {
		return
	}
	for first := true; ; {
		k, ok := d.member(&first)
		if !ok {
			return
		}
		switch string(k) {
		case "key":
			key := d.str()
			d.a.nodes[i].key = key
		case "value":
			d.anyValue(i)
		case "keyStrindex", "key_strindex":
			d.i32()
		default:
			d.skip()
		}
	}
}

// anyValue reads an AnyValue into node i, merging as pdata does: the last
// member of the oneof wins and an array or kvlist starts afresh.
func (d *jsonDecoder) anyValue(i int32) {
	a := d.a
	if !d.object() {
		return
	}
	for first := true; ; {
		k, ok := d.member(&first)
		if !ok {
			return
		}
		switch string(k) {
		case "stringValue", "string_value":
			s := d.str()
			a.nodes[i].kind, a.nodes[i].s, a.nodes[i].ascii = kindStr, s, d.ascii
		case "boolValue", "bool_value":
			var v uint64
			if d.boolean() {
				v = 1
			}
			a.nodes[i].kind, a.nodes[i].num = kindBool, v
		case "intValue", "int_value":
			v := d.i64()
			a.nodes[i].kind, a.nodes[i].num = kindInt, uint64(v)
		case "doubleValue", "double_value":
			v := d.double()
			a.nodes[i].kind, a.nodes[i].num = kindDouble, math.Float64bits(v)
		case "arrayValue", "array_value", "kvlistValue", "kvlist_value":
			kv := string(k) == "kvlistValue" || string(k) == "kvlist_value"
			var kids list
			d.valueList(&kids, kv)
			a.nodes[i].kind, a.nodes[i].kids = kindArray, kids
			if kv {
				a.nodes[i].kind = kindKvlist
			}
		case "bytesValue", "bytes_value":
			s := d.base64()
			a.nodes[i].kind, a.nodes[i].s = kindBytes, s
		case "stringValueStrindex", "string_value_strindex":
			d.i32()
			a.nodes[i].kind = kindEmpty
		default:
			d.skip()
		}
	}
}

// valueList reads an ArrayValue or KeyValueList object ({"values": [...]}).
func (d *jsonDecoder) valueList(kids *list, kv bool) {
	if !d.object() {
		return
	}
	for first := true; ; {
		k, ok := d.member(&first)
		if !ok {
			return
		}
		if string(k) != "values" {
			d.skip()
			continue
		}
		if !d.array() {
			continue
		}
		for first := true; d.elem(&first); {
			i := d.a.newNode()
			d.a.appendTo(kids, i)
			if kv {
				d.keyValue(i)
			} else {
				d.anyValue(i)
			}
		}
	}
}

var severityNumbers = map[string]int32{
	"SEVERITY_NUMBER_UNSPECIFIED": 0,
	// pdata's name for 1 has a trailing space; its decoder accepts only
	// that spelling, so this one does too.
	"SEVERITY_NUMBER_TRACE ": 1, "SEVERITY_NUMBER_TRACE2": 2, "SEVERITY_NUMBER_TRACE3": 3, "SEVERITY_NUMBER_TRACE4": 4,
	"SEVERITY_NUMBER_DEBUG": 5, "SEVERITY_NUMBER_DEBUG2": 6, "SEVERITY_NUMBER_DEBUG3": 7, "SEVERITY_NUMBER_DEBUG4": 8,
	"SEVERITY_NUMBER_INFO": 9, "SEVERITY_NUMBER_INFO2": 10, "SEVERITY_NUMBER_INFO3": 11, "SEVERITY_NUMBER_INFO4": 12,
	"SEVERITY_NUMBER_WARN": 13, "SEVERITY_NUMBER_WARN2": 14, "SEVERITY_NUMBER_WARN3": 15, "SEVERITY_NUMBER_WARN4": 16,
	"SEVERITY_NUMBER_ERROR": 17, "SEVERITY_NUMBER_ERROR2": 18, "SEVERITY_NUMBER_ERROR3": 19, "SEVERITY_NUMBER_ERROR4": 20,
	"SEVERITY_NUMBER_FATAL": 21, "SEVERITY_NUMBER_FATAL2": 22, "SEVERITY_NUMBER_FATAL3": 23, "SEVERITY_NUMBER_FATAL4": 24,
}

var (
	spanKindNumbers = map[string]int32{
		"SPAN_KIND_UNSPECIFIED": 0, "SPAN_KIND_INTERNAL": 1, "SPAN_KIND_SERVER": 2,
		"SPAN_KIND_CLIENT": 3, "SPAN_KIND_PRODUCER": 4, "SPAN_KIND_CONSUMER": 5,
	}
	statusCodeNumbers  = map[string]int32{"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
	temporalityNumbers = map[string]int32{"AGGREGATION_TEMPORALITY_UNSPECIFIED": 0, "AGGREGATION_TEMPORALITY_DELTA": 1, "AGGREGATION_TEMPORALITY_CUMULATIVE": 2}
)

func (d *jsonDecoder) body(body *int32) {
	if *body == 0 {
		*body = d.a.newNode() + 1
	}
	d.anyValue(*body - 1)
}

func (d *jsonDecoder) logRecord() {
	var lr logRecord
	if d.object() {
		for first := true; ; {
			k, ok := d.member(&first)
			if !ok {
				break
			}
			switch string(k) {
			case "timeUnixNano", "time_unix_nano":
				lr.time = d.u64()
			case "observedTimeUnixNano", "observed_time_unix_nano":
				lr.observed = d.u64()
			case "severityNumber", "severity_number":
				lr.severity = d.enum(severityNumbers)
			case "severityText", "severity_text":
				lr.sevText = d.str()
			case "body":
				d.body(&lr.body)
			case "attributes":
				d.attrs(&lr.attrs)
			case "droppedAttributesCount", "dropped_attributes_count":
				lr.dropped = d.u32()
			case "flags":
				lr.flags = d.u32()
			case "traceId", "trace_id":
				d.id(lr.traceID[:])
			case "spanId", "span_id":
				d.id(lr.spanID[:])
			case "eventName", "event_name":
				lr.event = d.str()
			default:
				d.skip()
			}
		}
	}
	d.a.logs = append(grow(d.a, d.a.logs, 1), lr)
}

func (d *jsonDecoder) span() {
	a := d.a
	s := span{events: int32(len(a.events)), links: int32(len(a.links))}
	if d.object() {
		for first := true; ; {
			k, ok := d.member(&first)
			if !ok {
				break
			}
			switch string(k) {
			case "traceId", "trace_id":
				d.id(s.traceID[:])
			case "spanId", "span_id":
				d.id(s.spanID[:])
			case "traceState", "trace_state":
				s.traceState = d.str()
			case "parentSpanId", "parent_span_id":
				d.id(s.parent[:])
			case "flags":
				s.flags = d.u32()
			case "name":
				s.name = d.str()
			case "kind":
				s.kind = d.enum(spanKindNumbers)
			case "startTimeUnixNano", "start_time_unix_nano":
				s.start = d.u64()
			case "endTimeUnixNano", "end_time_unix_nano":
				s.end = d.u64()
			case "attributes":
				d.attrs(&s.attrs)
			case "droppedAttributesCount", "dropped_attributes_count":
				s.dropped = d.u32()
			case "events":
				if d.array() {
					for first := true; d.elem(&first); {
						d.event()
					}
				}
			case "droppedEventsCount", "dropped_events_count":
				s.droppedEv = d.u32()
			case "links":
				if d.array() {
					for first := true; d.elem(&first); {
						d.link()
					}
				}
			case "droppedLinksCount", "dropped_links_count":
				s.droppedLn = d.u32()
			case "status":
				d.status(&s)
			default:
				d.skip()
			}
		}
	}
	s.eventsEnd, s.linksEnd = int32(len(a.events)), int32(len(a.links))
	a.spans = append(grow(a, a.spans, 1), s)
}

func (d *jsonDecoder) status(s *span) {
	if !d.object() {
		return
	}
	for first := true; ; {
		k, ok := d.member(&first)
		if !ok {
			return
		}
		switch string(k) {
		case "message":
			s.statusMsg = d.str()
		case "code":
			s.statusCode = d.enum(statusCodeNumbers)
		default:
			d.skip()
		}
	}
}

func (d *jsonDecoder) event() {
	var ev event
	if d.object() {
		for first := true; ; {
			k, ok := d.member(&first)
			if !ok {
				break
			}
			switch string(k) {
			case "timeUnixNano", "time_unix_nano":
				ev.time = d.u64()
			case "name":
				ev.name = d.str()
			case "attributes":
				d.attrs(&ev.attrs)
			case "droppedAttributesCount", "dropped_attributes_count":
				ev.dropped = d.u32()
			default:
				d.skip()
			}
		}
	}
	d.a.events = append(grow(d.a, d.a.events, 1), ev)
}

func (d *jsonDecoder) link() {
	var l link
	if d.object() {
		for first := true; ; {
			k, ok := d.member(&first)
			if !ok {
				break
			}
			switch string(k) {
			case "traceId", "trace_id":
				d.id(l.traceID[:])
			case "spanId", "span_id":
				d.id(l.spanID[:])
			case "traceState", "trace_state":
				l.traceState = d.str()
			case "attributes":
				d.attrs(&l.attrs)
			case "droppedAttributesCount", "dropped_attributes_count":
				l.dropped = d.u32()
			case "flags":
				l.flags = d.u32()
			default:
				d.skip()
			}
		}
	}
	d.a.links = append(grow(d.a, d.a.links, 1), l)
}

func (d *jsonDecoder) metric() {
	var m metric
	if d.object() {
		for first := true; ; {
			k, ok := d.member(&first)
			if !ok {
				break
			}
			switch string(k) {
			case "name":
				m.name = d.str()
			case "description":
				m.desc = d.str()
			case "unit":
				m.unit = d.str()
			case "gauge":
				d.metricData(metricGauge, &m)
			case "sum":
				d.metricData(metricSum, &m)
			case "histogram":
				d.metricData(metricHistogram, &m)
			case "exponentialHistogram", "exponential_histogram":
				d.metricData(metricExpHistogram, &m)
			case "summary":
				d.metricData(metricSummary, &m)
			case "metadata":
				d.attrs(&m.metadata)
			default:
				d.skip()
			}
		}
	}
	d.a.metrics = append(grow(d.a, d.a.metrics, 1), m)
}

// metricData reads a Gauge, Sum, Histogram, ExponentialHistogram or Summary,
// replacing the data the metric had.
func (d *jsonDecoder) metricData(typ metricType, m *metric) {
	a := d.a
	m.typ, m.temporality, m.monotonic = typ, 0, false
	m.points = int32(len(a.points))
	if d.object() {
		for first := true; ; {
			k, ok := d.member(&first)
			if !ok {
				break
			}
			switch string(k) {
			case "dataPoints", "data_points":
				if d.array() {
					for first := true; d.elem(&first); {
						d.point(typ)
					}
				}
			case "aggregationTemporality", "aggregation_temporality":
				if typ == metricGauge || typ == metricSummary {
					d.skip()
				} else {
					m.temporality = d.enum(temporalityNumbers)
				}
			case "isMonotonic", "is_monotonic":
				if typ == metricSum {
					m.monotonic = d.boolean()
				} else {
					d.skip()
				}
			default:
				d.skip()
			}
		}
	}
	m.end = int32(len(a.points))
}

// jsonPointFields maps each data point type's member names to fields.
var jsonPointFields = func() map[metricType]map[string]pointField {
	common := map[string]pointField{
		"attributes": pfAttrs, "startTimeUnixNano": pfStart, "start_time_unix_nano": pfStart,
		"timeUnixNano": pfTime, "time_unix_nano": pfTime, "flags": pfFlags,
	}
	with := func(extra map[string]pointField) map[string]pointField {
		m := map[string]pointField{}
		for k, v := range common {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	number := with(map[string]pointField{"asDouble": pfDouble, "as_double": pfDouble, "asInt": pfInt, "as_int": pfInt, "exemplars": pfExemplars})
	return map[metricType]map[string]pointField{
		metricGauge: number,
		metricSum:   number,
		metricHistogram: with(map[string]pointField{"count": pfCount, "sum": pfSum, "bucketCounts": pfBucketCounts, "bucket_counts": pfBucketCounts,
			"explicitBounds": pfBounds, "explicit_bounds": pfBounds, "exemplars": pfExemplars, "min": pfMin, "max": pfMax}),
		metricExpHistogram: with(map[string]pointField{"count": pfCount, "sum": pfSum, "scale": pfScale, "zeroCount": pfZeroCount, "zero_count": pfZeroCount,
			"positive": pfPositive, "negative": pfNegative, "exemplars": pfExemplars, "min": pfMin, "max": pfMax,
			"zeroThreshold": pfZeroThreshold, "zero_threshold": pfZeroThreshold}),
		metricSummary: with(map[string]pointField{"count": pfCount, "sum": pfSum, "quantileValues": pfQuantiles, "quantile_values": pfQuantiles}),
	}
}()

func (d *jsonDecoder) point(typ metricType) {
	a := d.a
	fields := jsonPointFields[typ]
	pt := point{exemplars: span32{int32(len(a.exemplars)), int32(len(a.exemplars))}}
	if d.object() {
		for first := true; ; {
			k, ok := d.member(&first)
			if !ok {
				break
			}
			switch fields[string(k)] {
			case pfAttrs:
				d.attrs(&pt.attrs)
			case pfStart:
				pt.start = d.u64()
			case pfTime:
				pt.time = d.u64()
			case pfFlags:
				pt.flags = d.u32()
			case pfDouble:
				pt.num, pt.numKind = math.Float64bits(d.double()), numDouble
			case pfInt:
				pt.num, pt.numKind = uint64(d.i64()), numInt
			case pfExemplars:
				if d.array() {
					for first := true; d.elem(&first); {
						d.exemplar()
					}
				}
				pt.exemplars.end = int32(len(a.exemplars))
			case pfCount:
				pt.count = d.u64()
			case pfSum:
				pt.sum, pt.hasSum = d.double(), true
			case pfMin:
				pt.min, pt.hasMin = d.double(), true
			case pfMax:
				pt.max, pt.hasMax = d.double(), true
			case pfBucketCounts:
				d.u64s(&pt.counts)
			case pfBounds:
				if d.array() {
					a.f64s = toTail(a, a.f64s, &pt.bounds)
					for first := true; d.elem(&first); {
						a.f64s = append(grow(a, a.f64s, 1), d.double())
					}
					pt.bounds.end = int32(len(a.f64s))
				}
			case pfScale:
				pt.scale = d.i32()
			case pfZeroCount:
				pt.zeroCount = d.u64()
			case pfZeroThreshold:
				pt.zeroThreshold = d.double()
			case pfPositive:
				d.buckets(&pt.pos)
			case pfNegative:
				d.buckets(&pt.neg)
			case pfQuantiles:
				if d.array() {
					for first := true; d.elem(&first); {
						d.quantile(&pt)
					}
				}
			default:
				d.skip()
			}
		}
	}
	a.points = append(grow(a, a.points, 1), pt)
}

// u64s appends an array of integers to the list r.
func (d *jsonDecoder) u64s(r *span32) {
	a := d.a
	if !d.array() {
		return
	}
	a.u64s = toTail(a, a.u64s, r)
	for first := true; d.elem(&first); {
		a.u64s = append(grow(a, a.u64s, 1), d.u64())
	}
	r.end = int32(len(a.u64s))
}

func (d *jsonDecoder) buckets(b *buckets) {
	if !d.object() {
		return
	}
	for first := true; ; {
		k, ok := d.member(&first)
		if !ok {
			return
		}
		switch string(k) {
		case "offset":
			b.offset = d.i32()
		case "bucketCounts", "bucket_counts":
			d.u64s(&b.counts)
		default:
			d.skip()
		}
	}
}

func (d *jsonDecoder) quantile(pt *point) {
	var q, v float64
	if d.object() {
		for first := true; ; {
			k, ok := d.member(&first)
			if !ok {
				break
			}
			switch string(k) {
			case "quantile":
				q = d.double()
			case "value":
				v = d.double()
			default:
				d.skip()
			}
		}
	}
	d.a.appendQuantile(pt, q, v)
}

func (d *jsonDecoder) exemplar() {
	var ex exemplar
	if d.object() {
		for first := true; ; {
			k, ok := d.member(&first)
			if !ok {
				break
			}
			switch string(k) {
			case "filteredAttributes", "filtered_attributes":
				d.attrs(&ex.attrs)
			case "timeUnixNano", "time_unix_nano":
				ex.time = d.u64()
			case "asDouble", "as_double":
				ex.num, ex.numKind = math.Float64bits(d.double()), numDouble
			case "asInt", "as_int":
				ex.num, ex.numKind = uint64(d.i64()), numInt
			case "traceId", "trace_id":
				d.id(ex.traceID[:])
			case "spanId", "span_id":
				d.id(ex.spanID[:])
			default:
				d.skip()
			}
		}
	}
	d.a.exemplars = append(grow(d.a, d.a.exemplars, 1), ex)
}
