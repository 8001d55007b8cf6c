package otlp

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/hyp-project/hyp/internal/partition"
	"github.com/hyp-project/hyp/internal/rowform"
)

const (
	protoType = "application/x-protobuf"
	jsonType  = "application/json"
)

type wantRow struct {
	source, line string
}

type decodeCase struct {
	name   string
	bodies func(testing.TB) bodies
	want   []wantRow
}

// checkRows fails unless every line is a single-line JSON object, which is
// what the cache stores.
func checkRows(t testing.TB, rows []Row) {
	t.Helper()
	for i, r := range rows {
		if !json.Valid(r.Line) {
			t.Fatalf("row %d is not valid JSON: %s", i, r.Line)
		}
		if len(r.Line) == 0 || r.Line[0] != '{' {
			t.Fatalf("row %d is not a JSON object: %s", i, r.Line)
		}
		if bytes.ContainsAny(r.Line, "\n\r") {
			t.Fatalf("row %d spans several lines: %q", i, r.Line)
		}
		if r.Source == "" {
			t.Fatalf("row %d has no source", i)
		}
	}
}

func compareRows(t *testing.T, got []Row, want []wantRow) {
	t.Helper()
	checkRows(t, got)
	if len(got) != len(want) {
		for _, r := range got {
			t.Logf("got %s %s", r.Source, r.Line)
		}
		t.Fatalf("got %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Source != want[i].source {
			t.Errorf("row %d: source %q, want %q", i, got[i].Source, want[i].source)
		}
		if string(got[i].Line) != want[i].line {
			t.Errorf("row %d:\n got %s\nwant %s", i, got[i].Line, want[i].line)
		}
	}
}

// runDecodeCases decodes each case in both encodings and expects the same
// rows from each.
func runDecodeCases(t *testing.T, sig Signal, cases []decodeCase) {
	for _, tc := range cases {
		b := tc.bodies(t)
		encodings := []struct {
			name, contentType string
			body              []byte
		}{
			{"protobuf", protoType, b.proto},
			{"json", jsonType, b.json},
		}
		for _, enc := range encodings {
			if enc.body == nil {
				continue // the case cannot be expressed in this encoding (NaN in OTLP JSON)
			}
			t.Run(tc.name+"/"+enc.name, func(t *testing.T) {
				rows, err := decodeLines(sig, enc.contentType, enc.body)
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				compareRows(t, rows, tc.want)
			})
		}
	}
}

func TestDecodeLogs(t *testing.T) {
	runDecodeCases(t, Logs, []decodeCase{
		{
			name:   "all fields",
			bodies: func(t testing.TB) bodies { return logsBodies(t, fullLogs()) },
			want: []wantRow{{"checkout", `{"resource":{"service.name":"checkout","host.name":"h1"},"scope_name":"hyp.test","scope_version":"1.2.3","scope_attributes":{"lib.kind":"sdk"},` +
				`"timestamp":"2018-12-13T14:51:00.3Z","observed_timestamp":"2018-12-13T14:51:00.300000001Z","severity_text":"ERROR","severity_number":17,"event_name":"payment.failed","body":"card declined",` +
				`"attributes":{"s":"x","b":true,"i":-42,"d":2.0,"f":0.25,"raw":"AAEC/w==","arr":[1,"two",false],"kv":{"inner":"v","n":1},"esc":"line\n\"quoted\"\t\u0001\\ é"},` +
				`"dropped_attributes_count":3,"trace_id":"5b8efff798038103d269b633813fc60c","span_id":"eee19b7ec3c1b174","flags":1}`}},
		},
		{
			name:   "unnamed services and row order",
			bodies: func(t testing.TB) bodies { return logsBodies(t, unnamedLogs()) },
			want: []wantRow{
				{"unknown", `{"resource":{"host.name":"h2"},"body__json":{"msg":"hi","level":3}}`},
				{"unknown", `{"resource":{"service.name":""},"severity_text":"INFO"}`},
				{"unknown", `{}`},
				{"api", `{"resource":{"service.name":"api"},"scope_name":"a","body":"a1"}`},
				{"api", `{"resource":{"service.name":"api"},"scope_name":"a","body":"a2"}`},
				{"api", `{"resource":{"service.name":"api"},"scope_name":"b","body":"b1"}`},
				{"api", `{"resource":{"service.name":"api"},"scope_name":"b","body":"b2"}`},
			},
		},
	})
}

