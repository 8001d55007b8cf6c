package otlp

import (
	"strings"
	"unsafe"
)

// The OTLP messages the decoders read, each as one table listing every field
// once: its protobuf number, how its value is read from either encoding, its
// OTLP/JSON member name and where the value lands in the model (model.go). The
// protobuf decoder looks fields up by number, the JSON decoder by name; both
// read the value their own way and then store it with the same code (the
// field setters and arena.begin), so the two cannot disagree about what a
// field means. A field not in its message's table is unknown and skipped.

// kind says how a field's value is read and how it is stored.
type kind uint8

const (
	kNone     kind = iota // not a field of the message: skipped
	kFixed64              // fixed64 into a uint64; JSON: an integer, number or decimal string
	kDouble               // double into a float64; JSON: a number or a string ParseFloat takes
	kSfixed64             // sfixed64 into a uint64 (int64 bits); JSON: a signed integer
	kInt64                // varint int64 into a uint64; JSON: a signed integer
	kBool64               // varint bool into a uint64, 0 or 1
	kUint32               // varint uint32 into a uint32
	kFixed32              // fixed32 into a uint32
	kInt32                // varint int32 into an int32
	kSint32               // zigzag varint into an int32
	kEnum                 // varint into an int32; JSON: a number or a name in field.enum
	kBool                 // varint bool into a bool
	kString               // string into a []byte
	kStrValue             // AnyValue's string into node.s, marked so, with node.ascii from the JSON reader
	kBytes                // bytes into a []byte; JSON: base64
	kTraceID              // 16 bytes (JSON: hex) into a [16]byte; empty is all zero
	kSpanID               // 8 bytes (JSON: hex) into an [8]byte; empty is all zero
	kFixed64s             // repeated fixed64 into a span32 of arena.u64s (see protoDecoder.fixed64s)
	kDoubles              // repeated double into a span32 of arena.f64s
	kVarints              // repeated varint uint64 into a span32 of arena.u64s; packed or not, both append
	kMessage              // a message, field.sub, whose model elem finds
	// Fields rows do not use: read and checked as kString, kUint32 and kInt32
	// are, then dropped.
	kDropString
	kDropUint32
	kDropInt32
)

// elem says where a message field's own fields land.
type elem uint8

const (
	inPlace     elem = iota // in the parent's model at field.off: a singular message merges
	newNode                 // a node appended to the list at field.off
	bodyNode                // the node whose index plus one is at field.off, made on first use
	emptied                 // the parent node, its array or kvlist emptied: the value starts afresh
	newResource             // a new resource (its attribute list)
	newGroup                // a new group of the current resource
	newLog                  // a log record appended to the parent group
	newSpan                 // a span appended to the parent group
	newEvent                // an event appended to the parent span
	newLink                 // a link appended to the parent span
	newMetric               // a metric appended to the parent group
	newData                 // the parent metric's data, replacing what it had
	newPoint                // a data point appended to the parent metric
	newExemplar             // an exemplar appended to the parent point
	newQuantile             // a (quantile, value) pair appended to the parent point's list
)

// deprecatedGroups is the field number of a Resource*'s deprecated scope groups
// (see arena.dropDeprecated).
const deprecatedGroups = 1000

type field struct {
	num    int32
	json   string // lowerCamelCase; its snake_case spelling is accepted too, as pdata does
	kind   kind
	rep    bool    // repeated message or string: one element per occurrence, a JSON array
	off    uintptr // of the value in the message's model
	tagged bool    // a oneof: storing the value also stores tag at tagOff
	tag    uint8
	tagOff uintptr
	enum   map[string]int32
	sub    *message
	elem   elem
}

type named struct {
	name string
	f    *field
}

type message struct {
	fields []field
	// nodes marks the AnyValue, ArrayValue, KeyValueList and KeyValue levels
	// maxProtoDepth counts.
	nodes bool
	// kinds and byNum are the fields by number, for numbers below maxNum: the
	// protobuf decoder dispatches on the kind, one load from the number as a
	// compiled switch would be.
	kinds [maxNum]kind
	byNum [maxNum]*field
	byLen [][]named // JSON member names by length
}

// maxNum bounds the field numbers byNum indexes; higher ones are looked up in fields.
const maxNum = 32

func newMessage(nodes bool, fields ...field) *message {
	m := &message{}
	m.define(nodes, fields...)
	return m
}

