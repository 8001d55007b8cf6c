package otlp

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unsafe"

	"github.com/hyp-project/hyp/internal/partition"
	"github.com/hyp-project/hyp/internal/rowform"
)

// rowWriter renders the rows of one decoded request, in the cache's row form,
// into chunks of memory that the rows of a chunk share.
type rowWriter struct {
	a *arena
	b *Batch
	w jsonWriter
	// prefix is the fields every row of the open scope begins with (resource and
	// scope); metricPrefix those every row of the open metric goes on with.
	prefix, metricPrefix []byte
	// prefixCap and metricPrefixCap are the prefixes' capacities as charged.
	prefixCap, metricPrefixCap int
	offs                       []int    // end offset of each row of the open chunk in w.b
	chunkRow                   int      // the open chunk's first row
	charged                    int      // the open chunk's capacity as charged to the meter
	spare                      [][]byte // the Batch's kept chunks not yet used
	rowAt                      int      // where the open row's frame starts
	total                      int      // the rows the request makes, for sizing chunks
	maxRow                     int      // the longest row written so far, its frame included
	rows                       []Row
	groups                     []rowform.RowGroup
}

// chunkBytes bounds the chunks rows are written in past the first: large enough
// that the rows of most requests make one group per source for the cache to log
// as it is. A chunk past the first is sized for the rows still to come at the
// size of those written so far, up to chunkBytes: a request whose rows only just
// outgrow the first chunk (OTLP/JSON bodies about the size of their rows) took a
// mostly empty 4 MiB chunk each, too large for its Batch to keep, which was most
// of what the JSON path allocated and most of the daemon's heap under its load.
const chunkBytes = 4 << 20

// minFirstChunk is the least the first chunk is given, so that a small request's
// rows rarely need a second one.
const minFirstChunk = 64 << 10

// rowSlack is room enough for most rows' own fields past their prefixes; a row
// that needs more grows its chunk while it is written.
const rowSlack = 1 << 10

// write renders the rows of the request in a into b, whose lines take about
// sizeHint bytes. Every allocation is charged to a's meter before it is made,
// except a chunk's regrowth inside a row that outgrew rowSlack, charged once the
// row is written: it is bounded by that row, hence by the body.
func (a *arena) write(b *Batch, sig Signal, sizeHint int) {
	n := a.records(sig)
	rw := rowWriter{a: a, b: b, offs: a.offs[:0], total: n, rows: b.Rows[:0], groups: b.Groups[:0], spare: b.chunks}
	if cap(rw.rows) < n {
		a.charge(n * int(unsafe.Sizeof(Row{})))
		rw.rows = make([]Row, 0, n)
	}
	b.chunks = nil // the chunks this request uses, and the kept ones it does not
	rw.w = jsonWriter{fields: true}
	rw.nextChunk(min(max(sizeHint, minFirstChunk), chunkBytes))
	for gi := range a.groups {
		g := &a.groups[gi]
		src := a.source(g.res)
		rw.setScope(g)
		switch sig {
		case Logs:
			for i := g.start; i < g.end; i++ {
				rw.writeLogRecord(rw.begin(src), &a.logs[i])
				rw.end()
			}
		case Traces:
			for i := g.start; i < g.end; i++ {
				rw.writeSpan(rw.begin(src), &a.spans[i])
				rw.end()
			}
		default:
			for i := g.start; i < g.end; i++ {
				rw.writeMetricPoints(src, &a.metrics[i])
			}
		}
	}
	rw.seal()
	b.chunks = append(b.chunks, rw.spare...)
	a.offs = rw.offs
	b.Rows, b.Groups = rw.rows, rw.groups
}

