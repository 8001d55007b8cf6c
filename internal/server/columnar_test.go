package server

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"pgregory.net/rapid"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/cluster"
	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/httpbody"
)

// encoded is what a cluster replica stages for a chunk: its records, or its userJSON rows
// through a cache.Encoder.
func encoded(t fataler, ch *chunk) []arrow.RecordBatch {
	t.Helper()
	if len(ch.recs) > 0 {
		for _, r := range ch.recs {
			r.Retain()
		}
		return slices.Clone(ch.recs)
	}
	enc := cache.NewEncoder()
	defer enc.Release()
	for i, row := range ch.all() {
		if err := enc.Add(row, ch.seqs[i], ch.ats[i]); err != nil {
			t.Fatalf("row %d %q: %v", i, row, err)
		}
	}
	rec, err := enc.Record()
	if err != nil {
		t.Fatal(err)
	}
	return []arrow.RecordBatch{rec}
}

// rowValues is each row of recs as column name -> type and value, nulls left out: what a
// lake table, resolving columns by name, makes of the records.
func rowValues(recs []arrow.RecordBatch) []map[string]string {
	var out []map[string]string
	for _, r := range recs {
		for i := range int(r.NumRows()) {
			row := map[string]string{}
			for j, f := range r.Schema().Fields() {
				col := r.Column(j)
				if col.IsNull(i) {
					continue
				}
				var v any
				switch a := col.(type) {
				case *array.String:
					v = a.Value(i)
				case *array.Int64:
					v = a.Value(i)
				case *array.Float64:
					v = math.Float64bits(a.Value(i))
				case *array.Boolean:
					v = a.Value(i)
				case *array.Timestamp:
					v = int64(a.Value(i))
				default:
					v = "unexpected type " + col.DataType().String()
				}
				row[f.Name] = fmt.Sprintf("%s %q", f.Type, fmt.Sprint(v))
			}
			out = append(out, row)
		}
	}
	return out
}

// sameStaged fails unless the columnar chunk stages what the rows chunk does.
func sameStaged(t fataler, columnarCh, rowsCh *chunk) {
	t.Helper()
	a, b := encoded(t, columnarCh), encoded(t, rowsCh)
	defer releaseRecs(a)
	defer releaseRecs(b)
	ga, gb := rowValues(a), rowValues(b)
	if len(ga) != len(gb) {
		t.Fatalf("%d rows, want %d", len(ga), len(gb))
	}
	for i := range ga {
		if !maps.Equal(ga[i], gb[i]) {
			t.Fatalf("row %d:\n got %v\nwant %v", i, ga[i], gb[i])
		}
	}
}

func releaseRecs(recs []arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}

