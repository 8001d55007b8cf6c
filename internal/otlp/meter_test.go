package otlp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// limitMeter refuses a charge that would take it past limit, as the listener's budget does.
type limitMeter struct {
	limit, held int
	refusals    int
}

var errSpent = errors.New("spent")

func (m *limitMeter) Charge(n int) error {
	if m.held+n > m.limit {
		m.refusals++
		return errSpent
	}
	m.held += n
	return nil
}

// pbField appends a length-delimited protobuf field.
func pbField(dst []byte, num int, payload []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(num)<<3|2)
	dst = binary.AppendUvarint(dst, uint64(len(payload)))
	return append(dst, payload...)
}

// emptyRecords is an export request of one resource and one scope holding n empty records
// (`12 00` each): two bytes of body each, a whole record in the decoded model.
func emptyRecords(n int) []byte {
	scope := bytes.Repeat([]byte{0x12, 0x00}, n)
	return pbField(nil, 1, pbField(nil, 2, scope))
}

// wideResource is a request of n records (spans, log records or gauge points) sharing one
// resource with an attribute of attrBytes: every row repeats it.
func wideResource(t testing.TB, sig Signal, n, attrBytes int) []byte {
	big := strings.Repeat("x", attrBytes)
	switch sig {
	case Logs:
		ld := plog.NewLogs()
		rl := ld.ResourceLogs().AppendEmpty()
		rl.Resource().Attributes().PutStr("big", big)
		lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
		for range n {
			lrs.AppendEmpty()
		}
		return logsBodies(t, ld).proto
	case Traces:
		td := ptrace.NewTraces()
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("big", big)
		ss := rs.ScopeSpans().AppendEmpty().Spans()
		for range n {
			ss.AppendEmpty()
		}
		return tracesBodies(t, td).proto
	default:
		md := pmetric.NewMetrics()
		rm := md.ResourceMetrics().AppendEmpty()
		rm.Resource().Attributes().PutStr("big", big)
		m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
		m.SetName("m")
		m.SetDescription(big)
		pts := m.SetEmptyGauge().DataPoints()
		for range n {
			pts.AppendEmpty()
		}
		return metricsProtoOnly(t, md).proto
	}
}

// allocated is what f allocates on the heap, in bytes.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestMeterBoundsWhatADecodeAllocates decodes the bodies that cost gigabytes before the
// meter (a resource every row repeats, a body of empty records) with a meter of a few MiB:
// each fails with the meter's error, and what the decode allocated stays within the meter's
// limit plus a little that is not per record.
func TestMeterBoundsWhatADecodeAllocates(t *testing.T) {
	const limit = 8 << 20
	cases := []struct {
		name string
		sig  Signal
		body []byte
	}{
		{"logs wide resource", Logs, wideResource(t, Logs, 10_000, 64<<10)},
		{"traces wide resource", Traces, wideResource(t, Traces, 10_000, 64<<10)},
		{"metrics wide resource", Metrics, wideResource(t, Metrics, 10_000, 64<<10)},
		{"logs empty records", Logs, emptyRecords(1 << 20)},
		{"traces empty records", Traces, emptyRecords(1 << 20)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b Batch
			m := &limitMeter{limit: limit}
			var err error
			got := allocated(func() { err = b.DecodeMetered(tc.sig, "application/x-protobuf", tc.body, m) })
			if !errors.Is(err, errSpent) {
				t.Fatalf("decode of %d bytes: err = %v, want the meter's refusal", len(tc.body), err)
			}
			if len(b.Rows) != 0 || len(b.Groups) != 0 {
				t.Errorf("a refused decode left %d rows, %d groups", len(b.Rows), len(b.Groups))
			}
			// The slack: a resource's prefix rendered once before it is charged, and the
			// pooled arena's structure.
			if slack := uint64(limit + 2<<20); got > slack {
				t.Errorf("decode allocated %d bytes with a meter of %d", got, limit)
			}
		})
	}
}