// nextChunk seals the open chunk and opens one with room for at least need
// bytes: a kept one when one is large enough, else a new one. Either is charged
// first: a kept chunk is memory the request holds while it lasts, too.
func (rw *rowWriter) nextChunk(need int) {
	first := rw.w.b == nil
	size := need // the first chunk is sized by the hint
	if !first {
		size = max(need, min(rw.restBytes(), chunkBytes))
		rw.seal()
	}
	var c []byte
	for len(rw.spare) > 0 && c == nil {
		if cap(rw.spare[0]) >= need {
			c = rw.spare[0][:0]
		} else {
			rw.b.chunks = append(rw.b.chunks, rw.spare[0][:0]) // kept for the next request
		}
		rw.spare = rw.spare[1:]
	}
	if c == nil {
		rw.a.charge(size)
		c = make([]byte, 0, size)
	} else {
		rw.a.charge(cap(c))
	}
	rw.w.b = c
	rw.charged = cap(c)
	rw.chunkRow = len(rw.rows)
	rw.offs = rw.offs[:0]
}

// restBytes estimates what the rows not yet written take, at the open chunk's
// bytes a row with an eighth more, plus rowSlack for the row about to begin.
func (rw *rowWriter) restBytes() int {
	done := len(rw.rows) - rw.chunkRow
	if done == 0 {
		return chunkBytes
	}
	rest := rw.total - len(rw.rows)
	perRow := len(rw.w.b)/done + 1
	return rest*perRow + rest*perRow/8 + rowSlack
}

// seal frames the open chunk's rows: each as a rowform.RowGroup's body frames it,
// and the rows of one source that follow one another in the chunk make one
// group, so the cache can log the chunk as it is.
func (rw *rowWriter) seal() {
	buf := rw.w.b
	start, groupStart := 0, 0
	for i, end := range rw.offs {
		row := &rw.rows[rw.chunkRow+i]
		row.Line = buf[start+4 : end : end]
		if n := len(rw.groups); i > 0 && rw.groups[n-1].Source == row.Source {
			rw.groups[n-1].Rows++
		} else {
			rw.groups = append(rw.groups, rowform.RowGroup{Source: row.Source})
			groupStart = start
			rw.groups[n].Rows = 1
		}
		rw.groups[len(rw.groups)-1].Body = buf[groupStart:end:end]
		start = end
	}
	rw.b.chunks = append(rw.b.chunks, buf)
	rw.chunkRow = len(rw.rows)
	rw.offs = rw.offs[:0]
}

// setScope renders the fields shared by every record of one scope.
func (rw *rowWriter) setScope(g *group) {
	w := jsonWriter{b: rw.prefix[:0], fields: true}
	w.attrsField(rw.a, "resource", rw.a.resources[g.res])
	w.bytesField("scope_name", g.scope.name)
	w.bytesField("scope_version", g.scope.version)
	w.attrsField(rw.a, "scope_attributes", g.scope.attrs)
	w.endField()
	rw.prefix = w.b
	// What the prefix repeats in every row is charged with the chunks the rows
	// are written in; the prefix itself when its buffer grows.
	rw.a.chargeGrowth(&rw.prefixCap, cap(rw.prefix))
}

// begin starts a record row and returns the writer to add its fields to.
//
// A row gets a chunk with room for the longest row so far, not only rowSlack: a row
// that outgrows its chunk has append move the chunk to an array a quarter larger, each
// charged in full, so a request of 8 KB records written into one growing chunk was
// charged several times its rows and refused as too large.
func (rw *rowWriter) begin(source string) *jsonWriter {
	if need := max(len(rw.prefix)+len(rw.metricPrefix)+rowSlack, rw.maxRow+rw.maxRow/8); cap(rw.w.b)-len(rw.w.b) < need {
		rw.nextChunk(need)
	}
	rw.rows = append(rw.rows, Row{Source: source})
	rw.w.b, rw.rowAt = rowform.BeginRow(rw.w.b)
	rw.w.b = append(rw.w.b, rw.prefix...)
	rw.w.b = append(rw.w.b, rw.metricPrefix...)
	return &rw.w
}

func (rw *rowWriter) end() {
	rw.w.endField()
	rowform.EndRow(rw.w.b, rw.rowAt)
	rw.maxRow = max(rw.maxRow, len(rw.w.b)-rw.rowAt)
	rw.offs = append(grow(rw.a, rw.offs, 1), len(rw.w.b))
	// A row that outgrew its chunk while it was written had append move the chunk
	// to a larger array.
	rw.a.chargeGrowth(&rw.charged, cap(rw.w.b))
}

