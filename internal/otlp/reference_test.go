package otlp

// The pdata-based decoder this package used before it parsed OTLP itself,
// kept as the reference the differential fuzz targets compare against.

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/hyp-project/hyp/internal/partition"
)

// refDecode is Decode through pdata.
func refDecode(sig Signal, contentType string, body []byte) ([]Row, error) {
	isJSON, err := parseContentType(contentType)
	if err != nil {
		return nil, err
	}
	switch sig {
	case Logs:
		return refDecodeLogs(body, isJSON)
	case Traces:
		return refDecodeTraces(body, isJSON)
	case Metrics:
		return refDecodeMetrics(body, isJSON)
	}
	return nil, fmt.Errorf("otlp: unknown signal %q", sig)
}

// request is what the pdata ExportRequest types of all three signals have in
// common, so body decoding and encoding are written once.
type request interface {
	UnmarshalProto([]byte) error
	UnmarshalJSON([]byte) error
	MarshalProto() ([]byte, error)
	MarshalJSON() ([]byte, error)
}

func newRequest(sig Signal) request {
	switch sig {
	case Logs:
		return plogotlp.NewExportRequest()
	case Traces:
		return ptraceotlp.NewExportRequest()
	}
	return pmetricotlp.NewExportRequest()
}

// refWriter writes the reference's rows as JSON text. It is written for this test
// from the standard library alone and shares no code with jsonWriter (jsonw.go), so a
// bug in the production writer (escaping, number, time, base64 or hex formatting) is
// not repeated here; compareWithReference compares rows by their JSON meaning, not their
// bytes, so the two writers may choose different spellings of the same value.
type refWriter struct{ b []byte }

func (w *refWriter) reset() { w.b = w.b[:0] }

// sep writes the ',' due before a member or element unless it is the first of its
// container.
func (w *refWriter) sep() {
	if n := len(w.b); n > 0 && w.b[n-1] != '{' && w.b[n-1] != '[' {
		w.b = append(w.b, ',')
	}
}

func (w *refWriter) beginObject() { w.b = append(w.b, '{') }
func (w *refWriter) endObject()   { w.b = append(w.b, '}') }
func (w *refWriter) beginArray()  { w.b = append(w.b, '[') }
func (w *refWriter) endArray()    { w.b = append(w.b, ']') }

func (w *refWriter) key(k string) {
	w.sep()
	w.str(k)
	w.b = append(w.b, ':')
}

// str writes s as a JSON string through encoding/json, which also replaces invalid
// UTF-8 with U+FFFD as the package doc requires.
func (w *refWriter) str(s string) {
	q, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	w.b = append(w.b, q...)
}

func (w *refWriter) intVal(v int64)   { w.b = append(w.b, strconv.FormatInt(v, 10)...) }
func (w *refWriter) uintVal(v uint64) { w.b = append(w.b, strconv.FormatUint(v, 10)...) }
func (w *refWriter) boolVal(v bool)   { w.b = append(w.b, strconv.FormatBool(v)...) }

