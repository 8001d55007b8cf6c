// Package jsonrow owns parsing and validating NDJSON rows that arrive from
// outside the process. It is the single place where untrusted bytes are judged
// to be JSON, so it never accepts anything encoding/json would reject (and is
// stricter in one respect: strings must be valid UTF-8). It sits on the ingest
// hot path, so it scans bytes by hand and never allocates per value: fields are
// reported as slices of the input, and the only scratch memory is owned by a
// reusable Scanner.
package jsonrow

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Kind is the JSON type of a top-level field value.
type Kind uint8

const (
	Null Kind = iota
	Bool
	Number
	String
	Object
	Array
)

func (k Kind) String() string {
	switch k {
	case Null:
		return "null"
	case Bool:
		return "bool"
	case Number:
		return "number"
	case String:
		return "string"
	case Object:
		return "object"
	case Array:
		return "array"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// maxDepth is the deepest nesting of objects and arrays accepted, counting the
// row's own top-level object as 1. It bounds the container stack an attacker
// can make us keep for one row.
const maxDepth = 1000

// LineError describes a bad line: 1-based line number in the body and a human
// message. Object leaves Line at 0 because it does not know where the line came
// from; callers that do fill it in.
type LineError struct {
	Line   int
	Offset int // byte offset of the problem within the line
	Msg    string
}

func (e *LineError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s at offset %d", e.Line, e.Msg, e.Offset)
	}
	return fmt.Sprintf("%s at offset %d", e.Msg, e.Offset)
}

// Lines calls fn for every non-blank line of an NDJSON body, with its 1-based
// line number. Blank and whitespace-only lines are skipped but still counted so
// that reported line numbers match what the sender sees in its own file. A
// "\r\n" ending is accepted and the '\r' is not part of the line; a last line
// without a trailing newline is accepted. fn's error stops iteration and is
// returned unchanged.
func Lines(body []byte, fn func(lineNo int, line []byte) error) error {
	lineNo := 0
	for len(body) > 0 {
		lineNo++
		line := body
		if j := bytes.IndexByte(body, '\n'); j >= 0 {
			line, body = body[:j], body[j+1:]
		} else {
			body = nil
		}
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		if skipWS(line, 0) == len(line) {
			continue
		}
		if err := fn(lineNo, line); err != nil {
			return err
		}
	}
	return nil
}

// Field is one top-level member of an object. Key is the unescaped key: it
// aliases the input when the key has no escapes, otherwise it is a scratch
// buffer owned by the Scanner that is only valid during the callback. Raw is
// the exact raw bytes of the value in the input (for a string, including the
// quotes).
type Field struct {
	Key  []byte
	Kind Kind
	Raw  []byte
}

// span records where a top-level field lies in the line, so that fields can be
// reported only once the whole line is known to be valid.
type span struct {
	keyStart, keyEnd int // the key literal including its quotes
	valStart, valEnd int
	escaped          bool // key needs unescaping
}

// Scanner is reusable (not safe for concurrent use) so its scratch buffers are
// amortised across rows. The zero value is ready to use.
type Scanner struct {
	fields []span
	key    []byte
	// open records, for every nesting level below the top-level object,
	// whether the container there is an object (bit set) or an array.
	open [maxDepth/64 + 1]uint64
}

// Object validates that line is exactly one JSON object (surrounding
// whitespace allowed) per RFC 8259, strictly: no trailing commas, NaN or
// comments; strings must be valid UTF-8 with valid escapes; nesting deeper than
// 1000 levels (counting the object itself) is an error. Invalid input returns a
// *LineError with Line 0 and Offset at the problem; messages use
// encoding/json's wording.
//
// fn is then called for each top-level field in order, duplicates included.
// fn is only called once the whole line has been validated, so a caller never
// acts on part of a line that turns out to be rejected. If fn returns an error,
// iteration stops and that error is returned. fn may be nil to only validate.
func (s *Scanner) Object(line []byte, fn func(f Field) error) error {
	return s.object(line, fn, false)
}

// Fields is Object for a caller that throws away whatever fn did when Fields
// returns an error: fn is called with each top-level field as soon as it has
// been validated, so it may see fields of a line that is then rejected, and the
// fields need not be remembered until the line's end. The result is Object's:
// an invalid line returns its *LineError even when fn failed on an earlier
// field, and otherwise the first error fn returned, after which fn is not
// called again.
func (s *Scanner) Fields(line []byte, fn func(f Field) error) error {
	return s.object(line, fn, true)
}

func (s *Scanner) object(line []byte, fn func(f Field) error, stream bool) error {
	b := line
	i := skipWS(b, 0)
	if i == len(b) {
		return errEOF(i)
	}
	if b[i] != '{' {
		return &LineError{Offset: i, Msg: "not a JSON object"}
	}
	s.fields = s.fields[:0]
	var fnErr error
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		i++
	} else {
		for {
			ks := i
			ke, esc, err := scanKey(b, i)
			if err != nil {
				return err
			}
			vs, err := colon(b, ke)
			if err != nil {
				return err
			}
			ve, err := s.value(b, vs)
			if err != nil {
				return err
			}
			switch {
			case fn == nil:
			case !stream:
				s.fields = append(s.fields, span{ks, ke, vs, ve, esc})
			case fnErr == nil:
				fnErr = fn(s.field(b, span{ks, ke, vs, ve, esc}))
			}
			i = skipWS(b, ve)
			if i == len(b) {
				return errEOF(i)
			}
			if b[i] == ',' {
				i = skipWS(b, i+1)
				continue
			}
			if b[i] == '}' {
				i++
				break
			}
			return errChar(b, i, "after object key:value pair")
		}
	}
	if i = skipWS(b, i); i != len(b) {
		return errChar(b, i, "after top-level value")
	}
	if fn == nil || stream {
		return fnErr
	}
	for _, f := range s.fields {
		if err := fn(s.field(b, f)); err != nil {
			return err
		}
	}
	return nil
}

