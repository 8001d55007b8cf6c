package otlp

import (
	"encoding/binary"
	"unsafe"
)

// Strings are most of the bytes of a request (bodies, attribute values), and most are plain
// ASCII with nothing to escape, so both the JSON decoder and the row writer look at them a
// word of 8 bytes at a time and skip a word with no byte of interest whole. The masks are
// exact about whether a word holds such a byte, not about which one, so a word that does is
// left to the byte-by-byte code.

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// special is nonzero when a byte of x is below 0x20, '"' or '\\': the bytes that end the
// plain run of a JSON string, in a request or in a row.
func special(x uint64) uint64 {
	q := x ^ (ones * '"')
	bs := x ^ (ones * '\\')
	return ((x-ones*0x20)&^x | (q-ones)&^q | (bs-ones)&^bs) & highs
}

// plainASCII reports whether s is ASCII without control characters, '"' or '\\', so that
// its JSON string is s between quotes: nothing to escape, no UTF-8 to check.
func plainASCII(s string) bool {
	b := unsafe.Slice(unsafe.StringData(s), len(s))
	// Plain strings are the rule, so the words' verdicts are OR'd together and looked at
	// once per 16 bytes rather than branched on word by word.
	var bad uint64
	i := 0
	for ; i+16 <= len(b); i += 16 {
		x, y := binary.LittleEndian.Uint64(b[i:]), binary.LittleEndian.Uint64(b[i+8:])
		if bad = x | y | special(x) | special(y); bad&highs != 0 {
			return false
		}
	}
	if i+8 <= len(b) {
		x := binary.LittleEndian.Uint64(b[i:])
		bad, i = x|special(x), i+8
	}
	for _, c := range b[i:] {
		if c < 0x20 || c == '"' || c == '\\' {
			return false
		}
		bad |= uint64(c)
	}
	return bad&highs == 0
}