// define fills m; the AnyValue family refers to itself, so its messages are
// declared first and defined in init.
func (m *message) define(nodes bool, fields ...field) {
	m.fields, m.nodes = fields, nodes
	for i := range m.fields {
		f := &m.fields[i]
		switch {
		case f.kind == kNone:
			panic("otlp: field " + f.json + " of no kind")
		case f.tagged && !canTag[f.kind]:
			panic("otlp: field " + f.json + " is of a kind that stores no tag")
		}
		if f.num < maxNum {
			m.kinds[f.num], m.byNum[f.num] = f.kind, f
		}
		for _, name := range []string{f.json, snakeCase(f.json)} {
			for len(m.byLen) <= len(name) {
				m.byLen = append(m.byLen, nil)
			}
			if m.byName([]byte(name)) == nil {
				m.byLen[len(name)] = append(m.byLen[len(name)], named{name, f})
			}
		}
	}
}

// canTag are the kinds whose values mark a oneof member (see field.mark).
var canTag = map[kind]bool{kFixed64: true, kDouble: true, kSfixed64: true, kInt64: true, kBool64: true, kBytes: true, kDropInt32: true, kMessage: true}

func snakeCase(s string) string {
	var b strings.Builder
	for _, c := range s {
		if 'A' <= c && c <= 'Z' {
			b.WriteByte('_')
			c += 'a' - 'A'
		}
		b.WriteRune(c)
	}
	return b.String()
}

func (m *message) byNumber(num int32) (kind, *field) {
	if uint32(num) < maxNum {
		return m.kinds[num], m.byNum[num]
	}
	for i := range m.fields {
		if m.fields[i].num == num {
			return m.fields[i].kind, &m.fields[i]
		}
	}
	return kNone, nil
}

func (m *message) byName(k []byte) *field {
	if len(k) < len(m.byLen) {
		for _, n := range m.byLen[len(k)] {
			if n.name == string(k) {
				return n.f
			}
		}
	}
	return nil
}

// fld is a field stored at off.
func fld(num int32, json string, k kind, off uintptr) field {
	return field{num: num, json: json, kind: k, off: off}
}

// msg is a message field.
func msg(num int32, json string, sub *message, e elem, off uintptr) field {
	return field{num: num, json: json, kind: kMessage, sub: sub, elem: e, off: off}
}

func (f field) repeated() field { f.rep = true; return f }

// oneof makes storing f also store tag at off.
func (f field) oneof(off uintptr, tag uint8) field {
	f.tagged, f.tagOff, f.tag = true, off, tag
	return f
}

func enum(num int32, json string, off uintptr, names map[string]int32) field {
	f := fld(num, json, kEnum, off)
	f.enum = names
	return f
}

// attrs is a repeated KeyValue field appended to the list at off.
func attrs(num int32, json string, off uintptr) field {
	return msg(num, json, &keyValueMsg, newNode, off).repeated()
}

// The AnyValue family, as nodes (see node).
var anyValueMsg, keyValueMsg, arrayValueMsg, kvlistValueMsg message

func init() {
	kindOff := unsafe.Offsetof(node{}.kind)
	keyValueMsg.define(true,
		fld(1, "key", kString, unsafe.Offsetof(node{}.key)),
		msg(2, "value", &anyValueMsg, inPlace, 0),
		fld(3, "keyStrindex", kDropInt32, 0))
	anyValueMsg.define(true,
		fld(1, "stringValue", kStrValue, unsafe.Offsetof(node{}.s)),
		fld(2, "boolValue", kBool64, unsafe.Offsetof(node{}.num)).oneof(kindOff, uint8(kindBool)),
		fld(3, "intValue", kInt64, unsafe.Offsetof(node{}.num)).oneof(kindOff, uint8(kindInt)),
		fld(4, "doubleValue", kDouble, unsafe.Offsetof(node{}.num)).oneof(kindOff, uint8(kindDouble)),
		msg(5, "arrayValue", &arrayValueMsg, emptied, 0).oneof(kindOff, uint8(kindArray)),
		msg(6, "kvlistValue", &kvlistValueMsg, emptied, 0).oneof(kindOff, uint8(kindKvlist)),
		fld(7, "bytesValue", kBytes, unsafe.Offsetof(node{}.s)).oneof(kindOff, uint8(kindBytes)),
		fld(8, "stringValueStrindex", kDropInt32, 0).oneof(kindOff, uint8(kindEmpty)))
	arrayValueMsg.define(true, msg(1, "values", &anyValueMsg, newNode, unsafe.Offsetof(node{}.kids)).repeated())
	kvlistValueMsg.define(true, msg(1, "values", &keyValueMsg, newNode, unsafe.Offsetof(node{}.kids)).repeated())
}

