package otlp

import (
	"bytes"
	"flag"
	"fmt"
	"go/format"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// The OTLP messages, one table each: every field once, with its protobuf
// number, its OTLP/JSON name (lowerCamelCase; its snake_case spelling is
// accepted too, as pdata does), how its value is read and where it lands in
// the message's model. TestGeneratedDecoders turns them into decoders.go.

// kind says how a field's value is read and stored.
type kind uint8

const (
	kFixed64    kind = iota // fixed64 into a uint64; JSON: an integer, number or decimal string
	kDouble                 // double into a float64; JSON: a number or a string ParseFloat takes
	kDoubleBits             // double into a uint64, its bits
	kSfixed64               // sfixed64 into a uint64 (int64 bits); JSON: a signed integer
	kInt64                  // varint int64 into a uint64; JSON: a signed integer
	kBool64                 // varint bool into a uint64, 0 or 1
	kUint32                 // varint uint32
	kFixed32                // fixed32 into a uint32
	kInt32                  // varint int32
	kSint32                 // zigzag varint into an int32
	kEnum                   // varint into an int32; JSON: a number or a name in field.enum
	kBool                   // varint bool
	kString                 // string into a []byte
	kStrValue               // AnyValue's string into node.s, with node.ascii from the JSON reader
	kBytes                  // bytes into a []byte; JSON: base64
	kID                     // a trace or span id (JSON: hex) into a byte array; empty is all zero
	kFixed64s               // repeated fixed64 into a span32 of arena.u64s (see protoDecoder.fixed64s)
	kDoubles                // repeated double into a span32 of arena.f64s
	kVarints                // repeated varint uint64 into a span32 of arena.u64s; packed or not, both append
	kMessage                // a message, field.sub, made or found by field.elem
	// Fields rows do not use: read and checked as kString, kUint32 and kInt32 are,
	// then dropped.
	kDropString
	kDropUint32
	kDropInt32
)

type field struct {
	num  int32
	json string
	kind kind
	to   string // where the value lands: a selector or index of the message's model
	tag  string // a oneof: the model's member that says which is set, and to what
	rep  bool   // repeated message or string: one element per occurrence, a JSON array
	sub  *message
	elem elem
	enum string // the names of an enum's values
}

type message struct {
	name   string // of the two decoders' methods for it
	model  string // the Go type its fields land in, "" for none
	nodes  bool   // an AnyValue, ArrayValue, KeyValueList or KeyValue level, as maxProtoDepth counts
	fields []field
}

func fld(num int32, json string, k kind, to string) field {
	return field{num: num, json: json, kind: k, to: to}
}

func msg(num int32, json string, sub *message, e elem, to string) field {
	return field{num: num, json: json, kind: kMessage, sub: sub, elem: e, to: to}
}

func enum(num int32, json, to, names string) field {
	f := fld(num, json, kEnum, to)
	f.enum = names
	return f
}

func (f field) repeated() field { f.rep = true; return f }

func (f field) oneof(tag string) field { f.tag = tag; return f }

// tables returns the requests of the three signals, the roots of the tables.
func tables() []*message {
	keyValue := &message{name: "keyValue", model: "node", nodes: true}
	anyValue := &message{name: "anyValue", model: "node", nodes: true}
	arrayValue := &message{name: "arrayValue", model: "node", nodes: true}
	kvlistValue := &message{name: "kvlistValue", model: "node", nodes: true}
	attrs := func(num int32, json, to string) field { return msg(num, json, keyValue, newNode, to).repeated() }
	keyValue.fields = []field{
		fld(1, "key", kString, ".key"),
		msg(2, "value", anyValue, inPlace, ""),
		fld(3, "keyStrindex", kDropInt32, ""),
	}
	anyValue.fields = []field{
		fld(1, "stringValue", kStrValue, ".s").oneof("kind = kindStr"),
		fld(2, "boolValue", kBool64, ".num").oneof("kind = kindBool"),
		fld(3, "intValue", kInt64, ".num").oneof("kind = kindInt"),
		fld(4, "doubleValue", kDoubleBits, ".num").oneof("kind = kindDouble"),
		msg(5, "arrayValue", arrayValue, emptied, "").oneof("kind = kindArray"),
		msg(6, "kvlistValue", kvlistValue, emptied, "").oneof("kind = kindKvlist"),
		fld(7, "bytesValue", kBytes, ".s").oneof("kind = kindBytes"),
		fld(8, "stringValueStrindex", kDropInt32, "").oneof("kind = kindEmpty"),
	}
	arrayValue.fields = []field{msg(1, "values", anyValue, newNode, ".kids").repeated()}
	kvlistValue.fields = []field{msg(1, "values", keyValue, newNode, ".kids").repeated()}

	entityRef := &message{name: "entityRef", fields: []field{
		fld(1, "schemaUrl", kDropString, ""),
		fld(2, "type", kDropString, ""),
		fld(3, "idKeys", kDropString, "").repeated(),
		fld(4, "descriptionKeys", kDropString, "").repeated(),
	}}
	resource := &message{name: "resource", model: "list", fields: []field{
		attrs(1, "attributes", ""),
		fld(2, "droppedAttributesCount", kDropUint32, ""),
		msg(3, "entityRefs", entityRef, inPlace, "").repeated(),
	}}
	scope := &message{name: "scope", model: "scope", fields: []field{
		fld(1, "name", kString, ".name"),
		fld(2, "version", kString, ".version"),
		attrs(3, "attributes", ".attrs"),
		fld(4, "droppedAttributesCount", kDropUint32, ""),
	}}

	logRecord := &message{name: "logRecord", model: "logRecord", fields: []field{
		fld(1, "timeUnixNano", kFixed64, ".time"),
		fld(11, "observedTimeUnixNano", kFixed64, ".observed"),
		enum(2, "severityNumber", ".severity", "severityNumbers"),
		fld(3, "severityText", kString, ".sevText"),
		msg(5, "body", anyValue, bodyNode, ".body"),
		attrs(6, "attributes", ".attrs"),
		fld(7, "droppedAttributesCount", kUint32, ".dropped"),
		fld(8, "flags", kFixed32, ".flags"),
		fld(9, "traceId", kID, ".traceID"),
		fld(10, "spanId", kID, ".spanID"),
		fld(12, "eventName", kString, ".event"),
	}}

	event := &message{name: "event", model: "event", fields: []field{
		fld(1, "timeUnixNano", kFixed64, ".time"),
		fld(2, "name", kString, ".name"),
		attrs(3, "attributes", ".attrs"),
		fld(4, "droppedAttributesCount", kUint32, ".dropped"),
	}}
	link := &message{name: "link", model: "link", fields: []field{
		fld(1, "traceId", kID, ".traceID"),
		fld(2, "spanId", kID, ".spanID"),
		fld(3, "traceState", kString, ".traceState"),
		attrs(4, "attributes", ".attrs"),
		fld(5, "droppedAttributesCount", kUint32, ".dropped"),
		fld(6, "flags", kFixed32, ".flags"),
	}}
	status := &message{name: "status", model: "span", fields: []field{ // into the span
		fld(2, "message", kString, ".statusMsg"),
		enum(3, "code", ".statusCode", "statusCodeNumbers"),
	}}
	span := &message{name: "span", model: "span", fields: []field{
		fld(1, "traceId", kID, ".traceID"),
		fld(2, "spanId", kID, ".spanID"),
		fld(3, "traceState", kString, ".traceState"),
		fld(4, "parentSpanId", kID, ".parent"),
		fld(16, "flags", kFixed32, ".flags"),
		fld(5, "name", kString, ".name"),
		enum(6, "kind", ".kind", "spanKindNumbers"),
		fld(7, "startTimeUnixNano", kFixed64, ".start"),
		fld(8, "endTimeUnixNano", kFixed64, ".end"),
		attrs(9, "attributes", ".attrs"),
		fld(10, "droppedAttributesCount", kUint32, ".dropped"),
		msg(11, "events", event, newEvent, "").repeated(),
		fld(12, "droppedEventsCount", kUint32, ".droppedEv"),
		msg(13, "links", link, newLink, "").repeated(),
		fld(14, "droppedLinksCount", kUint32, ".droppedLn"),
		msg(15, "status", status, inPlace, ""),
	}}

	exemplar := &message{name: "exemplar", model: "exemplar", fields: []field{
		attrs(7, "filteredAttributes", ".attrs"),
		fld(2, "timeUnixNano", kFixed64, ".time"),
		fld(3, "asDouble", kDoubleBits, ".num").oneof("numKind = numDouble"),
		fld(6, "asInt", kSfixed64, ".num").oneof("numKind = numInt"),
		fld(5, "traceId", kID, ".traceID"),
		fld(4, "spanId", kID, ".spanID"),
	}}
	// The fields all data point types have, under numbers of their own.
	pointAttrs := func(num int32) field { return attrs(num, "attributes", ".attrs") }
	pointFlags := func(num int32) field { return fld(num, "flags", kUint32, ".flags") }
	pointExemplars := func(num int32) field { return msg(num, "exemplars", exemplar, newExemplar, "").repeated() }
	pointMin := func(num int32) field { return fld(num, "min", kDouble, ".min").oneof("hasMin = true") }
	pointMax := func(num int32) field { return fld(num, "max", kDouble, ".max").oneof("hasMax = true") }
	var (
		pointStart = fld(2, "startTimeUnixNano", kFixed64, ".start")
		pointTime  = fld(3, "timeUnixNano", kFixed64, ".time")
		pointCount = fld(4, "count", kFixed64, ".count")
		pointSum   = fld(5, "sum", kDouble, ".sum").oneof("hasSum = true")
	)
	numberPoint := &message{name: "numberPoint", model: "point", fields: []field{
		pointAttrs(7), pointStart, pointTime,
		fld(4, "asDouble", kDoubleBits, ".num").oneof("numKind = numDouble"),
		fld(6, "asInt", kSfixed64, ".num").oneof("numKind = numInt"),
		pointExemplars(5), pointFlags(8),
	}}
	histogramPoint := &message{name: "histogramPoint", model: "point", fields: []field{
		pointAttrs(9), pointStart, pointTime, pointCount, pointSum,
		fld(6, "bucketCounts", kFixed64s, ".counts"),
		fld(7, "explicitBounds", kDoubles, ".bounds"),
		pointExemplars(8), pointFlags(10), pointMin(11), pointMax(12),
	}}
	buckets := &message{name: "buckets", model: "buckets", fields: []field{
		fld(1, "offset", kSint32, ".offset"),
		fld(2, "bucketCounts", kVarints, ".counts"),
	}}
	expHistogramPoint := &message{name: "expHistogramPoint", model: "point", fields: []field{
		pointAttrs(1), pointStart, pointTime, pointCount, pointSum,
		fld(6, "scale", kSint32, ".scale"),
		fld(7, "zeroCount", kFixed64, ".zeroCount"),
		msg(8, "positive", buckets, inPlace, ".pos"),
		msg(9, "negative", buckets, inPlace, ".neg"),
		pointFlags(10), pointExemplars(11), pointMin(12), pointMax(13),
		fld(14, "zeroThreshold", kDouble, ".zeroThreshold"),
	}}
	quantile := &message{name: "quantile", model: "[2]float64", fields: []field{ // a pair newQuantile appends
		fld(1, "quantile", kDouble, "[0]"),
		fld(2, "value", kDouble, "[1]"),
	}}
	summaryPoint := &message{name: "summaryPoint", model: "point", fields: []field{
		pointAttrs(7), pointStart, pointTime, pointCount, pointSum,
		msg(6, "quantileValues", quantile, newQuantile, "").repeated(),
		pointFlags(8),
	}}
	// data is a metric's Gauge, Sum, Histogram, ExponentialHistogram or Summary:
	// 1 data points, and the fields given, which land in the metric.
	data := func(num int32, json, typ string, point *message, fields ...field) field {
		points := msg(1, "dataPoints", point, newPoint, "").repeated()
		m := &message{name: json + "Data", model: "metric", fields: append([]field{points}, fields...)}
		return msg(num, json, m, newData, "").oneof("typ = " + typ)
	}
	temporality := enum(2, "aggregationTemporality", ".temporality", "temporalityNumbers")
	metric := &message{name: "metric", model: "metric", fields: []field{
		fld(1, "name", kString, ".name"),
		fld(2, "description", kString, ".desc"),
		fld(3, "unit", kString, ".unit"),
		data(5, "gauge", "metricGauge", numberPoint),
		data(7, "sum", "metricSum", numberPoint, temporality, fld(3, "isMonotonic", kBool, ".monotonic")),
		data(9, "histogram", "metricHistogram", histogramPoint, temporality),
		data(10, "exponentialHistogram", "metricExpHistogram", expHistogramPoint, temporality),
		data(11, "summary", "metricSummary", summaryPoint),
		attrs(12, "metadata", ".metadata"),
	}}

	// An Export*ServiceRequest is 1 Resource*, whose layouts agree but for their
	// member names: 1 resource, 2 scope groups, 3 schema url, 1000 the deprecated
	// scope groups; a scope group is 1 scope, 2 records, 3 schema url.
	request := func(sig, resources, groups, deprecated, records string, record *message, e elem) *message {
		group := &message{name: sig + "ScopeGroup", model: "group", fields: []field{
			msg(1, "scope", scope, inPlace, ".scope"),
			msg(2, records, record, e, "").repeated(),
			fld(3, "schemaUrl", kDropString, ""),
		}}
		res := &message{name: sig + "Resource", model: "list", fields: []field{
			msg(1, "resource", resource, inPlace, ""),
			msg(2, groups, group, newGroup, "").repeated(),
			fld(3, "schemaUrl", kDropString, ""),
			msg(1000, deprecated, group, newDeprecatedGroup, "").repeated(),
		}}
		return &message{name: sig + "Request", fields: []field{msg(1, resources, res, newResource, "").repeated()}}
	}
	return []*message{
		request("logs", "resourceLogs", "scopeLogs", "deprecatedScopeLogs", "logRecords", logRecord, newLog),
		request("traces", "resourceSpans", "scopeSpans", "deprecatedScopeSpans", "spans", span, newSpan),
		request("metrics", "resourceMetrics", "scopeMetrics", "deprecatedScopeMetrics", "metrics", metric, newMetric),
	}
}

var update = flag.Bool("update", false, "write decoders.go from the tables")

// TestGeneratedDecoders fails when decoders.go is not what the tables make;
// with -update (go generate) it writes it.
func TestGeneratedDecoders(t *testing.T) {
	src, err := generate(tables())
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("decoders.go", src, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	have, err := os.ReadFile("decoders.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, src) {
		t.Fatal("decoders.go is stale: run go generate ./internal/otlp")
	}
}

// models are the types the tables' models name, to check the tables against.
var models = map[string]reflect.Type{
	"node": reflect.TypeFor[node](), "list": reflect.TypeFor[list](), "scope": reflect.TypeFor[scope](),
	"group": reflect.TypeFor[group](), "logRecord": reflect.TypeFor[logRecord](), "span": reflect.TypeFor[span](),
	"event": reflect.TypeFor[event](), "link": reflect.TypeFor[link](), "metric": reflect.TypeFor[metric](),
	"point": reflect.TypeFor[point](), "buckets": reflect.TypeFor[buckets](), "exemplar": reflect.TypeFor[exemplar](),
	"[2]float64": reflect.TypeFor[[2]float64](),
}

// made are the models of the messages begin makes, and the models of the parents
// they are made for.
var made = map[elem][2]string{
	newNode: {"node", ""}, bodyNode: {"node", ""}, emptied: {"node", "node"}, newResource: {"list", ""},
	newGroup: {"group", "list"}, newDeprecatedGroup: {"group", "list"},
	newLog: {"logRecord", "group"}, newSpan: {"span", "group"}, newMetric: {"metric", "group"},
	newEvent: {"event", "span"}, newLink: {"link", "span"}, newData: {"metric", "metric"},
	newPoint: {"point", "metric"}, newExemplar: {"exemplar", "point"}, newQuantile: {"[2]float64", "point"},
}

// generate writes the decoders' methods for every message reachable from roots,
// in the order they are first reached. The Go compiler checks that each value
// fits where it lands; generate checks what it cannot: numbers and names once a
// message, and each message field made into the model its table says.
func generate(roots []*message) ([]byte, error) {
	var order []*message
	seen := map[*message]bool{}
	var errs []string
	var visit func(m *message)
	visit = func(m *message) {
		if seen[m] {
			return
		}
		seen[m] = true
		order = append(order, m)
		nums, names := map[int32]bool{}, map[string]bool{}
		for _, f := range m.fields {
			if nums[f.num] {
				errs = append(errs, fmt.Sprintf("%s: field number %d twice", m.name, f.num))
			}
			nums[f.num] = true
			for _, n := range jsonNames(f) {
				if names[n] {
					errs = append(errs, fmt.Sprintf("%s: member name %q twice", m.name, n))
				}
				names[n] = true
			}
			if f.kind != kMessage {
				continue
			}
			want := m.model
			if f.to != "" {
				want = ""
				if sf, ok := models[m.model].FieldByName(strings.TrimPrefix(f.to, ".")); ok {
					want = sf.Type.String()
				}
			}
			if mk, ok := made[f.elem]; ok {
				want = mk[0]
				if mk[1] != "" && mk[1] != m.model {
					errs = append(errs, fmt.Sprintf("%s.%s: made for a %s, not a %s", m.name, f.json, mk[1], m.model))
				}
			}
			if f.sub.model != "" && "otlp."+f.sub.model != want && f.sub.model != want {
				errs = append(errs, fmt.Sprintf("%s.%s: lands in a %s, its table says %s", m.name, f.json, want, f.sub.model))
			}
			visit(f.sub)
		}
	}
	for _, m := range roots {
		visit(m)
	}
	if errs != nil {
		return nil, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	var b bytes.Buffer
	b.WriteString("// Code generated by go test -run TestGeneratedDecoders -update (tables_test.go); DO NOT EDIT.\n\n")
	b.WriteString("package otlp\n\nimport (\n\"math\"\n\"unsafe\"\n)\n\n")
	for _, m := range order {
		writeProto(&b, m)
		writeJSON(&b, m)
	}
	return format.Source(b.Bytes())
}

func jsonNames(f field) []string {
	var snake strings.Builder
	for _, c := range f.json {
		if 'A' <= c && c <= 'Z' {
			snake.WriteByte('_')
			c += 'a' - 'A'
		}
		snake.WriteRune(c)
	}
	if snake.String() == f.json {
		return []string{f.json}
	}
	return []string{f.json, snake.String()}
}

// lands is where field f of message m lands, as Go. The model is found anew
// for each field: a node's slice grows while its children are decoded.
func lands(m *message, f field) string { return "(*" + m.model + ")(r.ptr())" + f.to }

// child is the ref a message field's own fields land at.
func child(m *message, f field) string {
	place := "r"
	if f.to != "" {
		place = "r.plus(unsafe.Offsetof(" + m.model + "{}" + f.to + "))"
	}
	switch f.elem {
	case inPlace:
		return place
	case newNode:
		return "d.a.appendNode(" + place + ")"
	}
	return "d.a.begin(" + elemNames[f.elem] + ", " + place + ")"
}

var elemNames = map[elem]string{
	newNode: "newNode", bodyNode: "bodyNode", emptied: "emptied", newResource: "newResource",
	newGroup: "newGroup", newDeprecatedGroup: "newDeprecatedGroup", newLog: "newLog", newSpan: "newSpan",
	newEvent: "newEvent", newLink: "newLink", newMetric: "newMetric", newData: "newData",
	newPoint: "newPoint", newExemplar: "newExemplar", newQuantile: "newQuantile",
}

// store is the statement that stores v, read for field f of message m: the
// one step the two decoders share.
func store(m *message, f field, v string) string {
	return lands(m, f) + " = " + v + tagOnly(m, f)
}

func tagOnly(m *message, f field) string {
	if f.tag == "" {
		return ""
	}
	return "\n" + lands(m, field{to: "." + f.tag})
}

func writeProto(b *bytes.Buffer, m *message) {
	fmt.Fprintf(b, "func (d *protoDecoder) %s(buf []byte, r ref, depth int) error {\n", m.name)
	if m.nodes {
		b.WriteString("if depth >= maxProtoDepth {\nreturn errDepth\n}\ndepth++\n")
	}
	b.WriteString("p := pbuf{b: buf}\nfor p.more() {\nnum, wt, err := p.tag()\nif err != nil {\nreturn err\n}\nswitch num {\n")
	for _, f := range m.fields {
		fmt.Fprintf(b, "case %d: // %s\n", f.num, f.json)
		varint := func(v string) string {
			return "var v uint64\nif v, err = p.varint(wt); err == nil {\n" + store(m, f, v) + "\n}"
		}
		i64 := func(v string) string {
			return "var v uint64\nif v, err = p.i64(wt); err == nil {\n" + store(m, f, v) + "\n}"
		}
		var s string
		switch f.kind {
		case kFixed64, kDoubleBits, kSfixed64:
			s = i64("v")
		case kDouble:
			s = i64("math.Float64frombits(v)")
		case kInt64:
			s = varint("v")
		case kBool64:
			s = varint("min(v, 1)")
		case kUint32:
			s = varint("uint32(v)")
		case kInt32, kEnum:
			s = varint("int32(v)")
		case kSint32:
			s = varint("zigzag32(v)")
		case kBool:
			s = varint("v != 0")
		case kFixed32:
			s = "var v uint32\nif v, err = p.i32(wt); err == nil {\n" + store(m, f, "v") + "\n}"
		case kString, kBytes, kStrValue:
			s = "var b []byte\nif b, err = p.bytes(wt); err == nil {\n" + store(m, f, "b") + "\n}"
		case kID:
			s = "err = p.id(wt, " + lands(m, f) + "[:])"
		case kFixed64s, kDoubles:
			s = fmt.Sprintf("err = d.fixed64s(&p, wt, &%s, %v)", lands(m, f), f.kind == kDoubles)
		case kVarints:
			s = "err = d.varints(&p, wt, &" + lands(m, f) + ")"
		case kDropString:
			s = "_, err = p.bytes(wt)"
		case kDropUint32, kDropInt32:
			s = "_, err = p.varint(wt)"
			if f.tag != "" {
				s = "if _, err = p.varint(wt); err == nil {" + tagOnly(m, f) + "\n}"
			}
		case kMessage:
			s = "var b []byte\nif b, err = p.bytes(wt); err == nil {" + tagOnly(m, f) + "\nerr = d." + f.sub.name + "(b, " + child(m, f) + ", depth)\n}"
		}
		b.WriteString(s + "\n")
	}
	b.WriteString("default:\nerr = p.skip(wt)\n}\nif err != nil {\nreturn err\n}\n}\nreturn nil\n}\n\n")
}

func writeJSON(b *bytes.Buffer, m *message) {
	fmt.Fprintf(b, "func (d *jsonDecoder) %s(r ref) {\n", m.name)
	b.WriteString("if !d.object() {\nreturn\n}\nfor first := true; ; {\nk, ok := d.member(&first)\nif !ok {\nreturn\n}\nswitch string(k) {\n")
	for _, f := range m.fields {
		var names []string
		for _, n := range jsonNames(f) {
			names = append(names, strconv.Quote(n))
		}
		fmt.Fprintf(b, "case %s:\n", strings.Join(names, ", "))
		read := func(v string) string { return "v := " + v + "\n" + store(m, f, "v") }
		var s string
		switch f.kind {
		case kFixed64:
			s = read("d.u64()")
		case kDouble:
			s = read("d.double()")
		case kDoubleBits:
			s = read("math.Float64bits(d.double())")
		case kSfixed64, kInt64:
			s = read("uint64(d.i64())")
		case kBool64:
			s = read("b2u(d.boolean())")
		case kUint32, kFixed32:
			s = read("d.u32()")
		case kInt32, kSint32:
			s = read("d.i32()")
		case kEnum:
			s = read("d.enum(" + f.enum + ")")
		case kBool:
			s = read("d.boolean()")
		case kString:
			s = read("d.str()")
		case kStrValue:
			s = read("d.str()") + "\n" + lands(m, field{to: ".ascii"}) + " = d.ascii"
		case kBytes:
			s = read("d.base64()")
		case kID:
			s = "d.id(" + lands(m, f) + "[:])"
		case kFixed64s, kVarints:
			s = "d.u64s(&" + lands(m, f) + ")"
		case kDoubles:
			s = "d.f64s(&" + lands(m, f) + ")"
		case kDropString:
			s = "d.str()"
		case kDropUint32:
			s = "d.u32()"
		case kDropInt32:
			s = "d.i32()" + tagOnly(m, f)
		case kMessage:
			s = strings.TrimPrefix(tagOnly(m, f), "\n") + "\nd." + f.sub.name + "(" + child(m, f) + ")"
		}
		if f.rep {
			s = "if d.array() {\nfor first := true; d.elem(&first); {\n" + s + "\n}\n}"
		}
		b.WriteString(s + "\n")
	}
	b.WriteString("default:\nd.skip()\n}\n}\n}\n\n")
}