func TestDecodeTraces(t *testing.T) {
	runDecodeCases(t, Traces, []decodeCase{
		{
			name:   "all fields",
			bodies: func(t testing.TB) bodies { return tracesBodies(t, fullTraces()) },
			want: []wantRow{{"checkout", `{"resource":{"service.name":"checkout"},"scope_name":"hyp.test",` +
				`"trace_id":"5b8efff798038103d269b633813fc60c","span_id":"eee19b7ec3c1b174","parent_span_id":"eee19b7ec3c1b173","trace_state":"k=v","flags":257,` +
				`"name":"GET /pay","kind":"server","start_time":"2018-12-13T14:51:00.3Z","end_time":"2018-12-13T14:51:00.3015Z","duration_ns":1500000,` +
				`"status_code":"error","status_message":"boom","attributes":{"http.status_code":500},"dropped_attributes_count":1,` +
				`"events":[{"time":"2018-12-13T14:51:00.300001Z","name":"exception","attributes":{"exception.type":"E"},"dropped_attributes_count":2},{"name":"no-time"}],"dropped_events_count":4,` +
				`"links":[{"trace_id":"0102030405060708090a0b0c0d0e0f10","span_id":"1112131415161718","trace_state":"a=b","flags":1,"attributes":{"l":true},"dropped_attributes_count":5},{}],"dropped_links_count":6}`}},
		},
		{
			name:   "skew and unknown enums",
			bodies: func(t testing.TB) bodies { return tracesBodies(t, oddTraces()) },
			want: []wantRow{
				{"unknown", `{"name":"","kind":"unspecified","start_time":"2018-12-13T14:51:00.30000001Z","end_time":"2018-12-13T14:51:00.3Z","duration_ns":-10,"status_code":"unset"}`},
				{"unknown", `{"name":"odd","kind":"9","start_time":"2018-12-13T14:51:00.3Z","status_code":"7"}`},
			},
		},
	})
}

func TestDecodeMetrics(t *testing.T) {
	const prefix = `{"resource":{"service.name":"checkout"},"scope_name":"hyp.test",`
	runDecodeCases(t, Metrics, []decodeCase{
		{
			name:   "all types",
			bodies: func(t testing.TB) bodies { return metricsBodies(t, fullMetrics()) },
			want: []wantRow{
				{"checkout", prefix + `"metric_name":"temp","metric_description":"Temperature","metric_unit":"Cel","metric_type":"gauge","time":"2018-12-13T14:51:00.3Z","attributes":{"room":"a"},"value":21,` +
					`"exemplars":[{"time":"2018-12-13T14:51:00.3Z","value":20.5,"trace_id":"5b8efff798038103d269b633813fc60c","span_id":"eee19b7ec3c1b174","filtered_attributes":{"user":"u"}},{"value":3}]}`},
				{"checkout", prefix + `"metric_name":"temp","metric_description":"Temperature","metric_unit":"Cel","metric_type":"gauge","start_time":"2018-12-13T14:51:00.3Z","time":"2018-12-13T14:51:00.300000001Z","value":21.5}`},
				{"checkout", prefix + `"metric_name":"temp","metric_description":"Temperature","metric_unit":"Cel","metric_type":"gauge","time":"2018-12-13T14:51:00.3Z","flags":1}`},
				{"checkout", prefix + `"metric_name":"requests","metric_unit":"1","metric_type":"sum","metric_metadata":{"origin":"prom"},"start_time":"2018-12-13T14:51:00.3Z","time":"2018-12-13T14:51:01.3Z",` +
					`"value":10,"is_monotonic":true,"aggregation_temporality":"cumulative"}`},
				{"checkout", prefix + `"metric_name":"latency","metric_unit":"ms","metric_type":"histogram","time":"2018-12-13T14:51:00.3Z",` +
					`"count":3,"sum":6.0,"min":1.0,"max":3.0,"bucket_counts":[1,1,1],"explicit_bounds":[1.0,2.0],"aggregation_temporality":"delta"}`},
				{"checkout", prefix + `"metric_name":"latency","metric_unit":"ms","metric_type":"histogram","count":0,"bucket_counts":[],"explicit_bounds":[],"aggregation_temporality":"delta"}`},
				{"checkout", prefix + `"metric_name":"size","metric_type":"exponential_histogram","time":"2018-12-13T14:51:00.3Z","count":5,"sum":10.5,"min":0.5,"max":4.0,` +
					`"scale":2,"zero_count":1,"zero_threshold":0.001,"positive":{"offset":-1,"bucket_counts":[1,2]},"negative":{"offset":0,"bucket_counts":[]},"aggregation_temporality":"cumulative"}`},
				{"checkout", prefix + `"metric_name":"rpc","metric_type":"summary","time":"2018-12-13T14:51:00.3Z","count":4,"sum":8.0,"quantile_values":[{"quantile":0.5,"value":2.0},{"quantile":0.99,"value":3.5}]}`},
			},
		},
		{
			name:   "non-finite doubles",
			bodies: func(t testing.TB) bodies { return metricsProtoOnly(t, nonFiniteMetrics()) },
			want: []wantRow{
				{"unknown", `{"metric_name":"weird","metric_type":"sum","value":"NaN","is_monotonic":false,"aggregation_temporality":"unspecified"}`},
				{"unknown", `{"metric_name":"weird","metric_type":"sum","value":"Infinity","is_monotonic":false,"aggregation_temporality":"unspecified"}`},
				{"unknown", `{"metric_name":"weird","metric_type":"sum","value":"-Infinity","is_monotonic":false,"aggregation_temporality":"unspecified"}`},
			},
		},
	})
}

