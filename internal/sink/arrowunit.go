package sink

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/hyp-project/hyp/internal/forward"
)

// arrowBody is a forward unit's body as an Arrow IPC stream (SPEC 5): the cache scan's
// record batches written as they are read, so no row is encoded one at a time, and the
// stream compressed whole by the client's compression once sealed, as an NDJSON body is.
// The batches keep the scan's schema, which exported already cut to the user columns and
// the two internal ones a server checks.
//
// The IPC format's own buffer compression is not used: arrow-go makes a ZSTD encoder per
// writer and a decoder per batch, each allocating and zeroing an 8 MiB window, which cost
// both ends more than the forward client's whole-body zstd saves (BenchmarkForwardTick,
// both ends: 3.7 CPU-s per 1M rows with IPC ZSTD buffers, 2.95 with a zstd body, which is
// also half the bytes).
type arrowBody struct {
	client *forward.Client
	// bodies is the shipper's pool of unit bodies (forwardShipper.bodies), which the stream
	// is written into and handed back to: growing a unit's stream from nothing, a doubling
	// and a zeroed allocation at a time, was a tenth of the sender's CPU.
	bodies *sync.Pool
	buf    bytes.Buffer
	w      *ipc.Writer
	sealed bool
	// wire is the stream compressed for the wire once sealed; nil until then, or when
	// compressing failed, in which case Send compresses again and reports the error.
	wire []byte
	// err is the first write's failure; the unit then fails at ship, as any unit that
	// cannot be encoded does.
	err error
}

func newArrowBody(schema *arrow.Schema, client *forward.Client, bodies *sync.Pool) *arrowBody {
	b := &arrowBody{client: client, bodies: bodies}
	if buf, ok := bodies.Get().(*[]byte); ok {
		b.buf = *bytes.NewBuffer(*buf)
	}
	b.w = ipc.NewWriter(&b.buf, ipc.WithSchema(schema))
	return b
}

func (b *arrowBody) add(_ context.Context, rec arrow.RecordBatch) error {
	if b.err == nil {
		b.err = b.w.Write(rec) // serialised (and compressed) now: rec is not kept
	}
	return nil
}

// seal ends the stream and compresses it.
func (b *arrowBody) seal() {
	if b.sealed {
		return
	}
	b.sealed = true
	if err := b.w.Close(); err != nil && b.err == nil {
		b.err = err
	}
	if b.err == nil {
		b.wire, _ = b.client.Compress(b.buf.Bytes())
	}
}

// body is the stream, ended if it was not yet (a unit re-read from its intent is never
// sealed by cutUnits' emit before ship asks).
func (b *arrowBody) body() []byte {
	b.seal()
	return b.buf.Bytes()
}

// discard drops the stream, and hands its buffer back for the next unit unless the stream
// itself went on the wire (recycleBody).
func (b *arrowBody) discard() {
	b.seal()
	recycleBody(b.bodies, b.buf.Bytes(), b.wire)
	b.buf, b.wire = bytes.Buffer{}, nil
}

// ndjsonOfArrow turns a unit's Arrow body, as arrowBody wrote it, into the NDJSON body of
// the same rows, for a central that does not read Arrow.
func ndjsonOfArrow(body []byte) ([]byte, error) {
	r, err := ipc.NewReader(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("reading the unit's Arrow stream: %w", err)
	}
	defer r.Release()
	nd, err := newNDJSONBody(r.Schema())
	if err != nil {
		return nil, err
	}
	for r.Next() {
		nd.append(r.RecordBatch())
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("reading the unit's Arrow stream: %w", err)
	}
	return nd.body, nil
}
