package otlp

import "unsafe"

// The decoders (protobuf and JSON) parse a whole request into this model
// before any row is written, because both encodings allow the resource and
// scope of a group to come after its records. The model mirrors the OTLP
// messages only as far as rows need them. Strings and bytes are views into
// the request body, or into arena.scratch when JSON escapes had to be
// undone; nothing is allocated per record, and every slice is reused by the
// next request that borrows the same arena.

type valueKind uint8

const (
	kindEmpty valueKind = iota // unset, or a string-table index (profiles only)
	kindStr
	kindBool
	kindInt
	kindDouble
	kindBytes
	kindArray
	kindKvlist
)

// list is a singly linked list of nodes; head and tail are node indices plus
// one, so the zero list is empty.
type list struct{ head, tail int32 }

// node is an AnyValue, or a KeyValue when it sits in an attribute list or a
// kvlist (then key is set). Children of arrays and kvlists hang off kids.
type node struct {
	key  []byte
	kind valueKind
	// ascii says s is known to be plain ASCII (plainASCII): the JSON decoder
	// learns it while reading the string. false says nothing.
	ascii bool
	num   uint64 // bool (0/1), int64 bits, float64 bits
	s     []byte // string or bytes
	kids  list
	next  int32
}

type scope struct {
	name, version []byte
	attrs         list
}

// group is the records of one ScopeLogs/ScopeSpans/ScopeMetrics: a range of
// arena.logs, arena.spans or arena.metrics.
type group struct {
	res        int32 // index into arena.resources
	scope      scope
	start, end int32
	deprecated bool // from a deprecated scope groups field (see arena.dropDeprecated)
}

type logRecord struct {
	time, observed uint64
	severity       int32
	sevText, event []byte
	body           int32 // node index plus one, 0 = no body
	attrs          list
	dropped, flags uint32
	traceID        [16]byte
	spanID         [8]byte
}

type span struct {
	traceID                       [16]byte
	spanID, parent                [8]byte
	traceState, name              []byte
	flags                         uint32
	kind                          int32
	start, end                    uint64
	attrs                         list
	dropped, droppedEv, droppedLn uint32
	events, eventsEnd             int32
	links, linksEnd               int32
	statusMsg                     []byte
	statusCode                    int32
}

type event struct {
	time    uint64
	name    []byte
	attrs   list
	dropped uint32
}

type link struct {
	traceID    [16]byte
	spanID     [8]byte
	traceState []byte
	attrs      list
	dropped    uint32
	flags      uint32
}

type metricType uint8

const (
	metricNone metricType = iota
	metricGauge
	metricSum
	metricHistogram
	metricExpHistogram
	metricSummary
)

type metric struct {
	name, desc, unit []byte
	metadata         list
	typ              metricType
	temporality      int32
	monotonic        bool
	points, end      int32 // range of arena.points
}

// numKind says which member of a number oneof (data point or exemplar
// value) is set.
type numKind uint8

const (
	numNone numKind = iota
	numInt
	numDouble
)

// span32 is a range of one of the arena's number slices.
type span32 struct{ start, end int32 }

type buckets struct {
	offset int32
	counts span32 // of arena.u64s
}

// point is a data point of any metric type; each type uses its own fields.
type point struct {
	attrs          list
	start, time    uint64
	flags          uint32
	numKind        numKind
	num            uint64
	count          uint64
	sum, min, max  float64
	hasSum         bool
	hasMin, hasMax bool
	counts         span32 // histogram bucket counts, of arena.u64s
	bounds         span32 // of arena.f64s
	scale          int32
	zeroCount      uint64
	zeroThreshold  float64
	pos, neg       buckets
	quantiles      span32 // pairs in arena.f64s
	exemplars      span32 // of arena.exemplars
}

type exemplar struct {
	time    uint64
	numKind numKind
	num     uint64
	traceID [16]byte
	spanID  [8]byte
	attrs   list
}

// arena holds one decoded request. reset keeps the capacity.
type arena struct {
	nodes     []node
	scratch   []byte
	resources []list // attributes of each resource
	groups    []group
	logs      []logRecord
	spans     []span
	events    []event
	links     []link
	metrics   []metric
	points    []point
	exemplars []exemplar
	u64s      []uint64
	f64s      []float64
	seen      map[string]struct{} // for de-duplicating long attribute lists
	sources   []string            // partition source of each resource, once computed
	offs      []int               // row ends in the open chunk, while rows are written
	// meter is charged for the arena's and the rows' memory before it is allocated;
	// nil charges nothing.
	meter Meter
}