// TestDecodeSpecJSON decodes hand-written OTLP/JSON in the style of the
// specification's examples, whose ids are hex, not base64.
func TestDecodeSpecJSON(t *testing.T) {
	const (
		prefix  = `{"resource":{"service.name":"my.service"},"scope_name":"my.library","scope_version":"1.0.0",`
		traceID = `"trace_id":"5b8efff798038103d269b633813fc60c"`
		spanID  = `"span_id":"eee19b7ec3c1b174"`
	)
	lowerIDs := strings.NewReplacer(
		"5B8EFFF798038103D269B633813FC60C", "5b8efff798038103d269b633813fc60c",
		"EEE19B7EC3C1B174", "eee19b7ec3c1b174",
		"EEE19B7EC3C1B173", "eee19b7ec3c1b173",
	)
	cases := []struct {
		name string
		sig  Signal
		body string
		want string
	}{
		{"logs", Logs, specLogsJSON, prefix + `"timestamp":"2018-12-13T14:51:00.3Z","observed_timestamp":"2018-12-13T14:51:00.3Z","severity_text":"Information","severity_number":9,"body":"Example log record",` +
			`"attributes":{"int.attribute":10,"double.attribute":637.704,"array.attribute":["many","values"],"map.attribute":{"some.map.key":"some value"}},` + traceID + "," + spanID + "}"},
		{"traces", Traces, specTracesJSON, prefix + traceID + "," + spanID + `,"parent_span_id":"eee19b7ec3c1b173","name":"I'm a server span","kind":"server",` +
			`"start_time":"2018-12-13T14:51:00Z","end_time":"2018-12-13T14:51:01Z","duration_ns":1000000000,"status_code":"unset","attributes":{"my.span.attr":"some value"}}`},
		{"lower-case ids", Traces, lowerIDs.Replace(specTracesJSON), prefix + traceID + "," + spanID + `,"parent_span_id":"eee19b7ec3c1b173","name":"I'm a server span","kind":"server",` +
			`"start_time":"2018-12-13T14:51:00Z","end_time":"2018-12-13T14:51:01Z","duration_ns":1000000000,"status_code":"unset","attributes":{"my.span.attr":"some value"}}`},
		{"metrics", Metrics, specMetricsJSON, prefix + `"metric_name":"my.counter","metric_description":"I am a Counter","metric_unit":"1","metric_type":"sum","start_time":"2018-12-13T14:51:00.3Z","time":"2018-12-13T14:51:00.3Z",` +
			`"attributes":{"my.counter.attr":"some value"},"value":5.0,"is_monotonic":true,"aggregation_temporality":"delta"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := decodeLines(tc.sig, "application/json; charset=utf-8", []byte(tc.body))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			compareRows(t, rows, []wantRow{{"my.service", tc.want}})
		})
	}
}

func TestDecodeDuplicateAttributeKeys(t *testing.T) {
	// OTLP forbids repeated keys but the wire format can carry them; the
	// first wins, as with pdata's Map.Get. Each key appears twice, first
	// with value 0; the sizes cover both sides of linearDedupMax.
	for _, distinct := range []int{3, linearDedupMax / 2, linearDedupMax/2 + 1, 20} {
		var attrs, want []string
		for i := range 2 * distinct {
			key := "k" + strconv.Itoa(i%distinct)
			attrs = append(attrs, `{"key":"`+key+`","value":{"intValue":`+strconv.Itoa(i/distinct)+`}}`)
			if i < distinct {
				want = append(want, `"`+key+`":0`)
			}
		}
		body := `{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"attributes":[` + strings.Join(attrs, ",") + `]}]}]}]}`
		rows, err := decodeLines(Logs, jsonType, []byte(body))
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		compareRows(t, rows, []wantRow{{"unknown", `{"attributes":{` + strings.Join(want, ",") + `}}`}})
	}
}

func TestDecodeEmptyRequest(t *testing.T) {
	for _, sig := range []Signal{Logs, Traces, Metrics} {
		for _, tc := range []struct{ contentType, body string }{{protoType, ""}, {jsonType, "{}"}} {
			rows, err := decodeLines(sig, tc.contentType, []byte(tc.body))
			if err != nil || len(rows) != 0 {
				t.Errorf("Decode(%s, %s, %q) = %d rows, %v; want none, no error", sig, tc.contentType, tc.body, len(rows), err)
			}
		}
	}
}

func TestDecodeMalformed(t *testing.T) {
	deep := `{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":` + strings.Repeat(`{"arrayValue":{"values":[`, 1000) +
		`{"intValue":1}` + strings.Repeat(`]}}`, 1000) + `}]}]}]}`
	cases := []struct {
		name, contentType, body string
		sig                     Signal
		wantMsg                 string
	}{
		{"truncated protobuf", protoType, "\x0a\x05\x0a", Logs, "malformed logs protobuf body"},
		{"invalid wire type", protoType, "\xff\xff\xff", Traces, "malformed traces protobuf body"},
		{"truncated JSON", jsonType, `{"resourceMetrics":[`, Metrics, "malformed metrics JSON body"},
		{"not JSON", jsonType, "hello", Logs, "malformed logs JSON body"},
		{"bad hex trace id", jsonType, `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}`, Traces, "malformed traces JSON body"},
		{"too deep", jsonType, deep, Logs, "nested deeper than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := decodeLines(tc.sig, tc.contentType, []byte(tc.body))
			if err == nil {
				t.Fatalf("Decode succeeded with %d rows, want error", len(rows))
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("error %q does not mention %q", err, tc.wantMsg)
			}
			if errors.Is(err, ErrUnsupportedMediaType) {
				t.Fatalf("malformed body reported as unsupported media type: %v", err)
			}
		})
	}
}

