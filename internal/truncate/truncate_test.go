package truncate

import (
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"
)

// genString draws strings that stress the cut and the increment: any unicode, bytes that
// are not UTF-8, and runs of the greatest character or byte.
func genString() *rapid.Generator[string] {
	return rapid.OneOf(
		rapid.String(),
		rapid.StringOf(rapid.SampledFrom([]rune{'a', 0x7f, 0x7ff, 0xd7ff, 0xe000, 0xffff, utf8.MaxRune, utf8.RuneError})),
		rapid.Custom(func(t *rapid.T) string {
			return string(rapid.SliceOf(rapid.SampledFrom([]byte{0, 'a', 0x7f, 0x80, 0xbf, 0xc3, 0xe2, 0xf4, 0xfe, 0xff})).Draw(t, "bytes"))
		}),
	)
}

// TestBoundsHoldEveryValue: the lower bound of a set's least value and the upper bound of
// its greatest hold every value of the set, whatever the unit and length, and are exact
// exactly when they are the value.
func TestBoundsHoldEveryValue(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		vals := rapid.SliceOfN(genString(), 1, 20).Draw(t, "vals")
		n := rapid.IntRange(0, 24).Draw(t, "n")
		u := rapid.SampledFrom([]Unit{Bytes, Runes}).Draw(t, "unit")
		least, greatest := vals[0], vals[0]
		for _, v := range vals {
			least, greatest = min(least, v), max(greatest, v)
		}
		lo, loExact := Lower(least, n, u)
		if loExact != (lo == least) || !strings.HasPrefix(least, lo) {
			t.Fatalf("lower %q of %q: exact %v", lo, least, loExact)
		}
		hi, hiExact, ok := Upper(greatest, n, u)
		if ok && hiExact != (hi == greatest) {
			t.Fatalf("upper %q of %q: exact %v", hi, greatest, hiExact)
		}
		for _, v := range vals {
			if lo > v {
				t.Fatalf("lower bound %q > value %q", lo, v)
			}
			if ok && hi < v {
				t.Fatalf("upper bound %q < value %q", hi, v)
			}
		}
		if k, _ := cut(greatest, n, u); !ok && !allGreatest(greatest[:k]) {
			// Only a prefix of nothing but greatest characters and bytes has no upper bound.
			t.Fatalf("no upper bound for %q within %d", greatest, n)
		}
		if size(lo, u) > n {
			t.Fatalf("lower bound %q is over %d", lo, n)
		}
		// A character's successor may take more bytes (U+007F, U+0080): never more runes.
		if ok && !hiExact && size(hi, u) > n+(utf8.UTFMax-1)*boolInt(u == Bytes) {
			t.Fatalf("upper bound %q is over %d", hi, n)
		}
	})
}

// allGreatest reports whether s is nothing but U+10FFFF and 0xff bytes.
func allGreatest(s string) bool {
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r != utf8.MaxRune && s[0] != 0xff {
			return false
		}
		s = s[n:]
	}
	return true
}

func size(s string, u Unit) int {
	if u == Bytes {
		return len(s)
	}
	return utf8.RuneCountInString(s)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestCuts pins the cases the property cannot name: where a cut falls and what an
// increment gives.
func TestCuts(t *testing.T) {
	for _, c := range []struct {
		s      string
		n      int
		u      Unit
		lo, hi string
		ok     bool
	}{
		{"abc", 3, Bytes, "abc", "abc", true},
		{"abcd", 3, Bytes, "abc", "abd", true},
		{"ab€d", 3, Bytes, "ab", "ac", true}, // € is 3 bytes: never split
		{"ab€d", 3, Runes, "ab€", "ab₭", true},
		{"a\U0010ffff\U0010ffffz", 3, Runes, "a\U0010ffff\U0010ffff", "b", true},
		{"\U0010ffffz", 1, Runes, "\U0010ffff", "", false},
		{"a\xffz", 2, Bytes, "a\xff", "b", true},
		{"a\xfez", 2, Bytes, "a\xfe", "a\xff", true},
		{"\ud7ffz", 1, Runes, "\ud7ff", "\ue000", true},
		{"a\x7fz", 2, Bytes, "a\x7f", "a\u0080", true},
		{"", 0, Bytes, "", "", true},
		{"x", 0, Runes, "", "", false},
	} {
		lo, _ := Lower(c.s, c.n, c.u)
		hi, _, ok := Upper(c.s, c.n, c.u)
		if lo != c.lo || hi != c.hi || ok != c.ok {
			t.Errorf("%q within %d (unit %d): %q, %q %v; want %q, %q %v", c.s, c.n, c.u, lo, hi, ok, c.lo, c.hi, c.ok)
		}
	}
}