// TestPassThroughMatchesEncoder: an Arrow body's batches kept as they came stage the rows,
// types and values that its rows' userJSON text through cache.Encoder stages, and a body the
// columnar form cannot keep goes the text path.
func TestPassThroughMatchesEncoder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		type colSpec struct {
			name string
			kind int // 0 string, 1 int64, 2 float64, 3 bool, 4 timestamp, 5 large string
		}
		ncols := rapid.IntRange(0, 6).Draw(t, "columns")
		names := map[string]bool{}
		var specs []colSpec
		for range ncols {
			name := rapid.SampledFrom([]string{"a", "b", "msg", "n", "ratio", "ok", "x__long", columns.OverflowColumn}).Draw(t, "name")
			if names[name] {
				continue // arrowColumns refuses a second _hyp_overflow; distinctNames covers the rest
			}
			names[name] = true
			kind := rapid.IntRange(0, 5).Draw(t, "kind")
			if name == columns.OverflowColumn {
				kind = 0
			}
			specs = append(specs, colSpec{name, kind})
		}
		fields := []arrow.Field{{Name: columns.SeqColumn, Type: arrow.PrimitiveTypes.Int64}, {Name: columns.IngestedAtColumn, Type: tsUS}}
		for _, s := range specs {
			typ := []arrow.DataType{arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Float64,
				arrow.FixedWidthTypes.Boolean, &arrow.TimestampType{Unit: arrow.Millisecond}, arrow.BinaryTypes.LargeString}[s.kind]
			fields = append(fields, arrow.Field{Name: s.name, Type: typ, Nullable: true})
		}
		nbatches := rapid.IntRange(1, 3).Draw(t, "batches")
		seq := int64(rapid.IntRange(1, 100).Draw(t, "first"))
		first, last := seq, seq
		var recs []arrow.RecordBatch
		strs := rapid.SampledFrom([]string{"", "plain", "é中😀", "quote \" \\ \n", "\x00ctl", "bad \xff", "\xe4\xb8", "\xad",
			`{"extra":1}`, `{}`, `{"a":[1,{"b":null}]}`, "2026-11-30T09:00:00Z", "12", "true"})
		floats := rapid.SampledFrom([]float64{0, math.Copysign(0, -1), 1, 2.5, -3, 1e21, 1e-7, 5e-324, math.MaxFloat64, math.NaN(), math.Inf(1)})
		for range nbatches {
			b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(fields, nil))
			rows := rapid.IntRange(1, 8).Draw(t, "rows")
			for range rows {
				b.Field(0).(*array.Int64Builder).Append(seq)
				b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(1_780_000_000_000_000 + seq))
				last = seq
				seq += int64(rapid.IntRange(1, 3).Draw(t, "gap"))
				for j, s := range specs {
					fb := b.Field(2 + j)
					if rapid.IntRange(0, 3).Draw(t, "null") == 0 {
						fb.AppendNull()
						continue
					}
					switch s.kind {
					case 0:
						v := strs.Draw(t, "string")
						if s.name == columns.OverflowColumn {
							v = rapid.SampledFrom([]string{`{"extra":1}`, `{}`, `{"é":"\u00e9"}`}).Draw(t, "overflow")
						}
						fb.(*array.StringBuilder).Append(v)
					case 1:
						fb.(*array.Int64Builder).Append(rapid.Int64().Draw(t, "int"))
					case 2:
						fb.(*array.Float64Builder).Append(floats.Draw(t, "float"))
					case 3:
						fb.(*array.BooleanBuilder).Append(rapid.Bool().Draw(t, "bool"))
					case 4:
						fb.(*array.TimestampBuilder).Append(arrow.Timestamp(rapid.Int64Range(0, 1<<45).Draw(t, "ts")))
					case 5:
						fb.(*array.LargeStringBuilder).Append(strs.Draw(t, "large"))
					}
				}
			}
			recs = append(recs, b.NewRecordBatch())
			b.Release()
		}
		defer releaseRecs(recs)
		body := arrowOf(t, recs...)
		sc, rerr := scanArrow(body, 64<<20)
		if rerr != nil {
			t.Fatalf("scan: %+v", rerr)
		}
		got, rerr := parseArrow(body, sc, first, last, userJSON, "inc", httpbody.Meter{})
		if rerr != nil {
			t.Fatalf("parse: %+v", rerr)
		}
		defer got.release()
		want, rerr := decodeArrow(body, sc, first, last, userJSON, "inc", httpbody.Meter{})
		if rerr != nil {
			t.Fatalf("parse as rows: %+v", rerr)
		}
		defer want.release()
		if !slices.Equal(got.seqs, want.seqs) || !slices.Equal(got.ats, want.ats) {
			t.Fatalf("seqs %v ats %v, want %v %v", got.seqs, got.ats, want.seqs, want.ats)
		}
		if len(got.recs) == 0 && keepable(recs) {
			t.Fatalf("the columnar form was not taken for a body it can keep")
		}
		if len(got.recs) > 0 && !keepable(recs) {
			t.Fatalf("the columnar form was taken for a body it cannot keep: %v", got.recs)
		}
		sameStaged(t, got, want)
	})
}

// keepable is passThrough's rule, written out again over the test's own records.
func keepable(recs []arrow.RecordBatch) bool {
	for _, r := range recs {
		for j := 2; j < int(r.NumCols()); j++ {
			col := r.Column(j)
			for i := range col.Len() {
				if col.IsNull(i) {
					continue
				}
				switch a := col.(type) {
				case *array.String:
					if !utf8.ValidString(a.Value(i)) {
						return false
					}
				case *array.Float64:
					if math.IsNaN(a.Value(i)) || math.IsInf(a.Value(i), 0) {
						return false
					}
				case *array.Timestamp, *array.LargeString:
					return false
				}
			}
		}
	}
	return true
}

// recordingCluster stores nothing and remembers whether each chunk came as records.
type recordingCluster struct{ asRecords []bool }

func (c *recordingCluster) Store(_ context.Context, ch cluster.Chunk) (cluster.Stored, error) {
	c.asRecords = append(c.asRecords, len(ch.Records) > 0)
	return cluster.Stored{Accepted: len(ch.Seqs)}, nil
}