func TestDecodeContentType(t *testing.T) {
	body := logsBodies(t, fullLogs())
	accepted := []struct {
		contentType string
		body        []byte
	}{
		{"application/x-protobuf", body.proto},
		{"Application/X-Protobuf", body.proto},
		{"application/json", body.json},
		{"application/json; charset=utf-8", body.json},
		{"APPLICATION/JSON ; charset=UTF-8", body.json},
	}
	for _, tc := range accepted {
		if _, err := Decode(Logs, tc.contentType, tc.body); err != nil {
			t.Errorf("Decode with %q: %v", tc.contentType, err)
		}
	}
	for _, ct := range []string{"", "text/plain", "application/protobuf", "application/xml; charset=utf-8", "application/json;;", "/"} {
		if _, err := Decode(Logs, ct, body.json); !errors.Is(err, ErrUnsupportedMediaType) {
			t.Errorf("Decode with %q: %v, want ErrUnsupportedMediaType", ct, err)
		}
	}
}

func TestDecodeUnknownSignal(t *testing.T) {
	_, err := Decode("profiles", jsonType, []byte("{}"))
	if err == nil || !strings.Contains(err.Error(), `unknown signal "profiles"`) {
		t.Fatalf("err = %v, want unknown signal", err)
	}
}

func TestSourceNonStringServiceName(t *testing.T) {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutInt("service.name", 42)
	rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
	rows, err := decodeLines(Logs, protoType, logsBodies(t, ld).proto)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	compareRows(t, rows, []wantRow{{"42", `{"resource":{"service.name":42}}`}})
}

