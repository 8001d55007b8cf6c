package otlp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// The protobuf decoder accepts exactly what pdata's generated unmarshalers
// accept (the differential fuzz targets hold it to that): a known field with
// the wrong wire type is an error rather than an unknown field, singular
// scalars take their last value, singular messages merge, a packed fixed64
// or double list replaces what came before while unpacked elements append,
// and AnyValue nesting stops at maxProtoDepth.

// maxProtoDepth is pdata's recursion limit, counted over AnyValue,
// ArrayValue, KeyValueList and KeyValue levels.
const maxProtoDepth = 100

const (
	wtVarint     = 0
	wtI64        = 1
	wtLen        = 2
	wtStartGroup = 3
	wtEndGroup   = 4
	wtI32        = 5
)

var (
	errOverflow    = errors.New("integer overflow")
	errDepth       = errors.New("exceeded max recursion depth")
	errEndOfGroup  = errors.New("unexpected end of group")
	errNegativeLen = errors.New("negative length")
)

// pbuf reads one message. Its methods take the wire type the tag announced
// and fail when it is not the field's.
type pbuf struct {
	b   []byte
	pos int
}

func (p *pbuf) more() bool { return p.pos < len(p.b) }

// oneByte reads a varint of one byte, which tags and most lengths are; false leaves the
// varint to rawVarint. It is small enough to be inlined, so the common case costs no call.
func (p *pbuf) oneByte() (uint64, bool) {
	if p.pos < len(p.b) && p.b[p.pos] < 0x80 {
		p.pos++
		return uint64(p.b[p.pos-1]), true
	}
	return 0, false
}

func (p *pbuf) rawVarint() (uint64, error) {
	if v, ok := p.oneByte(); ok {
		return v, nil
	}
	var v uint64
	for shift := uint(0); ; shift += 7 {
		if shift >= 64 {
			return 0, errOverflow
		}
		if p.pos >= len(p.b) {
			return 0, io.ErrUnexpectedEOF
		}
		c := p.b[p.pos]
		p.pos++
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, nil
		}
	}
}

// tag reads a field tag. The field number is truncated to int32 as pdata
// does, so a huge number can alias a small one there and here alike.
func (p *pbuf) tag() (int32, int8, error) {
	t, ok := p.oneByte()
	if !ok {
		var err error
		if t, err = p.rawVarint(); err != nil {
			return 0, 0, err
		}
	}
	num := int32(t >> 3)
	if num <= 0 {
		return 0, 0, fmt.Errorf("illegal field number %d", num)
	}
	return num, int8(t & 7), nil
}

func wrongType(wt int8) error { return fmt.Errorf("wrong wire type %d", wt) }

func (p *pbuf) varint(wt int8) (uint64, error) {
	if wt != wtVarint {
		return 0, wrongType(wt)
	}
	return p.rawVarint()
}

func (p *pbuf) rawI64() (uint64, error) {
	if len(p.b)-p.pos < 8 {
		return 0, io.ErrUnexpectedEOF
	}
	v := binary.LittleEndian.Uint64(p.b[p.pos:])
	p.pos += 8
	return v, nil
}

func (p *pbuf) i64(wt int8) (uint64, error) {
	if wt != wtI64 {
		return 0, wrongType(wt)
	}
	return p.rawI64()
}

func (p *pbuf) rawI32() (uint32, error) {
	if len(p.b)-p.pos < 4 {
		return 0, io.ErrUnexpectedEOF
	}
	v := binary.LittleEndian.Uint32(p.b[p.pos:])
	p.pos += 4
	return v, nil
}

func (p *pbuf) i32(wt int8) (uint32, error) {
	if wt != wtI32 {
		return 0, wrongType(wt)
	}
	return p.rawI32()
}

func (p *pbuf) rawLen() ([]byte, error) {
	n, ok := p.oneByte()
	if !ok {
		var err error
		if n, err = p.rawVarint(); err != nil {
			return nil, err
		}
	}
	if int(n) < 0 {
		return nil, errNegativeLen
	}
	if uint64(len(p.b)-p.pos) < n {
		return nil, io.ErrUnexpectedEOF
	}
	b := p.b[p.pos : p.pos+int(n)]
	p.pos += int(n)
	return b, nil
}

