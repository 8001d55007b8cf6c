package ingest

import (
	"bytes"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/hyp-project/hyp/internal/otlp"
)

// The handler writes its OTLP success replies without pdata; they must stay byte for byte
// what pdata, the collector's own encoder, writes for an empty export response.
func TestOTLPSuccessReplyMatchesPdata(t *testing.T) {
	h := newTestHandler(t, 1<<20, nil).Handler.(*handler)
	for _, tc := range []struct {
		ep   endpoint
		sig  otlp.Signal
		resp interface {
			MarshalProto() ([]byte, error)
			MarshalJSON() ([]byte, error)
		}
	}{
		{epOTLPLogs, otlp.Logs, plogotlp.NewExportResponse()},
		{epOTLPTraces, otlp.Traces, ptraceotlp.NewExportResponse()},
		{epOTLPMetrics, otlp.Metrics, pmetricotlp.NewExportResponse()},
	} {
		route := h.otlp[tc.ep]
		if route.signal != tc.sig {
			t.Errorf("%s route serves signal %q", tc.sig, route.signal)
		}
		if want := marshal(t, tc.resp.MarshalProto); !bytes.Equal(route.protoResp, want) {
			t.Errorf("%s protobuf reply %q, pdata writes %q", tc.sig, route.protoResp, want)
		}
		if want := marshal(t, tc.resp.MarshalJSON); !bytes.Equal(route.jsonResp, want) {
			t.Errorf("%s JSON reply %s, pdata writes %s", tc.sig, route.jsonResp, want)
		}
	}
}
