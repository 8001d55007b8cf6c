package rowform

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/hyp-project/hyp/internal/jsonrow"
)

// TestRowFormRoundTrip checks that a validated line kept in the row form yields the fields
// the scanner saw, in order, and that a row set aside is the object the line was.
func TestRowFormRoundTrip(t *testing.T) {
	lines := []string{
		`{}`,
		`{"a":1,"b":"x","c":null,"d":true,"e":[1,{"f":2}],"g":{"h":"i"}}`,
		`{"k\"ey":"v\\u00e9\"","":"empty key","dup":1,"dup":2}`,
		`  {"spaces" : "around"  }  `,
		`{"n":-1.5e300,"big":123456789012345678901234567890}`,
	}
	var body []byte
	var want [][]jsonrow.Field
	var sc jsonrow.Scanner
	for _, l := range lines {
		var row []byte
		var fields []jsonrow.Field
		if err := sc.Object([]byte(l), func(f jsonrow.Field) error {
			row = AppendField(row, f)
			fields = append(fields, jsonrow.Field{Key: append([]byte(nil), f.Key...), Kind: f.Kind, Raw: append([]byte(nil), f.Raw...)})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		body = AppendRow(body, row)
		want = append(want, fields)
	}
	if n, ok := CountRows(body); !ok || n != len(lines) {
		t.Fatalf("CountRows = %d, %v", n, ok)
	}
	i := 0
	ForRows(body, func(row []byte) {
		var got []jsonrow.Field
		if err := Fields(row, func(f jsonrow.Field) error {
			got = append(got, f)
			return nil
		}); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want[i]) {
			t.Errorf("row %d: fields %q, want %q", i, got, want[i])
		}
		var a, b any
		if err := json.Unmarshal([]byte(lines[i]), &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(RowJSON(row), &b); err != nil || !reflect.DeepEqual(a, b) {
			t.Errorf("row %d: rowJSON %s (%v), want %s", i, RowJSON(row), err, lines[i])
		}
		i++
	})
	for _, bad := range [][]byte{{1, 0, 0}, {5, 0, 0, 0, 1}, append(AppendRow(nil, []byte("x")), 9)} {
		if _, ok := CountRows(bad); ok {
			t.Errorf("CountRows accepted %q", bad)
		}
	}
}
