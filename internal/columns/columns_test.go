package columns

import "testing"

// FuzzPrintableASCII holds the word-at-a-time field name check to CheckFieldName: it may
// only pass names CheckFieldName accepts, and passes every printable-ASCII one.
func FuzzPrintableASCII(f *testing.F) {
	for _, s := range []string{"", "id", "time_unix_nano", "severity_number", "a\x7fbcdefgh", "abcdefg\x1f", "abcdefgh\x80", "\xff\x00abcdefgh", "abcdefghijklmnop\x7f", "é", "tab\tname"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, name []byte) {
		want := len(name) > 0
		for _, c := range name {
			want = want && c >= 0x20 && c < 0x7f
		}
		got := printableASCII(name)
		if got != want {
			t.Fatalf("printableASCII(%q) = %v, want %v", name, got, want)
		}
		if got && CheckFieldName(name) != "" {
			t.Fatalf("printableASCII passed %q, which CheckFieldName refuses: %s", name, CheckFieldName(name))
		}
	})
}

// TestCheckReserved holds the rule for hyp's field names (SPEC 4): the prefix in any letter
// case, and nothing else.
func TestCheckReserved(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"", false}, {"_", false}, {"_hyp", false}, {"hyp_x", false}, {"x_hyp_", false}, {"_hyp-x", false},
		{"_hyp_", true}, {"_hyp_x", true}, {SeqColumn, true}, {IngestedAtColumn, true}, {OverflowColumn, true},
		{"_HYP_OVERFLOW", true}, {"_Hyp_Source", true}, {"_hYp_", true},
		{"_ℎyp_", false}, {"_hyp\\u005f", false}, // a letter-like rune is not the letter, nor an escape in the name
	} {
		if got := CheckReserved([]byte(tc.name)) != ""; got != tc.want {
			t.Errorf("CheckReserved(%q) = %q, want reserved: %v", tc.name, CheckReserved([]byte(tc.name)), tc.want)
		}
	}
}
