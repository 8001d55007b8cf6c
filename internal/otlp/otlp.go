// Package otlp owns turning OTLP/HTTP export requests (logs, traces,
// metrics; protobuf or JSON) into flat, single-line JSON rows ready for the
// cache. It never stores anything: the caller decides where rows go. It never
// drops a record silently either: every log record, span and metric data
// point in a request becomes exactly one row, or Decode returns an error.
//
// Decoding goes through go.opentelemetry.io/collector/pdata rather than the
// generated proto types with protojson, because OTLP/JSON encodes trace and
// span ids as hex while protojson would treat them as base64 bytes.
//
// # Row shapes
//
// Keys appear in the order listed, so the same request always yields the
// same bytes. Keys whose value is empty or zero are omitted unless marked
// "always"; rows contain no top-level nulls.
//
// Every row starts with the fields of its resource and scope: resource (the
// resource attributes), scope_name, scope_version, scope_attributes.
//
// Log record: timestamp, observed_timestamp, severity_text,
// severity_number, event_name, body (the AnyValue, converted like an
// attribute value), attributes, dropped_attributes_count, trace_id, span_id,
// flags.
//
// Span: trace_id, span_id, parent_span_id, trace_state, flags, name
// (always), kind (always), start_time, end_time, duration_ns (end minus
// start, only when both are set; negative when the span ends before it
// starts), status_code (always), status_message, attributes,
// dropped_attributes_count, events ([{time, name, attributes,
// dropped_attributes_count}]), dropped_events_count, links ([{trace_id,
// span_id, trace_state, flags, attributes, dropped_attributes_count}]),
// dropped_links_count. kind is pdata's SpanKind name in lower case
// ("unspecified", "internal", "server", "client", "producer", "consumer");
// status_code likewise ("unset", "ok", "error").
//
// Metric data point: metric_name (always), metric_description, metric_unit,
// metric_type (always: "gauge", "sum", "histogram", "exponential_histogram"
// or "summary"), metric_metadata, start_time, time, attributes, flags, then
// by type:
//   - gauge: value (a JSON integer or double as the point carries it;
//     absent when the point has none);
//   - sum: value, is_monotonic (always), aggregation_temporality (always:
//     "unspecified", "delta" or "cumulative");
//   - histogram: count (always), sum, min, max (each only when the point
//     has it), bucket_counts and explicit_bounds (always, possibly []),
//     aggregation_temporality;
//   - exponential_histogram: count, sum, min, max as for histograms, scale,
//     zero_count (always), zero_threshold, positive and negative (always,
//     {offset, bucket_counts}), aggregation_temporality;
//   - summary: count, sum, quantile_values (always, [{quantile, value}]);
//
// and for all but summaries exemplars ([{time, value, trace_id, span_id,
// filtered_attributes}]). A metric without data points has no record to
// turn into a row, so it yields none.
//
// # Value encoding
//
//   - timestamps are RFC 3339 strings with nanoseconds in UTC; a zero
//     timestamp means "not set" in OTLP, so its key is omitted;
//   - trace and span ids are lowercase hex; all-zero ids are omitted;
//   - severity_number 0 is OTLP's "unspecified" and is omitted;
//   - enums (span kind, status code, aggregation temporality) are lowercase
//     names; a value this package does not know is written as its decimal
//     number in a string ("9"), so it is neither lost nor confused with a
//     known name;
//   - doubles always carry a '.' or an exponent so a reader never mistakes
//     2.0 for an integer; NaN and ±Inf, which JSON cannot represent, become
//     the strings "NaN", "Infinity" and "-Infinity";
//   - attribute values keep their OTLP type: string, bool, int, double,
//     bytes (standard base64 string), array and kvlist (object); an unset
//     AnyValue nested in an attribute becomes null, because dropping it
//     would lose the key or shift array positions;
//   - when a key repeats in one attribute list (which OTLP forbids) the
//     first occurrence wins, as with pdata's Map.Get, so an object never
//     holds the same key twice;
//   - invalid UTF-8 in strings is replaced with U+FFFD so every row is
//     valid JSON.
package otlp

import (
	"bytes"
	"errors"
	"fmt"
	"mime"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/hyp-project/hyp/internal/partition"
)

// Signal names one OTLP signal; its value is also the dataset name the
// rows belong to.
type Signal string

// The signals of OTLP/HTTP: POST /v1/logs, /v1/traces and /v1/metrics.
const (
	Logs    Signal = "logs"
	Traces  Signal = "traces"
	Metrics Signal = "metrics"
)

// Row is one flattened record.
type Row struct {
	// Source is the resource's service.name attribute made a valid source
	// value (partition.SanitizeSource), or "unknown" when it is absent or
	// empty; the cache partitions datasets by it.
	Source string
	// Line is a single-line JSON object without a trailing newline.
	Line []byte
}

