package otlp

import (
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog"
)

// benchLogs is a logs request like the ingest benchmark's: 1000 records
// with ~150-byte bodies, a timestamp, a severity and two attributes.
func benchLogs(tb testing.TB) bodies {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "bench")
	sl := rl.ScopeLogs().AppendEmpty()
	sl.Scope().SetName("bench")
	for i := range 1000 {
		lr := sl.LogRecords().AppendEmpty()
		lr.SetTimestamp(ts0 + 1000*1000*1000*1)
		lr.SetSeverityNumber(plog.SeverityNumberInfo)
		lr.SetSeverityText("INFO")
		lr.Body().SetStr("request " + strconv.Itoa(i) + " served " + strings.Repeat("x", 130))
		lr.Attributes().PutStr("http.method", "GET")
		lr.Attributes().PutInt("http.status_code", 200)
	}
	return logsBodies(tb, ld)
}

func BenchmarkDecodeLogs(b *testing.B) {
	body := benchLogs(b)
	for _, enc := range []struct {
		name, contentType string
		body              []byte
	}{{"protobuf", protoType, body.proto}, {"json", jsonType, body.json}} {
		for _, impl := range []struct {
			name   string
			decode func(Signal, string, []byte) ([]Row, error)
		}{{"pdata", refDecode}, {"direct", Decode}, {"reused", reusedDecode()}} {
			b.Run(enc.name+"/"+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(enc.body)))
				for b.Loop() {
					rows, err := impl.decode(Logs, enc.contentType, enc.body)
					if err != nil || len(rows) != 1000 {
						b.Fatalf("%d rows, %v", len(rows), err)
					}
				}
				b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "records/s")
			})
		}
	}
}

// reusedDecode decodes into one Batch, as the ingest handler does with the Batches it keeps.
func reusedDecode() func(Signal, string, []byte) ([]Row, error) {
	var b Batch
	return func(sig Signal, contentType string, body []byte) ([]Row, error) {
		b.Reset()
		err := b.Decode(sig, contentType, body)
		return b.Rows, err
	}
}
