package otlp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// compareWithReference decodes body with Decode and with the pdata-based
// reference and fails unless both give the same rows or both fail. Where
// pdata is laxer than JSON itself (it ignores what follows the request
// object, and its iterator accepts malformed input in places), only bodies
// that are valid JSON must be accepted alike; Decode may still refuse the
// rest, but never accept what pdata refuses.
func compareWithReference(t *testing.T, sig Signal, isJSON bool, body []byte) {
	contentType := protoType
	if isJSON {
		contentType = jsonType
	}
	// The reference's JSON decoder recurses without a bound; keep it off
	// bodies that would exhaust the stack (Decode refuses them).
	if isJSON && checkJSONDepth(body) != nil {
		if _, err := Decode(sig, contentType, body); err == nil {
			t.Fatalf("Decode accepted a body nested deeper than %d", maxJSONDepth)
		}
		return
	}
	got, err := decodeLines(sig, contentType, body)
	if isJSON && pdataDesyncs(body) {
		return // Decode ignores a member named "" with its value; pdata does not (see pdataDesyncs)
	}
	want, wantErr := refDecode(sig, contentType, body)
	switch {
	case err != nil && wantErr != nil:
		return
	case err == nil && wantErr != nil:
		t.Fatalf("Decode accepted what pdata refuses (%v): %d rows", wantErr, len(got))
	case err != nil:
		if isJSON && (!json.Valid(body) || pdataDesyncs(body)) {
			return
		}
		t.Fatalf("Decode: %v; pdata accepts it with %d rows", err, len(want))
	}
	checkRows(t, got)
	if len(got) != len(want) {
		t.Fatalf("%d rows, pdata %d", len(got), len(want))
	}
	for i := range want {
		if !utf8.Valid(got[i].Line) {
			t.Fatalf("row %d is not valid UTF-8: %q", i, got[i].Line)
		}
		if got[i].Source != want[i].Source {
			t.Fatalf("row %d: source %q, pdata %q\n got %s\nwant %s", i, got[i].Source, want[i].Source, got[i].Line, want[i].Line)
		}
		if err := sameJSON(got[i].Line, want[i].Line); err != nil {
			t.Fatalf("row %d: %v\n got %s %s\nwant %s %s", i, err, got[i].Source, got[i].Line, want[i].Source, want[i].Line)
		}
	}
	checkRoundTrip(t, sig, isJSON, body, got)
}

// checkRoundTrip holds Decode to pdata's own marshalling: the request pdata
// parsed from body, marshalled again by pdata as JSON and as protobuf, must
// decode to the rows body did. The reference above checks the rows' values
// with a writer of its own; this checks the two decoders against what pdata
// writes, field by field and encoding by encoding, including members and
// encodings (pdata's spelling of enums, 64-bit integers, ids, bytes, NaN) the
// fuzzed bodies may never reach.
func checkRoundTrip(t *testing.T, sig Signal, isJSON bool, body []byte, got []Row) {
	t.Helper()
	for _, enc := range []struct {
		name, contentType string
		marshal           func(request) ([]byte, error)
	}{
		{"JSON", jsonType, request.MarshalJSON},
		{"protobuf", protoType, request.MarshalProto},
	} {
		req := newRequest(sig)
		if err := unmarshal(sig, req, body, isJSON); err != nil {
			t.Fatalf("pdata: %v", err)
		}
		again, err := enc.marshal(req)
		if err != nil {
			t.Fatalf("pdata's %s marshalling: %v", enc.name, err)
		}
		rows, err := decodeLines(sig, enc.contentType, again)
		if err != nil {
			t.Fatalf("Decode of pdata's %s marshalling: %v\n%q", enc.name, err, again)
		}
		if len(rows) != len(got) {
			t.Fatalf("pdata's %s marshalling: %d rows, the body %d", enc.name, len(rows), len(got))
		}
		for i := range rows {
			if rows[i].Source != got[i].Source || !bytes.Equal(rows[i].Line, got[i].Line) {
				t.Fatalf("row %d of pdata's %s marshalling:\n%s %s\nthe body's:\n%s %s", i, enc.name, rows[i].Source, rows[i].Line, got[i].Source, got[i].Line)
			}
		}
	}
}