var (
	entityRefMsg = newMessage(false,
		fld(1, "schemaUrl", kDropString, 0),
		fld(2, "type", kDropString, 0),
		fld(3, "idKeys", kDropString, 0).repeated(),
		fld(4, "descriptionKeys", kDropString, 0).repeated())
	resourceMsg = newMessage(false, // into the resource's attribute list
		attrs(1, "attributes", 0),
		fld(2, "droppedAttributesCount", kDropUint32, 0),
		msg(3, "entityRefs", entityRefMsg, inPlace, 0).repeated())
	scopeMsg = newMessage(false,
		fld(1, "name", kString, unsafe.Offsetof(scope{}.name)),
		fld(2, "version", kString, unsafe.Offsetof(scope{}.version)),
		attrs(3, "attributes", unsafe.Offsetof(scope{}.attrs)),
		fld(4, "droppedAttributesCount", kDropUint32, 0))
)

// exportRequest is an Export*ServiceRequest: 1 Resource*, whose layouts agree but
// for their member names: 1 resource, 2 scope groups, 3 schema url, 1000 the
// deprecated scope groups; a scope group is 1 scope, 2 records, 3 schema url.
func exportRequest(resources, groups, deprecated, records string, record *message, e elem) *message {
	group := newMessage(false,
		msg(1, "scope", scopeMsg, inPlace, unsafe.Offsetof(group{}.scope)),
		msg(2, records, record, e, 0).repeated(),
		fld(3, "schemaUrl", kDropString, 0))
	resource := newMessage(false,
		msg(1, "resource", resourceMsg, inPlace, 0),
		msg(2, groups, group, newGroup, 0).repeated(),
		fld(3, "schemaUrl", kDropString, 0),
		msg(deprecatedGroups, deprecated, group, newGroup, 0).repeated())
	return newMessage(false, msg(1, resources, resource, newResource, 0).repeated())
}

var (
	logsRequest    = exportRequest("resourceLogs", "scopeLogs", "deprecatedScopeLogs", "logRecords", logRecordMsg, newLog)
	tracesRequest  = exportRequest("resourceSpans", "scopeSpans", "deprecatedScopeSpans", "spans", spanMsg, newSpan)
	metricsRequest = exportRequest("resourceMetrics", "scopeMetrics", "deprecatedScopeMetrics", "metrics", metricMsg, newMetric)
)

func requestMsg(sig Signal) *message {
	switch sig {
	case Logs:
		return logsRequest
	case Traces:
		return tracesRequest
	}
	return metricsRequest
}

var logRecordMsg = newMessage(false,
	fld(1, "timeUnixNano", kFixed64, unsafe.Offsetof(logRecord{}.time)),
	fld(11, "observedTimeUnixNano", kFixed64, unsafe.Offsetof(logRecord{}.observed)),
	enum(2, "severityNumber", unsafe.Offsetof(logRecord{}.severity), severityNumbers),
	fld(3, "severityText", kString, unsafe.Offsetof(logRecord{}.sevText)),
	msg(5, "body", &anyValueMsg, bodyNode, unsafe.Offsetof(logRecord{}.body)),
	attrs(6, "attributes", unsafe.Offsetof(logRecord{}.attrs)),
	fld(7, "droppedAttributesCount", kUint32, unsafe.Offsetof(logRecord{}.dropped)),
	fld(8, "flags", kFixed32, unsafe.Offsetof(logRecord{}.flags)),
	fld(9, "traceId", kTraceID, unsafe.Offsetof(logRecord{}.traceID)),
	fld(10, "spanId", kSpanID, unsafe.Offsetof(logRecord{}.spanID)),
	fld(12, "eventName", kString, unsafe.Offsetof(logRecord{}.event)))

