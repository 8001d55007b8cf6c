// Package truncate owns shortening a string into a bound that still holds every value it
// bounds: a lower bound is a prefix of the smallest value, an upper bound a prefix of the
// largest with its last character incremented, so that it is greater than every string
// that starts with the prefix. Parquet footers (internal/parquetw) and Iceberg manifests
// (internal/bounds) bound long strings this way, as parquet-mr, arrow-rs and Iceberg's own
// writers do.
//
// It never decides how long a bound may be, and knows one order only: bytes, unsigned,
// which for UTF-8 is code point order (Parquet's and Iceberg's order of strings). Strings
// that are not valid UTF-8 still get bounds that hold; they are just not valid UTF-8
// either.
package truncate

import "unicode/utf8"

// Unit is what a bound's length counts.
type Unit int

const (
	// Bytes cuts at most n bytes, never inside a UTF-8 character (Parquet statistics).
	Bytes Unit = iota
	// Runes cuts at most n characters, an invalid byte counting as one (Iceberg's
	// truncate(n) metrics mode, as iceberg-go counts them).
	Runes
)

// cut returns the length of the longest prefix of s within n units, and whether that is
// shorter than s.
func cut(s string, n int, u Unit) (int, bool) {
	if n < 0 {
		n = 0
	}
	if u == Runes {
		for i := range s {
			if n == 0 {
				return i, true
			}
			n--
		}
		return len(s), false
	}
	if len(s) <= n {
		return len(s), false
	}
	// Back off to the start of the character at n; bytes that start no valid character
	// are cut anywhere.
	for k := n; k > 0 && k > n-utf8.UTFMax; k-- {
		if utf8.RuneStart(s[k]) {
			return k, true
		}
	}
	return n, true
}

// Lower returns a lower bound of s within n units: s itself when it fits, and whether it
// is s.
func Lower(s string, n int, u Unit) (lo string, exact bool) {
	k, short := cut(s, n, u)
	return s[:k], !short
}

// Upper returns an upper bound of s within n units: s itself when it fits (exact), else
// its prefix with the last character incremented. ok is false when no such bound exists
// (every character of the prefix is the greatest there is).
func Upper(s string, n int, u Unit) (hi string, exact, ok bool) {
	k, short := cut(s, n, u)
	if !short {
		return s, true, true
	}
	p := s[:k]
	for p != "" {
		r, size := utf8.DecodeLastRuneInString(p)
		head := p[:len(p)-size]
		if r == utf8.RuneError && size == 1 {
			// Not a character: the byte itself is incremented.
			if b := p[len(p)-1]; b < 0xff {
				return head + string([]byte{b + 1}), false, true
			}
		} else if next, more := nextRune(r); more {
			// A character's successor encodes to greater bytes: UTF-8 keeps code point order.
			return head + string(next), false, true
		}
		p = head
	}
	return "", false, false
}

// nextRune is the code point after r that UTF-8 can encode (surrogates cannot be).
func nextRune(r rune) (rune, bool) {
	switch {
	case r == 0xd7ff:
		return 0xe000, true
	case r >= utf8.MaxRune:
		return 0, false
	}
	return r + 1, true
}
