// Package otlp owns turning OTLP/HTTP export requests (logs, traces,
// metrics; protobuf or JSON) into flat rows ready for the cache, written in the
// cache's row form (top-level fields framed, each value JSON text) so the cache
// never parses them. It never stores anything: the caller decides where rows go. It never
// drops a record silently either: every log record, span and metric data
// point in a request becomes exactly one row, or Decode returns an error.
//
// Both encodings are parsed by decoders generated from one table of the
// OTLP messages (table.go), straight into a reusable arena (no pdata
// objects, nothing allocated per record) and the rows of a request share
// one output buffer, which a Batch keeps for the next request. Rows are
// framed in it as the cache's log keeps a partition's rows
// (rowform.RowGroup), so the cache logs the buffer without copying the rows.
// What they accept is what the OpenTelemetry Collector's pdata accepts,
// decoded to the same rows; the differential fuzz targets hold them to
// that, with pdata as the reference, and to pdata's own JSON and protobuf
// marshalling of what it parsed. OTLP/JSON differs
// from protojson: ids are hex, and 64-bit integers may be numbers or
// strings.
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
// attribute value, under a name that keeps its kind: body for a string,
// body__long, body__double, body__boolean, body__bytes, and body__json for a
// kvlist or an array), attributes, dropped_attributes_count, trace_id, span_id,
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
	"errors"
	"fmt"
	"mime"
	"sync"
	"unsafe"

	"github.com/hyp-project/hyp/internal/rowform"
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

// Row is one flattened record, in the form the cache takes it (rowform.Row).
// Source is the resource's service.name attribute made a valid source value
// (partition.SanitizeSource), or "unknown" when it is absent or empty; the
// cache partitions datasets by it. Line is the row in the cache's row form
// (rowform.BeginField): its top-level fields, each value JSON text;
// rowform.RowJSON turns it into the JSON object the row shapes above describe.
type Row = rowform.Row

// Batch holds the rows of one decoded request and the buffers their lines
// share. Decoding into a Batch that held an earlier request reuses its
// memory, so a busy endpoint does not allocate every request's rows anew;
// the earlier rows are overwritten.
type Batch struct {
	Rows []Row
	// Groups are the same rows framed for cache.IngestRowGroups: a group for each run of
	// rows of one source within one of the buffers, its body the rows' memory itself.
	Groups []rowform.RowGroup
	// chunks are the buffers the rows are written in. Rows go into chunks of
	// chunkBytes rather than one buffer grown by doubling, so what a request's rows
	// take is charged to its Meter as it is allocated, never twice over by copies.
	chunks [][]byte
}

// maxKept bounds the memory a Batch keeps across Reset, so a Batch kept for
// reuse never pins the memory of one unusually large request.
const maxKept = 4 << 20

// Reset empties b for reuse, dropping buffers beyond maxKept.
func (b *Batch) Reset() {
	kept, total := b.chunks[:0], 0
	for _, c := range b.chunks {
		if total+cap(c) <= maxKept {
			kept = append(kept, c[:0])
			total += cap(c)
		}
	}
	clear(b.chunks[len(kept):])
	b.chunks = kept
	if cap(b.Rows)*int(unsafe.Sizeof(Row{})) > maxKept {
		b.Rows = nil
	}
	clear(b.Rows) // the sources are strings of the request's own
	clear(b.Groups)
	b.Rows, b.Groups = b.Rows[:0], b.Groups[:0]
}

// ErrUnsupportedMediaType is returned when the content type is neither
// application/x-protobuf nor application/json, so the HTTP layer can answer
// 415 instead of 400.
var ErrUnsupportedMediaType = errors.New("otlp: unsupported media type: want application/x-protobuf or application/json")

// arenas keeps decoded-request arenas between requests so their slices are
// reused instead of allocated per request; it holds no request state.
var arenas = sync.Pool{New: func() any { return new(arena) }}

// Decode parses an OTLP/HTTP export body of the given signal and returns one
// row per log record, span or metric data point, in input order. The body
// must already be decompressed; the rows do not refer to it. Parameters of
// contentType such as charset are ignored. A malformed body returns an error
// whose message says what is wrong.
func Decode(sig Signal, contentType string, body []byte) ([]Row, error) {
	var b Batch
	if err := b.Decode(sig, contentType, body); err != nil {
		return nil, err
	}
	return b.Rows, nil
}

// Decode is the package's Decode into b: b.Rows are the request's rows, in
// memory b keeps for the next request, and b.Groups the same rows framed for
// the cache. On error both are empty.
func (b *Batch) Decode(sig Signal, contentType string, body []byte) error {
	return b.DecodeMetered(sig, contentType, body, nil)
}

// DecodeMetered is Decode with the memory it allocates beyond the body (the
// decoded model and the rows) charged to m first; nil charges nothing. When m
// refuses a charge, decoding stops there and the error wraps m's.
func (b *Batch) DecodeMetered(sig Signal, contentType string, body []byte, m Meter) (err error) {
	b.Rows, b.Groups = b.Rows[:0], b.Groups[:0]
	isJSON, err := parseContentType(contentType)
	if err != nil {
		return err
	}
	if sig != Logs && sig != Traces && sig != Metrics {
		return fmt.Errorf("otlp: unknown signal %q", sig)
	}
	a := arenas.Get().(*arena)
	defer arenas.Put(a)
	a.reset()
	a.meter = m
	defer func() {
		a.meter = nil
		r := recover()
		if r == nil {
			return
		}
		abort, ok := r.(meterAbort)
		if !ok {
			panic(r)
		}
		b.Reset()
		err = fmt.Errorf("otlp: decoding the %s request: %w", sig, abort.err)
	}()
	format := "protobuf"
	if isJSON {
		format = "JSON"
		d := jsonDecoder{a: a, b: body}
		err = d.decodeRequest(sig)
	} else {
		d := protoDecoder{a: a}
		err = d.decodeRequest(sig, body)
	}
	if err != nil {
		return fmt.Errorf("otlp: malformed %s %s body: %w", sig, format, err)
	}
	a.dropDeprecated(isJSON)
	// Rows repeat the resource and scope fields in each record and spell
	// out names protobuf numbers, so they outgrow a protobuf body; a JSON
	// body's rows take about its size, a little more when its records are
	// terse (the load generator's, 323 bytes a record, overflowed a
	// body-sized buffer by a few KiB, so every request took two chunks and
	// the cache merged them). Sizing the first buffer so saves most of that.
	hint := len(body) + len(body)/8 + 512
	if !isJSON {
		hint = 2*len(body) + 512
	}
	a.write(b, sig, hint)
	return nil
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

// maxJSONDepth bounds how deeply a JSON body may nest. pdata's JSON decoder,
// the reference, recurses without limit, and a body nested deeply enough
// would overflow a recursive decoder's stack, a fatal error no recover can
// catch. A legitimate request nests about a dozen levels plus three per
// AnyValue level, so this leaves room for the 100 levels protobuf allows.
const maxJSONDepth = 512