// Meter is charged for a request's memory beyond its body before the memory is
// allocated: the decoded model and the rows written from it (SPEC 4: a request costs
// what it is, and OTLP rows repeat their resource's and scope's fields). An error from
// Charge ends the decoding; Decode returns it as it is (wrapped), so the caller can
// answer with it. httpbody.Meter is the listener's.
type Meter interface {
	Charge(n int) error
}

// meterAbort carries a refused charge out of the decoders. They descend recursively
// and append at dozens of places; a refusal ends the request, so unwinding with a
// panic that Batch.Decode recovers costs nothing on the path that succeeds, where an
// error threaded through every append would cost a branch on each.
type meterAbort struct{ err error }

// charge charges n bytes to the meter, or unwinds the decoding with meterAbort.
func (a *arena) charge(n int) {
	if a.meter == nil || n <= 0 {
		return
	}
	if err := a.meter.Charge(n); err != nil {
		panic(meterAbort{err})
	}
}

// grow returns s with room for extra more elements. A reallocation is charged in
// full before it is made: the array it replaces is garbage but still memory until
// the collector runs.
func grow[T any](a *arena, s []T, extra int) []T {
	if cap(s)-len(s) >= extra {
		return s
	}
	return regrow(a, s, extra)
}

func regrow[T any](a *arena, s []T, extra int) []T {
	n := max(2*cap(s), len(s)+extra, 16)
	var zero T
	a.charge(n * int(unsafe.Sizeof(zero)))
	ns := make([]T, len(s), n)
	copy(ns, s)
	return ns
}

// maxKeptSlice bounds what each of an arena's slices keeps across reset, so a pooled
// arena never pins the model of one unusually large request (its growth was charged
// to that request alone).
const maxKeptSlice = 4 << 20

// trim empties s, dropping it when its array is over maxKeptSlice bytes.
func trim[T any](s []T) []T {
	var zero T
	if cap(s)*int(unsafe.Sizeof(zero)) > maxKeptSlice {
		return nil
	}
	return s[:0]
}

func (a *arena) reset() {
	a.nodes = trim(a.nodes)
	a.scratch = trim(a.scratch)
	a.resources = trim(a.resources)
	a.groups = trim(a.groups)
	a.logs = trim(a.logs)
	a.spans = trim(a.spans)
	a.events = trim(a.events)
	a.links = trim(a.links)
	a.metrics = trim(a.metrics)
	a.points = trim(a.points)
	a.exemplars = trim(a.exemplars)
	a.u64s = trim(a.u64s)
	a.f64s = trim(a.f64s)
	a.offs = trim(a.offs)
	clear(a.sources)
	a.sources = a.sources[:0]
	a.meter = nil
}

// newNode appends an empty node and returns its index.
func (a *arena) newNode() int32 {
	a.nodes = append(grow(a, a.nodes, 1), node{})
	return int32(len(a.nodes) - 1)
}

// appendTo adds node i at the end of l.
func (a *arena) appendTo(l *list, i int32) {
	if l.tail == 0 {
		l.head = i + 1
	} else {
		a.nodes[l.tail-1].next = i + 1
	}
	l.tail = i + 1
	a.nodes[i].next = 0
}

// records counts the records (log records, spans or data points) the rows
// will come from, to size the output.
func (a *arena) records(sig Signal) int {
	n := 0
	for _, g := range a.groups {
		if sig != Metrics {
			n += int(g.end - g.start)
			continue
		}
		for _, m := range a.metrics[g.start:g.end] {
			if m.typ != metricNone {
				n += int(m.end - m.points)
			}
		}
	}
	return n
}

// toTail makes the list r of s end at the end of s, moving it there if
// other lists were appended since, so it can grow in place.
func toTail[T any](a *arena, s []T, r *span32) []T {
	n := int32(len(s))
	switch {
	case r.start == r.end:
		r.start, r.end = n, n
	case r.end != n:
		// A body can interleave two lists' entries to have them moved again and
		// again, so the copies are charged like any other growth.
		s = append(grow(a, s, int(r.end-r.start)), s[r.start:r.end]...)
		r.start, r.end = n, int32(len(s))
	}
	return s
}