// TestMeterCoversWhatADecodeAllocates decodes ordinary requests of every signal and
// encoding with a meter that refuses nothing: what the decode allocated is charged, but for
// a few KiB, so no allocation escapes the budget.
func TestMeterCoversWhatADecodeAllocates(t *testing.T) {
	type body struct {
		name string
		sig  Signal
		ct   string
		b    []byte
	}
	var cases []body
	add := func(name string, sig Signal, bs bodies) {
		cases = append(cases, body{name + " proto", sig, "application/x-protobuf", bs.proto})
		if bs.json != nil {
			cases = append(cases, body{name + " json", sig, "application/json", bs.json})
		}
	}
	add("bench logs", Logs, benchLogs(t))
	add("full logs", Logs, logsBodies(t, fullLogs()))
	add("full traces", Traces, tracesBodies(t, fullTraces()))
	add("full metrics", Metrics, metricsBodies(t, fullMetrics()))
	cases = append(cases, body{"wide logs", Logs, "application/x-protobuf", wideResource(t, Logs, 200, 4<<10)})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b Batch
			m := &limitMeter{limit: 1 << 40}
			var err error
			got := allocated(func() { err = b.DecodeMetered(tc.sig, tc.ct, tc.b, m) })
			if err != nil {
				t.Fatal(err)
			}
			if len(b.Rows) == 0 {
				t.Fatal("no rows")
			}
			if uncharged := int64(got) - int64(m.held); uncharged > 32<<10 {
				t.Errorf("decode allocated %d bytes, %d of them not charged", got, uncharged)
			}
		})
	}
}

// TestChunksFollowTheRows decodes requests whose rows outgrow the first chunk (a resource
// every row repeats, or JSON bodies about the size of their rows): the chunks after the
// first are sized for the rows still to come, so what the Batch holds stays near what the
// rows take instead of a mostly empty chunkBytes chunk per request.
func TestChunksFollowTheRows(t *testing.T) {
	cases := []struct {
		name string
		sig  Signal
		ct   string
		body []byte
	}{
		{"logs wide resource", Logs, "application/x-protobuf", wideResource(t, Logs, 1000, 512)},
		{"traces wide resource", Traces, "application/x-protobuf", wideResource(t, Traces, 1000, 512)},
		{"metrics wide resource", Metrics, "application/x-protobuf", wideResource(t, Metrics, 1000, 512)},
		{"bench logs json", Logs, "application/json", benchLogs(t).json},
		{"bench logs proto", Logs, "application/x-protobuf", benchLogs(t).proto},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b Batch
			if err := b.Decode(tc.sig, tc.ct, tc.body); err != nil {
				t.Fatal(err)
			}
			used, held := 0, 0
			for _, c := range b.chunks {
				used, held = used+len(c), held+cap(c)
			}
			// The first chunk is sized by the body alone; the rest by the rows.
			first := max(len(tc.body)*2+512, minFirstChunk)
			if limit := first + used + used/4; held > limit {
				t.Errorf("%d rows in %d bytes of %d chunks holding %d bytes, want at most %d", len(b.Rows), used, len(b.chunks), held, limit)
			}
		})
	}
}

// TestLargeRecordsAreChargedAboutTheirSize: a collector's batch of 2,000 records with 8 KB
// bodies (16 MB of rows) is charged little more than its rows and its decoded model. A row
// that outgrows its chunk has append move the chunk to an array a quarter larger, charged in
// full; when every row started with room for rowSlack only, each 8 KB row outgrew its chunk
// and the charges summed to several times the rows, so such batches were refused as too
// large to decode.
func TestLargeRecordsAreChargedAboutTheirSize(t *testing.T) {
	ld := plog.NewLogs()
	lrs := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
	for i := range 2000 {
		lrs.AppendEmpty().Body().SetStr(strings.Repeat(string(rune('a'+i%26)), 8000))
	}
	body := logsBodies(t, ld).proto
	var b Batch
	m := &limitMeter{limit: 1 << 40}
	if err := b.DecodeMetered(Logs, "application/x-protobuf", body, m); err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, r := range b.Rows {
		rows += len(r.Line)
	}
	if limit := rows + rows/4 + 1<<20; m.held > limit {
		t.Errorf("%d bytes of rows from a %d-byte body were charged %d bytes, want at most %d", rows, len(body), m.held, limit)
	}
}