// TestClusterHandlerKeepsArrowBatches: through the cluster handler, an Arrow body of
// keepable columns reaches the cluster as records, one with a bad UTF-8 string as rows, and
// hyp_server_arrow_chunks_total counts each by how it was kept.
func TestClusterHandlerKeepsArrowBatches(t *testing.T) {
	reg := prometheus.NewRegistry()
	rc := &recordingCluster{}
	h, err := NewClusterHandler(rc, Options{Tokens: []Token{{Secret: testToken}}, MaxBodyBytes: 1 << 20,
		Registerer: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	body := func(msg string) []byte {
		return streamOf(t, []arrow.Field{{Name: columns.SeqColumn, Type: arrow.PrimitiveTypes.Int64}, {Name: columns.IngestedAtColumn, Type: tsUS},
			{Name: "msg", Type: arrow.BinaryTypes.String, Nullable: true}}, func(b *array.RecordBuilder) {
			for s := int64(1); s <= 3; s++ {
				b.Field(0).(*array.Int64Builder).Append(s)
				b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(1_780_000_000_000_000 + s))
				b.Field(2).(*array.StringBuilder).Append(msg)
			}
		})
	}
	for _, msg := range []string{"fine", "bad \xff"} {
		r := request(1, 3, body(msg), func(r *http.Request) { r.Header.Set("Content-Type", arrowContentType) })
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("%q: %d %s", msg, w.Code, w.Body)
		}
	}
	if !slices.Equal(rc.asRecords, []bool{true, false}) {
		t.Errorf("chunks came as records %v, want [true false]", rc.asRecords)
	}
	for kept, want := range map[string]float64{"as_sent": 1, "as_rows": 1} {
		var m dto.Metric
		if err := h.(*handler).metrics.arrow.WithLabelValues(kept).Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetCounter().GetValue(); got != want {
			t.Errorf("hyp_server_arrow_chunks_total{kept=%q} = %v, want %v", kept, got, want)
		}
	}
}

// TestServerKeepsArrowBatches: a single-node server logs a keepable Arrow body's batches as
// they came (cache.IngestPartitionRecords) and stores the same rows, seqs, origin columns and
// values as the same unit sent as NDJSON; a re-sent chunk that overlaps what is stored keeps
// only its fresh rows, cut out of the batches around the held ones.
func TestServerKeepsArrowBatches(t *testing.T) {
	unit := func(seqs []int64) arrow.RecordBatch {
		b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema([]arrow.Field{
			{Name: columns.SeqColumn, Type: arrow.PrimitiveTypes.Int64},
			{Name: columns.IngestedAtColumn, Type: tsUS},
			{Name: "msg", Type: arrow.BinaryTypes.String, Nullable: true},
			{Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
			{Name: "ratio", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
			{Name: "ok", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		}, nil))
		defer b.Release()
		for i, s := range seqs {
			b.Field(0).(*array.Int64Builder).Append(s)
			b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(1_780_000_000_000_000 + s))
			b.Field(2).(*array.StringBuilder).Append(fmt.Sprintf("row \"%d\" é", s))
			if i%3 == 1 {
				b.Field(3).AppendNull()
			} else {
				b.Field(3).(*array.Int64Builder).Append(s * 1000)
			}
			b.Field(4).(*array.Float64Builder).Append(float64(s) / 2)
			b.Field(5).(*array.BooleanBuilder).Append(i%2 == 0)
		}
		return b.NewRecordBatch()
	}
	post := func(e *env, a, b int64, body []byte, arrowBody bool, accepted, duplicates int) {
		t.Helper()
		rp := e.do(request(a, b, body, func(r *http.Request) {
			r.Header.Set(headerIncarnation, "inc-1")
			if arrowBody {
				r.Header.Set("Content-Type", arrowContentType)
			}
		}))
		if rp.code != http.StatusOK || rp.Accepted != accepted || rp.Duplicates != duplicates {
			t.Fatalf("chunk %d-%d: %d accepted=%d duplicates=%d %s %s", a, b, rp.code, rp.Accepted, rp.Duplicates, rp.Error, rp.Message)
		}
	}
	first, again := unit(seqRange(1, 10)), unit(seqRange(1, 20))
	defer first.Release()
	defer again.Release()
	// The re-sent chunk: two batches, so the held rows end inside the first one.
	lo, hi := again.NewSlice(0, 7), again.NewSlice(7, 20)
	defer lo.Release()
	defer hi.Release()
	byArrow, byNDJSON := newEnv(t, nil), newEnv(t, nil)
	post(byArrow, 1, 10, arrowOf(t, first), true, 10, 0)
	post(byArrow, 1, 20, arrowOf(t, lo, hi), true, 10, 10)
	post(byNDJSON, 1, 10, ndjsonOf(t, first), false, 10, 0)
	post(byNDJSON, 1, 20, ndjsonOf(t, lo, hi), false, 10, 10)
	got, want := stored(t, byArrow.cache), stored(t, byNDJSON.cache)
	for _, rows := range [][]storedRow{got, want} {
		for _, r := range rows {
			delete(r, columns.IngestedAtColumn) // each server's own clock
		}
	}
	if len(got) != 20 || !reflect.DeepEqual(got, want) {
		t.Fatalf("stored from Arrow:\n%v\nfrom NDJSON:\n%v", got, want)
	}
	if got[0][originIncarnationColumn] != `"inc-1"` {
		t.Errorf("row %v has no origin incarnation", got[0])
	}
	if n := gather(t, byArrow.reg)[`hyp_server_arrow_chunks_total{kept="as_sent"}`]; n != 2 {
		t.Errorf("%v Arrow chunks kept as sent, want 2", n)
	}
}
