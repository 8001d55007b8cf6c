package cache

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

// TestInternalKey holds the []byte form of the internal-column rule to Internal.
func TestInternalKey(t *testing.T) {
	for _, name := range []string{"", "_", "_hyp", "_hyp_", "_hyp_x", SeqColumn, IngestedAtColumn, OverflowColumn, OverflowColumn + "x", "hyp_x", "_HYP_x", "x_hyp_"} {
		if got, want := InternalKey([]byte(name)), Internal(name); got != want {
			t.Errorf("InternalKey(%q) = %v, Internal says %v", name, got, want)
		}
	}
}