func (p *pbuf) bytes(wt int8) ([]byte, error) {
	if wt != wtLen {
		return nil, wrongType(wt)
	}
	return p.rawLen()
}

// id reads a trace or span id: empty (all zero) or exactly len(dst) bytes.
func (p *pbuf) id(wt int8, dst []byte) error {
	b, err := p.bytes(wt)
	if err != nil {
		return err
	}
	switch len(b) {
	case 0:
		clear(dst)
	case len(dst):
		copy(dst, b)
	default:
		return fmt.Errorf("id of %d bytes, want %d", len(b), len(dst))
	}
	return nil
}

// skip passes over an unknown field. It is pdata's ConsumeUnknown, quirks
// included: inside a group any non-group field ends the skip, which leaves
// the group's end tag to fail the enclosing message.
func (p *pbuf) skip(wt int8) error {
	depth := 0
	for p.pos < len(p.b) {
		var err error
		switch wt {
		case wtVarint:
			_, err = p.rawVarint()
			return err
		case wtI64:
			_, err = p.rawI64()
			return err
		case wtLen:
			_, err = p.rawLen()
			return err
		case wtI32:
			_, err = p.rawI32()
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
		if _, wt, err = p.tag(); err != nil {
			return err
		}
	}
	return io.ErrUnexpectedEOF
}

// protoDecoder fills an arena from a protobuf request; its methods for each
// message are generated (decoders.go).
type protoDecoder struct {
	a *arena
}

func (d *protoDecoder) decodeRequest(sig Signal, body []byte) error {
	switch sig {
	case Logs:
		return d.logsRequest(body, ref{}, 0)
	case Traces:
		return d.tracesRequest(body, ref{}, 0)
	}
	return d.metricsRequest(body, ref{}, 0)
}

func zigzag32(v uint64) int32 {
	return int32(uint32(v>>1) ^ uint32(int32((v&1)<<31)>>31))
}

// fixed64s reads histogram bucket counts or explicit bounds into the list r:
// a packed list replaces the list, a single element appends to it.
func (d *protoDecoder) fixed64s(p *pbuf, wt int8, r *span32, doubles bool) error {
	a := d.a
	var packed []byte
	var one uint64
	var err error
	switch wt {
	case wtLen:
		if packed, err = p.rawLen(); err == nil && len(packed)%8 != 0 {
			err = fmt.Errorf("packed list of %d bytes", len(packed))
		}
	case wtI64:
		one, err = p.rawI64()
	default:
		err = wrongType(wt)
	}
	if err != nil {
		return err
	}
	if wt == wtLen {
		*r = span32{} // replaced, not merged
	}
	if doubles {
		a.f64s = toTail(a, a.f64s, r)
		for i := 0; i < len(packed); i += 8 {
			a.f64s = append(grow(a, a.f64s, 1), math.Float64frombits(binary.LittleEndian.Uint64(packed[i:])))
		}
		if wt == wtI64 {
			a.f64s = append(grow(a, a.f64s, 1), math.Float64frombits(one))
		}
		r.end = int32(len(a.f64s))
		return nil
	}
	a.u64s = toTail(a, a.u64s, r)
	for i := 0; i < len(packed); i += 8 {
		a.u64s = append(grow(a, a.u64s, 1), binary.LittleEndian.Uint64(packed[i:]))
	}
	if wt == wtI64 {
		a.u64s = append(grow(a, a.u64s, 1), one)
	}
	r.end = int32(len(a.u64s))
	return nil
}

// varints reads exponential histogram bucket counts, packed or not, appending
// them to the list r.
func (d *protoDecoder) varints(p *pbuf, wt int8, r *span32) error {
	a := d.a
	a.u64s = toTail(a, a.u64s, r)
	var err error
	switch wt {
	case wtLen:
		var packed []byte
		if packed, err = p.rawLen(); err != nil {
			return err
		}
		q := pbuf{b: packed}
		for q.more() && err == nil {
			var v uint64
			if v, err = q.rawVarint(); err == nil {
				a.u64s = append(grow(a, a.u64s, 1), v)
			}
		}
	case wtVarint:
		var v uint64
		if v, err = p.rawVarint(); err == nil {
			a.u64s = append(grow(a, a.u64s, 1), v)
		}
	default:
		err = wrongType(wt)
	}
	r.end = int32(len(a.u64s))
	return err
}
