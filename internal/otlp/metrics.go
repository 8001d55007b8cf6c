package otlp

import (
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
)

// decodeMetrics produces the row shape documented in the package comment,
// where callers of Decode can see it.
func decodeMetrics(body []byte, isJSON bool) ([]Row, error) {
	req := pmetricotlp.NewExportRequest()
	if err := unmarshal(Metrics, req, body, isJSON); err != nil {
		return nil, err
	}
	md := req.Metrics()
	rb := newRowBuilder(md.DataPointCount())
	for _, rm := range md.ResourceMetrics().All() {
		for _, sm := range rm.ScopeMetrics().All() {
			rb.setScope(rm.Resource(), sm.Scope())
			for _, m := range sm.Metrics().All() {
				writeMetricPoints(rb, m)
			}
		}
	}
	return rb.rows, nil
}

func writeMetricPoints(rb *rowBuilder, m pmetric.Metric) {
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		for _, dp := range m.Gauge().DataPoints().All() {
			w := beginPoint(rb, m, "gauge", dp.Attributes(), dp.StartTimestamp(), dp.Timestamp(), dp.Flags())
			writeNumber(w, dp)
			writeExemplars(w, dp.Exemplars())
			rb.end()
		}
	case pmetric.MetricTypeSum:
		sum := m.Sum()
		for _, dp := range sum.DataPoints().All() {
			w := beginPoint(rb, m, "sum", dp.Attributes(), dp.StartTimestamp(), dp.Timestamp(), dp.Flags())
			writeNumber(w, dp)
			w.boolField("is_monotonic", sum.IsMonotonic())
			writeTemporality(w, sum.AggregationTemporality())
			writeExemplars(w, dp.Exemplars())
			rb.end()
		}
	case pmetric.MetricTypeHistogram:
		h := m.Histogram()
		for _, dp := range h.DataPoints().All() {
			w := beginPoint(rb, m, "histogram", dp.Attributes(), dp.StartTimestamp(), dp.Timestamp(), dp.Flags())
			w.uintField("count", dp.Count())
			if dp.HasSum() {
				w.floatField("sum", dp.Sum())
			}
			if dp.HasMin() {
				w.floatField("min", dp.Min())
			}
			if dp.HasMax() {
				w.floatField("max", dp.Max())
			}
			w.uintsField("bucket_counts", dp.BucketCounts())
			w.floatsField("explicit_bounds", dp.ExplicitBounds())
			writeTemporality(w, h.AggregationTemporality())
			writeExemplars(w, dp.Exemplars())
			rb.end()
		}
	case pmetric.MetricTypeExponentialHistogram:
		h := m.ExponentialHistogram()
		for _, dp := range h.DataPoints().All() {
			w := beginPoint(rb, m, "exponential_histogram", dp.Attributes(), dp.StartTimestamp(), dp.Timestamp(), dp.Flags())
			w.uintField("count", dp.Count())
			if dp.HasSum() {
				w.floatField("sum", dp.Sum())
			}
			if dp.HasMin() {
				w.floatField("min", dp.Min())
			}
			if dp.HasMax() {
				w.floatField("max", dp.Max())
			}
			w.intField("scale", int64(dp.Scale()))
			w.uintField("zero_count", dp.ZeroCount())
			if zt := dp.ZeroThreshold(); zt != 0 {
				w.floatField("zero_threshold", zt)
			}
			writeBuckets(w, "positive", dp.Positive())
			writeBuckets(w, "negative", dp.Negative())
			writeTemporality(w, h.AggregationTemporality())
			writeExemplars(w, dp.Exemplars())
			rb.end()
		}
	case pmetric.MetricTypeSummary:
		for _, dp := range m.Summary().DataPoints().All() {
			w := beginPoint(rb, m, "summary", dp.Attributes(), dp.StartTimestamp(), dp.Timestamp(), dp.Flags())
			w.uintField("count", dp.Count())
			w.floatField("sum", dp.Sum())
			w.key("quantile_values")
			w.beginArray()
			for _, q := range dp.QuantileValues().All() {
				w.sep()
				w.beginObject()
				w.floatField("quantile", q.Quantile())
				w.floatField("value", q.Value())
				w.endObject()
			}
			w.endArray()
			rb.end()
		}
	}
}

// beginPoint starts a data point row with the fields every point type has.
func beginPoint(rb *rowBuilder, m pmetric.Metric, typ string, attrs pcommon.Map, start, ts pcommon.Timestamp, flags pmetric.DataPointFlags) *jsonWriter {
	w := rb.begin()
	w.key("metric_name")
	w.str(m.Name())
	w.strField("metric_description", m.Description())
	w.strField("metric_unit", m.Unit())
	w.key("metric_type")
	w.str(typ)
	w.attrsField("metric_metadata", m.Metadata())
	w.timeField("start_time", start)
	w.timeField("time", ts)
	w.attrsField("attributes", attrs)
	w.nonZeroField("flags", uint64(flags))
	return w
}

func writeNumber(w *jsonWriter, dp pmetric.NumberDataPoint) {
	switch dp.ValueType() {
	case pmetric.NumberDataPointValueTypeInt:
		w.intField("value", dp.IntValue())
	case pmetric.NumberDataPointValueTypeDouble:
		w.floatField("value", dp.DoubleValue())
	}
}

func writeTemporality(w *jsonWriter, t pmetric.AggregationTemporality) {
	w.enumField("aggregation_temporality", strings.ToLower(t.String()), int32(t))
}

func writeBuckets(w *jsonWriter, k string, b pmetric.ExponentialHistogramDataPointBuckets) {
	w.key(k)
	w.beginObject()
	w.intField("offset", int64(b.Offset()))
	w.uintsField("bucket_counts", b.BucketCounts())
	w.endObject()
}

func writeExemplars(w *jsonWriter, exemplars pmetric.ExemplarSlice) {
	if exemplars.Len() == 0 {
		return
	}
	w.key("exemplars")
	w.beginArray()
	for _, ex := range exemplars.All() {
		w.sep()
		w.beginObject()
		w.timeField("time", ex.Timestamp())
		switch ex.ValueType() {
		case pmetric.ExemplarValueTypeInt:
			w.intField("value", ex.IntValue())
		case pmetric.ExemplarValueTypeDouble:
			w.floatField("value", ex.DoubleValue())
		}
		w.traceIDField("trace_id", ex.TraceID())
		w.spanIDField("span_id", ex.SpanID())
		w.attrsField("filtered_attributes", ex.FilteredAttributes())
		w.endObject()
	}
	w.endArray()
}
