package otlp

import "math"

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
	offs      []int               // row ends, while rows are written
}

func (a *arena) reset() {
	a.nodes = a.nodes[:0]
	a.scratch = a.scratch[:0]
	a.resources = a.resources[:0]
	a.groups = a.groups[:0]
	a.logs = a.logs[:0]
	a.spans = a.spans[:0]
	a.events = a.events[:0]
	a.links = a.links[:0]
	a.metrics = a.metrics[:0]
	a.points = a.points[:0]
	a.exemplars = a.exemplars[:0]
	a.u64s = a.u64s[:0]
	a.f64s = a.f64s[:0]
	clear(a.sources)
	a.sources = a.sources[:0]
}

// newNode appends an empty node and returns its index.
func (a *arena) newNode() int32 {
	a.nodes = append(a.nodes, node{})
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
func toTail[T any](s []T, r *span32) []T {
	n := int32(len(s))
	switch {
	case r.start == r.end:
		r.start, r.end = n, n
	case r.end != n:
		s = append(s, s[r.start:r.end]...)
		r.start, r.end = n, int32(len(s))
	}
	return s
}

func (a *arena) appendFixed64(double bool, v uint64) {
	if double {
		a.f64s = append(a.f64s, math.Float64frombits(v))
	} else {
		a.u64s = append(a.u64s, v)
	}
}

// appendQuantile adds one (quantile, value) pair to pt.
func (a *arena) appendQuantile(pt *point, q, v float64) {
	a.f64s = toTail(a.f64s, &pt.quantiles)
	a.f64s = append(a.f64s, q, v)
	pt.quantiles.end = int32(len(a.f64s))
}
