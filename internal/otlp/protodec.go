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

func (p *pbuf) double(wt int8) (float64, error) {
	v, err := p.i64(wt)
	return math.Float64frombits(v), err
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

// protoDecoder fills an arena from a protobuf request.
type protoDecoder struct {
	a *arena
}

// decodeRequest parses an Export*ServiceRequest: field 1 repeats the
// Resource* message of the signal.
func (d *protoDecoder) decodeRequest(sig Signal, body []byte) error {
	p := pbuf{b: body}
	for p.more() {
		num, wt, err := p.tag()
		if err != nil {
			return err
		}
		if num != 1 {
			if err := p.skip(wt); err != nil {
				return err
			}
			continue
		}
		b, err := p.bytes(wt)
		if err != nil {
			return err
		}
		if err := d.resourceGroups(sig, b); err != nil {
			return err
		}
	}
	return nil
}

// resourceGroups parses ResourceLogs, ResourceSpans or ResourceMetrics
// (their layouts agree): 1 resource, 2 scope groups, 3 schema url, 1000 the
// deprecated scope groups, which pdata uses only when there are no others.
func (d *protoDecoder) resourceGroups(sig Signal, buf []byte) error {
	a := d.a
	res := int32(len(a.resources))
	a.resources = append(grow(a, a.resources, 1), list{})
	var attrs list
	first := len(a.groups)
	var deprecated []group
	p := pbuf{b: buf}
	for p.more() {
		num, wt, err := p.tag()
		if err != nil {
			return err
		}
		switch num {
		case 1:
			b, err := p.bytes(wt)
			if err == nil {
				err = d.resource(b, &attrs)
			}
			if err != nil {
				return err
			}
		case 2, 1000:
			b, err := p.bytes(wt)
			if err == nil {
				err = d.scopeGroup(sig, b, res)
			}
			if err != nil {
				return err
			}
			if num == 1000 {
				// Move it aside; it only counts if no current group comes.
				deprecated = append(grow(a, deprecated, 1), a.groups[len(a.groups)-1])
				a.groups = a.groups[:len(a.groups)-1]
			}
		case 3:
			if _, err := p.bytes(wt); err != nil {
				return err
			}
		default:
			if err := p.skip(wt); err != nil {
				return err
			}
		}
	}
	a.resources[res] = attrs
	if len(a.groups) == first {
		a.groups = append(grow(a, a.groups, len(deprecated)), deprecated...)
	}
	return nil
}

// resource parses a Resource: 1 attributes, 2 dropped count, 3 entity refs.
func (d *protoDecoder) resource(buf []byte, attrs *list) error {
	p := pbuf{b: buf}
	for p.more() {
		num, wt, err := p.tag()
		if err != nil {
			return err
		}
		switch num {
		case 1:
			err = d.attr(&p, wt, attrs)
		case 2:
			_, err = p.varint(wt)
		case 3:
			var b []byte
			if b, err = p.bytes(wt); err == nil {
				err = entityRef(b)
			}
		default:
			err = p.skip(wt)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// entityRef checks an EntityRef, whose fields (all strings) rows do not use.
func entityRef(buf []byte) error {
	p := pbuf{b: buf}
	for p.more() {
		num, wt, err := p.tag()
		if err != nil {
			return err
		}
		if num >= 1 && num <= 4 {
			_, err = p.bytes(wt)
		} else {
			err = p.skip(wt)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// scopeGroup parses ScopeLogs, ScopeSpans or ScopeMetrics: 1 scope,
// 2 records, 3 schema url. It appends one group.
func (d *protoDecoder) scopeGroup(sig Signal, buf []byte, res int32) error {
	a := d.a
	g := group{res: res}
	switch sig {
	case Logs:
		g.start = int32(len(a.logs))
	case Traces:
		g.start = int32(len(a.spans))
	default:
		g.start = int32(len(a.metrics))
	}
	p := pbuf{b: buf}
	for p.more() {
		num, wt, err := p.tag()
		if err != nil {
			return err
		}
		switch num {
		case 1:
			var b []byte
			if b, err = p.bytes(wt); err == nil {
				err = d.scope(b, &g.scope)
			}
		case 2:
			var b []byte
			if b, err = p.bytes(wt); err == nil {
				switch sig {
				case Logs:
					err = d.logRecord(b)
				case Traces:
					err = d.span(b)
				default:
					err = d.metric(b)
				}
			}
		case 3:
			_, err = p.bytes(wt)
		default:
			err = p.skip(wt)
		}
		if err != nil {
			return err
		}
	}
	switch sig {
	case Logs:
		g.end = int32(len(a.logs))
	case Traces:
		g.end = int32(len(a.spans))
	default:
		g.end = int32(len(a.metrics))
	}
	a.groups = append(grow(a, a.groups, 1), g)
	return nil
}

// scope parses an InstrumentationScope: 1 name, 2 version, 3 attributes,
// 4 dropped count.
func (d *protoDecoder) scope(buf []byte, s *scope) error {
	p := pbuf{b: buf}
	for p.more() {
		num, wt, err := p.tag()
		if err != nil {
			return err
		}
		switch num {
		case 1:
			s.name, err = p.bytes(wt)
		case 2:
			s.version, err = p.bytes(wt)
		case 3:
			err = d.attr(&p, wt, &s.attrs)
		case 4:
			_, err = p.varint(wt)
		default:
			err = p.skip(wt)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// attr reads one KeyValue of an attribute list and appends it to l.
func (d *protoDecoder) attr(p *pbuf, wt int8, l *list) error {
	b, err := p.bytes(wt)
	if err != nil {
		return err
	}
	i := d.a.newNode()
	d.a.appendTo(l, i)
	return d.keyValue(b, i, 0)
}

// keyValue parses a KeyValue into node i: 1 key, 2 value, 3 key index.
func (d *protoDecoder) keyValue(buf []byte, i int32, depth int) error {
	if depth >= maxProtoDepth {
		return errDepth
	}
	depth++
	p := pbuf{b: buf}
	for p.more() {
		num, wt, err := p.tag()
		if err != nil {
			return err
		}
		switch num {
		case 1:
			var k []byte
			k, err = p.bytes(wt)
			d.a.nodes[i].key = k
		case 2:
			var b []byte
			if b, err = p.bytes(wt); err == nil {
				err = d.anyValue(b, i, depth)
			}
		case 3:
			_, err = p.varint(wt)
		default:
			err = p.skip(wt)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// anyValue parses an AnyValue into node i, merging with what is there: the
// last member of the oneof wins, and an array or kvlist starts afresh.
func (d *protoDecoder) anyValue(buf []byte, i int32, depth int) error {
	if depth >= maxProtoDepth {
		return errDepth
	}
	depth++
	a := d.a
	p := pbuf{b: buf}
	for p.more() {
		num, wt, err := p.tag()
		if err != nil {
			return err
		}
		switch num {
		case 1, 7:
			var b []byte
			if b, err = p.bytes(wt); err == nil {
				n := &a.nodes[i]
				n.kind, n.s = kindStr, b
				if num == 7 {
					n.kind = kindBytes
				}
			}
		case 2, 3, 8:
			var v uint64
			if v, err = p.varint(wt); err == nil {
				n := &a.nodes[i]
				switch num {
				case 2:
					n.kind, n.num = kindBool, 0
					if v != 0 {
						n.num = 1
					}
				case 3:
					n.kind, n.num = kindInt, v
				default:
					n.kind = kindEmpty
				}
			}
		case 4:
			var v uint64
			if v, err = p.i64(wt); err == nil {
				a.nodes[i].kind, a.nodes[i].num = kindDouble, v
			}
		case 5, 6:
			var b []byte
			if b, err = p.bytes(wt); err == nil {
				var kids list
				if num == 5 {
					err = d.arrayValue(b, &kids, depth)
				} else {
					err = d.kvlistValue(b, &kids, depth)
				}
				n := &a.nodes[i]
				n.kind, n.kids = kindArray, kids
				if num == 6 {
					n.kind = kindKvlist
				}
			}
		default:
			err = p.skip(wt)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// arrayValue parses an ArrayValue (1: repeated AnyValue) into kids.
func (d *protoDecoder) arrayValue(buf []byte, kids *list, depth int) error {
	return d.valueList(buf, kids, depth, false)
}

// kvlistValue parses a KeyValueList (1: repeated KeyValue) into kids.
func (d *protoDecoder) kvlistValue(buf []byte, kids *list, depth int) error {
	return d.valueList(buf, kids, depth, true)
}

func (d *protoDecoder) valueList(buf []byte, kids *list, depth int, kv bool) error {
	if depth >= maxProtoDepth {
		return errDepth
	}
	depth++
	p := pbuf{b: buf}
	for p.more() {
		num, wt, err := p.tag()
		if err != nil {
			return err
		}
		if num != 1 {
			if err := p.skip(wt); err != nil {
				return err
			}
			continue
		}
		b, err := p.bytes(wt)
		if err != nil {
			return err
		}
		i := d.a.newNode()
		d.a.appendTo(kids, i)
		if kv {
			err = d.keyValue(b, i, depth)
		} else {
			err = d.anyValue(b, i, depth)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// body parses a record's body, merging into the node it already has.
func (d *protoDecoder) body(p *pbuf, wt int8, body *int32) error {
	b, err := p.bytes(wt)
	if err != nil {
		return err
	}
	if *body == 0 {
		*body = d.a.newNode() + 1
	}
	return d.anyValue(b, *body-1, 0)
}

func (d *protoDecoder) logRecord(buf []byte) error {
	var lr logRecord
	p := pbuf{b: buf}
	for p.more() {
		num, wt, err := p.tag()
		if err != nil {
			return err
		}
		switch num {
		case 1:
			lr.time, err = p.i64(wt)
		case 11:
			lr.observed, err = p.i64(wt)
		case 2:
			var v uint64
			v, err = p.varint(wt)
			lr.severity = int32(v)
		case 3:
			lr.sevText, err = p.bytes(wt)
		case 5:
			err = d.body(&p, wt, &lr.body)
		case 6:
			err = d.attr(&p, wt, &lr.attrs)
		case 7:
			var v uint64
			v, err = p.varint(wt)
			lr.dropped = uint32(v)
		case 8:
			lr.flags, err = p.i32(wt)
		case 9:
			err = p.id(wt, lr.traceID[:])
		case 10:
			err = p.id(wt, lr.spanID[:])
		case 12:
			lr.event, err = p.bytes(wt)
		default:
			err = p.skip(wt)
		}
		if err != nil {
			return err
		}
	}
	d.a.logs = append(grow(d.a, d.a.logs, 1), lr)
	return nil
}

func (d *protoDecoder) span(buf []byte) error {
	a := d.a
	s := span{events: int32(len(a.events)), links: int32(len(a.links))}
	p := pbuf{b: buf}
	for p.more() {
		num, wt, err := p.tag()
		if err != nil {
			return err
		}
		var v uint64
		switch num {
		case 1:
			err = p.id(wt, s.traceID[:])
		case 2:
			err = p.id(wt, s.spanID[:])
		case 3:
			s.traceState, err = p.bytes(wt)
		case 4:
			err = p.id(wt, s.parent[:])
		case 16:
			s.flags, err = p.i32(wt)
		case 5:
			s.name, err = p.bytes(wt)
		case 6:
			v, err = p.varint(wt)
			s.kind = int32(v)
		case 7:
			s.start, err = p.i64(wt)
		case 8:
			s.end, err = p.i64(wt)
		case 9:
			err = d.attr(&p, wt, &s.attrs)
		case 10:
			v, err = p.varint(wt)
			s.dropped = uint32(v)
		case 11:
			var b []byte
			if b, err = p.bytes(wt); err == nil {
				err = d.event(b)
			}
		case 12:
			v, err = p.varint(wt)
			s.droppedEv = uint32(v)
		case 13:
			var b []byte
			if b, err = p.bytes(wt); err == nil {
				err = d.link(b)
			}
		case 14:
			v, err = p.varint(wt)
			s.droppedLn = uint32(v)
		case 15:
			var b []byte
			if b, err = p.bytes(wt); err == nil {
				err = status(b, &s)
			}
		default:
			err = p.skip(wt)
		}
		if err != nil {
			return err
		}
	}
	s.eventsEnd, s.linksEnd = int32(len(a.events)), int32(len(a.links))
	a.spans = append(grow(a, a.spans, 1), s)
	return nil
}

// status parses a Status (2 message, 3 code) into its span.
func status(buf []byte, s *span) error {
	p := pbuf{b: buf}
	for p.more() {
		num, wt, err := p.tag()
		if err != nil {
			return err
		}
		switch num {
		case 2:
			s.statusMsg, err = p.bytes(wt)
		case 3:
			var v uint64
			v, err = p.varint(wt)
			s.statusCode = int32(v)
		default:
			err = p.skip(wt)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (d *protoDecoder) event(buf []byte) error {
	var ev event
	p := pbuf{b: buf}
	for p.more() {
		num, wt, err := p.tag()
		if err != nil {
			return err
		}
		switch num {
		case 1:
			ev.time, err = p.i64(wt)
		case 2:
			ev.name, err = p.bytes(wt)
		case 3:
			err = d.attr(&p, wt, &ev.attrs)
		case 4:
			var v uint64
			v, err = p.varint(wt)
			ev.dropped = uint32(v)
		default:
			err = p.skip(wt)
		}
		if err != nil {
			return err
		}
	}
	d.a.events = append(grow(d.a, d.a.events, 1), ev)
	return nil
}

func (d *protoDecoder) link(buf []byte) error {
	var l link
	p := pbuf{b: buf}
	for p.more() {
		num, wt, err := p.tag()
		if err != nil {
			return err
		}
		switch num {
		case 1:
			err = p.id(wt, l.traceID[:])
		case 2:
			err = p.id(wt, l.spanID[:])
		case 3:
			l.traceState, err = p.bytes(wt)
		case 4:
			err = d.attr(&p, wt, &l.attrs)
		case 5:
			var v uint64
			v, err = p.varint(wt)
			l.dropped = uint32(v)
		case 6:
			l.flags, err = p.i32(wt)
		default:
			err = p.skip(wt)
		}
		if err != nil {
			return err
		}
	}
	d.a.links = append(grow(d.a, d.a.links, 1), l)
	return nil
}

func (d *protoDecoder) metric(buf []byte) error {
	var m metric
	p := pbuf{b: buf}
	for p.more() {
		num, wt, err := p.tag()
		if err != nil {
			return err
		}
		switch num {
		case 1:
			m.name, err = p.bytes(wt)
		case 2:
			m.desc, err = p.bytes(wt)
		case 3:
			m.unit, err = p.bytes(wt)
		case 5, 7, 9, 10, 11:
			var b []byte
			if b, err = p.bytes(wt); err == nil {
				err = d.metricData(b, num, &m)
			}
		case 12:
			err = d.attr(&p, wt, &m.metadata)
		default:
			err = p.skip(wt)
		}
		if err != nil {
			return err
		}
	}
	d.a.metrics = append(grow(d.a, d.a.metrics, 1), m)
	return nil
}

var metricTypeOfField = map[int32]metricType{5: metricGauge, 7: metricSum, 9: metricHistogram, 10: metricExpHistogram, 11: metricSummary}

// metricData parses the Gauge, Sum, Histogram, ExponentialHistogram or
// Summary of a metric, replacing any data the metric had: 1 data points,
// 2 aggregation temporality, 3 is monotonic (sums).
func (d *protoDecoder) metricData(buf []byte, field int32, m *metric) error {
	a := d.a
	typ := metricTypeOfField[field]
	m.typ, m.temporality, m.monotonic = typ, 0, false
	m.points = int32(len(a.points))
	p := pbuf{b: buf}
	for p.more() {
		num, wt, err := p.tag()
		if err != nil {
			return err
		}
		switch {
		case num == 1:
			var b []byte
			if b, err = p.bytes(wt); err == nil {
				err = d.point(b, typ)
			}
		case num == 2 && typ != metricGauge && typ != metricSummary:
			var v uint64
			v, err = p.varint(wt)
			m.temporality = int32(v)
		case num == 3 && typ == metricSum:
			var v uint64
			v, err = p.varint(wt)
			m.monotonic = v != 0
		default:
			err = p.skip(wt)
		}
		if err != nil {
			return err
		}
	}
	m.end = int32(len(a.points))
	return nil
}

// pointFields maps a data point type's field numbers to what they mean, so
// one loop parses all five types.
type pointField uint8

const (
	pfUnknown pointField = iota
	pfAttrs
	pfStart
	pfTime
	pfDouble
	pfInt
	pfExemplars
	pfFlags
	pfCount
	pfSum
	pfBucketCounts
	pfBounds
	pfMin
	pfMax
	pfScale
	pfZeroCount
	pfPositive
	pfNegative
	pfZeroThreshold
	pfQuantiles
)

var pointFields = map[metricType][]pointField{
	metricGauge:        numberPointFields,
	metricSum:          numberPointFields,
	metricHistogram:    {0, 0, pfStart, pfTime, pfCount, pfSum, pfBucketCounts, pfBounds, pfExemplars, pfAttrs, pfFlags, pfMin, pfMax},
	metricExpHistogram: {0, pfAttrs, pfStart, pfTime, pfCount, pfSum, pfScale, pfZeroCount, pfPositive, pfNegative, pfFlags, pfExemplars, pfMin, pfMax, pfZeroThreshold},
	metricSummary:      {0, 0, pfStart, pfTime, pfCount, pfSum, pfQuantiles, pfAttrs, pfFlags},
}

var numberPointFields = []pointField{0, 0, pfStart, pfTime, pfDouble, pfExemplars, pfInt, pfAttrs, pfFlags}

func (d *protoDecoder) point(buf []byte, typ metricType) error {
	a := d.a
	fields := pointFields[typ]
	pt := point{exemplars: span32{int32(len(a.exemplars)), int32(len(a.exemplars))}}
	p := pbuf{b: buf}
	for p.more() {
		num, wt, err := p.tag()
		if err != nil {
			return err
		}
		f := pfUnknown
		if int(num) < len(fields) {
			f = fields[num]
		}
		var v uint64
		switch f {
		case pfAttrs:
			err = d.attr(&p, wt, &pt.attrs)
		case pfStart:
			pt.start, err = p.i64(wt)
		case pfTime:
			pt.time, err = p.i64(wt)
		case pfDouble, pfInt:
			pt.num, err = p.i64(wt)
			pt.numKind = numDouble
			if f == pfInt {
				pt.numKind = numInt
			}
		case pfExemplars:
			var b []byte
			if b, err = p.bytes(wt); err == nil {
				err = d.exemplar(b)
			}
			pt.exemplars.end = int32(len(a.exemplars))
		case pfFlags:
			v, err = p.varint(wt)
			pt.flags = uint32(v)
		case pfCount:
			pt.count, err = p.i64(wt)
		case pfSum:
			pt.sum, err = p.double(wt)
			pt.hasSum = true
		case pfMin:
			pt.min, err = p.double(wt)
			pt.hasMin = true
		case pfMax:
			pt.max, err = p.double(wt)
			pt.hasMax = true
		case pfBucketCounts, pfBounds:
			err = d.fixed64s(&p, wt, &pt, f == pfBounds)
		case pfScale:
			v, err = p.varint(wt)
			pt.scale = zigzag32(v)
		case pfZeroCount:
			pt.zeroCount, err = p.i64(wt)
		case pfZeroThreshold:
			pt.zeroThreshold, err = p.double(wt)
		case pfPositive, pfNegative:
			b := &pt.pos
			if f == pfNegative {
				b = &pt.neg
			}
			var m []byte
			if m, err = p.bytes(wt); err == nil {
				err = d.buckets(m, b)
			}
		case pfQuantiles:
			var m []byte
			if m, err = p.bytes(wt); err == nil {
				err = d.quantile(m, &pt)
			}
		default:
			err = p.skip(wt)
		}
		if err != nil {
			return err
		}
	}
	a.points = append(grow(a, a.points, 1), pt)
	return nil
}

func zigzag32(v uint64) int32 {
	return int32(uint32(v>>1) ^ uint32(int32((v&1)<<31)>>31))
}

// fixed64s reads histogram bucket counts or explicit bounds: a packed list
// replaces the point's list, a single element appends to it.
func (d *protoDecoder) fixed64s(p *pbuf, wt int8, pt *point, bounds bool) error {
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
	r := &pt.counts
	if bounds {
		r = &pt.bounds
	}
	if wt == wtLen {
		*r = span32{} // replaced, not merged
	}
	if bounds {
		a.f64s = toTail(a, a.f64s, r)
	} else {
		a.u64s = toTail(a, a.u64s, r)
	}
	for i := 0; i < len(packed); i += 8 {
		a.appendFixed64(bounds, binary.LittleEndian.Uint64(packed[i:]))
	}
	if wt == wtI64 {
		a.appendFixed64(bounds, one)
	}
	if bounds {
		r.end = int32(len(a.f64s))
	} else {
		r.end = int32(len(a.u64s))
	}
	return nil
}

// buckets parses ExponentialHistogramDataPoint.Buckets, merging: 1 offset,
// 2 bucket counts (varints, packed or not; both append).
func (d *protoDecoder) buckets(buf []byte, b *buckets) error {
	a := d.a
	p := pbuf{b: buf}
	for p.more() {
		num, wt, err := p.tag()
		if err != nil {
			return err
		}
		switch num {
		case 1:
			var v uint64
			v, err = p.varint(wt)
			b.offset = zigzag32(v)
		case 2:
			a.u64s = toTail(a, a.u64s, &b.counts)
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
			b.counts.end = int32(len(a.u64s))
		default:
			err = p.skip(wt)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// quantile parses a ValueAtQuantile (1 quantile, 2 value) and appends it to
// the point's quantiles.
func (d *protoDecoder) quantile(buf []byte, pt *point) error {
	var q, v float64
	p := pbuf{b: buf}
	for p.more() {
		num, wt, err := p.tag()
		if err != nil {
			return err
		}
		switch num {
		case 1:
			q, err = p.double(wt)
		case 2:
			v, err = p.double(wt)
		default:
			err = p.skip(wt)
		}
		if err != nil {
			return err
		}
	}
	d.a.appendQuantile(pt, q, v)
	return nil
}

func (d *protoDecoder) exemplar(buf []byte) error {
	var ex exemplar
	p := pbuf{b: buf}
	for p.more() {
		num, wt, err := p.tag()
		if err != nil {
			return err
		}
		switch num {
		case 7:
			err = d.attr(&p, wt, &ex.attrs)
		case 2:
			ex.time, err = p.i64(wt)
		case 3, 6:
			ex.num, err = p.i64(wt)
			ex.numKind = numDouble
			if num == 6 {
				ex.numKind = numInt
			}
		case 5:
			err = p.id(wt, ex.traceID[:])
		case 4:
			err = p.id(wt, ex.spanID[:])
		default:
			err = p.skip(wt)
		}
		if err != nil {
			return err
		}
	}
	d.a.exemplars = append(grow(d.a, d.a.exemplars, 1), ex)
	return nil
}