// sameJSON reports how the JSON texts got and want differ in meaning, or nil if they
// do not. The reference writes its rows independently of jsonWriter, so the same
// value may be spelled differently (escapes, 1e+20 for 100000000000000000000.0); what
// must agree is: objects member by member (same keys, in the same order, which also
// rules out a repeated key), arrays element by element, strings exactly, and numbers
// by kind (a float literal, with '.', 'e' or 'E', is a double; anything else an
// integer, compared exactly as text) and value.
func sameJSON(got, want []byte) error {
	if !json.Valid(got) {
		return fmt.Errorf("not valid JSON")
	}
	g, err := parseJSONValue(got)
	if err != nil {
		return fmt.Errorf("got: %v", err)
	}
	w, err := parseJSONValue(want)
	if err != nil {
		return fmt.Errorf("reference: %v", err)
	}
	return diffJSON("$", g, w)
}

// jsonMember is one member of a parsed object; objects are []jsonMember so that order
// and repeated keys survive parsing.
type jsonMember struct {
	key string
	val any
}

// parseJSONValue parses one JSON value (and nothing after it) into nil, bool, string,
// json.Number, []any or []jsonMember.
func parseJSONValue(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	v, err := parseJSONNext(d)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("text after the value (%v)", err)
	}
	return v, nil
}

func parseJSONNext(d *json.Decoder) (any, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		obj := []jsonMember{}
		for d.More() {
			k, err := d.Token()
			if err != nil {
				return nil, err
			}
			v, err := parseJSONNext(d)
			if err != nil {
				return nil, err
			}
			obj = append(obj, jsonMember{k.(string), v})
		}
		_, err := d.Token() // '}'
		return obj, err
	case json.Delim('['):
		arr := []any{}
		for d.More() {
			v, err := parseJSONNext(d)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err := d.Token() // ']'
		return arr, err
	}
	return tok, nil
}

func diffJSON(path string, got, want any) error {
	switch w := want.(type) {
	case []jsonMember:
		g, ok := got.([]jsonMember)
		if !ok {
			return fmt.Errorf("%s: %s, want an object", path, jsonKind(got))
		}
		for i := 0; i < len(g) || i < len(w); i++ {
			switch {
			case i >= len(g):
				return fmt.Errorf("%s: member %q missing", path, w[i].key)
			case i >= len(w):
				return fmt.Errorf("%s: extra member %q", path, g[i].key)
			case g[i].key != w[i].key:
				return fmt.Errorf("%s: member %d is %q, want %q", path, i, g[i].key, w[i].key)
			}
			if err := diffJSON(path+"."+g[i].key, g[i].val, w[i].val); err != nil {
				return err
			}
		}
		return nil
	case []any:
		g, ok := got.([]any)
		if !ok {
			return fmt.Errorf("%s: %s, want an array", path, jsonKind(got))
		}
		if len(g) != len(w) {
			return fmt.Errorf("%s: %d elements, want %d", path, len(g), len(w))
		}
		for i := range w {
			if err := diffJSON(fmt.Sprintf("%s[%d]", path, i), g[i], w[i]); err != nil {
				return err
			}
		}
		return nil
	case json.Number:
		g, ok := got.(json.Number)
		if !ok {
			return fmt.Errorf("%s: %s, want a number", path, jsonKind(got))
		}
		gf, wf := isFloatLiteral(g), isFloatLiteral(w)
		switch {
		case gf != wf:
			return fmt.Errorf("%s: %s is %s, want %s (%s)", path, g, numberKind(gf), numberKind(wf), w)
		case !gf:
			if g != w {
				return fmt.Errorf("%s: %s, want %s", path, g, w)
			}
		default:
			gv, gerr := strconv.ParseFloat(string(g), 64)
			wv, werr := strconv.ParseFloat(string(w), 64)
			if gerr != nil || werr != nil || math.Float64bits(gv) != math.Float64bits(wv) {
				return fmt.Errorf("%s: %s, want %s", path, g, w)
			}
		}
		return nil
	default: // nil, bool, string
		if got != want {
			return fmt.Errorf("%s: %s %#v, want %s %#v", path, jsonKind(got), got, jsonKind(want), want)
		}
		return nil
	}
}

