package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"pgregory.net/rapid"

	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/rowjson"
)

// arrowTypes are the column types a forwarded Arrow body may bring; a timestamp takes the
// row path (as an RFC 3339 string).
var arrowTypes = []arrow.DataType{arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int64,
	arrow.PrimitiveTypes.Float64, arrow.FixedWidthTypes.Boolean, &arrow.TimestampType{Unit: arrow.Microsecond}}

// drawRecord draws a record batch of the shapes a sender's cache scan makes, with the
// values the row path writes differently from what they are now and then (NaN, a bad UTF-8
// byte, an integral float), and some names the dataset already has under another type.
func drawRecord(t *rapid.T, label string) arrow.RecordBatch {
	names := rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"a", "b", "msg", "n", "a__string", "x.y", "é"}), 1, 5, rapid.ID[string]).Draw(t, label+"names")
	rows := rapid.IntRange(1, 20).Draw(t, label+"rows")
	fields := make([]arrow.Field, len(names))
	cols := make([]arrow.Array, len(names))
	for j, name := range names {
		typ := rapid.SampledFrom(arrowTypes).Draw(t, label+"type")
		fields[j] = arrow.Field{Name: name, Type: typ, Nullable: true}
		b := array.NewBuilder(memory.DefaultAllocator, typ)
		nullOdds := rapid.SampledFrom([]int{0, 2, 100}).Draw(t, label+"nulls") // none, some, all
		for range rows {
			if nullOdds > 0 && rapid.IntRange(1, nullOdds).Draw(t, label+"null") <= max(1, nullOdds/2) {
				b.AppendNull()
				continue
			}
			switch bl := b.(type) {
			case *array.StringBuilder:
				v := rapid.SampledFrom([]string{"", "plain", "quote\"d", "ünï", "1", "true", "{\"k\":1}"}).Draw(t, label+"s")
				if rapid.IntRange(0, 30).Draw(t, label+"bad") == 0 {
					v += "\xff"
				}
				bl.Append(v)
			case *array.Int64Builder:
				bl.Append(rapid.SampledFrom([]int64{0, 1, -7, math.MaxInt64, math.MinInt64, 1 << 53}).Draw(t, label+"i"))
			case *array.Float64Builder:
				bl.Append(rapid.SampledFrom([]float64{0, math.Copysign(0, -1), 1.5, 3, -2e300, 1e-7, 1e21, math.NaN(), math.Inf(1)}).Draw(t, label+"f"))
			case *array.BooleanBuilder:
				bl.Append(rapid.Bool().Draw(t, label+"b"))
			case *array.TimestampBuilder:
				bl.Append(arrow.Timestamp(rapid.Int64Range(0, 4e15).Draw(t, label+"ts")))
			}
		}
		cols[j] = b.NewArray()
		b.Release()
	}
	rec := array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, int64(rows))
	for _, c := range cols {
		c.Release()
	}
	// A flush takes a group's batches in slices, whose arrays start inside their buffers.
	if from := rapid.IntRange(0, rows-1).Draw(t, label+"from"); from > 0 {
		sliced := rec.NewSlice(int64(from), int64(rows))
		rec.Release()
		return sliced
	}
	return rec
}

// batchColumns is every column a batch built, by name, as arrays of its rows.
func batchColumns(b *batch) map[string]arrow.Array {
	out := map[string]arrow.Array{}
	for _, c := range b.cols {
		if n := c.b.Len(); n < b.rows {
			c.b.AppendNulls(b.rows - n)
		}
		out[fmt.Sprintf("%s %s", c.Name, c.Type)] = c.b.NewArray()
	}
	out["seq"], out["at"] = b.seqs.NewArray(), b.times.NewArray()
	return out
}

