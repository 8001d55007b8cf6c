package otlp

import (
	"math"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

// Fixtures shared by the table tests and the fuzz seed corpus.

// ts0 is 2018-12-13T14:51:00.3Z, the instant used by the OTLP spec examples.
const ts0 = pcommon.Timestamp(1544712660300000000)

var (
	specTraceID = pcommon.TraceID{0x5b, 0x8e, 0xff, 0xf7, 0x98, 0x03, 0x81, 0x03, 0xd2, 0x69, 0xb6, 0x33, 0x81, 0x3f, 0xc6, 0x0c}
	specSpanID  = pcommon.SpanID{0xee, 0xe1, 0x9b, 0x7e, 0xc3, 0xc1, 0xb1, 0x74}
	specParent  = pcommon.SpanID{0xee, 0xe1, 0x9b, 0x7e, 0xc3, 0xc1, 0xb1, 0x73}
	linkTraceID = pcommon.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	linkSpanID  = pcommon.SpanID{0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18}
)

// bodies holds one export request in both OTLP/HTTP encodings. json is nil
// when the request cannot be expressed in JSON (NaN and ±Inf doubles).
type bodies struct {
	proto, json []byte
}

func mustBodies(t testing.TB, marshalProto, marshalJSON func() ([]byte, error)) bodies {
	t.Helper()
	pb, err := marshalProto()
	if err != nil {
		t.Fatalf("marshal protobuf: %v", err)
	}
	var js []byte
	if marshalJSON != nil {
		if js, err = marshalJSON(); err != nil {
			t.Fatalf("marshal JSON: %v", err)
		}
	}
	return bodies{proto: pb, json: js}
}

func logsBodies(t testing.TB, ld plog.Logs) bodies {
	req := plogotlp.NewExportRequestFromLogs(ld)
	return mustBodies(t, req.MarshalProto, req.MarshalJSON)
}

func tracesBodies(t testing.TB, td ptrace.Traces) bodies {
	req := ptraceotlp.NewExportRequestFromTraces(td)
	return mustBodies(t, req.MarshalProto, req.MarshalJSON)
}

func metricsBodies(t testing.TB, md pmetric.Metrics) bodies {
	req := pmetricotlp.NewExportRequestFromMetrics(md)
	return mustBodies(t, req.MarshalProto, req.MarshalJSON)
}

func metricsProtoOnly(t testing.TB, md pmetric.Metrics) bodies {
	req := pmetricotlp.NewExportRequestFromMetrics(md)
	return mustBodies(t, req.MarshalProto, nil)
}

// putAllTypes adds one attribute of every AnyValue type, plus strings that
// need escaping.
func putAllTypes(m pcommon.Map) {
	m.PutStr("s", "x")
	m.PutBool("b", true)
	m.PutInt("i", -42)
	m.PutDouble("d", 2)
	m.PutDouble("f", 0.25)
	m.PutEmptyBytes("raw").FromRaw([]byte{0, 1, 2, 0xff})
	arr := m.PutEmptySlice("arr")
	arr.AppendEmpty().SetInt(1)
	arr.AppendEmpty().SetStr("two")
	arr.AppendEmpty().SetBool(false)
	kv := m.PutEmptyMap("kv")
	kv.PutStr("inner", "v")
	kv.PutInt("n", 1)
	m.PutStr("esc", "line\n\"quoted\"\t\x01\\ é")
}

func fullLogs() plog.Logs {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "checkout")
	rl.Resource().Attributes().PutStr("host.name", "h1")
	sl := rl.ScopeLogs().AppendEmpty()
	sl.Scope().SetName("hyp.test")
	sl.Scope().SetVersion("1.2.3")
	sl.Scope().Attributes().PutStr("lib.kind", "sdk")
	lr := sl.LogRecords().AppendEmpty()
	lr.SetTimestamp(ts0)
	lr.SetObservedTimestamp(ts0 + 1)
	lr.SetSeverityText("ERROR")
	lr.SetSeverityNumber(plog.SeverityNumberError)
	lr.SetEventName("payment.failed")
	lr.Body().SetStr("card declined")
	putAllTypes(lr.Attributes())
	lr.SetDroppedAttributesCount(3)
	lr.SetTraceID(specTraceID)
	lr.SetSpanID(specSpanID)
	lr.SetFlags(plog.DefaultLogRecordFlags.WithIsSampled(true))
	return ld
}

