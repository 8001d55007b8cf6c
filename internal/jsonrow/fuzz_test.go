package jsonrow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// objectSeeds are inputs near the edges of the grammar, so the fuzzer starts
// from where a hand-written scanner is most likely to disagree with
// encoding/json.
var objectSeeds = []string{
	row,
	`{}`, ` {} `, "\t{\r\n}\n", `{"a":1}`, `{"a":1,"a":2}`, `{"":null}`,
	`{"a":{"b":[1,2,{"c":[]}],"d":{}}}`, `{"a":[[[[[[]]]]]]}`,
	`{"a":1,}`, `{"a":[1,]}`, `{,}`, `{"a"}`, `{"a":}`, `{"a" 1}`, `{"a":1 "b":2}`, `{"a":1}}`,
	`{"a":1} {}`, `{"a":1}x`, `{`, `}`, `[]`, `"x"`, `1`, `null`, ``, ` `,
	`{"a":NaN}`, `{"a":-Infinity}`, `{"a":+1}`, `{"a":01}`, `{"a":-0}`, `{"a":-}`, `{"a":1.}`, `{"a":.1}`,
	`{"a":1e}`, `{"a":1e+}`, `{"a":1E-07}`, `{"a":-0.0e0}`, `{"a":9223372036854775808}`,
	`{"a":-9223372036854775808}`, `{"a":1e400}`, `{"a":1e-400}`,
	`{"a":tru}`, `{"a":nul}`, `{"a":falsey}`, `{"a":True}`,
	`{"a":"\u00e9\ud83d\ude00"}`, `{"a":"\ud83d"}`, `{"a":"\ude00\ud83d"}`, `{"a":"\ud83d\u0041"}`,
	`{"\ud800\udc00":1}`, `{"a\"b":1}`, `{"a":"\/\b\f\n\r\t\\"}`, `{"a":"\x"}`, `{"a":"\u12g4"}`, `{"a":"\u12`,
	"{\"a\":\"\x00\"}", "{\"a\":\"\x1f\"}", "{\"a\":\"\x7f\"}", "{\"a\":\"\xff\"}", "{\"a\":\"\xed\xa0\x80\"}",
	"{\"a\":\"\xc0\xaf\"}", "{\"a\":\"\xf4\x90\x80\x80\"}", "{\"a\":\"\xef\xbf\xbd\"}", "{\"a\":1}\xff",
	"\xef\xbb\xbf{}", `{/**/"a":1}`, `{"a":1}//`, "{\"a\":\"\u2028\"}",
	`{"a":"` + strings.Repeat(`x"\`, 10) + `"}`,
	`{"a":` + strings.Repeat("[", 999) + strings.Repeat("]", 999) + `}`,
	`{"a":` + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + `}`,
	`{"a":` + strings.Repeat(`{"b":`, 999) + `1` + strings.Repeat("}", 999) + `}`,
}

// checkFields holds Fields to Object on line: the same fields when the line is valid, the
// same error whatever it is, also when fn fails on one of the fields.
func checkFields[F any](t *testing.T, s *Scanner, line []byte, objectFields []F, objectErr error) {
	t.Helper()
	n := 0
	err := s.Fields(line, func(Field) error { n++; return nil })
	if fmt.Sprint(err) != fmt.Sprint(objectErr) || (err == nil && n != len(objectFields)) {
		t.Fatalf("Fields(%q) = %v with %d fields, Object = %v with %d", line, err, n, objectErr, len(objectFields))
	}
	// fn failing on field k: Object and Fields must return the same error, and Fields must
	// not call fn after it failed.
	for k := range len(objectFields) + 1 {
		stop := errors.New("stop")
		failAt := func(calls *int) func(Field) error {
			return func(Field) error {
				if *calls++; *calls > k+1 {
					t.Fatalf("fn called again after it failed on field %d of %q", k, line)
				}
				if *calls == k+1 {
					return stop
				}
				return nil
			}
		}
		var oc, fc int
		oerr, ferr := s.Object(line, failAt(&oc)), s.Fields(line, failAt(&fc))
		if fmt.Sprint(oerr) != fmt.Sprint(ferr) {
			t.Fatalf("fn failing on field %d of %q: Object = %v, Fields = %v", k, line, oerr, ferr)
		}
	}
}

func FuzzObject(f *testing.F) {
	for _, s := range objectSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var s Scanner
		type field struct {
			key  string
			kind Kind
			raw  []byte
		}
		var got []field
		err := s.Object(line, func(f Field) error {
			got = append(got, field{string(f.Key), f.Kind, f.Raw})
			return nil
		})
		if verr := s.Object(line, nil); (verr == nil) != (err == nil) {
			t.Fatalf("validate-only result %v differs from %v", verr, err)
		}
		checkFields(t, &s, line, got, err)

		trimmed := bytes.TrimLeft(line, " \t\r\n")
		want := json.Valid(line) && utf8.Valid(line) &&
			len(trimmed) > 0 && trimmed[0] == '{' && nestingDepth(line) <= maxDepth
		if (err == nil) != want {
			t.Fatalf("Object(%q) = %v, want valid=%v", line, err, want)
		}
		if err != nil {
			checkError(t, line, err)
			if got != nil {
				t.Fatalf("fn called on invalid line %q", line)
			}
			return
		}

		// Order and duplicates: a streaming decode sees every member in turn.
		dec := json.NewDecoder(bytes.NewReader(line))
		if _, err := dec.Token(); err != nil {
			t.Fatal(err)
		}
		for i := 0; dec.More(); i++ {
			tok, err := dec.Token()
			if err != nil {
				t.Fatal(err)
			}
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				t.Fatal(err)
			}
			if i >= len(got) {
				t.Fatalf("Object(%q) reported %d fields, encoding/json has more", line, len(got))
			}
			if got[i].key != tok.(string) || !bytes.Equal(got[i].raw, raw) {
				t.Fatalf("field %d = %q:%s, encoding/json has %q:%s", i, got[i].key, got[i].raw, tok, raw)
			}
		}

		// Last key wins, as in encoding/json.
		var m map[string]json.RawMessage
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		last := map[string][]byte{}
		for _, f := range got {
			last[f.key] = f.raw
		}
		if len(last) != len(m) {
			t.Fatalf("%d distinct keys, encoding/json has %d", len(last), len(m))
		}
		for k, v := range m {
			if !bytes.Equal(last[k], v) {
				t.Fatalf("key %q = %s, encoding/json has %s", k, last[k], v)
			}
		}

		for _, f := range got {
			checkValue(t, f.kind, f.raw)
		}
	})
}

