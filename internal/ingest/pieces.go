package ingest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/hyp-project/hyp/internal/httpbody"
	"github.com/hyp-project/hyp/internal/otlp"
	"github.com/hyp-project/hyp/internal/rowform"
)

// A compressed protobuf OTLP request too large to hold whole once decompressed (its body
// and rows beyond the listener's budget) is taken resource by resource instead of refused:
// the OpenTelemetry Collector drops a batch answered 413, and its default batches of large
// records decompress to tens of MiB. The compressed body is kept; it is decompressed again
// as a stream (httpbody.Reopen), one resource at a time (otlp.SplitProto) is decoded, and
// the rows are stored whenever they reach a quarter of the budget (16 MiB by default), their
// memory then given back to it, so the request holds at most about that much beside one
// resource.
//
// What this gives up is the request's atomicity. A first pass decodes the whole request
// and stores nothing, so a request that is not well formed is refused whole, as ever; once
// part is stored, a piece the budget refuses waits for it rather than fail the request. But
// a request whose store fails after some of its appends (the disk full, the log failed) is
// answered with the failure, as any other, the rows already stored stay, and the sender's
// retry stores them again. A request that fits the budget is still stored in one append,
// all or nothing.

// A piece the budget refuses once part of its request is stored waits for the budget,
// from piecesWaitFirst doubling up to piecesWaitMax between tries, for as long as the
// request lasts.
const (
	piecesWaitFirst = 10 * time.Millisecond
	piecesWaitMax   = 500 * time.Millisecond
)

// maxPiecesBytes bounds a request taken in pieces, decompressed: what a 16 MiB gzip body
// of ordinary records decompresses to, far beyond any batch a sender makes, while a
// compression bomb is refused before anything is stored.
const maxPiecesBytes = 1 << 30

// piecesTooLarge answers a request beyond maxPiecesBytes.
var piecesTooLarge = &httpbody.Error{Status: http.StatusRequestEntityTooLarge, Kind: "decoded_too_large",
	Msg: fmt.Sprintf("the body decompresses to more than %d bytes; send fewer records in a request", maxPiecesBytes)}

// countingMeter forwards charges to the request's Meter and counts what it took, so that
// what the rows of the stored pieces took can be given back. The piece buffer SplitProto
// reuses and the decoder's arena are given back with them though still held: at most one
// resource and its model, which the next pieces' charges do not count again.
type countingMeter struct {
	m    httpbody.Meter
	held int
}

func (c *countingMeter) Charge(n int) error {
	if err := c.m.Charge(n); err != nil {
		return err
	}
	c.held += max(n, 0)
	return nil
}

// release gives back everything counted.
func (c *countingMeter) release() {
	c.m.Release(c.held)
	c.held = 0
}

// otlpPieces stores a compressed protobuf request resource by resource, sent being its body
// as sent, and returns the rows it stored or the reply to send instead. It decodes the
// request twice: the first pass stores nothing and refuses a request that is not well
// formed, or decompresses beyond maxPiecesBytes, as the atomic path would refuse it whole;
// only the second stores.
func (h *handler) otlpPieces(r *http.Request, sig otlp.Signal, sent []byte) (int, *httpbody.Error) {
	dataset := string(sig)
	meter := &countingMeter{m: httpbody.MeterOf(r)}
	// Batches here are new, not the handler's pooled ones: a pooled Batch keeps chunks of
	// up to 4 MiB, each charged in full whenever it is used, which would charge every
	// small piece as much; these go to the collector with the request.
	scratch := new(otlp.Batch)
	err := h.eachPiece(r, sent, meter, func(req []byte) error {
		defer meter.release()
		defer scratch.Reset()
		return scratch.DecodeMetered(sig, protobufType, req, meter)
	})
	if err != nil {
		return 0, h.piecesError(dataset, err, nil)
	}

	var (
		batches  []*otlp.Batch
		groups   []rowform.RowGroup
		accepted int
	)
	drop := func() {
		clear(batches)
		batches, groups = batches[:0], groups[:0]
	}
	var storeErr error
	store := func() error {
		if len(groups) == 0 {
			return nil
		}
		res, err := h.store.IngestRowGroups(dataset, groups)
		if err != nil {
			storeErr = err
			return err
		}
		accepted += res.Accepted
		drop()
		meter.release()
		return nil
	}
	err = h.eachPiece(r, sent, meter, func(req []byte) error {
		var b *otlp.Batch
		err := admitted(r.Context(), func() bool { return accepted+len(groups) > 0 }, func() error {
			b = new(otlp.Batch)
			batches = append(batches, b)
			return b.DecodeMetered(sig, protobufType, req, meter)
		}, store)
		if err != nil {
			return err
		}
		groups = append(groups, b.Groups...)
		if meter.held >= int(h.limits.Decoded/4) {
			return store()
		}
		return nil
	})
	if err == nil {
		err = store()
	}
	if err != nil {
		return accepted, h.piecesError(dataset, err, storeErr)
	}
	return accepted, nil
}

// admitted runs decode, a piece's, and while the budget refuses it (503: other requests
// hold it) once part of the request is stored, stores what the request holds (storeHeld)
// and runs it again after a wait, for as long as ctx lasts: refusing the request then would
// have the sender's retry store that part again. Before anything is stored, or for any other
// error, it returns decode's error.
func admitted(ctx context.Context, partStored func() bool, decode, storeHeld func() error) error {
	for wait := piecesWaitFirst; ; wait = min(2*wait, piecesWaitMax) {
		err := decode()
		var refused *httpbody.Error
		if !errors.As(err, &refused) || refused.Status != http.StatusServiceUnavailable || !partStored() {
			return err
		}
		if err := storeHeld(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// eachPiece calls fn with each resource of the compressed protobuf request sent, framed as
// a request of its own (otlp.SplitProto), decompressing it as a stream.
func (h *handler) eachPiece(r *http.Request, sent []byte, meter *countingMeter, fn func(req []byte) error) error {
	rd, done, err := httpbody.Reopen(r, sent)
	if err != nil {
		return badBody(err)
	}
	defer done()
	lr := &io.LimitedReader{R: rd, N: maxPiecesBytes + 1}
	err = otlp.SplitProto(bufio.NewReader(lr), int(h.limits.Decoded), meter.Charge, fn)
	if lr.N <= 0 {
		return piecesTooLarge
	}
	return err
}

// piecesError is the reply to a request taken in pieces that failed with err; storeErr is
// the store's failure when that is what it was.
func (h *handler) piecesError(dataset string, err, storeErr error) *httpbody.Error {
	var refused *httpbody.Error
	switch {
	case storeErr != nil:
		return h.storeError(dataset, storeErr)
	case errors.As(err, &refused):
		return refused
	case errors.Is(err, otlp.ErrPieceTooLarge):
		return httpbody.DecodedTooLarge(h.limits.Decoded)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &httpbody.Error{Status: http.StatusServiceUnavailable, Kind: "unavailable", RetryAfter: 1, Msg: "the request ended while it waited for memory: " + err.Error()}
	}
	return &httpbody.Error{Status: http.StatusBadRequest, Kind: "bad_otlp", Msg: err.Error()}
}

// badBody answers a body that cannot be decompressed again.
func badBody(err error) *httpbody.Error {
	return &httpbody.Error{Status: http.StatusBadRequest, Kind: "bad_body", Msg: "decompressing the body: " + err.Error()}
}