// unnamedLogs has resources that do not name their service, in several
// ways, and records in more than one scope to pin the row order.
func unnamedLogs() plog.Logs {
	ld := plog.NewLogs()

	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("host.name", "h2")
	body := rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().Body().SetEmptyMap()
	body.PutStr("msg", "hi")
	body.PutInt("level", 3)

	rl = ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "")
	rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().SetSeverityText("INFO")

	rl = ld.ResourceLogs().AppendEmpty()
	rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()

	rl = ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "api")
	for _, scope := range []string{"a", "b"} {
		sl := rl.ScopeLogs().AppendEmpty()
		sl.Scope().SetName(scope)
		for _, msg := range []string{"1", "2"} {
			sl.LogRecords().AppendEmpty().Body().SetStr(scope + msg)
		}
	}
	return ld
}

func fullTraces() ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "checkout")
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("hyp.test")
	span := ss.Spans().AppendEmpty()
	span.SetTraceID(specTraceID)
	span.SetSpanID(specSpanID)
	span.SetParentSpanID(specParent)
	span.TraceState().FromRaw("k=v")
	span.SetFlags(257)
	span.SetName("GET /pay")
	span.SetKind(ptrace.SpanKindServer)
	span.SetStartTimestamp(ts0)
	span.SetEndTimestamp(ts0 + 1500000)
	span.Status().SetCode(ptrace.StatusCodeError)
	span.Status().SetMessage("boom")
	span.Attributes().PutInt("http.status_code", 500)
	span.SetDroppedAttributesCount(1)
	ev := span.Events().AppendEmpty()
	ev.SetTimestamp(ts0 + 1000)
	ev.SetName("exception")
	ev.Attributes().PutStr("exception.type", "E")
	ev.SetDroppedAttributesCount(2)
	span.Events().AppendEmpty().SetName("no-time")
	span.SetDroppedEventsCount(4)
	link := span.Links().AppendEmpty()
	link.SetTraceID(linkTraceID)
	link.SetSpanID(linkSpanID)
	link.TraceState().FromRaw("a=b")
	link.SetFlags(1)
	link.Attributes().PutBool("l", true)
	link.SetDroppedAttributesCount(5)
	span.Links().AppendEmpty()
	span.SetDroppedLinksCount(6)
	return td
}

// oddTraces has spans without a service name: an empty one that ends before
// it starts, and one with enum values newer than this package.
func oddTraces() ptrace.Traces {
	td := ptrace.NewTraces()
	spans := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans()
	skewed := spans.AppendEmpty()
	skewed.SetStartTimestamp(ts0 + 10)
	skewed.SetEndTimestamp(ts0)
	future := spans.AppendEmpty()
	future.SetName("odd")
	future.SetKind(ptrace.SpanKind(9))
	future.Status().SetCode(ptrace.StatusCode(7))
	future.SetStartTimestamp(ts0)
	return td
}

func fullMetrics() pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "checkout")
	sm := rm.ScopeMetrics().AppendEmpty()
	sm.Scope().SetName("hyp.test")

	m := sm.Metrics().AppendEmpty()
	m.SetName("temp")
	m.SetDescription("Temperature")
	m.SetUnit("Cel")
	points := m.SetEmptyGauge().DataPoints()
	dp := points.AppendEmpty()
	dp.SetTimestamp(ts0)
	dp.Attributes().PutStr("room", "a")
	dp.SetIntValue(21)
	ex := dp.Exemplars().AppendEmpty()
	ex.SetTimestamp(ts0)
	ex.SetDoubleValue(20.5)
	ex.SetTraceID(specTraceID)
	ex.SetSpanID(specSpanID)
	ex.FilteredAttributes().PutStr("user", "u")
	dp.Exemplars().AppendEmpty().SetIntValue(3)
	dp = points.AppendEmpty()
	dp.SetStartTimestamp(ts0)
	dp.SetTimestamp(ts0 + 1)
	dp.SetDoubleValue(21.5)
	dp = points.AppendEmpty()
	dp.SetTimestamp(ts0)
	dp.SetFlags(pmetric.DefaultDataPointFlags.WithNoRecordedValue(true))

	m = sm.Metrics().AppendEmpty()
	m.SetName("requests")
	m.SetUnit("1")
	m.Metadata().PutStr("origin", "prom")
	sum := m.SetEmptySum()
	sum.SetIsMonotonic(true)
	sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	dp = sum.DataPoints().AppendEmpty()
	dp.SetStartTimestamp(ts0)
	dp.SetTimestamp(ts0 + 1e9)
	dp.SetIntValue(10)

	m = sm.Metrics().AppendEmpty()
	m.SetName("latency")
	m.SetUnit("ms")
	hist := m.SetEmptyHistogram()
	hist.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	hdp := hist.DataPoints().AppendEmpty()
	hdp.SetTimestamp(ts0)
	hdp.SetCount(3)
	hdp.SetSum(6)
	hdp.SetMin(1)
	hdp.SetMax(3)
	hdp.BucketCounts().FromRaw([]uint64{1, 1, 1})
	hdp.ExplicitBounds().FromRaw([]float64{1, 2})
	hist.DataPoints().AppendEmpty()

	m = sm.Metrics().AppendEmpty()
	m.SetName("size")
	exp := m.SetEmptyExponentialHistogram()
	exp.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	edp := exp.DataPoints().AppendEmpty()
	edp.SetTimestamp(ts0)
	edp.SetCount(5)
	edp.SetSum(10.5)
	edp.SetMin(0.5)
	edp.SetMax(4)
	edp.SetScale(2)
	edp.SetZeroCount(1)
	edp.SetZeroThreshold(0.001)
	edp.Positive().SetOffset(-1)
	edp.Positive().BucketCounts().FromRaw([]uint64{1, 2})

	m = sm.Metrics().AppendEmpty()
	m.SetName("rpc")
	sdp := m.SetEmptySummary().DataPoints().AppendEmpty()
	sdp.SetTimestamp(ts0)
	sdp.SetCount(4)
	sdp.SetSum(8)
	q := sdp.QuantileValues().AppendEmpty()
	q.SetQuantile(0.5)
	q.SetValue(2)
	q = sdp.QuantileValues().AppendEmpty()
	q.SetQuantile(0.99)
	q.SetValue(3.5)

	// A metric without data has no data point, hence no row.
	sm.Metrics().AppendEmpty().SetName("empty")
	return md
}

