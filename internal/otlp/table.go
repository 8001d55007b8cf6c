package otlp

//go:generate go test -run TestGeneratedDecoders -update

import "unsafe"

// The decoders of both encodings are generated (decoders.go) from one table per
// OTLP message (tables_test.go), which lists every field once: its protobuf
// number, its OTLP/JSON member name, how its value is read and where in the
// model (model.go) it lands. Each message becomes a protobuf method that
// dispatches on the field number and a JSON method that dispatches on the
// member name; both store each field with the same statement, generated from
// the same row, so the encodings cannot disagree about what a field means. A
// field not in the table is unknown and skipped. Generated code runs as fast
// as the hand-written decoders it replaced; a decoder interpreting the tables
// at run time was a fifth slower, most of it dispatch.
//
// What the generated methods share is here: the messages' models are reached
// through refs, and made by begin.

// elem says where a message field's own fields land.
type elem uint8

const (
	inPlace            elem = iota // at the field's place in the parent's model: a singular message merges
	newNode                        // a node appended to the list at the field's place
	bodyNode                       // the node whose index plus one is at the field's place, made on first use
	emptied                        // the parent node, its array or kvlist emptied: the value starts afresh
	newResource                    // a new resource (its attribute list)
	newGroup                       // a new group of the current resource
	newDeprecatedGroup             // the same from a deprecated field (see arena.dropDeprecated)
	newLog                         // a log record appended to the parent group
	newSpan                        // a span appended to the parent group
	newEvent                       // an event appended to the parent span
	newLink                        // a link appended to the parent span
	newMetric                      // a metric appended to the parent group
	newData                        // the parent metric's data, replacing what it had
	newPoint                       // a data point appended to the parent metric
	newExemplar                    // an exemplar appended to the parent point
	newQuantile                    // a (quantile, value) pair appended to the parent point's list
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

func (r ref) ptr() unsafe.Pointer { return unsafe.Add(*r.array, r.off) }

// begin makes or finds the model of a message field of kind e, whose place in
// its parent's model is r (the parent itself for the kinds that append), and
// returns where the message's fields land.
func (a *arena) begin(e elem, r ref) ref {
	switch e {
	case newNode:
		return a.appendNode(r)
	case bodyNode:
		if *(*int32)(r.ptr()) == 0 {
			i := a.newNode()
			*(*int32)(r.ptr()) = i + 1
		}
		return at(&a.nodes, int(*(*int32)(r.ptr())-1))
	case emptied:
		(*node)(r.ptr()).kids = list{}
	case newResource:
		return push(a, &a.resources)
	case newGroup, newDeprecatedGroup:
		g := push(a, &a.groups)
		(*group)(g.ptr()).res = int32(len(a.resources) - 1)
		(*group)(g.ptr()).deprecated = e == newDeprecatedGroup
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
	return r
}

// appendNode appends a new node to the list at r and returns where it is. The
// decoders call it for attributes, the commonest message, rather than begin:
// the switch there costs a few percent of a JSON decode.
func (a *arena) appendNode(r ref) ref {
	i := a.newNode()
	a.appendTo((*list)(r.ptr()), i)
	return ref{(*unsafe.Pointer)(unsafe.Pointer(&a.nodes)), uintptr(i) * unsafe.Sizeof(node{})}
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