// field is the Field at f in line b; an escaped key is unescaped into s.key.
func (s *Scanner) field(b []byte, f span) Field {
	key := b[f.keyStart+1 : f.keyEnd-1]
	if f.escaped {
		s.key = appendUnescaped(s.key[:0], key)
		key = s.key
	}
	return Field{Key: key, Kind: kindOf[b[f.valStart]], Raw: b[f.valStart:f.valEnd]}
}

// KindOf is the Kind of a validated JSON value whose first byte is c.
func KindOf(c byte) Kind { return kindOf[c] }

// kindOf maps the first byte of a validated value to its Kind.
var kindOf = func() (t [256]Kind) {
	t['t'], t['f'] = Bool, Bool
	t['"'] = String
	t['{'] = Object
	t['['] = Array
	t['-'] = Number
	for c := '0'; c <= '9'; c++ {
		t[c] = Number
	}
	return t
}()

// value validates the value at b[i] (whitespace already skipped), which sits
// directly inside the top-level object, and returns the offset just past it.
// Nested containers are walked iteratively with a bit stack rather than by
// recursion so the cost of a deep row is a loop, not a deep goroutine stack.
func (s *Scanner) value(b []byte, i int) (int, error) {
	depth := 1 // containers open, counting the top-level object
	var err error
	for {
		// Here a value must start at b[i].
		if i == len(b) {
			return i, errEOF(i)
		}
		switch c := b[i]; c {
		case '"':
			if i, _, err = scanString(b, i); err != nil {
				return i, err
			}
		case '{', '[':
			if depth == maxDepth {
				return i, &LineError{Offset: i, Msg: "exceeded max nesting depth " + strconv.Itoa(maxDepth)}
			}
			isObj := c == '{'
			if isObj {
				s.open[depth>>6] |= 1 << (depth & 63)
			} else {
				s.open[depth>>6] &^= 1 << (depth & 63)
			}
			depth++
			i = skipWS(b, i+1)
			if i < len(b) && b[i] == c+2 { // '}' == '{'+2, ']' == '['+2
				depth--
				i++
				break
			}
			if isObj {
				if i, _, err = scanKey(b, i); err != nil {
					return i, err
				}
				if i, err = colon(b, i); err != nil {
					return i, err
				}
			}
			continue
		case 't':
			if i, err = scanLiteral(b, i, "true"); err != nil {
				return i, err
			}
		case 'f':
			if i, err = scanLiteral(b, i, "false"); err != nil {
				return i, err
			}
		case 'n':
			if i, err = scanLiteral(b, i, "null"); err != nil {
				return i, err
			}
		default:
			if c != '-' && (c < '0' || c > '9') {
				return i, errChar(b, i, "looking for beginning of value")
			}
			if i, err = scanNumber(b, i); err != nil {
				return i, err
			}
		}
		// A value ended just before b[i]: close finished containers until one
		// continues with another element, or we are back at the top level.
		for {
			if depth == 1 {
				return i, nil
			}
			i = skipWS(b, i)
			if i == len(b) {
				return i, errEOF(i)
			}
			inObj := s.open[(depth-1)>>6]&(1<<((depth-1)&63)) != 0
			c := b[i]
			if c == ',' {
				i = skipWS(b, i+1)
				if inObj {
					if i, _, err = scanKey(b, i); err != nil {
						return i, err
					}
					if i, err = colon(b, i); err != nil {
						return i, err
					}
				}
				break
			}
			if (inObj && c == '}') || (!inObj && c == ']') {
				depth--
				i++
				continue
			}
			if inObj {
				return i, errChar(b, i, "after object key:value pair")
			}
			return i, errChar(b, i, "after array element")
		}
	}
}