// floatVal writes a double so that it reads back as a double (the package doc: it
// always carries a '.' or an exponent), and NaN and ±Inf as the strings "NaN",
// "Infinity" and "-Infinity". Unlike jsonWriter it uses strconv's 'g' notation (1e+06
// where jsonWriter writes 1000000.0); the comparison is by value.
func (w *refWriter) floatVal(f float64) {
	switch {
	case math.IsNaN(f):
		w.str("NaN")
		return
	case math.IsInf(f, 1):
		w.str("Infinity")
		return
	case math.IsInf(f, -1):
		w.str("-Infinity")
		return
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	w.b = append(w.b, s...)
}

func (w *refWriter) strField(k, v string) {
	if v != "" {
		w.key(k)
		w.str(v)
	}
}

func (w *refWriter) intField(k string, v int64) {
	w.key(k)
	w.intVal(v)
}

func (w *refWriter) uintField(k string, v uint64) {
	w.key(k)
	w.uintVal(v)
}

func (w *refWriter) nonZeroField(k string, v uint64) {
	if v != 0 {
		w.uintField(k, v)
	}
}

func (w *refWriter) floatField(k string, v float64) {
	w.key(k)
	w.floatVal(v)
}

func (w *refWriter) boolField(k string, v bool) {
	w.key(k)
	w.boolVal(v)
}

// enumField writes a known enum value by its name and an unknown one (name == "") as
// its decimal number in a string.
func (w *refWriter) enumField(k, name string, v int32) {
	w.key(k)
	if name == "" {
		name = strconv.Itoa(int(v))
	}
	w.str(name)
}

// refDecodeLogs produces the row shape documented in the package comment,
// where callers of Decode can see it.
// refBodyField is the field each kind of body goes to (SPEC 4), as the package doc says.
var refBodyField = map[pcommon.ValueType]string{
	pcommon.ValueTypeStr:    "body",
	pcommon.ValueTypeBool:   "body__boolean",
	pcommon.ValueTypeInt:    "body__long",
	pcommon.ValueTypeDouble: "body__double",
	pcommon.ValueTypeBytes:  "body__bytes",
	pcommon.ValueTypeSlice:  "body__json",
	pcommon.ValueTypeMap:    "body__json",
}

func refDecodeLogs(body []byte, isJSON bool) ([]Row, error) {
	req := plogotlp.NewExportRequest()
	if err := unmarshal(Logs, req, body, isJSON); err != nil {
		return nil, err
	}
	ld := req.Logs()
	rb := newRefRowBuilder(ld.LogRecordCount())
	for _, rl := range ld.ResourceLogs().All() {
		for _, sl := range rl.ScopeLogs().All() {
			rb.setScope(rl.Resource(), sl.Scope())
			for _, lr := range sl.LogRecords().All() {
				refWriteLogRecord(rb.begin(), lr)
				rb.end()
			}
		}
	}
	return rb.rows, nil
}

func refWriteLogRecord(w *refWriter, lr plog.LogRecord) {
	w.timeField("timestamp", lr.Timestamp())
	w.timeField("observed_timestamp", lr.ObservedTimestamp())
	w.strField("severity_text", lr.SeverityText())
	if n := lr.SeverityNumber(); n != plog.SeverityNumberUnspecified {
		w.intField("severity_number", int64(n))
	}
	w.strField("event_name", lr.EventName())
	// An unset body is absent, not null: rows stay null-free.
	if b := lr.Body(); b.Type() != pcommon.ValueTypeEmpty {
		w.key(refBodyField[b.Type()])
		w.value(b)
	}
	w.attrsField("attributes", lr.Attributes())
	w.nonZeroField("dropped_attributes_count", uint64(lr.DroppedAttributesCount()))
	w.traceIDField("trace_id", lr.TraceID())
	w.spanIDField("span_id", lr.SpanID())
	w.nonZeroField("flags", uint64(lr.Flags()))
}

// refDecodeTraces produces the row shape documented in the package comment,
// where callers of Decode can see it.
func refDecodeTraces(body []byte, isJSON bool) ([]Row, error) {
	req := ptraceotlp.NewExportRequest()
	if err := unmarshal(Traces, req, body, isJSON); err != nil {
		return nil, err
	}
	td := req.Traces()
	rb := newRefRowBuilder(td.SpanCount())
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			rb.setScope(rs.Resource(), ss.Scope())
			for _, span := range ss.Spans().All() {
				refWriteSpan(rb.begin(), span)
				rb.end()
			}
		}
	}
	return rb.rows, nil
}

func refWriteSpan(w *refWriter, span ptrace.Span) {
	w.traceIDField("trace_id", span.TraceID())
	w.spanIDField("span_id", span.SpanID())
	w.spanIDField("parent_span_id", span.ParentSpanID())
	w.strField("trace_state", span.TraceState().AsRaw())
	w.nonZeroField("flags", uint64(span.Flags()))
	w.key("name")
	w.str(span.Name())
	w.enumField("kind", strings.ToLower(span.Kind().String()), int32(span.Kind()))
	start, end := span.StartTimestamp(), span.EndTimestamp()
	w.timeField("start_time", start)
	w.timeField("end_time", end)
	// Without both ends the difference would be a meaningless epoch offset.
	if start != 0 && end != 0 {
		refWriteDuration(w, start, end)
	}
	status := span.Status()
	w.enumField("status_code", strings.ToLower(status.Code().String()), int32(status.Code()))
	w.strField("status_message", status.Message())
	w.attrsField("attributes", span.Attributes())
	w.nonZeroField("dropped_attributes_count", uint64(span.DroppedAttributesCount()))
	refWriteEvents(w, span.Events())
	w.nonZeroField("dropped_events_count", uint64(span.DroppedEventsCount()))
	refWriteLinks(w, span.Links())
	w.nonZeroField("dropped_links_count", uint64(span.DroppedLinksCount()))
}