// chargeGrowth charges a buffer that append grew past the capacity *charged, in
// full (the array it replaced is garbage but memory until the collector runs).
// It is charged after the fact: the buffers it is used for grow only by what a
// record's own fields take, which the body bounds.
func (a *arena) chargeGrowth(charged *int, c int) {
	if c > *charged {
		a.charge(c)
		*charged = c
	}
}

// source is the partition source of resource r, computed once per
// resource.
func (a *arena) source(r int32) string {
	for len(a.sources) <= int(r) {
		a.sources = append(a.sources, "")
	}
	if a.sources[r] == "" {
		a.sources[r] = resourceSource(a, a.resources[r])
	}
	return a.sources[r]
}

// resourceSource reads service.name the way pdata's Map.Get and
// Value.AsString would: the first entry with that key, any type rendered as
// text. A non-string service.name is a client bug, but its value still
// names the service better than "unknown" does. So does a name too long or
// with control characters: it is mapped to a valid source rather than left
// for the cache to file under "unknown".
func resourceSource(a *arena, attrs list) string {
	for i := attrs.head; i != 0; i = a.nodes[i-1].next {
		if n := &a.nodes[i-1]; string(n.key) == "service.name" {
			return partition.SanitizeSource(asString(a, n))
		}
	}
	return partition.Unknown
}

func asString(a *arena, n *node) string {
	switch n.kind {
	case kindStr:
		return string(n.s)
	case kindBool:
		return strconv.FormatBool(n.num != 0)
	case kindInt:
		return strconv.FormatInt(int64(n.num), 10)
	case kindDouble:
		return float64AsString(math.Float64frombits(n.num))
	case kindBytes:
		return base64.StdEncoding.EncodeToString(n.s)
	case kindArray, kindKvlist:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(asRaw(a, n)) // as pdata: a NaN leaves the text empty
		return strings.TrimRight(buf.String(), "\n")
	}
	return ""
}

// asRaw is pdata's Value.AsRaw: in a map a repeated key keeps its last value.
func asRaw(a *arena, n *node) any {
	switch n.kind {
	case kindStr:
		return string(n.s)
	case kindBool:
		return n.num != 0
	case kindInt:
		return int64(n.num)
	case kindDouble:
		return math.Float64frombits(n.num)
	case kindBytes:
		return bytes.Clone(n.s)
	case kindArray:
		s := []any{}
		for i := n.kids.head; i != 0; i = a.nodes[i-1].next {
			s = append(s, asRaw(a, &a.nodes[i-1]))
		}
		return s
	case kindKvlist:
		m := map[string]any{}
		for i := n.kids.head; i != 0; i = a.nodes[i-1].next {
			m[string(a.nodes[i-1].key)] = asRaw(a, &a.nodes[i-1])
		}
		return m
	}
	return nil
}