var (
	spanMsg = newMessage(false,
		fld(1, "traceId", kTraceID, unsafe.Offsetof(span{}.traceID)),
		fld(2, "spanId", kSpanID, unsafe.Offsetof(span{}.spanID)),
		fld(3, "traceState", kString, unsafe.Offsetof(span{}.traceState)),
		fld(4, "parentSpanId", kSpanID, unsafe.Offsetof(span{}.parent)),
		fld(16, "flags", kFixed32, unsafe.Offsetof(span{}.flags)),
		fld(5, "name", kString, unsafe.Offsetof(span{}.name)),
		enum(6, "kind", unsafe.Offsetof(span{}.kind), spanKindNumbers),
		fld(7, "startTimeUnixNano", kFixed64, unsafe.Offsetof(span{}.start)),
		fld(8, "endTimeUnixNano", kFixed64, unsafe.Offsetof(span{}.end)),
		attrs(9, "attributes", unsafe.Offsetof(span{}.attrs)),
		fld(10, "droppedAttributesCount", kUint32, unsafe.Offsetof(span{}.dropped)),
		msg(11, "events", eventMsg, newEvent, 0).repeated(),
		fld(12, "droppedEventsCount", kUint32, unsafe.Offsetof(span{}.droppedEv)),
		msg(13, "links", linkMsg, newLink, 0).repeated(),
		fld(14, "droppedLinksCount", kUint32, unsafe.Offsetof(span{}.droppedLn)),
		msg(15, "status", statusMsg, inPlace, 0))
	// statusMsg's fields land in the span.
	statusMsg = newMessage(false,
		fld(2, "message", kString, unsafe.Offsetof(span{}.statusMsg)),
		enum(3, "code", unsafe.Offsetof(span{}.statusCode), statusCodeNumbers))
	eventMsg = newMessage(false,
		fld(1, "timeUnixNano", kFixed64, unsafe.Offsetof(event{}.time)),
		fld(2, "name", kString, unsafe.Offsetof(event{}.name)),
		attrs(3, "attributes", unsafe.Offsetof(event{}.attrs)),
		fld(4, "droppedAttributesCount", kUint32, unsafe.Offsetof(event{}.dropped)))
	linkMsg = newMessage(false,
		fld(1, "traceId", kTraceID, unsafe.Offsetof(link{}.traceID)),
		fld(2, "spanId", kSpanID, unsafe.Offsetof(link{}.spanID)),
		fld(3, "traceState", kString, unsafe.Offsetof(link{}.traceState)),
		attrs(4, "attributes", unsafe.Offsetof(link{}.attrs)),
		fld(5, "droppedAttributesCount", kUint32, unsafe.Offsetof(link{}.dropped)),
		fld(6, "flags", kFixed32, unsafe.Offsetof(link{}.flags)))
)

var metricMsg = newMessage(false,
	fld(1, "name", kString, unsafe.Offsetof(metric{}.name)),
	fld(2, "description", kString, unsafe.Offsetof(metric{}.desc)),
	fld(3, "unit", kString, unsafe.Offsetof(metric{}.unit)),
	data(5, "gauge", metricGauge, numberPoint),
	data(7, "sum", metricSum, numberPoint, temporality, fld(3, "isMonotonic", kBool, unsafe.Offsetof(metric{}.monotonic))),
	data(9, "histogram", metricHistogram, histogramPoint, temporality),
	data(10, "exponentialHistogram", metricExpHistogram, expHistogramPoint, temporality),
	data(11, "summary", metricSummary, summaryPoint),
	attrs(12, "metadata", unsafe.Offsetof(metric{}.metadata)))

// data is a Gauge, Sum, Histogram, ExponentialHistogram or Summary field of a
// metric: 1 data points and the fields given, which land in the metric.
func data(num int32, json string, typ metricType, point *message, fields ...field) field {
	points := msg(1, "dataPoints", point, newPoint, 0).repeated()
	return msg(num, json, newMessage(false, append([]field{points}, fields...)...), newData, 0).
		oneof(unsafe.Offsetof(metric{}.typ), uint8(typ))
}

var temporality = enum(2, "aggregationTemporality", unsafe.Offsetof(metric{}.temporality), temporalityNumbers)

// Fields every data point type has, under numbers of its own.
func pointAttrs(num int32) field { return attrs(num, "attributes", unsafe.Offsetof(point{}.attrs)) }
func pointFlags(num int32) field { return fld(num, "flags", kUint32, unsafe.Offsetof(point{}.flags)) }