// ErrUnsupportedMediaType is returned when the content type is neither
// application/x-protobuf nor application/json, so the HTTP layer can answer
// 415 instead of 400.
var ErrUnsupportedMediaType = errors.New("otlp: unsupported media type: want application/x-protobuf or application/json")

// request is what the pdata ExportRequest types of all three signals have in
// common, so body decoding is written once.
type request interface {
	UnmarshalProto([]byte) error
	UnmarshalJSON([]byte) error
}

// Decode parses an OTLP/HTTP export body of the given signal and returns one
// row per log record, span or metric data point, in input order. The body
// must already be decompressed. Parameters of contentType such as charset
// are ignored. A malformed body returns an error whose message says what is
// wrong.
func Decode(sig Signal, contentType string, body []byte) ([]Row, error) {
	isJSON, err := parseContentType(contentType)
	if err != nil {
		return nil, err
	}
	switch sig {
	case Logs:
		return decodeLogs(body, isJSON)
	case Traces:
		return decodeTraces(body, isJSON)
	case Metrics:
		return decodeMetrics(body, isJSON)
	}
	return nil, fmt.Errorf("otlp: unknown signal %q", sig)
}

func parseContentType(contentType string) (isJSON bool, err error) {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false, fmt.Errorf("%w: %q", ErrUnsupportedMediaType, contentType)
	}
	switch mt {
	case "application/x-protobuf":
		return false, nil
	case "application/json":
		return true, nil
	}
	return false, fmt.Errorf("%w: %q", ErrUnsupportedMediaType, mt)
}

// maxJSONDepth bounds how deeply a JSON body may nest. pdata's protobuf
// decoder stops at 100 nested AnyValues, but its JSON decoder recurses
// without limit, and a body of a few tens of megabytes nested deeply enough
// overflows the goroutine stack, a fatal error no recover can catch. A
// legitimate request nests about a dozen levels plus three per AnyValue
// level, so this leaves room for the 100 levels protobuf allows.
const maxJSONDepth = 512

func unmarshal(sig Signal, req request, body []byte, isJSON bool) error {
	var err error
	format := "protobuf"
	if isJSON {
		format = "JSON"
		err = checkJSONDepth(body)
		if err == nil {
			err = req.UnmarshalJSON(body)
		}
	} else {
		err = req.UnmarshalProto(body)
	}
	if err != nil {
		return fmt.Errorf("otlp: malformed %s %s body: %w", sig, format, err)
	}
	return nil
}

// checkJSONDepth rejects bodies nested deeper than maxJSONDepth. It only
// tracks brackets outside strings; everything else is left to the decoder.
func checkJSONDepth(body []byte) error {
	depth := 0
	inString, escaped := false, false
	for _, c := range body {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch c {
			case '\\':
				escaped = true
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			if depth > maxJSONDepth {
				return fmt.Errorf("nested deeper than %d levels", maxJSONDepth)
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return nil
}

func source(res pcommon.Resource) string {
	v, ok := res.Attributes().Get("service.name")
	if !ok {
		return partition.Unknown
	}
	// AsString rather than Str: a non-string service.name is a client bug,
	// but its value still names the service better than "unknown" does. So
	// does a name too long or with control characters: it is mapped to a
	// valid source rather than left for the cache to file under "unknown".
	return partition.SanitizeSource(v.AsString())
}

// rowBuilder renders the rows of one request. The resource and scope fields
// are the same for every record of a scope, so they are rendered once into
// prefix and copied in front of each record.
type rowBuilder struct {
	w      jsonWriter
	prefix []byte
	source string
	rows   []Row
}

func newRowBuilder(capacity int) *rowBuilder {
	return &rowBuilder{rows: make([]Row, 0, capacity)}
}

// setScope renders the fields shared by every record of one scope.
func (rb *rowBuilder) setScope(res pcommon.Resource, scope pcommon.InstrumentationScope) {
	rb.source = source(res)
	w := &rb.w
	w.reset()
	w.beginObject()
	w.attrsField("resource", res.Attributes())
	w.strField("scope_name", scope.Name())
	w.strField("scope_version", scope.Version())
	w.attrsField("scope_attributes", scope.Attributes())
	rb.prefix = append(rb.prefix[:0], w.b...)
}

// begin starts a record row and returns the writer to add its fields to.
func (rb *rowBuilder) begin() *jsonWriter {
	rb.w.b = append(rb.w.b[:0], rb.prefix...)
	return &rb.w
}

// end closes the record row. The line is copied out because the writer's
// buffer is reused for the next record.
func (rb *rowBuilder) end() {
	rb.w.endObject()
	rb.rows = append(rb.rows, Row{Source: rb.source, Line: bytes.Clone(rb.w.b)})
}
