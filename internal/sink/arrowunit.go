package sink

import (
	"bytes"
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
)

// arrowBody is a forward unit's body as an Arrow IPC stream (SPEC 5): the cache scan's
// record batches written as they are read, their buffers ZSTD-compressed by the IPC writer,
// so no row is encoded one at a time. The batches keep the scan's schema, which exported
// already cut to the user columns and the two internal ones a server checks.
type arrowBody struct {
	buf    bytes.Buffer
	w      *ipc.Writer
	sealed bool
	// err is the first write's failure; the unit then fails at ship, as any unit that
	// cannot be encoded does.
	err error
}

func newArrowBody(schema *arrow.Schema) *arrowBody {
	b := &arrowBody{}
	b.w = ipc.NewWriter(&b.buf, ipc.WithSchema(schema), ipc.WithZstd())
	return b
}

func (b *arrowBody) add(_ context.Context, rec arrow.RecordBatch) error {
	if b.err == nil {
		b.err = b.w.Write(rec) // serialised (and compressed) now: rec is not kept
	}
	return nil
}

// seal ends the stream.
func (b *arrowBody) seal() {
	if b.sealed {
		return
	}
	b.sealed = true
	if err := b.w.Close(); err != nil && b.err == nil {
		b.err = err
	}
}

// body is the stream, ended if it was not yet (a unit re-read from its intent is never
// sealed by cutUnits' emit before ship asks).
func (b *arrowBody) body() []byte {
	b.seal()
	return b.buf.Bytes()
}

// discard drops the stream. Its bytes went on the wire as they are, and the HTTP transport
// may read a request body after Send returned, so they are not reused.
func (b *arrowBody) discard() {
	b.seal()
	b.buf = bytes.Buffer{}
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