func pointExemplars(num int32) field {
	return msg(num, "exemplars", exemplarMsg, newExemplar, 0).repeated()
}

var (
	pointStart = fld(2, "startTimeUnixNano", kFixed64, unsafe.Offsetof(point{}.start))
	pointTime  = fld(3, "timeUnixNano", kFixed64, unsafe.Offsetof(point{}.time))
	pointCount = fld(4, "count", kFixed64, unsafe.Offsetof(point{}.count))
	pointSum   = fld(5, "sum", kDouble, unsafe.Offsetof(point{}.sum)).oneof(unsafe.Offsetof(point{}.hasSum), 1)
)

func pointMin(num int32) field {
	return fld(num, "min", kDouble, unsafe.Offsetof(point{}.min)).oneof(unsafe.Offsetof(point{}.hasMin), 1)
}

func pointMax(num int32) field {
	return fld(num, "max", kDouble, unsafe.Offsetof(point{}.max)).oneof(unsafe.Offsetof(point{}.hasMax), 1)
}

var (
	numberPoint = newMessage(false,
		pointAttrs(7), pointStart, pointTime,
		fld(4, "asDouble", kDouble, unsafe.Offsetof(point{}.num)).oneof(unsafe.Offsetof(point{}.numKind), uint8(numDouble)),
		fld(6, "asInt", kSfixed64, unsafe.Offsetof(point{}.num)).oneof(unsafe.Offsetof(point{}.numKind), uint8(numInt)),
		pointExemplars(5), pointFlags(8))
	histogramPoint = newMessage(false,
		pointAttrs(9), pointStart, pointTime, pointCount, pointSum,
		fld(6, "bucketCounts", kFixed64s, unsafe.Offsetof(point{}.counts)),
		fld(7, "explicitBounds", kDoubles, unsafe.Offsetof(point{}.bounds)),
		pointExemplars(8), pointFlags(10), pointMin(11), pointMax(12))
	expHistogramPoint = newMessage(false,
		pointAttrs(1), pointStart, pointTime, pointCount, pointSum,
		fld(6, "scale", kSint32, unsafe.Offsetof(point{}.scale)),
		fld(7, "zeroCount", kFixed64, unsafe.Offsetof(point{}.zeroCount)),
		msg(8, "positive", bucketsMsg, inPlace, unsafe.Offsetof(point{}.pos)),
		msg(9, "negative", bucketsMsg, inPlace, unsafe.Offsetof(point{}.neg)),
		pointFlags(10), pointExemplars(11), pointMin(12), pointMax(13),
		fld(14, "zeroThreshold", kDouble, unsafe.Offsetof(point{}.zeroThreshold)))
	summaryPoint = newMessage(false,
		pointAttrs(7), pointStart, pointTime, pointCount, pointSum,
		msg(6, "quantileValues", quantileMsg, newQuantile, 0).repeated(),
		pointFlags(8))
	bucketsMsg = newMessage(false,
		fld(1, "offset", kSint32, unsafe.Offsetof(buckets{}.offset)),
		fld(2, "bucketCounts", kVarints, unsafe.Offsetof(buckets{}.counts)))
	// quantileMsg's fields land in the pair of arena.f64s newQuantile appends.
	quantileMsg = newMessage(false,
		fld(1, "quantile", kDouble, 0),
		fld(2, "value", kDouble, 8))
	exemplarMsg = newMessage(false,
		attrs(7, "filteredAttributes", unsafe.Offsetof(exemplar{}.attrs)),
		fld(2, "timeUnixNano", kFixed64, unsafe.Offsetof(exemplar{}.time)),
		fld(3, "asDouble", kDouble, unsafe.Offsetof(exemplar{}.num)).oneof(unsafe.Offsetof(exemplar{}.numKind), uint8(numDouble)),
		fld(6, "asInt", kSfixed64, unsafe.Offsetof(exemplar{}.num)).oneof(unsafe.Offsetof(exemplar{}.numKind), uint8(numInt)),
		fld(5, "traceId", kTraceID, unsafe.Offsetof(exemplar{}.traceID)),
		fld(4, "spanId", kSpanID, unsafe.Offsetof(exemplar{}.spanID)))
)

