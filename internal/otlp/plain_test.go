package otlp

import (
	"encoding/binary"
	"testing"
)

// FuzzSpecial holds the word masks to the byte-by-byte rules they stand for.
func FuzzSpecial(f *testing.F) {
	for _, s := range []string{"abcdefgh", "abc\"defg", "\\bcdefgh", "abcdefg\x1f", "\x80\x80\x80\x80\x80\x80\x80\x80", "\xa2\xdc\x9f\xa0\x21\x5d\x23\x5b", "\x00\x00\x00\x00\x00\x00\x00\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for len(b) < 8 {
			b = append(b, 'a')
		}
		x := binary.LittleEndian.Uint64(b)
		wantSpecial, wantHigh := false, false
		for _, c := range b[:8] {
			wantSpecial = wantSpecial || c < 0x20 || c == '"' || c == '\\'
			wantHigh = wantHigh || c >= 0x80
		}
		if got := special(x) != 0; got != wantSpecial {
			t.Fatalf("special(%q) = %v, want %v", b[:8], got, wantSpecial)
		}
		if got := plainASCII(string(b)); got != (!wantSpecial && !wantHigh && plainBytes(b[8:])) {
			t.Fatalf("plainASCII(%q) = %v", b, got)
		}
	})
}

func plainBytes(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// FuzzDecimal holds the eight-digits-at-a-time decimal to the digit-by-digit rule.
func FuzzDecimal(f *testing.F) {
	for _, s := range []string{"1764600000000000000", "12345678", "1234567/", "1234567:", "0", "", "99999999999999999999", "1234 5678"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, s []byte) {
		var want uint64
		wantOK := true
		for _, c := range s {
			if c < '0' || c > '9' {
				wantOK = false
				break
			}
			want = want*10 + uint64(c-'0')
		}
		if got, ok := decimal(s); ok != wantOK || (ok && got != want) {
			t.Fatalf("decimal(%q) = %d, %v; want %d, %v", s, got, ok, want, wantOK)
		}
	})
}