// TestArrowGroupMatchesRows holds the flush's two ways with a formArrow group together: a
// batch that took record batches column by column, where addColumns could, has the very
// columns, types and values of one that took each row as the NDJSON line eachLine writes,
// whatever columns the dataset already had and however little room it had left.
func TestArrowGroupMatchesRows(t *testing.T) {
	columnar := 0
	rapid.Check(t, func(t *rapid.T) {
		// Two datasets alike: what earlier rows established, and the room left under MaxColumns.
		room := rapid.IntRange(1, 8).Draw(t, "room")
		var pre []string
		for range rapid.IntRange(0, 3).Draw(t, "earlier") {
			pre = append(pre, rapid.SampledFrom([]string{`{"a":1}`, `{"a":"s"}`, `{"n":1.5}`, `{"msg":true}`, `{"b":2}`}).Draw(t, "pre"))
		}
		// Some of them reached this partition's batch, the rest another partition's only, so
		// the dataset has columns the batch has no builder for yet.
		here := rapid.IntRange(0, len(pre)).Draw(t, "here")
		mk := func() *batch {
			ds := &dataset{types: map[string]ColType{}, capped: MaxColumns - room}
			b, other := newBatch(ds), newBatch(ds)
			defer other.release()
			for i, line := range pre {
				to := other
				if i < here {
					to = b
				}
				if err := to.add(formNDJSON, []byte(line), int64(i+1), 5); err != nil {
					t.Fatal(err)
				}
			}
			return b
		}
		cols, rows := mk(), mk()
		defer cols.release()
		defer rows.release()
		seq := int64(len(pre) + 1)
		for k := range rapid.IntRange(1, 3).Draw(t, "records") {
			rec := drawRecord(t, fmt.Sprint(k))
			enc, err := rowjson.NewEncoder(rec.Schema())
			if err != nil {
				t.Fatal(err)
			}
			lines := func(b *batch, from int) {
				at := seq + int64(from)
				eachLine(enc, rec, from, func(line []byte) {
					if err := b.add(formNDJSON, line, at, 7); err != nil {
						t.Fatalf("row path refused %s: %v", line, err)
					}
					at++
				})
			}
			if cols.addColumns(rec, seq, 7) {
				columnar++
			} else {
				lines(cols, 0)
			}
			lines(rows, 0)
			seq += rec.NumRows()
			rec.Release()
		}
		// A new table takes its columns in the order the batch made them.
		if g, w := builderNames(cols), builderNames(rows); !slices.Equal(g, w) {
			t.Fatalf("columns made in the order %v, by the row path %v", g, w)
		}
		got, want := batchColumns(cols), batchColumns(rows)
		gotNames, wantNames := slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))
		if !slices.Equal(gotNames, wantNames) {
			t.Fatalf("columns %v, the row path's %v", gotNames, wantNames)
		}
		for _, name := range wantNames {
			if !array.Equal(got[name], want[name]) {
				t.Fatalf("column %s:\n%v\nthe row path's\n%v", name, got[name], want[name])
			}
		}
	})
	// The property says nothing if addColumns never takes a record.
	if columnar == 0 {
		t.Fatal("no record went column by column")
	}
	t.Logf("%d records went column by column", columnar)
}

func builderNames(b *batch) []string {
	var out []string
	for _, c := range b.cols {
		out = append(out, fmt.Sprintf("%s %s", c.Name, c.Type))
	}
	return out
}