// refWriteDuration writes end-start in nanoseconds. A span that ends before it
// starts (clock skew) gets a negative duration rather than a wrapped-around
// uint64, and the arithmetic stays unsigned so no input can overflow it.
func refWriteDuration(w *refWriter, start, end pcommon.Timestamp) {
	w.key("duration_ns")
	if end >= start {
		w.uintVal(uint64(end - start))
		return
	}
	w.b = append(w.b, '-')
	w.uintVal(uint64(start - end))
}

func refWriteEvents(w *refWriter, events ptrace.SpanEventSlice) {
	if events.Len() == 0 {
		return
	}
	w.key("events")
	w.beginArray()
	for _, ev := range events.All() {
		w.sep()
		w.beginObject()
		w.timeField("time", ev.Timestamp())
		w.key("name")
		w.str(ev.Name())
		w.attrsField("attributes", ev.Attributes())
		w.nonZeroField("dropped_attributes_count", uint64(ev.DroppedAttributesCount()))
		w.endObject()
	}
	w.endArray()
}

func refWriteLinks(w *refWriter, links ptrace.SpanLinkSlice) {
	if links.Len() == 0 {
		return
	}
	w.key("links")
	w.beginArray()
	for _, l := range links.All() {
		w.sep()
		w.beginObject()
		w.traceIDField("trace_id", l.TraceID())
		w.spanIDField("span_id", l.SpanID())
		w.strField("trace_state", l.TraceState().AsRaw())
		w.nonZeroField("flags", uint64(l.Flags()))
		w.attrsField("attributes", l.Attributes())
		w.nonZeroField("dropped_attributes_count", uint64(l.DroppedAttributesCount()))
		w.endObject()
	}
	w.endArray()
}

// refDecodeMetrics produces the row shape documented in the package comment,
// where callers of Decode can see it.
func refDecodeMetrics(body []byte, isJSON bool) ([]Row, error) {
	req := pmetricotlp.NewExportRequest()
	if err := unmarshal(Metrics, req, body, isJSON); err != nil {
		return nil, err
	}
	md := req.Metrics()
	rb := newRefRowBuilder(md.DataPointCount())
	for _, rm := range md.ResourceMetrics().All() {
		for _, sm := range rm.ScopeMetrics().All() {
			rb.setScope(rm.Resource(), sm.Scope())
			for _, m := range sm.Metrics().All() {
				refWriteMetricPoints(rb, m)
			}
		}
	}
	return rb.rows, nil
}

