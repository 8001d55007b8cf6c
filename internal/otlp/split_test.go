package otlp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog"
)

// TestSplitProto: each resource of a request comes out as a request of its own that
// decodes to the resource's rows, in order, unknown top-level fields skipped; a cut
// request, a wire type no request holds and a resource over the limit are errors.
func TestSplitProto(t *testing.T) {
	ld := plog.NewLogs()
	for _, svc := range []string{"a", "b", "c"} {
		rl := ld.ResourceLogs().AppendEmpty()
		rl.Resource().Attributes().PutStr("service.name", svc)
		lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
		for range 2 {
			lrs.AppendEmpty().Body().SetStr("hello " + svc)
		}
	}
	whole := logsBodies(t, ld).proto
	// Unknown fields between the resources: a varint, a fixed64 and a bytes field.
	body := append([]byte{0x10, 0x96, 0x01, 0x19, 1, 2, 3, 4, 5, 6, 7, 8, 0x22, 2, 'x', 'y'}, whole...)
	var want Batch
	if err := want.Decode(Logs, "application/x-protobuf", whole); err != nil {
		t.Fatal(err)
	}
	var got []string
	var pieces int
	err := SplitProto(bufio.NewReader(bytes.NewReader(body)), 1<<20, func(int) error { return nil }, func(req []byte) error {
		pieces++
		var b Batch
		if err := b.Decode(Logs, "application/x-protobuf", req); err != nil {
			return err
		}
		for _, r := range b.Rows {
			got = append(got, r.Source+":"+string(r.Line))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if pieces != 3 || len(got) != len(want.Rows) {
		t.Fatalf("%d pieces, %d rows; want 3 pieces and the whole request's %d rows", pieces, len(got), len(want.Rows))
	}
	for i, r := range want.Rows {
		if got[i] != r.Source+":"+string(r.Line) {
			t.Errorf("row %d differs from the whole request's", i)
		}
	}

	none := func(int) error { return nil }
	skip := func([]byte) error { return nil }
	for _, tc := range []struct {
		name string
		body []byte
		max  int
		want error
	}{
		{"cut inside a resource", whole[:len(whole)-3], 1 << 20, io.ErrUnexpectedEOF},
		{"cut inside a tag", []byte{0x0a, 0x80}, 1 << 20, io.ErrUnexpectedEOF},
		{"a resource over the limit", whole, 10, ErrPieceTooLarge},
	} {
		if err := SplitProto(bufio.NewReader(bytes.NewReader(tc.body)), tc.max, none, skip); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := SplitProto(bufio.NewReader(bytes.NewReader([]byte{0x0b})), 1<<20, none, skip); err == nil {
		t.Error("wire type 3 (a group) was taken")
	}
	refused := errors.New("refused")
	if err := SplitProto(bufio.NewReader(bytes.NewReader(whole)), 1<<20, func(int) error { return refused }, skip); !errors.Is(err, refused) {
		t.Errorf("a refused grow: %v", err)
	}
}

// FuzzSplitProto: for any body, SplitProto ends without panicking, and when the body
// decodes whole, so do its pieces, to exactly its rows, in order.
func FuzzSplitProto(f *testing.F) {
	f.Add(logsBodies(f, fullLogs()).proto)
	f.Add(benchLogs(f).proto)
	f.Add([]byte{0x0a, 0x00, 0x10, 0x01})
	f.Fuzz(func(t *testing.T, body []byte) {
		var pieces []string
		err := SplitProto(bufio.NewReader(bytes.NewReader(body)), 1<<20, func(int) error { return nil }, func(req []byte) error {
			var b Batch
			if err := b.Decode(Logs, "application/x-protobuf", req); err != nil {
				return err
			}
			for _, r := range b.Rows {
				pieces = append(pieces, r.Source+":"+string(r.Line))
			}
			return nil
		})
		var whole Batch
		if werr := whole.Decode(Logs, "application/x-protobuf", body); werr != nil {
			return
		}
		if err != nil {
			t.Fatalf("the body decodes whole, but not in pieces: %v", err)
		}
		if len(pieces) != len(whole.Rows) {
			t.Fatalf("pieces gave %d rows, the whole body %d", len(pieces), len(whole.Rows))
		}
		for i, r := range whole.Rows {
			if pieces[i] != r.Source+":"+string(r.Line) {
				t.Fatalf("row %d differs", i)
			}
		}
	})
}
