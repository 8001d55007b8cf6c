package rowjson

import (
	"encoding/json"
	"testing"
	"time"
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

// FuzzAppendTimestamp holds appendTimestamp to time.RFC3339Nano in UTC, which it spells out
// by hand, for every unit a timestamp column can have.
func FuzzAppendTimestamp(f *testing.F) {
	for _, v := range []int64{0, 1, -1, 1764547200123456, 1764547200000000, 253402300799999999, 253402300800000000, -62135596800000000, -62135596800000001, 1 << 62, -1 << 62} {
		f.Add(v, uint8(2))
	}
	f.Fuzz(func(t *testing.T, v int64, unit uint8) {
		perSec := []int64{1, 1e3, 1e6, 1e9}[unit%4]
		sec, frac := v/perSec, v%perSec
		want := `"` + time.Unix(sec, frac*(1e9/perSec)).UTC().Format(time.RFC3339Nano) + `"`
		if got := string(appendTimestamp(nil, v, perSec)); got != want {
			t.Fatalf("appendTimestamp(%d, %d) = %s, want %s", v, perSec, got, want)
		}
	})
}
