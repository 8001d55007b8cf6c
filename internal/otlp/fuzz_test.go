package otlp

import (
	"testing"

	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

// fuzzDecode checks that Decode never panics, that every row it returns is
// a JSON object, and that it returns exactly one row per record as counted
// by pdata itself, so nothing is dropped silently.
func fuzzDecode(f *testing.F, sig Signal, seeds []bodies, specJSON string, countRecords func(body []byte, isJSON bool) int) {
	for _, b := range seeds {
		f.Add(false, b.proto)
		if b.json != nil {
			f.Add(true, b.json)
		}
	}
	f.Add(true, []byte(specJSON))
	f.Add(true, []byte(`{}`))
	f.Add(false, []byte{})
	f.Add(false, []byte{0x0a, 0x00})
	f.Fuzz(func(t *testing.T, isJSON bool, body []byte) {
		contentType := protoType
		if isJSON {
			contentType = jsonType
		}
		rows, err := decodeLines(sig, contentType, body)
		if err != nil {
			return
		}
		checkRows(t, rows)
		if isJSON && pdataDesyncs(body) {
			return // pdata's count would be of a different request (see pdataDesyncs)
		}
		if n := countRecords(body, isJSON); len(rows) != n {
			t.Fatalf("%d rows for %d records", len(rows), n)
		}
	})
}

func FuzzDecodeLogs(f *testing.F) {
	fuzzDecode(f, Logs, []bodies{logsBodies(f, fullLogs()), logsBodies(f, unnamedLogs())}, specLogsJSON,
		func(body []byte, isJSON bool) int {
			req := plogotlp.NewExportRequest()
			_ = unmarshal(Logs, req, body, isJSON)
			return req.Logs().LogRecordCount()
		})
}

func FuzzDecodeTraces(f *testing.F) {
	fuzzDecode(f, Traces, []bodies{tracesBodies(f, fullTraces()), tracesBodies(f, oddTraces())}, specTracesJSON,
		func(body []byte, isJSON bool) int {
			req := ptraceotlp.NewExportRequest()
			_ = unmarshal(Traces, req, body, isJSON)
			return req.Traces().SpanCount()
		})
}

func FuzzDecodeMetrics(f *testing.F) {
	fuzzDecode(f, Metrics, []bodies{metricsBodies(f, fullMetrics()), metricsProtoOnly(f, nonFiniteMetrics())}, specMetricsJSON,
		func(body []byte, isJSON bool) int {
			req := pmetricotlp.NewExportRequest()
			_ = unmarshal(Metrics, req, body, isJSON)
			return req.Metrics().DataPointCount()
		})
}