// checkError requires the error to be a *LineError pointing into the line and,
// where encoding/json rejects the same line for the same reason, to agree with
// it on position and wording.
func checkError(t *testing.T, line []byte, err error) {
	t.Helper()
	var le *LineError
	if !errors.As(err, &le) {
		t.Fatalf("error %v is %T, want *LineError", err, err)
	}
	if le.Line != 0 || le.Offset < 0 || le.Offset > len(line) || le.Msg == "" {
		t.Fatalf("bad LineError %+v for %q", le, line)
	}
	trimmed := bytes.TrimLeft(line, " \t\r\n")
	if !utf8.Valid(line) || len(trimmed) == 0 || trimmed[0] != '{' || strings.HasPrefix(le.Msg, "exceeded max nesting depth") {
		return
	}
	var raw json.RawMessage
	var se *json.SyntaxError
	if !errors.As(json.Unmarshal(line, &raw), &se) {
		t.Fatalf("Object(%q) = %v but encoding/json reports no syntax error", line, err)
	}
	if le.Offset == len(line) {
		// encoding/json feeds a virtual space at EOF, so it words this case
		// in several ways, but always at the end.
		if se.Offset != int64(len(line)) {
			t.Fatalf("Object(%q) = %v, encoding/json: %v at %d", line, err, se, se.Offset)
		}
		return
	}
	// encoding/json counts the offending byte as read.
	if se.Offset != int64(le.Offset)+1 || (line[le.Offset] < utf8.RuneSelf && se.Error() != le.Msg) {
		t.Fatalf("Object(%q) = %v, encoding/json: %v at %d", line, err, se, se.Offset)
	}
}

// checkValue requires a field's Kind and the typed helpers to agree with
// encoding/json on the raw value.
func checkValue(t *testing.T, kind Kind, raw []byte) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	var wantKind Kind
	switch v.(type) {
	case nil:
		wantKind = Null
	case bool:
		wantKind = Bool
	case json.Number:
		wantKind = Number
	case string:
		wantKind = String
	case map[string]any:
		wantKind = Object
	case []any:
		wantKind = Array
	}
	if kind != wantKind {
		t.Fatalf("%s has Kind %v, want %v", raw, kind, wantKind)
	}
	switch kind {
	case String:
		var want string
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		got, err := AppendString(nil, raw)
		if err != nil || string(got) != want {
			t.Fatalf("AppendString(%s) = %q, %v; encoding/json has %q", raw, got, err, want)
		}
	case Number:
		var wantInt int64
		intErr := json.Unmarshal(raw, &wantInt)
		gotInt, ok := NumberIsInt(raw)
		if ok != (intErr == nil) || gotInt != wantInt {
			t.Fatalf("NumberIsInt(%s) = %d, %v; encoding/json has %d, %v", raw, gotInt, ok, wantInt, intErr)
		}
		var wantF float64
		fErr := json.Unmarshal(raw, &wantF)
		gotF, err := ParseFloat(raw)
		if (err == nil) != (fErr == nil) || gotF != wantF && err == nil {
			t.Fatalf("ParseFloat(%s) = %v, %v; encoding/json has %v, %v", raw, gotF, err, wantF, fErr)
		}
	}
}

// nestingDepth is the deepest container nesting of a valid JSON text.
func nestingDepth(b []byte) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case inString && escaped:
			escaped = false
		case inString:
			escaped = c == '\\'
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

func FuzzLines(f *testing.F) {
	for _, s := range []string{
		"", "\n", "\r\n", "a", "a\n", "a\r\n", "a\r", "\r", "\n\na\n\n", " \t\r\n{}\r\n", "a\r\r\nb",
		"a\rb\nc", "{\"a\":1}\n{\"b\":2}\n", " x \n\t\n\ny",
	} {
		f.Add([]byte(s), uint8(0))
	}
	f.Fuzz(func(t *testing.T, body []byte, stopAt uint8) {
		// The reference splits the obvious, allocating way.
		type line struct {
			no   int
			text string
		}
		var want []line
		for i, l := range strings.Split(string(body), "\n") {
			l = strings.TrimSuffix(l, "\r")
			if strings.Trim(l, " \t\r") != "" {
				want = append(want, line{i + 1, l})
			}
		}

		stop := errors.New("stop")
		var got []line
		err := Lines(body, func(n int, l []byte) error {
			got = append(got, line{n, string(l)})
			if len(got) == int(stopAt) {
				return stop
			}
			return nil
		})
		if stopAt > 0 && int(stopAt) <= len(want) {
			want = want[:stopAt]
			if err != stop {
				t.Fatalf("Lines returned %v, want the callback's error", err)
			}
		} else if err != nil {
			t.Fatalf("Lines returned %v", err)
		}
		if len(got) != len(want) {
			t.Fatalf("Lines(%q) gave %+v, want %+v", body, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("Lines(%q) line %d = %+v, want %+v", body, i, got[i], want[i])
			}
		}
	})
}