// nonFiniteMetrics carries values only protobuf can encode.
func nonFiniteMetrics() pmetric.Metrics {
	md := pmetric.NewMetrics()
	m := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("weird")
	sum := m.SetEmptySum()
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		sum.DataPoints().AppendEmpty().SetDoubleValue(v)
	}
	return md
}

// The spec-style JSON bodies below use upper-case hex ids, as the examples in
// the opentelemetry-proto repository do; decoding must still yield the
// canonical lower-case form.

const specLogsJSON = `{"resourceLogs":[{
  "resource":{"attributes":[{"key":"service.name","value":{"stringValue":"my.service"}}]},
  "scopeLogs":[{
    "scope":{"name":"my.library","version":"1.0.0"},
    "logRecords":[{
      "timeUnixNano":"1544712660300000000",
      "observedTimeUnixNano":1544712660300000000,
      "severityNumber":9,
      "severityText":"Information",
      "traceId":"5B8EFFF798038103D269B633813FC60C",
      "spanId":"EEE19B7EC3C1B174",
      "body":{"stringValue":"Example log record"},
      "attributes":[
        {"key":"int.attribute","value":{"intValue":"10"}},
        {"key":"double.attribute","value":{"doubleValue":637.704}},
        {"key":"array.attribute","value":{"arrayValue":{"values":[{"stringValue":"many"},{"stringValue":"values"}]}}},
        {"key":"map.attribute","value":{"kvlistValue":{"values":[{"key":"some.map.key","value":{"stringValue":"some value"}}]}}}
      ]
    }]
  }]
}]}`

const specTracesJSON = `{"resourceSpans":[{
  "resource":{"attributes":[{"key":"service.name","value":{"stringValue":"my.service"}}]},
  "scopeSpans":[{
    "scope":{"name":"my.library","version":"1.0.0"},
    "spans":[{
      "traceId":"5B8EFFF798038103D269B633813FC60C",
      "spanId":"EEE19B7EC3C1B174",
      "parentSpanId":"EEE19B7EC3C1B173",
      "name":"I'm a server span",
      "startTimeUnixNano":"1544712660000000000",
      "endTimeUnixNano":"1544712661000000000",
      "kind":2,
      "attributes":[{"key":"my.span.attr","value":{"stringValue":"some value"}}]
    }]
  }]
}]}`

const specMetricsJSON = `{"resourceMetrics":[{
  "resource":{"attributes":[{"key":"service.name","value":{"stringValue":"my.service"}}]},
  "scopeMetrics":[{
    "scope":{"name":"my.library","version":"1.0.0"},
    "metrics":[{
      "name":"my.counter","unit":"1","description":"I am a Counter",
      "sum":{"aggregationTemporality":1,"isMonotonic":true,"dataPoints":[{
        "asDouble":5,
        "startTimeUnixNano":"1544712660300000000",
        "timeUnixNano":"1544712660300000000",
        "attributes":[{"key":"my.counter.attr","value":{"stringValue":"some value"}}]
      }]}
    }]
  }]
}]}`