// float64AsString is pdata's rendering of a double as text (ES6 style).
func float64AsString(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b := strconv.AppendFloat(nil, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return string(b)
}

func (rw *rowWriter) writeLogRecord(w *jsonWriter, lr *logRecord) {
	a := rw.a
	w.timeField("timestamp", lr.time)
	w.timeField("observed_timestamp", lr.observed)
	w.bytesField("severity_text", lr.sevText)
	if lr.severity != 0 {
		w.intField("severity_number", int64(lr.severity))
	}
	w.bytesField("event_name", lr.event)
	// An unset body is absent, not null: rows stay null-free.
	if lr.body != 0 && a.nodes[lr.body-1].kind != kindEmpty {
		n := &a.nodes[lr.body-1]
		w.key(bodyFields[n.kind])
		w.value(a, n)
	}
	w.attrsField(a, "attributes", lr.attrs)
	w.nonZeroField("dropped_attributes_count", uint64(lr.dropped))
	w.idField("trace_id", lr.traceID[:])
	w.idField("span_id", lr.spanID[:])
	w.nonZeroField("flags", uint64(lr.flags))
}

// bodyFields names the field a log body of each kind is written under (SPEC 4: a body
// keeps its kind). A string body is `body`; any other kind has the sibling column the
// cache's type rule names (`<name>__<type>`), because in `body` a string column would take
// it as text, and an int, a bool, bytes or a kvlist would read back as a string that merely
// looks like one. kvlist and array bodies are JSON in `body__json`.
var bodyFields = [...]string{
	kindStr:    "body",
	kindBool:   "body__boolean",
	kindInt:    "body__long",
	kindDouble: "body__double",
	kindBytes:  "body__bytes",
	kindArray:  "body__json",
	kindKvlist: "body__json",
}

var (
	spanKinds       = []string{"unspecified", "internal", "server", "client", "producer", "consumer"}
	statusCodes     = []string{"unset", "ok", "error"}
	temporalities   = []string{"unspecified", "delta", "cumulative"}
	metricTypeNames = [...]string{metricGauge: "gauge", metricSum: "sum", metricHistogram: "histogram", metricExpHistogram: "exponential_histogram", metricSummary: "summary"}
)

// enumName is the lowercase name of v in names, or "" when v is not known.
func enumName(names []string, v int32) string {
	if v >= 0 && int(v) < len(names) {
		return names[v]
	}
	return ""
}

func (rw *rowWriter) writeSpan(w *jsonWriter, s *span) {
	a := rw.a
	w.idField("trace_id", s.traceID[:])
	w.idField("span_id", s.spanID[:])
	w.idField("parent_span_id", s.parent[:])
	w.bytesField("trace_state", s.traceState)
	w.nonZeroField("flags", uint64(s.flags))
	w.key("name")
	w.bytesStr(s.name)
	w.enumField("kind", enumName(spanKinds, s.kind), s.kind)
	w.timeField("start_time", s.start)
	w.timeField("end_time", s.end)
	// Without both ends the difference would be a meaningless epoch offset.
	if s.start != 0 && s.end != 0 {
		writeDuration(w, s.start, s.end)
	}
	w.enumField("status_code", enumName(statusCodes, s.statusCode), s.statusCode)
	w.bytesField("status_message", s.statusMsg)
	w.attrsField(a, "attributes", s.attrs)
	w.nonZeroField("dropped_attributes_count", uint64(s.dropped))
	if s.events != s.eventsEnd {
		w.key("events")
		w.beginArray()
		for _, ev := range a.events[s.events:s.eventsEnd] {
			w.sep()
			w.beginObject()
			w.timeField("time", ev.time)
			w.key("name")
			w.bytesStr(ev.name)
			w.attrsField(a, "attributes", ev.attrs)
			w.nonZeroField("dropped_attributes_count", uint64(ev.dropped))
			w.endObject()
		}
		w.endArray()
	}
	w.nonZeroField("dropped_events_count", uint64(s.droppedEv))
	if s.links != s.linksEnd {
		w.key("links")
		w.beginArray()
		for _, l := range a.links[s.links:s.linksEnd] {
			w.sep()
			w.beginObject()
			w.idField("trace_id", l.traceID[:])
			w.idField("span_id", l.spanID[:])
			w.bytesField("trace_state", l.traceState)
			w.nonZeroField("flags", uint64(l.flags))
			w.attrsField(a, "attributes", l.attrs)
			w.nonZeroField("dropped_attributes_count", uint64(l.dropped))
			w.endObject()
		}
		w.endArray()
	}
	w.nonZeroField("dropped_links_count", uint64(s.droppedLn))
}

// writeDuration writes end-start in nanoseconds. A span that ends before it
// starts (clock skew) gets a negative duration rather than a wrapped-around
// uint64, and the arithmetic stays unsigned so no input can overflow it.
func writeDuration(w *jsonWriter, start, end uint64) {
	w.key("duration_ns")
	if end >= start {
		w.uintVal(end - start)
		return
	}
	w.b = append(w.b, '-')
	w.uintVal(start - end)
}

func (rw *rowWriter) writeMetricPoints(src string, m *metric) {
	if m.typ == metricNone {
		return // a metric without data has no data point, hence no row
	}
	a := rw.a
	// The metric's own fields are rendered once and repeated in each point's row,
	// as a scope's are.
	mw := jsonWriter{b: rw.metricPrefix[:0], fields: true}
	mw.key("metric_name")
	mw.bytesStr(m.name)
	mw.bytesField("metric_description", m.desc)
	mw.bytesField("metric_unit", m.unit)
	mw.key("metric_type")
	mw.str(metricTypeNames[m.typ])
	mw.attrsField(a, "metric_metadata", m.metadata)
	mw.endField()
	rw.metricPrefix = mw.b
	a.chargeGrowth(&rw.metricPrefixCap, cap(rw.metricPrefix))
	defer func() { rw.metricPrefix = rw.metricPrefix[:0] }()
	for i := m.points; i < m.end; i++ {
		pt := &a.points[i]
		w := rw.begin(src)
		w.timeField("start_time", pt.start)
		w.timeField("time", pt.time)
		w.attrsField(a, "attributes", pt.attrs)
		w.nonZeroField("flags", uint64(pt.flags))
		switch m.typ {
		case metricGauge:
			writeNumber(w, pt.numKind, pt.num)
		case metricSum:
			writeNumber(w, pt.numKind, pt.num)
			w.boolField("is_monotonic", m.monotonic)
			w.enumField("aggregation_temporality", enumName(temporalities, m.temporality), m.temporality)
		case metricHistogram:
			writeCountSumMinMax(w, pt)
			w.uintsField("bucket_counts", a.u64s[pt.counts.start:pt.counts.end])
			w.floatsField("explicit_bounds", a.f64s[pt.bounds.start:pt.bounds.end])
			w.enumField("aggregation_temporality", enumName(temporalities, m.temporality), m.temporality)
		case metricExpHistogram:
			writeCountSumMinMax(w, pt)
			w.intField("scale", int64(pt.scale))
			w.uintField("zero_count", pt.zeroCount)
			if pt.zeroThreshold != 0 {
				w.floatField("zero_threshold", pt.zeroThreshold)
			}
			writeBuckets(w, a, "positive", &pt.pos)
			writeBuckets(w, a, "negative", &pt.neg)
			w.enumField("aggregation_temporality", enumName(temporalities, m.temporality), m.temporality)
		case metricSummary:
			w.uintField("count", pt.count)
			w.floatField("sum", pt.sum)
			w.key("quantile_values")
			w.beginArray()
			q := a.f64s[pt.quantiles.start:pt.quantiles.end]
			for j := 0; j+1 < len(q); j += 2 {
				w.sep()
				w.beginObject()
				w.floatField("quantile", q[j])
				w.floatField("value", q[j+1])
				w.endObject()
			}
			w.endArray()
		}
		if m.typ != metricSummary {
			rw.writeExemplars(w, pt)
		}
		rw.end()
	}
}

func writeNumber(w *jsonWriter, k numKind, v uint64) {
	switch k {
	case numInt:
		w.intField("value", int64(v))
	case numDouble:
		w.floatField("value", math.Float64frombits(v))
	}
}

func writeCountSumMinMax(w *jsonWriter, pt *point) {
	w.uintField("count", pt.count)
	if pt.hasSum {
		w.floatField("sum", pt.sum)
	}
	if pt.hasMin {
		w.floatField("min", pt.min)
	}
	if pt.hasMax {
		w.floatField("max", pt.max)
	}
}

func writeBuckets(w *jsonWriter, a *arena, k string, b *buckets) {
	w.key(k)
	w.beginObject()
	w.intField("offset", int64(b.offset))
	w.uintsField("bucket_counts", a.u64s[b.counts.start:b.counts.end])
	w.endObject()
}

func (rw *rowWriter) writeExemplars(w *jsonWriter, pt *point) {
	if pt.exemplars.start == pt.exemplars.end {
		return
	}
	a := rw.a
	w.key("exemplars")
	w.beginArray()
	for _, ex := range a.exemplars[pt.exemplars.start:pt.exemplars.end] {
		w.sep()
		w.beginObject()
		w.timeField("time", ex.time)
		writeNumber(w, ex.numKind, ex.num)
		w.idField("trace_id", ex.traceID[:])
		w.idField("span_id", ex.spanID[:])
		w.attrsField(a, "filtered_attributes", ex.attrs)
		w.endObject()
	}
	w.endArray()
}
