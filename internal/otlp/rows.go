package otlp

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
	"strings"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/partition"
)

// rowWriter renders the rows of one decoded request, in the cache's row form,
// into one buffer that all the rows share.
type rowWriter struct {
	a      *arena
	w      jsonWriter
	prefix []byte
	offs   []int // end offset of each row in w.b
	rowAt  int   // where the open row's frame starts
	rows   []Row
}

// write renders the rows of the request in a into b, whose lines take about
// sizeHint bytes.
func (a *arena) write(b *Batch, sig Signal, sizeHint int) {
	n := a.records(sig)
	rw := rowWriter{a: a, offs: a.offs[:0], rows: b.Rows[:0]}
	if cap(rw.rows) < n {
		rw.rows = make([]Row, 0, n)
	}
	rw.w = jsonWriter{b: b.buf[:0], fields: true}
	if cap(rw.w.b) < sizeHint {
		rw.w.b = make([]byte, 0, sizeHint)
	}
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
	// Each row is framed as a cache.RowGroup's body frames it, and the rows of one source
	// that follow one another make one group, so the cache can log the buffer as it is.
	groups := b.Groups[:0]
	start, groupStart := 0, 0
	for i, end := range rw.offs {
		row := &rw.rows[i]
		row.Line = rw.w.b[start+4 : end : end]
		if n := len(groups); n > 0 && groups[n-1].Source == row.Source {
			groups[n-1].Rows++
		} else {
			groups = append(groups, cache.RowGroup{Source: row.Source})
			groupStart = start
			groups[n].Rows = 1
		}
		groups[len(groups)-1].Body = rw.w.b[groupStart:end:end]
		start = end
	}
	a.offs = rw.offs
	b.Rows, b.Groups, b.buf = rw.rows, groups, rw.w.b
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
}

// begin starts a record row and returns the writer to add its fields to.
func (rw *rowWriter) begin(source string) *jsonWriter {
	rw.rows = append(rw.rows, Row{Source: source})
	rw.w.b, rw.rowAt = cache.BeginRow(rw.w.b)
	rw.w.b = append(rw.w.b, rw.prefix...)
	return &rw.w
}

func (rw *rowWriter) end() {
	rw.w.endField()
	cache.EndRow(rw.w.b, rw.rowAt)
	rw.offs = append(rw.offs, len(rw.w.b))
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
		w.key("body")
		w.value(a, &a.nodes[lr.body-1])
	}
	w.attrsField(a, "attributes", lr.attrs)
	w.nonZeroField("dropped_attributes_count", uint64(lr.dropped))
	w.idField("trace_id", lr.traceID[:])
	w.idField("span_id", lr.spanID[:])
	w.nonZeroField("flags", uint64(lr.flags))
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
	for i := m.points; i < m.end; i++ {
		pt := &a.points[i]
		w := rw.begin(src)
		w.key("metric_name")
		w.bytesStr(m.name)
		w.bytesField("metric_description", m.desc)
		w.bytesField("metric_unit", m.unit)
		w.key("metric_type")
		w.str(metricTypeNames[m.typ])
		w.attrsField(a, "metric_metadata", m.metadata)
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