// TestIngestPartitionRecords stores record batches as a server stores a forwarded Arrow
// body, flushes part of them, "crashes" before the log is released and replays: the
// partition then holds every row once, with the values and types of the same rows stored
// through the row form.
func TestIngestPartitionRecords(t *testing.T) {
	ctx := context.Background()
	const part = "gateway=g1/source=web"
	arrowDir := t.TempDir()
	viaArrow, viaRows := openTest(t, arrowDir), openTest(t, t.TempDir())
	defer viaRows.Close(ctx)
	var last Result
	for k := range 6 {
		rec := testRecord(t, k)
		r, err := viaArrow.IngestPartitionRecords("logs", part, []arrow.RecordBatch{rec.NewSlice(0, 2), rec.NewSlice(2, rec.NumRows())})
		if err != nil || r.Accepted != int(rec.NumRows()) {
			t.Fatalf("IngestPartitionRecords = %+v, %v", r, err)
		}
		last = r
		enc, err := rowjson.NewEncoder(rec.Schema())
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		eachLine(enc, rec, 0, func(line []byte) { lines = append(lines, string(line)) })
		body, n := framedOf(t, lines...)
		if _, err := viaRows.IngestPartitionRows("logs", part, body, n); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		if k == 2 {
			// The first half goes to the table; the replay must skip it.
			seg, ok, err := viaArrow.wal.Rotate(func(n int64) []byte { return appendMarker(nil, n) })
			if err != nil || !ok {
				t.Fatal(err)
			}
			if err := viaArrow.flushSegment(ctx, seg, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A listing has the rows the log holds, flushed or not, as the flush stores them.
	listed := func(c *Cache) map[int64]map[string]string {
		tables, err := c.Listing(ctx, putIn(t.TempDir()))
		if err != nil {
			t.Fatal(err)
		}
		out := map[int64]map[string]string{}
		for seq, rows := range listedRows(t, tables, "logs") {
			if len(rows) != 1 {
				t.Fatalf("seq %d listed %d times", seq, len(rows))
			}
			out[seq] = rows[0].fields
		}
		return out
	}
	if got, want := listed(viaArrow), listed(viaRows); len(got) != int(last.LastSeq) || !reflect.DeepEqual(got, want) {
		t.Fatalf("listed before the flush:\n%v\nthe row form's:\n%v", got, want)
	}
	crash(viaArrow)
	viaArrow = openTest(t, arrowDir)
	defer viaArrow.Close(ctx)
	for _, c := range []*Cache{viaArrow, viaRows} {
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got, want := scanJSON(t, viaArrow, "logs", part), scanJSON(t, viaRows, "logs", part)
	for _, rows := range [][]map[string]any{got, want} {
		for _, r := range rows {
			delete(r, columns.IngestedAtColumn) // each cache's own clock
		}
	}
	if len(got) != int(last.LastSeq) || !reflect.DeepEqual(got, want) {
		t.Fatalf("%d rows (last seq %d):\n%v\nthe row form's:\n%v", len(got), last.LastSeq, got, want)
	}
	for _, bad := range [][]arrow.Field{
		{{Name: columns.SeqColumn, Type: arrow.PrimitiveTypes.Int64}},
		{{Name: "a", Type: arrow.PrimitiveTypes.Int64}, {Name: "a", Type: arrow.BinaryTypes.String}},
		{{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64)}},
	} {
		rec := array.NewRecordBatch(arrow.NewSchema(bad, nil), nullColumns(bad, 1), 1)
		if _, err := viaArrow.IngestPartitionRecords("logs", part, []arrow.RecordBatch{rec}); err == nil {
			t.Errorf("IngestPartitionRecords took columns %v", bad)
		}
		rec.Release()
	}
}

// testRecord is the k-th of a run of record batches of 4 rows: the first brings its
// columns, the next take them column by column, one brings a new column, one a NaN and one
// a timestamp (those two take the row path).
func testRecord(t *testing.T, k int) arrow.RecordBatch {
	t.Helper()
	fields := []arrow.Field{
		{Name: "msg", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "f", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "ok", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: "_hyp_origin_seq", Type: arrow.PrimitiveTypes.Int64},
		{Name: "_hyp_origin_incarnation", Type: arrow.BinaryTypes.String},
	}
	switch k {
	case 3:
		fields = append(fields, arrow.Field{Name: "extra", Type: arrow.BinaryTypes.String, Nullable: true})
	case 5:
		fields = append(fields, arrow.Field{Name: "when", Type: &arrow.TimestampType{Unit: arrow.Millisecond}, Nullable: true})
	}
	bld := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(fields, nil))
	defer bld.Release()
	for i := range 4 {
		row := k*4 + i
		bld.Field(0).(*array.StringBuilder).Append(fmt.Sprintf("m \"%d\" é", row))
		if i == 1 {
			bld.Field(1).AppendNull()
		} else {
			bld.Field(1).(*array.Int64Builder).Append(int64(row * 1000))
		}
		f := float64(row) / 4
		if k == 4 && i == 2 {
			f = math.NaN()
		}
		bld.Field(2).(*array.Float64Builder).Append(f)
		bld.Field(3).(*array.BooleanBuilder).Append(i%2 == 0)
		bld.Field(4).(*array.Int64Builder).Append(int64(100 + row))
		bld.Field(5).(*array.StringBuilder).Append("inc-1")
		switch k {
		case 3:
			bld.Field(6).(*array.StringBuilder).Append("x")
		case 5:
			bld.Field(6).(*array.TimestampBuilder).Append(arrow.Timestamp(1_700_000_000_000 + int64(row)))
		}
	}
	return bld.NewRecordBatch()
}

func nullColumns(fields []arrow.Field, n int) []arrow.Array {
	out := make([]arrow.Array, len(fields))
	for i, f := range fields {
		out[i] = array.MakeArrayOfNull(memory.DefaultAllocator, f.Type, n)
	}
	return out
}

// TestDecodeArrowRecord: a log record of an Arrow group decodes to its batches, and one
// whose group is cut short, claims other rows than it holds or none at all is refused as
// malformed (the flush then reports its bytes as damage) rather than read.
func TestDecodeArrowRecord(t *testing.T) {
	rec := testRecord(t, 0)
	defer rec.Release()
	var body bytes.Buffer
	if err := arrowGroupBody(&body, []arrow.RecordBatch{rec}); err != nil {
		t.Fatal(err)
	}
	payload := func(b []byte, rows int) []byte {
		return appendRecord(nil, &record{Form: formArrow, Dataset: "logs", IngestedAt: 1,
			Groups: []group{{Partition: "gateway=g/source=s", FirstSeq: 10, Rows: rows, Body: b}}})
	}
	got, err := decodeRecord(payload(body.Bytes(), 4))
	if err != nil || len(got.Groups[0].Records) != 1 || got.Groups[0].Records[0].NumRows() != 4 || got.lastSeq() != 13 {
		t.Fatalf("decodeRecord = %+v, %v", got, err)
	}
	got.release()
	var empty bytes.Buffer // a stream of the schema alone
	if err := ipc.NewWriter(&empty, ipc.WithSchema(rec.Schema())).Close(); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string][]byte{
		"cut short":  payload(body.Bytes()[:body.Len()/2], 4),
		"other rows": payload(body.Bytes(), 5),
		"no rows":    payload(empty.Bytes(), 0),
		"not Arrow":  payload([]byte("{\"a\":1}\n"), 1),
	} {
		if r, err := decodeRecord(p); !errors.Is(err, errBadRecord) {
			t.Errorf("%s: decodeRecord = %+v, %v; want errBadRecord", name, r, err)
		}
	}
}