// TestDecodeSanitizesServiceName: a service.name the cache could not use as a partition
// (over 200 bytes, a control character) still names the rows' partition, mapped the one way
// partition.SanitizeSource maps it, instead of leaving them to "unknown".
func TestDecodeSanitizesServiceName(t *testing.T) {
	long := strings.Repeat("svc-", 60) // 240 bytes
	for _, tc := range []struct{ name, want string }{
		{long, long[:partition.MaxSourceBytes]},
		{"pay\x00ments", "pay\uFFFDments"},
		{"line\nbreak", "line\uFFFDbreak"},
	} {
		name, _ := json.Marshal(tc.name)
		body := `{"resourceLogs":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":` + string(name) + `}}]},"scopeLogs":[{"logRecords":[{"body":{"stringValue":"hi"}}]}]}]}`
		rows, err := decodeLines(Logs, jsonType, []byte(body))
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if len(rows) != 1 || rows[0].Source != tc.want {
			t.Fatalf("service.name %q: rows %+v, want one row with source %q", tc.name, rows, tc.want)
		}
		if err := partition.ValidateSource(rows[0].Source); err != nil {
			t.Fatalf("source %q is not valid: %v", rows[0].Source, err)
		}
		if !strings.Contains(string(rows[0].Line), `"service.name":`+string(name)) {
			t.Errorf("row %s lost the raw service.name %s", rows[0].Line, name)
		}
	}
}

// decodeLines is Decode with each row turned into the JSON object it stands for, as the
// cache would keep it.
//
// It decodes through a Batch, twice, the second time into the memory of the first, and
// panics (failing any test or fuzz target) unless both give the same rows and the Batch's
// groups frame exactly its rows, each run of one source in one group.
func decodeLines(sig Signal, contentType string, body []byte) ([]Row, error) {
	var b Batch
	if err := b.Decode(sig, contentType, body); err != nil {
		if len(b.Rows) != 0 || len(b.Groups) != 0 {
			panic("a failed Decode left rows in its Batch")
		}
		return nil, err
	}
	checkGroups(&b)
	first := make([]Row, len(b.Rows))
	for i, r := range b.Rows {
		first[i] = Row{Source: r.Source, Line: bytes.Clone(r.Line)}
	}
	b.Reset()
	if err := b.Decode(sig, contentType, body); err != nil {
		panic(fmt.Sprintf("a second Decode into a reused Batch failed: %v", err))
	}
	checkGroups(&b)
	rows := b.Rows
	for i := range rows {
		if rows[i].Source != first[i].Source || !bytes.Equal(rows[i].Line, first[i].Line) {
			panic(fmt.Sprintf("row %d differs when decoded into a reused Batch", i))
		}
		rows[i].Line = rowform.RowJSON(rows[i].Line)
	}
	return rows, nil
}

// checkGroups panics unless b.Groups, read back through their framing (a little-endian u32
// length before each row), give b.Rows in order, with no two adjacent groups of one source
// in one chunk (contiguous in memory).
func checkGroups(b *Batch) {
	i := 0
	for gi, g := range b.Groups {
		if gi > 0 && b.Groups[gi-1].Source == g.Source && contiguous(b.Groups[gi-1].Body, g.Body) {
			panic(fmt.Sprintf("groups %d and %d both hold source %q", gi-1, gi, g.Source))
		}
		body := g.Body
		for n := 0; n < g.Rows; n++ {
			if len(body) < 4 || i >= len(b.Rows) {
				panic(fmt.Sprintf("group %d ends before its row %d", gi, n))
			}
			l := int(binary.LittleEndian.Uint32(body))
			if l > len(body)-4 || !bytes.Equal(body[4:4+l], b.Rows[i].Line) || b.Rows[i].Source != g.Source {
				panic(fmt.Sprintf("group %d, row %d is not row %d", gi, n, i))
			}
			body, i = body[4+l:], i+1
		}
		if len(body) != 0 {
			panic(fmt.Sprintf("group %d has %d bytes after its %d rows", gi, len(body), g.Rows))
		}
	}
	if i != len(b.Rows) {
		panic(fmt.Sprintf("groups hold %d rows of %d", i, len(b.Rows)))
	}
}

