package otlp

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
)

// decodeLogs produces the row shape documented in the package comment,
// where callers of Decode can see it.
func decodeLogs(body []byte, isJSON bool) ([]Row, error) {
	req := plogotlp.NewExportRequest()
	if err := unmarshal(Logs, req, body, isJSON); err != nil {
		return nil, err
	}
	ld := req.Logs()
	rb := newRowBuilder(ld.LogRecordCount())
	for _, rl := range ld.ResourceLogs().All() {
		for _, sl := range rl.ScopeLogs().All() {
			rb.setScope(rl.Resource(), sl.Scope())
			for _, lr := range sl.LogRecords().All() {
				writeLogRecord(rb.begin(), lr)
				rb.end()
			}
		}
	}
	return rb.rows, nil
}

func writeLogRecord(w *jsonWriter, lr plog.LogRecord) {
	w.timeField("timestamp", lr.Timestamp())
	w.timeField("observed_timestamp", lr.ObservedTimestamp())
	w.strField("severity_text", lr.SeverityText())
	if n := lr.SeverityNumber(); n != plog.SeverityNumberUnspecified {
		w.intField("severity_number", int64(n))
	}
	w.strField("event_name", lr.EventName())
	// An unset body is absent, not null: rows stay null-free.
	if b := lr.Body(); b.Type() != pcommon.ValueTypeEmpty {
		w.key("body")
		w.value(b)
	}
	w.attrsField("attributes", lr.Attributes())
	w.nonZeroField("dropped_attributes_count", uint64(lr.DroppedAttributesCount()))
	w.traceIDField("trace_id", lr.TraceID())
	w.spanIDField("span_id", lr.SpanID())
	w.nonZeroField("flags", uint64(lr.Flags()))
}