// The names OTLP/JSON may give enum values instead of their numbers.
var (
	severityNumbers = map[string]int32{
		"SEVERITY_NUMBER_UNSPECIFIED": 0,
		// pdata's name for 1 has a trailing space; its decoder accepts only
		// that spelling, so this one does too.
		"SEVERITY_NUMBER_TRACE ": 1, "SEVERITY_NUMBER_TRACE2": 2, "SEVERITY_NUMBER_TRACE3": 3, "SEVERITY_NUMBER_TRACE4": 4,
		"SEVERITY_NUMBER_DEBUG": 5, "SEVERITY_NUMBER_DEBUG2": 6, "SEVERITY_NUMBER_DEBUG3": 7, "SEVERITY_NUMBER_DEBUG4": 8,
		"SEVERITY_NUMBER_INFO": 9, "SEVERITY_NUMBER_INFO2": 10, "SEVERITY_NUMBER_INFO3": 11, "SEVERITY_NUMBER_INFO4": 12,
		"SEVERITY_NUMBER_WARN": 13, "SEVERITY_NUMBER_WARN2": 14, "SEVERITY_NUMBER_WARN3": 15, "SEVERITY_NUMBER_WARN4": 16,
		"SEVERITY_NUMBER_ERROR": 17, "SEVERITY_NUMBER_ERROR2": 18, "SEVERITY_NUMBER_ERROR3": 19, "SEVERITY_NUMBER_ERROR4": 20,
		"SEVERITY_NUMBER_FATAL": 21, "SEVERITY_NUMBER_FATAL2": 22, "SEVERITY_NUMBER_FATAL3": 23, "SEVERITY_NUMBER_FATAL4": 24,
	}
	spanKindNumbers = map[string]int32{
		"SPAN_KIND_UNSPECIFIED": 0, "SPAN_KIND_INTERNAL": 1, "SPAN_KIND_SERVER": 2,
		"SPAN_KIND_CLIENT": 3, "SPAN_KIND_PRODUCER": 4, "SPAN_KIND_CONSUMER": 5,
	}
	statusCodeNumbers  = map[string]int32{"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
	temporalityNumbers = map[string]int32{"AGGREGATION_TEMPORALITY_UNSPECIFIED": 0, "AGGREGATION_TEMPORALITY_DELTA": 1, "AGGREGATION_TEMPORALITY_CUMULATIVE": 2}
)

// ref locates a message's model in the arena: an element of one of its slices,
// by the slice (its header's first word, the array) and the byte offset in it.
// It stays true when the slice is reallocated, as the node slice is while an
// AnyValue's children are decoded.
type ref struct {
	array *unsafe.Pointer
	off   uintptr
}

func at[T any](s *[]T, i int) ref {
	var zero T
	return ref{(*unsafe.Pointer)(unsafe.Pointer(s)), uintptr(i) * unsafe.Sizeof(zero)}
}

func (r ref) plus(off uintptr) ref { return ref{r.array, r.off + off} }

// nowhere is the model of a request, which has none of its own.
var nowhere = ref{array: new(unsafe.Pointer)}

func (r ref) ptr() unsafe.Pointer { return unsafe.Add(*r.array, r.off) }

// The setters store a value either decoder read into the model at p, as field
// f says; set64 and mark also mark the member of its oneof as set. They are
// small enough to be inlined into the decoders.

func (f *field) set64(p unsafe.Pointer, v uint64) {
	*(*uint64)(unsafe.Add(p, f.off)) = v
	f.mark(p)
}

func (f *field) set32(p unsafe.Pointer, v uint32) { *(*uint32)(unsafe.Add(p, f.off)) = v }

func (f *field) setBool(p unsafe.Pointer, v bool) { *(*bool)(unsafe.Add(p, f.off)) = v }

func (f *field) setBytes(p unsafe.Pointer, b []byte) { *(*[]byte)(unsafe.Add(p, f.off)) = b }

// setStr stores an AnyValue's string; ascii says it is known to be plain ASCII.
func setStr(p unsafe.Pointer, b []byte, ascii bool) {
	n := (*node)(p)
	n.s, n.ascii, n.kind = b, ascii, kindStr
}

func (f *field) mark(p unsafe.Pointer) {
	if f.tagged {
		*(*uint8)(unsafe.Add(p, f.tagOff)) = f.tag
	}
}

// id is where the id of field f lands.
func (f *field) id(p unsafe.Pointer) []byte {
	n := 16
	if f.kind == kSpanID {
		n = 8
	}
	return unsafe.Slice((*byte)(unsafe.Add(p, f.off)), n)
}

// list is where the number list of field f lands.
func (f *field) list(p unsafe.Pointer) *span32 { return (*span32)(unsafe.Add(p, f.off)) }

// begin makes or finds the model of message field f of the message at r and
// returns where its fields land.
func (a *arena) begin(f *field, r ref) ref {
	if f.tagged {
		f.mark(r.ptr())
	}
	switch f.elem {
	case newNode:
		i := a.newNode()
		a.appendTo((*list)(r.plus(f.off).ptr()), i)
		return at(&a.nodes, int(i))
	case bodyNode:
		if *(*int32)(r.plus(f.off).ptr()) == 0 {
			i := a.newNode()
			*(*int32)(r.plus(f.off).ptr()) = i + 1
		}
		return at(&a.nodes, int(*(*int32)(r.plus(f.off).ptr())-1))
	case emptied:
		(*node)(r.ptr()).kids = list{}
	case newResource:
		return push(a, &a.resources)
	case newGroup:
		g := push(a, &a.groups)
		(*group)(g.ptr()).res = int32(len(a.resources) - 1)
		(*group)(g.ptr()).deprecated = f.num == deprecatedGroups
		return g
	case newLog:
		return extend(r, push(a, &a.logs), len(a.logs))
	case newSpan:
		s := push(a, &a.spans)
		sp := (*span)(s.ptr())
		sp.events, sp.eventsEnd = int32(len(a.events)), int32(len(a.events))
		sp.links, sp.linksEnd = int32(len(a.links)), int32(len(a.links))
		return extend(r, s, len(a.spans))
	case newEvent:
		e := push(a, &a.events)
		(*span)(r.ptr()).eventsEnd = int32(len(a.events))
		return e
	case newLink:
		l := push(a, &a.links)
		(*span)(r.ptr()).linksEnd = int32(len(a.links))
		return l
	case newMetric:
		return extend(r, push(a, &a.metrics), len(a.metrics))
	case newData:
		m := (*metric)(r.ptr())
		m.temporality, m.monotonic = 0, false
		m.points, m.end = int32(len(a.points)), int32(len(a.points))
	case newPoint:
		p := push(a, &a.points)
		n := int32(len(a.exemplars))
		(*point)(p.ptr()).exemplars = span32{n, n}
		(*metric)(r.ptr()).end = int32(len(a.points))
		return p
	case newExemplar:
		e := push(a, &a.exemplars)
		(*point)(r.ptr()).exemplars.end = int32(len(a.exemplars))
		return e
	case newQuantile:
		pt := (*point)(r.ptr())
		a.f64s = toTail(a, a.f64s, &pt.quantiles)
		a.f64s = append(grow(a, a.f64s, 2), 0, 0)
		pt.quantiles.end = int32(len(a.f64s))
		return at(&a.f64s, len(a.f64s)-2)
	}
	return r.plus(f.off)
}

// push appends a zero element to *s and returns where it is.
func push[T any](a *arena, s *[]T) ref {
	*s = grow(a, *s, 1)
	n := len(*s)
	*s = (*s)[:n+1]
	clear((*s)[n:])
	return at(s, n)
}

// extend makes the group at r end with the record at rec, the n-th of its
// kind, just appended: a group's records are the ones decoded while it was.
func extend(r, rec ref, n int) ref {
	g := (*group)(r.ptr())
	if g.start == g.end {
		g.start = int32(n - 1)
	}
	g.end = int32(n)
	return rec
}

// dropDeprecated settles each resource's deprecated scope groups as pdata does:
// its protobuf decoder uses them only when the resource has no others, its JSON
// decoder never.
func (a *arena) dropDeprecated(isJSON bool) {
	kept := a.groups[:0]
	for i := 0; i < len(a.groups); {
		j, current := i, false
		for ; j < len(a.groups) && a.groups[j].res == a.groups[i].res; j++ {
			current = current || !a.groups[j].deprecated
		}
		for _, g := range a.groups[i:j] {
			if !g.deprecated || !current && !isJSON {
				kept = append(kept, g)
			}
		}
		i = j
	}
	a.groups = kept
}