func refWriteMetricPoints(rb *refRowBuilder, m pmetric.Metric) {
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		for _, dp := range m.Gauge().DataPoints().All() {
			w := refBeginPoint(rb, m, "gauge", dp.Attributes(), dp.StartTimestamp(), dp.Timestamp(), dp.Flags())
			refWriteNumber(w, dp)
			refWriteExemplars(w, dp.Exemplars())
			rb.end()
		}
	case pmetric.MetricTypeSum:
		sum := m.Sum()
		for _, dp := range sum.DataPoints().All() {
			w := refBeginPoint(rb, m, "sum", dp.Attributes(), dp.StartTimestamp(), dp.Timestamp(), dp.Flags())
			refWriteNumber(w, dp)
			w.boolField("is_monotonic", sum.IsMonotonic())
			refWriteTemporality(w, sum.AggregationTemporality())
			refWriteExemplars(w, dp.Exemplars())
			rb.end()
		}
	case pmetric.MetricTypeHistogram:
		h := m.Histogram()
		for _, dp := range h.DataPoints().All() {
			w := refBeginPoint(rb, m, "histogram", dp.Attributes(), dp.StartTimestamp(), dp.Timestamp(), dp.Flags())
			w.uintField("count", dp.Count())
			if dp.HasSum() {
				w.floatField("sum", dp.Sum())
			}
			if dp.HasMin() {
				w.floatField("min", dp.Min())
			}
			if dp.HasMax() {
				w.floatField("max", dp.Max())
			}
			w.uintsField("bucket_counts", dp.BucketCounts())
			w.floatsField("explicit_bounds", dp.ExplicitBounds())
			refWriteTemporality(w, h.AggregationTemporality())
			refWriteExemplars(w, dp.Exemplars())
			rb.end()
		}
	case pmetric.MetricTypeExponentialHistogram:
		h := m.ExponentialHistogram()
		for _, dp := range h.DataPoints().All() {
			w := refBeginPoint(rb, m, "exponential_histogram", dp.Attributes(), dp.StartTimestamp(), dp.Timestamp(), dp.Flags())
			w.uintField("count", dp.Count())
			if dp.HasSum() {
				w.floatField("sum", dp.Sum())
			}
			if dp.HasMin() {
				w.floatField("min", dp.Min())
			}
			if dp.HasMax() {
				w.floatField("max", dp.Max())
			}
			w.intField("scale", int64(dp.Scale()))
			w.uintField("zero_count", dp.ZeroCount())
			if zt := dp.ZeroThreshold(); zt != 0 {
				w.floatField("zero_threshold", zt)
			}
			refWriteBuckets(w, "positive", dp.Positive())
			refWriteBuckets(w, "negative", dp.Negative())
			refWriteTemporality(w, h.AggregationTemporality())
			refWriteExemplars(w, dp.Exemplars())
			rb.end()
		}
	case pmetric.MetricTypeSummary:
		for _, dp := range m.Summary().DataPoints().All() {
			w := refBeginPoint(rb, m, "summary", dp.Attributes(), dp.StartTimestamp(), dp.Timestamp(), dp.Flags())
			w.uintField("count", dp.Count())
			w.floatField("sum", dp.Sum())
			w.key("quantile_values")
			w.beginArray()
			for _, q := range dp.QuantileValues().All() {
				w.sep()
				w.beginObject()
				w.floatField("quantile", q.Quantile())
				w.floatField("value", q.Value())
				w.endObject()
			}
			w.endArray()
			rb.end()
		}
	}
}

// refBeginPoint starts a data point row with the fields every point type has.
func refBeginPoint(rb *refRowBuilder, m pmetric.Metric, typ string, attrs pcommon.Map, start, ts pcommon.Timestamp, flags pmetric.DataPointFlags) *refWriter {
	w := rb.begin()
	w.key("metric_name")
	w.str(m.Name())
	w.strField("metric_description", m.Description())
	w.strField("metric_unit", m.Unit())
	w.key("metric_type")
	w.str(typ)
	w.attrsField("metric_metadata", m.Metadata())
	w.timeField("start_time", start)
	w.timeField("time", ts)
	w.attrsField("attributes", attrs)
	w.nonZeroField("flags", uint64(flags))
	return w
}

func refWriteNumber(w *refWriter, dp pmetric.NumberDataPoint) {
	switch dp.ValueType() {
	case pmetric.NumberDataPointValueTypeInt:
		w.intField("value", dp.IntValue())
	case pmetric.NumberDataPointValueTypeDouble:
		w.floatField("value", dp.DoubleValue())
	}
}

func refWriteTemporality(w *refWriter, t pmetric.AggregationTemporality) {
	w.enumField("aggregation_temporality", strings.ToLower(t.String()), int32(t))
}

func refWriteBuckets(w *refWriter, k string, b pmetric.ExponentialHistogramDataPointBuckets) {
	w.key(k)
	w.beginObject()
	w.intField("offset", int64(b.Offset()))
	w.uintsField("bucket_counts", b.BucketCounts())
	w.endObject()
}

func refWriteExemplars(w *refWriter, exemplars pmetric.ExemplarSlice) {
	if exemplars.Len() == 0 {
		return
	}
	w.key("exemplars")
	w.beginArray()
	for _, ex := range exemplars.All() {
		w.sep()
		w.beginObject()
		w.timeField("time", ex.Timestamp())
		switch ex.ValueType() {
		case pmetric.ExemplarValueTypeInt:
			w.intField("value", ex.IntValue())
		case pmetric.ExemplarValueTypeDouble:
			w.floatField("value", ex.DoubleValue())
		}
		w.traceIDField("trace_id", ex.TraceID())
		w.spanIDField("span_id", ex.SpanID())
		w.attrsField("filtered_attributes", ex.FilteredAttributes())
		w.endObject()
	}
	w.endArray()
}
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