func isFloatLiteral(n json.Number) bool { return strings.ContainsAny(string(n), ".eE") }

func numberKind(float bool) string {
	if float {
		return "a double"
	}
	return "an integer"
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a bool"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case []any:
		return "an array"
	case []jsonMember:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// pdataDesyncs reports whether body may have a member named "": pdata's
// iterator reads it as the end of the object and ignores the rest of it, or,
// below the top level, goes on reading the rest out of step. Decode ignores
// the member and its value, as the protobuf JSON mapping does with unknown
// names (SPEC 4), so the two are not compared on such bodies. An empty string
// as a value is no such member, and common, so only "" before a colon counts
// (and an escaped quote ending a name, "a\"":, too, which is harmless).
func pdataDesyncs(body []byte) bool {
	return emptyName.Match(body)
}

var emptyName = regexp.MustCompile(`""[ \t\r\n]*:`)

func fuzzDifferential(f *testing.F, sig Signal, seeds []bodies, specJSON string) {
	for _, b := range seeds {
		f.Add(false, b.proto)
		if b.json != nil {
			f.Add(true, b.json)
		}
	}
	f.Add(true, []byte(specJSON))
	f.Add(true, []byte(strings.ReplaceAll(strings.ReplaceAll(specJSON, "Value", "_value"), "UnixNano", "_unix_nano")))
	f.Add(true, []byte(`{}`))
	f.Add(true, []byte(`null`))
	f.Add(false, []byte{})
	f.Add(false, []byte{0x0a, 0x00})
	f.Fuzz(func(t *testing.T, isJSON bool, body []byte) {
		compareWithReference(t, sig, isJSON, body)
	})
}

func FuzzDifferentialLogs(f *testing.F) {
	fuzzDifferential(f, Logs, []bodies{logsBodies(f, fullLogs()), logsBodies(f, unnamedLogs())}, specLogsJSON)
}

func FuzzDifferentialTraces(f *testing.F) {
	fuzzDifferential(f, Traces, []bodies{tracesBodies(f, fullTraces()), tracesBodies(f, oddTraces())}, specTracesJSON)
}

func FuzzDifferentialMetrics(f *testing.F) {
	fuzzDifferential(f, Metrics, []bodies{metricsBodies(f, fullMetrics()), metricsProtoOnly(f, nonFiniteMetrics())}, specMetricsJSON)
}

// TestDecodeMatchesReference pins cases where the encodings' merge and
// leniency rules matter, against pdata.
func TestDecodeMatchesReference(t *testing.T) {
	nest := func(n int) []byte {
		// n nested AnyValue arrays around an int, as a log body.
		v := []byte{0x18, 0x01} // intValue 1
		for range n {
			arr := append(appendVarintTag(nil, 1, 2, len(v)), v...) // ArrayValue.values
			v = append(appendVarintTag(nil, 5, 2, len(arr)), arr...)
		}
		rec := append(appendVarintTag(nil, 5, 2, len(v)), v...)
		sl := append(appendVarintTag(nil, 2, 2, len(rec)), rec...)
		rl := append(appendVarintTag(nil, 2, 2, len(sl)), sl...)
		return append(appendVarintTag(nil, 1, 2, len(rl)), rl...)
	}
	cases := []struct {
		name   string
		sig    Signal
		isJSON bool
		body   string
	}{
		{"nesting at the limit", Logs, false, string(nest(49))},
		{"nesting past the limit", Logs, false, string(nest(50))},
		{"snake case", Logs, true, `{"resource_logs":[{"scope_logs":[{"log_records":[{"time_unix_nano":"5","severity_number":"SEVERITY_NUMBER_WARN","body":{"string_value":"x"},"trace_id":"5b8efff798038103d269b633813fc60c"}]}]}]}`},
		{"nulls", Logs, true, `{"resourceLogs":[null,{"resource":null,"scopeLogs":[{"scope":null,"logRecords":[null,{"severityText":null,"attributes":null}]}]}]}`},
		{"repeated members merge", Logs, true, `{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"a"},"attributes":[{"key":"a","value":{"intValue":1}}],"body":{},"attributes":[{"key":"b","value":{"boolValue":true}}],"flags":1,"flags":"2"}]}]}]}`},
		{"escapes", Logs, true, `{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"\ud83d\ude00 \ud800x \u00e9\n"}}]}]}]}`},
		// Every byte a row must escape, alone and at the end of short strings, where the
		// writer looks at bytes one by one rather than a word at a time.
		{"escaped specials", Logs, true, `{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"a\\b"},"severityText":"\"x","eventName":"\t\u0001\u001f","attributes":[{"key":"k\\","value":{"stringValue":"\\"}},{"key":"\"q","value":{"arrayValue":{"values":[{"stringValue":"x\"y"},{"stringValue":"0123456789abcd\\"}]}}}]}]}]}]}`},
		// Rows that are valid JSON but say something else: only a reference writing its
		// own rows notices.
		{"backslash in a short string", Logs, true, `{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"dir\\new"}}]}]}]}`},
		{"escaped id", Logs, true, `{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"spanId":"\u0030000000000000001"}]}]}]}`},
		{"int as float", Logs, true, `{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"timeUnixNano":1.5}]}]}]}`},
		{"uint32 overflow", Logs, true, `{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"flags":4294967296}]}]}]}`},
		{"uint64 wrap pdata misses", Logs, true, `{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"timeUnixNano":30000000000000000000}]}]}]}`},
		{"severity name with pdata's space", Logs, true, `{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"severityNumber":"SEVERITY_NUMBER_TRACE "}]}]}]}`},
		{"double as string", Metrics, true, `{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"m","gauge":{"dataPoints":[{"asDouble":"NaN"},{"asDouble":"-Infinity"},{"asInt":"-7"}]}}]}]}]}`},
		{"histogram lists append", Metrics, true, `{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"h","histogram":{"dataPoints":[{"bucketCounts":[1],"explicitBounds":[0.5],"bucketCounts":["2"]}]}}]}]}]}`},
		{"metric data replaced", Metrics, true, `{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"m","gauge":{"dataPoints":[{},{}]},"sum":{"dataPoints":[{"asInt":1}],"isMonotonic":true}}]}]}]}`},
		{"kvlist service name", Logs, true, `{"resourceLogs":[{"resource":{"attributes":[{"key":"service.name","value":{"kvlistValue":{"values":[{"key":"b","value":{"intValue":1}},{"key":"a","value":{"doubleValue":1e-7}}]}}}]},"scopeLogs":[{"logRecords":[{}]}]}]}`},
	}
	if _, err := Decode(Logs, protoType, nest(49)); err != nil {
		t.Fatalf("49 nested arrays: %v", err)
	}
	if _, err := Decode(Logs, protoType, nest(50)); err == nil {
		t.Fatal("50 nested arrays accepted")
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			compareWithReference(t, tc.sig, tc.isJSON, []byte(tc.body))
		})
	}
}

func appendVarintTag(b []byte, field, wt, n int) []byte {
	b = append(b, byte(field<<3|wt))
	for n >= 0x80 {
		b = append(b, byte(n)|0x80)
		n >>= 7
	}
	return append(b, byte(n))
}