// TestGroupsFollowSources: resources of one service that follow one another share a group,
// and a service that comes back after another starts a new one.
func TestGroupsFollowSources(t *testing.T) {
	ld := plog.NewLogs()
	for _, svc := range []string{"a", "a", "b", "", "a"} {
		rl := ld.ResourceLogs().AppendEmpty()
		if svc != "" {
			rl.Resource().Attributes().PutStr("service.name", svc)
		}
		for range 2 {
			rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().Body().SetStr(svc)
		}
	}
	body := logsBodies(t, ld)
	for _, enc := range []struct {
		contentType string
		body        []byte
	}{{protoType, body.proto}, {jsonType, body.json}} {
		var b Batch
		if err := b.Decode(Logs, enc.contentType, enc.body); err != nil {
			t.Fatal(err)
		}
		checkGroups(&b)
		var got []string
		for _, g := range b.Groups {
			got = append(got, fmt.Sprintf("%s:%d", g.Source, g.Rows))
		}
		if want := "[a:4 b:2 unknown:2 a:2]"; fmt.Sprint(got) != want {
			t.Errorf("%s: groups %v, want %s", enc.contentType, got, want)
		}
	}
}

// contiguous says whether b starts where a ends in one array.
func contiguous(a, b []byte) bool {
	return len(a) > 0 && len(b) > 0 && unsafe.Add(unsafe.Pointer(&a[0]), len(a)) == unsafe.Pointer(&b[0])
}

// TestDecodeIgnoresEmptyNames: a member named "" is an unknown member, ignored with its
// value wherever it is, never the end of the object (pdata's reading, which stores nothing
// of {"":0,"resourceLogs":[...]}).
func TestDecodeIgnoresEmptyNames(t *testing.T) {
	for _, body := range []string{
		`{"":0,"resourceLogs":[{"scopeLogs":[{"logRecords":[{"severityText":"a"},{"severityText":"b"}]}]}]}`,
		`{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"severityText":"a"},{"severityText":"b"}]}]}],"":{"x":[1]}}`,
		`{"resourceLogs":[{"":"x","scopeLogs":[{"":[],"logRecords":[{"":1,"severityText":"a"},{"severityText":"b","":null}]}]}]}`,
	} {
		rows, err := decodeLines(Logs, jsonType, []byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if len(rows) != 2 || !strings.Contains(string(rows[1].Line), `"severity_text":"b"`) {
			t.Fatalf("%s: %d rows %q, want the two records", body, len(rows), rows)
		}
	}
}

// TestBodyKeepsItsKind: each kind of log body has a field of its own, so no reader takes an
// int, a bool, bytes or a kvlist for a string, nor a string that looks like JSON for a kvlist.
func TestBodyKeepsItsKind(t *testing.T) {
	ld := plog.NewLogs()
	lrs := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
	lrs.AppendEmpty().Body().SetStr(`{"a":1}`)
	lrs.AppendEmpty().Body().SetEmptyMap().PutInt("a", 1)
	lrs.AppendEmpty().Body().SetEmptySlice().AppendEmpty().SetStr("x")
	lrs.AppendEmpty().Body().SetInt(42)
	lrs.AppendEmpty().Body().SetDouble(2.5)
	lrs.AppendEmpty().Body().SetBool(true)
	lrs.AppendEmpty().Body().SetEmptyBytes().FromRaw([]byte("hi"))
	want := []string{
		`{"body":"{\"a\":1}"}`,
		`{"body__json":{"a":1}}`,
		`{"body__json":["x"]}`,
		`{"body__long":42}`,
		`{"body__double":2.5}`,
		`{"body__boolean":true}`,
		`{"body__bytes":"aGk="}`,
	}
	bs := logsBodies(t, ld)
	for _, enc := range []struct {
		ct   string
		body []byte
	}{{protoType, bs.proto}, {jsonType, bs.json}} {
		rows, err := decodeLines(Logs, enc.ct, enc.body)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != len(want) {
			t.Fatalf("%s: %d rows", enc.ct, len(rows))
		}
		for i, r := range rows {
			if string(r.Line) != want[i] {
				t.Errorf("%s: row %d = %s, want %s", enc.ct, i, r.Line, want[i])
			}
		}
	}
}