// scanKey validates an object key string at b[i] and returns the offset just
// past its closing quote and whether it contains escapes.
func scanKey(b []byte, i int) (int, bool, error) {
	if i == len(b) {
		return i, false, errEOF(i)
	}
	if b[i] != '"' {
		return i, false, errChar(b, i, "looking for beginning of object key string")
	}
	return scanString(b, i)
}

// colon consumes the ':' after an object key, with surrounding whitespace, and
// returns the offset of the value.
func colon(b []byte, i int) (int, error) {
	i = skipWS(b, i)
	if i == len(b) {
		return i, errEOF(i)
	}
	if b[i] != ':' {
		return i, errChar(b, i, "after object key")
	}
	return skipWS(b, i+1), nil
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// plain marks string bytes that need no attention: printable ASCII other than
// the quote and the backslash.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// specialMask has the high bit set in (at least) the lowest byte of w that is a
// quote, a backslash, a control character or non-ASCII. Only bytes above a true
// match can be flagged spuriously (borrows propagate upwards), so the lowest
// flagged byte is exact. Checking eight bytes per step is what keeps long
// message strings cheap.
func specialMask(w uint64) uint64 {
	q := w ^ (lsb * '"')
	bs := w ^ (lsb * '\\')
	return ((q-lsb)&^q | (bs-lsb)&^bs | (w-lsb*0x20)&^w | w) & msb
}

// scanString validates the string literal at b[i] (which is '"') and returns
// the offset just past the closing quote and whether it contains escapes.
func scanString(b []byte, i int) (int, bool, error) {
	n := len(b)
	escaped := false
	i++
	for {
		for i+8 <= n {
			if m := specialMask(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		for i < n && plain[b[i]] {
			i++
		}
		if i == n {
			return i, false, errEOF(i)
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, escaped, nil
		case c == '\\':
			escaped = true
			if i+1 == n {
				return n, false, errEOF(n)
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				for k := i + 2; k < i+6; k++ {
					if k == n {
						return n, false, errEOF(n)
					}
					if unhex(b[k]) < 0 {
						return k, false, errChar(b, k, "in \\u hexadecimal character escape")
					}
				}
				i += 6
			default:
				return i + 1, false, errChar(b, i+1, "in string escape code")
			}
		case c < 0x20:
			return i, false, errChar(b, i, "in string literal")
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return i, false, &LineError{Offset: i, Msg: "invalid UTF-8 in string literal"}
			}
			i += size
		}
	}
}

func unhex(c byte) rune {
	switch {
	case '0' <= c && c <= '9':
		return rune(c - '0')
	case 'a' <= c && c <= 'f':
		return rune(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return rune(c - 'A' + 10)
	}
	return -1
}

// scanNumber validates the number at b[i] against the RFC 8259 grammar and
// returns the offset just past it. What follows is the caller's business, so
// "01" ends after the "0" and the caller rejects the '1'.
func scanNumber(b []byte, i int) (int, error) {
	n := len(b)
	if b[i] == '-' {
		i++
	}
	if i == n {
		return i, errEOF(i)
	}
	switch c := b[i]; {
	case c == '0':
		i++
	case '1' <= c && c <= '9':
		i = digits(b, i+1)
	default:
		return i, errChar(b, i, "in numeric literal")
	}
	if i < n && b[i] == '.' {
		if i++; i == n {
			return i, errEOF(i)
		}
		if b[i] < '0' || b[i] > '9' {
			return i, errChar(b, i, "after decimal point in numeric literal")
		}
		i = digits(b, i+1)
	}
	if i < n && (b[i] == 'e' || b[i] == 'E') {
		if i++; i < n && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i == n {
			return i, errEOF(i)
		}
		if b[i] < '0' || b[i] > '9' {
			return i, errChar(b, i, "in exponent of numeric literal")
		}
		i = digits(b, i+1)
	}
	return i, nil
}

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// scanLiteral checks that lit (true, false or null) is at b[i].
func scanLiteral(b []byte, i int, lit string) (int, error) {
	for k := 1; k < len(lit); k++ {
		if i+k == len(b) {
			return i + k, errEOF(i + k)
		}
		if b[i+k] != lit[k] {
			return i + k, errChar(b, i+k, "in literal "+lit+" (expecting "+quoteByte(lit[k])+")")
		}
	}
	return i + len(lit), nil
}

func errEOF(off int) error {
	return &LineError{Offset: off, Msg: "unexpected end of JSON input"}
}

func errChar(b []byte, off int, context string) error {
	return &LineError{Offset: off, Msg: "invalid character " + quoteByte(b[off]) + " " + context}
}

// quoteByte renders an offending byte readably without letting raw control or
// non-UTF-8 bytes from untrusted input into log lines. For ASCII it matches
// encoding/json's wording, so messages read the same as the standard library's.
func quoteByte(c byte) string {
	if c < utf8.RuneSelf {
		return strconv.QuoteRuneToASCII(rune(c))
	}
	return fmt.Sprintf(`'\x%02x'`, c)
}

// AppendString appends the decoded value of a raw JSON string literal (with
// quotes) to dst. It validates raw as strictly as Object does. Escaped lone
// surrogates decode to U+FFFD, as encoding/json does.
func AppendString(dst, raw []byte) ([]byte, error) {
	if len(raw) == 0 {
		return dst, errEOF(0)
	}
	if raw[0] != '"' {
		return dst, errChar(raw, 0, "looking for beginning of string literal")
	}
	end, escaped, err := scanString(raw, 0)
	if err != nil {
		return dst, err
	}
	if end != len(raw) {
		return dst, errChar(raw, end, "after string literal")
	}
	if !escaped {
		return append(dst, raw[1:end-1]...), nil
	}
	return appendUnescaped(dst, raw[1:end-1]), nil
}

// appendUnescaped decodes the inside of a string literal that scanString has
// already accepted, so it cannot fail.
func appendUnescaped(dst, s []byte) []byte {
	for {
		j := bytes.IndexByte(s, '\\')
		if j < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:j]...)
		c := s[j+1]
		s = s[j+2:]
		switch c {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(s)
			s = s[4:]
			if utf16.IsSurrogate(r) {
				// Same rule as encoding/json: a surrogate only counts if the
				// very next escape completes a valid pair; otherwise it becomes
				// U+FFFD and the next escape is decoded on its own.
				dec := utf8.RuneError
				if len(s) >= 6 && s[0] == '\\' && s[1] == 'u' {
					dec = utf16.DecodeRune(r, hex4(s[2:]))
				}
				if dec != utf8.RuneError {
					s = s[6:]
				}
				r = dec
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, c)
		}
	}
}

// hex4 decodes four hex digits that scanString has already checked.
func hex4(s []byte) rune {
	return unhex(s[0])<<12 | unhex(s[1])<<8 | unhex(s[2])<<4 | unhex(s[3])
}

// NumberIsInt reports whether a raw JSON number is an integer literal (no '.',
// 'e' or 'E') that fits in int64, returning its value. Anything that is not a
// valid JSON integer literal, such as "007" or "+1", reports false.
func NumberIsInt(raw []byte) (int64, bool) {
	neg := len(raw) > 0 && raw[0] == '-'
	d := raw
	if neg {
		d = raw[1:]
	}
	// 19 digits always fit in a uint64, so only the final range check can
	// overflow int64.
	if len(d) == 0 || len(d) > 19 || (d[0] == '0' && len(d) > 1) {
		return 0, false
	}
	var u uint64
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return -int64(u), true
	}
	if u > 1<<63-1 {
		return 0, false
	}
	return int64(u), true
}

// ParseFloat parses a raw JSON number as float64. It rejects what
// strconv.ParseFloat alone would accept but JSON does not (such as "Inf",
// "0x1p3" or "+1"), and numbers out of float64 range, like encoding/json.
func ParseFloat(raw []byte) (float64, error) {
	if len(raw) == 0 {
		return 0, errEOF(0)
	}
	if raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return 0, errChar(raw, 0, "looking for beginning of numeric literal")
	}
	end, err := scanNumber(raw, 0)
	if err != nil {
		return 0, err
	}
	if end != len(raw) {
		return 0, errChar(raw, end, "after numeric literal")
	}
	return strconv.ParseFloat(string(raw), 64)
}
