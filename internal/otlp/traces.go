package otlp

import (
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

// decodeTraces produces the row shape documented in the package comment,
// where callers of Decode can see it.
func decodeTraces(body []byte, isJSON bool) ([]Row, error) {
	req := ptraceotlp.NewExportRequest()
	if err := unmarshal(Traces, req, body, isJSON); err != nil {
		return nil, err
	}
	td := req.Traces()
	rb := newRowBuilder(td.SpanCount())
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			rb.setScope(rs.Resource(), ss.Scope())
			for _, span := range ss.Spans().All() {
				writeSpan(rb.begin(), span)
				rb.end()
			}
		}
	}
	return rb.rows, nil
}

func writeSpan(w *jsonWriter, span ptrace.Span) {
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
		writeDuration(w, start, end)
	}
	status := span.Status()
	w.enumField("status_code", strings.ToLower(status.Code().String()), int32(status.Code()))
	w.strField("status_message", status.Message())
	w.attrsField("attributes", span.Attributes())
	w.nonZeroField("dropped_attributes_count", uint64(span.DroppedAttributesCount()))
	writeEvents(w, span.Events())
	w.nonZeroField("dropped_events_count", uint64(span.DroppedEventsCount()))
	writeLinks(w, span.Links())
	w.nonZeroField("dropped_links_count", uint64(span.DroppedLinksCount()))
}

// writeDuration writes end-start in nanoseconds. A span that ends before it
// starts (clock skew) gets a negative duration rather than a wrapped-around
// uint64, and the arithmetic stays unsigned so no input can overflow it.
func writeDuration(w *jsonWriter, start, end pcommon.Timestamp) {
	w.key("duration_ns")
	if end >= start {
		w.uintVal(uint64(end - start))
		return
	}
	w.b = append(w.b, '-')
	w.uintVal(uint64(start - end))
}

func writeEvents(w *jsonWriter, events ptrace.SpanEventSlice) {
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

func writeLinks(w *jsonWriter, links ptrace.SpanLinkSlice) {
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