func refSource(res pcommon.Resource) string {
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

// refRowBuilder renders the rows of one request. The resource and scope fields
// are the same for every record of a scope, so they are rendered once into
// prefix and copied in front of each record.
type refRowBuilder struct {
	w      refWriter
	prefix []byte
	source string
	rows   []Row
}

func newRefRowBuilder(capacity int) *refRowBuilder {
	return &refRowBuilder{rows: make([]Row, 0, capacity)}
}

// setScope renders the fields shared by every record of one scope.
func (rb *refRowBuilder) setScope(res pcommon.Resource, scope pcommon.InstrumentationScope) {
	rb.source = refSource(res)
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
func (rb *refRowBuilder) begin() *refWriter {
	rb.w.b = append(rb.w.b[:0], rb.prefix...)
	return &rb.w
}

// end closes the record row. The line is copied out because the writer's
// buffer is reused for the next record.
func (rb *refRowBuilder) end() {
	rb.w.endObject()
	rb.rows = append(rb.rows, Row{Source: rb.source, Line: bytes.Clone(rb.w.b)})
}

// timeField writes ts, nanoseconds since the epoch, as an RFC 3339 UTC string with the
// fraction's trailing zeros dropped (time.RFC3339Nano); 0 means "not set".
func (w *refWriter) timeField(k string, ts pcommon.Timestamp) {
	if ts == 0 {
		return
	}
	w.key(k)
	// Not ts.AsTime(): it converts through int64 and turns timestamps past
	// 2262 into dates before 1970; splitting keeps them monotonic.
	t := time.Unix(int64(ts/1e9), int64(ts%1e9)).UTC()
	w.str(t.Format(time.RFC3339Nano))
}

func (w *refWriter) traceIDField(k string, id pcommon.TraceID) {
	if !id.IsEmpty() {
		w.hexField(k, id[:])
	}
}

func (w *refWriter) spanIDField(k string, id pcommon.SpanID) {
	if !id.IsEmpty() {
		w.hexField(k, id[:])
	}
}

func (w *refWriter) hexField(k string, id []byte) {
	w.key(k)
	w.str(hex.EncodeToString(id))
}

func (w *refWriter) attrsField(k string, m pcommon.Map) {
	if m.Len() > 0 {
		w.key(k)
		w.mapValue(m)
	}
}

func (w *refWriter) uintsField(k string, s pcommon.UInt64Slice) {
	w.key(k)
	w.beginArray()
	for _, v := range s.All() {
		w.sep()
		w.uintVal(v)
	}
	w.endArray()
}

func (w *refWriter) floatsField(k string, s pcommon.Float64Slice) {
	w.key(k)
	w.beginArray()
	for _, v := range s.All() {
		w.sep()
		w.floatVal(v)
	}
	w.endArray()
}

func (w *refWriter) value(v pcommon.Value) {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		w.str(v.Str())
	case pcommon.ValueTypeBool:
		w.boolVal(v.Bool())
	case pcommon.ValueTypeInt:
		w.intVal(v.Int())
	case pcommon.ValueTypeDouble:
		w.floatVal(v.Double())
	case pcommon.ValueTypeBytes:
		w.str(base64.StdEncoding.EncodeToString(v.Bytes().AsRaw()))
	case pcommon.ValueTypeMap:
		w.mapValue(v.Map())
	case pcommon.ValueTypeSlice:
		w.beginArray()
		for _, e := range v.Slice().All() {
			w.sep()
			w.value(e)
		}
		w.endArray()
	default:
		w.b = append(w.b, "null"...)
	}
}

// mapValue writes m as an object. Keys repeated in m (which OTLP forbids but
// the wire format allows) are written once, with their first value.
func (w *refWriter) mapValue(m pcommon.Map) {
	seen := make(map[string]bool, m.Len())
	w.beginObject()
	for k, v := range m.All() {
		if seen[k] {
			continue
		}
		seen[k] = true
		w.key(k)
		w.value(v)
	}
	w.endObject()
}
