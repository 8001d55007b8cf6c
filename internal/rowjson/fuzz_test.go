package rowjson

import (
	"encoding/json"
	"testing"
)

// FuzzAppendString holds the string escaper to encoding/json's reading of it: any bytes a
// user sent (column values and names come from outside) must give one valid JSON string
// that decodes to what encoding/json itself would have carried.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a", `"\`, "\x00\x1f\x7f", "é中😀", "\u2028", "\xff", "\xed\xa0\x80", "\xe2\x82", "\xf4\x90\x80\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := AppendString([]byte("prefix"), s)[len("prefix"):]
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%q gave %q, not a JSON string: %v", s, got, err)
		}
		if want := viaEncodingJSON(t, s); back != want {
			t.Fatalf("%q decoded to %q, want %q", s, back, want)
		}
	})
}
