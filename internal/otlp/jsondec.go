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
// scalar wins). Errors are sticky: the first one ends the parse. Its
// methods for each message are generated (decoders.go); those here read
// JSON's tokens.
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
	switch sig {
	case Logs:
		d.logsRequest(ref{})
	case Traces:
		d.tracesRequest(ref{})
	default:
		d.metricsRequest(ref{})
	}
	if d.err == nil && d.peek() != 0 {
		d.fail("data after the request object")
	}
	return d.err
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
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

// f64s appends an array of doubles to the list r.
func (d *jsonDecoder) f64s(r *span32) {
	a := d.a
	if !d.array() {
		return
	}
	a.f64s = toTail(a, a.f64s, r)
	for first := true; d.elem(&first); {
		a.f64s = append(grow(a, a.f64s, 1), d.double())
	}
	r.end = int32(len(a.f64s))
}
