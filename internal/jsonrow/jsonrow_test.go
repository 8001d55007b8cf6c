package jsonrow

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
)

// row is a realistic ~200-byte log row: eight top-level fields of every kind,
// including a nested object, the shape the ingest path sees most.
const row = `{"ts":"2025-06-01T12:34:56.789Z","level":"info","svc":"api-gateway","latency_ms":12.75,` +
	`"status":200,"ok":true,"trace":null,"msg":"GET /v1/users/42 served from cache",` +
	`"http":{"method":"GET","bytes":5120,"tags":["a","b"]}}`

type gotField struct {
	Key  string
	Kind Kind
	Raw  string
}

func collect(t *testing.T, line string) ([]gotField, error) {
	t.Helper()
	var s Scanner
	var got []gotField
	err := s.Object([]byte(line), func(f Field) error {
		got = append(got, gotField{string(f.Key), f.Kind, string(f.Raw)})
		return nil
	})
	return got, err
}

func TestObjectValid(t *testing.T) {
	tests := []struct {
		name string
		line string
		want []gotField
	}{
		{"empty", `{}`, nil},
		{"empty with whitespace", " \t{ \r\n } \t", nil},
		{"all kinds", `{"n":null,"t":true,"f":false,"i":-12,"x":1.5e+3,"s":"hi","o":{"a":[1,{}]},"a":[]}`, []gotField{
			{"n", Null, `null`}, {"t", Bool, `true`}, {"f", Bool, `false`}, {"i", Number, `-12`},
			{"x", Number, `1.5e+3`}, {"s", String, `"hi"`}, {"o", Object, `{"a":[1,{}]}`}, {"a", Array, `[]`},
		}},
		{"whitespace everywhere", "{ \"a\" :\t1 ,\n\"b\" : [ 1 , 2 ] }", []gotField{
			{"a", Number, `1`}, {"b", Array, `[ 1 , 2 ]`},
		}},
		{"duplicate keys kept in order", `{"a":1,"b":2,"a":3}`, []gotField{
			{"a", Number, `1`}, {"b", Number, `2`}, {"a", Number, `3`},
		}},
		{"escaped key", `{"a\"b\\c\/\n\u00e9\ud83d\ude00":0}`, []gotField{{"a\"b\\c/\né😀", Number, `0`}}},
		{"lone surrogate key", `{"\ud800x":0}`, []gotField{{"\uFFFDx", Number, `0`}}},
		{"empty key", `{"":""}`, []gotField{{"", String, `""`}}},
		{"utf8 string", `{"k":"héllo, 世界 😀"}`, []gotField{{"k", String, `"héllo, 世界 😀"`}}},
		{"numbers", `{"a":0,"b":-0,"c":0.0,"d":1E9,"e":1e-9,"f":123456789012345678901234567890}`, []gotField{
			{"a", Number, `0`}, {"b", Number, `-0`}, {"c", Number, `0.0`}, {"d", Number, `1E9`},
			{"e", Number, `1e-9`}, {"f", Number, `123456789012345678901234567890`},
		}},
		{"long string crosses word boundaries", `{"m":"` + strings.Repeat("abcdefg\\n", 5) + `"}`, []gotField{
			{"m", String, `"` + strings.Repeat("abcdefg\\n", 5) + `"`},
		}},
		{"depth limit", `{"a":` + strings.Repeat("[", 999) + strings.Repeat("]", 999) + `}`, []gotField{
			{"a", Array, strings.Repeat("[", 999) + strings.Repeat("]", 999)},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := collect(t, tt.line)
			if err != nil {
				t.Fatalf("Object(%q) = %v", tt.line, err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d fields %q, want %q", len(got), got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("field %d = %q, want %q", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestObjectInvalid(t *testing.T) {
	tests := []struct {
		line   string
		offset int
		msg    string
	}{
		{``, 0, "unexpected end of JSON input"},
		{`   `, 3, "unexpected end of JSON input"},
		{`[1]`, 0, "not a JSON object"},
		{`  "x"`, 2, "not a JSON object"},
		{`null`, 0, "not a JSON object"},
		{`{`, 1, "unexpected end of JSON input"},
		{`{"a":1`, 6, "unexpected end of JSON input"},
		{`{"a":1,}`, 7, "invalid character '}' looking for beginning of object key string"},
		{`{,}`, 1, "invalid character ',' looking for beginning of object key string"},
		{`{a:1}`, 1, "invalid character 'a' looking for beginning of object key string"},
		{`{'a':1}`, 1, `invalid character '\'' looking for beginning of object key string`},
		{`{"a" 1}`, 5, "invalid character '1' after object key"},
		{`{"a":1 "b":2}`, 7, `invalid character '"' after object key:value pair`},
		{`{"a":}`, 5, "invalid character '}' looking for beginning of value"},
		{`{"a":[1,]}`, 8, "invalid character ']' looking for beginning of value"},
		{`{"a":[1 2]}`, 8, "invalid character '2' after array element"},
		{`{"a":[1}`, 7, "invalid character '}' after array element"},
		{`{"a":{"b":1]}`, 11, "invalid character ']' after object key:value pair"},
		{`{"a":{"b"}}`, 9, "invalid character '}' after object key"},
		{`{"a":NaN}`, 5, "invalid character 'N' looking for beginning of value"},
		{`{"a":Infinity}`, 5, "invalid character 'I' looking for beginning of value"},
		{`{"a":+1}`, 5, "invalid character '+' looking for beginning of value"},
		{`{"a":01}`, 6, "invalid character '1' after object key:value pair"},
		{`{"a":-}`, 6, "invalid character '}' in numeric literal"},
		{`{"a":1.}`, 7, "invalid character '}' after decimal point in numeric literal"},
		{`{"a":.5}`, 5, "invalid character '.' looking for beginning of value"},
		{`{"a":1e}`, 7, "invalid character '}' in exponent of numeric literal"},
		{`{"a":1e+}`, 8, "invalid character '}' in exponent of numeric literal"},
		{`{"a":tru}`, 8, "invalid character '}' in literal true (expecting 'e')"},
		{`{"a":nul`, 8, "unexpected end of JSON input"},
		{`{"a":fals3}`, 9, "invalid character '3' in literal false (expecting 'e')"},
		{`{"a":True}`, 5, "invalid character 'T' looking for beginning of value"},
		{`{"a":"x}`, 8, "unexpected end of JSON input"},
		{"{\"a\":\"x\ty\"}", 7, `invalid character '\t' in string literal`},
		{"{\"a\":\"\x00\"}", 6, `invalid character '\x00' in string literal`},
		{`{"a":"\x"}`, 7, "invalid character 'x' in string escape code"},
		{`{"a":"\u12g4"}`, 10, `invalid character 'g' in \u hexadecimal character escape`},
		{`{"a":"\u12`, 10, "unexpected end of JSON input"},
		{`{"a":"\`, 7, "unexpected end of JSON input"},
		{"{\"a\":\"\xff\"}", 6, "invalid UTF-8 in string literal"},
		{"{\"a\":\"ok\xed\xa0\x80\"}", 8, "invalid UTF-8 in string literal"}, // UTF-8 encoded surrogate
		{"{\"\xc0\xaf\":1}", 2, "invalid UTF-8 in string literal"},           // overlong
		{`{"a":1}}`, 7, "invalid character '}' after top-level value"},
		{`{"a":1} {"b":2}`, 8, "invalid character '{' after top-level value"},
		{`{"a":1} // c`, 8, "invalid character '/' after top-level value"},
		{`{/*c*/"a":1}`, 1, "invalid character '/' looking for beginning of object key string"},
		{"{\"a\":1}\x00", 7, `invalid character '\x00' after top-level value`},
		{"{\"a\":\xc3\xa9}", 5, `invalid character '\xc3' looking for beginning of value`},
		{`{"a":` + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + `}`, 5 + 999, "exceeded max nesting depth 1000"},
		{`{"a":` + strings.Repeat(`{"b":`, 999) + `1` + strings.Repeat("}", 999), 5 + 999*5 + 1 + 999, "unexpected end of JSON input"},
	}
	for _, tt := range tests {
		got, err := collect(t, tt.line)
		var le *LineError
		if !errors.As(err, &le) {
			t.Errorf("Object(%.40q) = %v, want *LineError", tt.line, err)
			continue
		}
		if le.Offset != tt.offset || le.Msg != tt.msg || le.Line != 0 {
			t.Errorf("Object(%.40q) = {Line:%d Offset:%d Msg:%q}, want {Offset:%d Msg:%q}",
				tt.line, le.Line, le.Offset, le.Msg, tt.offset, tt.msg)
		}
		if got != nil {
			t.Errorf("Object(%.40q) called fn on an invalid line: %q", tt.line, got)
		}
	}
}

func TestLineErrorError(t *testing.T) {
	e := &LineError{Offset: 17, Msg: "invalid character 'x' looking for beginning of value"}
	if got, want := e.Error(), "invalid character 'x' looking for beginning of value at offset 17"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	e.Line = 3
	if got, want := e.Error(), "line 3: invalid character 'x' looking for beginning of value at offset 17"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestObjectCallbackError(t *testing.T) {
	var s Scanner
	stop := errors.New("stop")
	var keys []string
	err := s.Object([]byte(`{"a":1,"b":2,"c":3}`), func(f Field) error {
		keys = append(keys, string(f.Key))
		if string(f.Key) == "b" {
			return stop
		}
		return nil
	})
	if err != stop {
		t.Errorf("err = %v, want %v", err, stop)
	}
	if strings.Join(keys, ",") != "a,b" {
		t.Errorf("fn saw keys %q, want a,b", keys)
	}
}

func TestObjectValidateOnly(t *testing.T) {
	var s Scanner
	if err := s.Object([]byte(row), nil); err != nil {
		t.Errorf("Object(row, nil) = %v", err)
	}
	if err := s.Object([]byte(`{"a":}`), nil); err == nil {
		t.Error("Object(invalid, nil) = nil")
	}
}

func TestObjectReuse(t *testing.T) {
	// The escaped-key scratch buffer is reused; a key seen in the callback must
	// be the current one even after a longer escaped key on an earlier row.
	var s Scanner
	for _, tc := range []struct{ line, key string }{
		{`{"long\u0041key":1}`, "longAkey"},
		{`{"\u0042":1}`, "B"},
		{`{"plain":1}`, "plain"},
	} {
		var got string
		if err := s.Object([]byte(tc.line), func(f Field) error { got = string(f.Key); return nil }); err != nil {
			t.Fatal(err)
		}
		if got != tc.key {
			t.Errorf("Object(%s) key = %q, want %q", tc.line, got, tc.key)
		}
	}
}

func TestObjectNoAllocs(t *testing.T) {
	var s Scanner
	line := []byte(row)
	n := 0
	fn := func(f Field) error {
		n += len(f.Key) + len(f.Raw)
		return nil
	}
	if err := s.Object(line, fn); err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = s.Object(line, fn) }); allocs != 0 {
		t.Errorf("Object allocated %v times per row, want 0", allocs)
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{
		Null: "null", Bool: "bool", Number: "number", String: "string", Object: "object", Array: "array", 9: "Kind(9)",
	} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", k, got, want)
		}
	}
}

type gotLine struct {
	No   int
	Line string
}

func TestLines(t *testing.T) {
	tests := []struct {
		name string
		body string
		want []gotLine
	}{
		{"empty", "", nil},
		{"only newlines", "\n\n\r\n", nil},
		{"one without newline", `{"a":1}`, []gotLine{{1, `{"a":1}`}}},
		{"one with newline", "{\"a\":1}\n", []gotLine{{1, `{"a":1}`}}},
		{"crlf", "{\"a\":1}\r\n{\"b\":2}\r\n", []gotLine{{1, `{"a":1}`}, {2, `{"b":2}`}}},
		{"blank lines counted", "\n  \t \n{\"a\":1}\n\r\n\n{\"b\":2}", []gotLine{{3, `{"a":1}`}, {6, `{"b":2}`}}},
		{"only one cr stripped", "x\r\r\ny", []gotLine{{1, "x\r"}, {2, "y"}}},
		{"bare cr is not a line break", "a\rb\n", []gotLine{{1, "a\rb"}}},
		{"lines are passed as is", " x \n", []gotLine{{1, " x "}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []gotLine
			err := Lines([]byte(tt.body), func(n int, line []byte) error {
				got = append(got, gotLine{n, string(line)})
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("line %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestLinesError(t *testing.T) {
	var s Scanner
	calls := 0
	err := Lines([]byte("{}\n\n{x}\n{}\n"), func(n int, line []byte) error {
		calls++
		if err := s.Object(line, nil); err != nil {
			var le *LineError
			if errors.As(err, &le) {
				le.Line = n
			}
			return err
		}
		return nil
	})
	if got, want := err.Error(), "line 3: invalid character 'x' looking for beginning of object key string at offset 1"; got != want {
		t.Errorf("err = %q, want %q", got, want)
	}
	if calls != 2 {
		t.Errorf("fn called %d times, want 2 (iteration must stop at the error)", calls)
	}
}

func TestAppendString(t *testing.T) {
	tests := []struct {
		raw, want string
		wantErr   bool
	}{
		{`""`, "", false},
		{`"plain"`, "plain", false},
		{`"\"\\\/\b\f\n\r\t"`, "\"\\/\b\f\n\r\t", false},
		{`"\u0041\u00e9\u4e16"`, "Aé世", false},
		{`"\ud83d\ude00"`, "😀", false},
		{`"\ud83d"`, "\uFFFD", false},
		{`"\ude00\ud83d"`, "\uFFFD\uFFFD", false},
		{`"\ud83d\u0041"`, "\uFFFDA", false},
		{`"\ud83dx"`, "\uFFFDx", false},
		{`"\ud83d\ud83d\ude00"`, "\uFFFD😀", false},
		{`"héllo"`, "héllo", false},
		{``, "", true},
		{`"`, "", true},
		{`x`, "", true},
		{`"a"b`, "", true},
		{`"\q"`, "", true},
		{"\"\xff\"", "", true},
		{"\"\n\"", "", true},
	}
	for _, tt := range tests {
		got, err := AppendString([]byte("pre:"), []byte(tt.raw))
		if (err != nil) != tt.wantErr {
			t.Errorf("AppendString(%q) err = %v, wantErr %v", tt.raw, err, tt.wantErr)
			continue
		}
		if !tt.wantErr && string(got) != "pre:"+tt.want {
			t.Errorf("AppendString(%q) = %q, want %q", tt.raw, got, "pre:"+tt.want)
		}
		if tt.wantErr && string(got) != "pre:" {
			t.Errorf("AppendString(%q) modified dst on error: %q", tt.raw, got)
		}
	}
}

func TestNumberIsInt(t *testing.T) {
	tests := []struct {
		raw  string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"-0", 0, true},
		{"42", 42, true},
		{"-42", -42, true},
		{"9223372036854775807", math.MaxInt64, true},
		{"-9223372036854775808", math.MinInt64, true},
		{"9223372036854775808", 0, false},
		{"-9223372036854775809", 0, false},
		{"99999999999999999999", 0, false},
		{"1.0", 0, false},
		{"1e3", 0, false},
		{"1E3", 0, false},
		{"", 0, false},
		{"-", 0, false},
		{"007", 0, false},
		{"+1", 0, false},
		{"1x", 0, false},
	}
	for _, tt := range tests {
		got, ok := NumberIsInt([]byte(tt.raw))
		if got != tt.want || ok != tt.ok {
			t.Errorf("NumberIsInt(%q) = %d, %v; want %d, %v", tt.raw, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParseFloat(t *testing.T) {
	tests := []struct {
		raw     string
		want    float64
		wantErr bool
	}{
		{"0", 0, false},
		{"-1.5", -1.5, false},
		{"12.75", 12.75, false},
		{"1e3", 1000, false},
		{"2E-2", 0.02, false},
		{"123456789012345678901234567890", 1.2345678901234568e29, false},
		{"1e400", 0, true},
		{"", 0, true},
		{"Inf", 0, true},
		{"NaN", 0, true},
		{"0x1p3", 0, true},
		{"+1", 0, true},
		{"1_000", 0, true},
		{".5", 0, true},
		{"1.", 0, true},
		{"1 ", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseFloat([]byte(tt.raw))
		if (err != nil) != tt.wantErr || (!tt.wantErr && got != tt.want) {
			t.Errorf("ParseFloat(%q) = %v, %v; want %v, wantErr %v", tt.raw, got, err, tt.want, tt.wantErr)
		}
	}
}

func BenchmarkObject(b *testing.B) {
	var s Scanner
	line := []byte(row)
	n := 0
	fn := func(f Field) error {
		n++
		return nil
	}
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Object(line, fn); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLines measures a whole NDJSON body the way ingest validates it:
// split into lines and validate each once.
func BenchmarkLines(b *testing.B) {
	var s Scanner
	body := bytes.Repeat([]byte(row+"\n"), 1000)
	validate := func(_ int, line []byte) error { return s.Object(line, nil) }
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := Lines(body, validate); err != nil {
			b.Fatal(err)
		}
	}
}
