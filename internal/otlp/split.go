package otlp

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// A protobuf export request of any signal is a list of resources, field 1 of the request
// (resource_logs, resource_spans, resource_metrics), each a whole message that shares
// nothing with the others. SplitProto reads a request from a stream one resource at a time
// and hands each on as a request of its own, so a request too large to hold whole can be
// decoded piece by piece (ingest's large-request path), never more than one resource's
// bytes in memory.

// ErrPieceTooLarge is returned by SplitProto for a resource larger than its limit.
var ErrPieceTooLarge = errors.New("otlp: one resource of the request is larger than the receiver takes")

// SplitProto reads a protobuf export request from r and calls fn with each resource framed
// as a request of its own (field 1, length, the resource's bytes), in the order of the
// request. Other top-level fields are skipped, as a decoder skips unknown fields. The
// slice fn gets is reused for the next resource; grow is told the capacity it needs before
// it is allocated (the caller charges it) and may refuse with an error that ends the
// split. A resource over maxPiece bytes is ErrPieceTooLarge.
func SplitProto(r *bufio.Reader, maxPiece int, grow func(n int) error, fn func(req []byte) error) error {
	var buf []byte
	for {
		if _, err := r.Peek(1); err == io.EOF {
			return nil
		}
		num, wire, err := readTag(r)
		if err != nil {
			return err
		}
		if num != 1 {
			if err := skipField(r, wire); err != nil {
				return fmt.Errorf("otlp: skipping field %d: %w", num, err)
			}
			continue
		}
		if wire != wtLen {
			return fmt.Errorf("otlp: a resource: %w", wrongType(wire))
		}
		n, err := readVarint(r)
		if err != nil {
			return fmt.Errorf("otlp: reading the length of a resource: %w", err)
		}
		if n > uint64(maxPiece) {
			return fmt.Errorf("%w: %d bytes, at most %d", ErrPieceTooLarge, n, maxPiece)
		}
		need := 1 + binary.MaxVarintLen64 + int(n)
		if cap(buf) < need {
			if err := grow(need); err != nil {
				return err
			}
			buf = make([]byte, 0, need)
		}
		buf = binary.AppendUvarint(append(buf[:0], 0x0a), n)
		at := len(buf)
		buf = buf[:at+int(n)]
		if _, err := io.ReadFull(r, buf[at:]); err != nil {
			return fmt.Errorf("otlp: reading a resource of %d bytes: %w", n, unexpected(err))
		}
		if err := fn(buf); err != nil {
			return err
		}
	}
}

// readVarint, readTag and skipField read a stream as pbuf's rawVarint, tag and skip read a
// body (protodec.go), quirks included, so that a request split here is refused exactly
// when the whole request would be (FuzzSplitProto holds them to it). They are a second
// copy on purpose: one skip over an interface of both sources made every pbuf of the
// decoder escape to the heap (211 KB more allocated for the benchmark's logs request).

func readVarint(r *bufio.Reader) (uint64, error) {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		if shift >= 64 {
			return 0, errOverflow
		}
		c, err := r.ReadByte()
		if err != nil {
			return 0, unexpected(err)
		}
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, nil
		}
	}
}

func readTag(r *bufio.Reader) (int32, int8, error) {
	t, err := readVarint(r)
	if err != nil {
		return 0, 0, err
	}
	num := int32(t >> 3)
	if num <= 0 {
		return 0, 0, fmt.Errorf("illegal field number %d", num)
	}
	return num, int8(t & 7), nil
}

func skipField(r *bufio.Reader, wt int8) error {
	depth := 0
	for {
		var err error
		switch wt {
		case wtVarint:
			_, err = readVarint(r)
			return err
		case wtI64:
			_, err = discard(r, 8)
			return err
		case wtLen:
			var n uint64
			if n, err = readVarint(r); err == nil {
				_, err = discard(r, n)
			}
			return err
		case wtI32:
			_, err = discard(r, 4)
			return err
		case wtStartGroup:
			depth++
		case wtEndGroup:
			if depth == 0 {
				return errEndOfGroup
			}
			depth--
		default:
			return fmt.Errorf("illegal wire type %d", wt)
		}
		if depth == 0 {
			return nil
		}
		if _, err := r.Peek(1); err != nil {
			return io.ErrUnexpectedEOF
		}
		if _, wt, err = readTag(r); err != nil {
			return err
		}
	}
}

// discard reads past n bytes, an end of input before them being io.ErrUnexpectedEOF.
func discard(r *bufio.Reader, n uint64) (int64, error) {
	got, err := io.CopyN(io.Discard, r, int64(min(n, 1<<62)))
	return got, unexpected(err)
}

// unexpected makes an end of input inside a field an error of its own: the request is cut.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
