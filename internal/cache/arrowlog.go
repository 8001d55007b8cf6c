package cache

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/hyp-project/hyp/internal/jsonrow"
	"github.com/hyp-project/hyp/internal/rowjson"
)

// A formArrow group holds its rows as an Arrow IPC stream of record batches: how a central
// server logs a forwarded Arrow body, whose batches a sender's cache scan built column by
// column. Logging them as the row form instead meant writing every value out as JSON text
// and parsing it back at the flush, the largest part of what storing a forwarded row cost.
//
// The batches are the rows as a sender's NDJSON line would give them (rowjson): a null is a
// field left out, and every value is what that line's JSON text means. So the row path
// (eachRow, one NDJSON line a row) is always right, and is what a listing and a set-aside
// row use; the flush takes a batch column by column instead (addColumns) when that gives
// the batch the very values the row path would, and falls back to the row path otherwise.
// TestArrowGroupMatchesRows holds the two together.

// arrowKind is what the row path makes of every value of an Arrow column: its JSON kind and
// number forms (for a number column, what each value has in common: an int64 fits a long
// and a double, a finite float64 a double only). false for a column type the row path
// would write as something else (a timestamp as a string): such a batch takes the row path.
func arrowKind(t arrow.DataType) (jsonrow.Kind, number, bool) {
	switch t.ID() {
	case arrow.STRING:
		return jsonrow.String, number{}, true
	case arrow.INT64:
		return jsonrow.Number, number{isInt: true, isF: true}, true
	case arrow.FLOAT64:
		return jsonrow.Number, number{isF: true}, true
	case arrow.BOOL:
		return jsonrow.Bool, number{}, true
	}
	return 0, number{}, false
}

// addColumns appends the rows of rec, the first with seq first, to the batch column by
// column, and reports whether it could; false leaves the batch and its dataset as they
// were. It takes a record only into columns the dataset already has: which column a new
// name gets, and whether it still fits under MaxColumns, depends on the order in which rows
// bring the names, so the row path adds the columns a record brings, after which the
// records that follow, most often alike, go column by column. It refuses too a column type
// or a value the row path writes as something else, and two columns the row path would
// merge into one.
func (b *batch) addColumns(rec arrow.RecordBatch, first, ingestedAtMicros int64) bool {
	n := int(rec.NumRows())
	type target struct {
		col, from int // the record's column, and its first row with a value
		name      string
		typ       ColType
	}
	var to []target
	for j, f := range rec.Schema().Fields() {
		arr := rec.Column(j)
		if arr.NullN() == n {
			continue // the row path never sees its name
		}
		k, num, ok := arrowKind(f.Type)
		if !ok || !utf8.ValidString(f.Name) || !rowjson.SameAsText(arr) {
			return false
		}
		tg := target{col: j, from: firstValue(arr)}
		if i, ok := b.byName[f.Name]; ok && b.cols[i].accepts(k, num) {
			tg.name, tg.typ = f.Name, b.cols[i].Type
		} else if tg.name, tg.typ, ok = b.ds.established(f.Name, valueType(k, num)); !ok {
			return false
		}
		for _, o := range to {
			if o.name == tg.name {
				return false
			}
		}
		to = append(to, tg)
	}
	// The builders a new table takes its column order from, made in the row path's order:
	// by the first row with a value, then field by field.
	slices.SortStableFunc(to, func(x, y target) int { return x.from - y.from })
	for _, tg := range to {
		c := b.cols[b.builder(tg.name, tg.typ)]
		if l := c.b.Len(); l < b.rows {
			c.b.AppendNulls(b.rows - l)
		}
		b.appendColumn(c, rec.Column(tg.col))
	}
	for i := range n {
		b.seqs.Append(first + int64(i))
		b.times.Append(arrow.Timestamp(ingestedAtMicros))
	}
	b.rows += n
	b.maxSeq = first + int64(n) - 1
	return true
}

// firstValue is the index of arr's first value that is not null.
func firstValue(arr arrow.Array) int {
	if arr.NullN() == 0 {
		return 0
	}
	for i := range arr.Len() {
		if arr.IsValid(i) {
			return i
		}
	}
	return arr.Len()
}

// appendColumn appends every value of arr to c as appendValue would append it from the
// value's JSON text: a string column takes a number's or a boolean's text. A column with no
// null of the builder's own type is appended at once.
func (b *batch) appendColumn(c *colBuilder, arr arrow.Array) {
	n := arr.Len()
	if arr.NullN() == 0 {
		switch a := arr.(type) {
		case *array.String:
			if bl, ok := c.b.(*stringCol); ok {
				var data []byte
				if buf := a.Data().Buffers()[2]; buf != nil {
					data = buf.Bytes()
				}
				bl.appendStrings(a.ValueOffsets(), data)
				return
			}
		case *array.Int64:
			if bl, ok := c.b.(*array.Int64Builder); ok {
				bl.AppendValues(a.Int64Values(), nil)
				return
			}
		case *array.Float64:
			if bl, ok := c.b.(*array.Float64Builder); ok {
				bl.AppendValues(a.Float64Values(), nil)
				return
			}
		}
	}
	switch bl := c.b.(type) {
	case *stringCol:
		for i := range n {
			if arr.IsNull(i) {
				bl.AppendNulls(1)
				continue
			}
			switch a := arr.(type) {
			case *array.String:
				appendText(bl, a.Value(i))
			case *array.Int64:
				b.scratch = strconv.AppendInt(b.scratch[:0], a.Value(i), 10)
				bl.Append(b.scratch)
			case *array.Float64:
				b.scratch = rowjson.AppendFloat(b.scratch[:0], a.Value(i))
				bl.Append(b.scratch)
			case *array.Boolean:
				b.scratch = strconv.AppendBool(b.scratch[:0], a.Value(i))
				bl.Append(b.scratch)
			}
		}
	case *array.Int64Builder:
		a := arr.(*array.Int64)
		for i := range n {
			if a.IsNull(i) {
				bl.AppendNull()
			} else {
				bl.Append(a.Value(i))
			}
		}
	case *array.Float64Builder:
		for i := range n {
			if arr.IsNull(i) {
				bl.AppendNull()
				continue
			}
			switch a := arr.(type) {
			case *array.Float64:
				bl.Append(a.Value(i))
			case *array.Int64:
				bl.Append(float64(a.Value(i)))
			}
		}
	case *array.BooleanBuilder:
		a := arr.(*array.Boolean)
		for i := range n {
			if a.IsNull(i) {
				bl.AppendNull()
			} else {
				bl.Append(a.Value(i))
			}
		}
	}
}

// addColumns adds the rows of ar, an Arrow group's record batch whose first row has seq
// first, above floor to p's batch column by column (batch.addColumns), in pieces that fit
// the batch's chunk, and returns the index of the first row it did not add: ar's rows from
// there take the row path.
func (r *flushRound) addColumns(p *Partition, ds *dataset, ar arrow.RecordBatch, first, floor, at int64, rowBytes int) int {
	n := ar.NumRows()
	lo := min(max(floor-first+1, 0), n)
	for lo < n && !r.failed[p] {
		b := r.batch(p, ds)
		lim := r.c.limits
		room := min(lim.chunkRows, lim.chunkCells/max(len(b.cols), 1)) - b.rows
		k := min(n-lo, int64(max(room, 1)))
		part := ar.NewSlice(lo, lo+k)
		ok := b.addColumns(part, first+lo, at)
		part.Release()
		if !ok {
			break
		}
		r.added(p, b, int(k)*rowBytes)
		lo += k
	}
	return int(lo)
}

// arrowGroupBody encodes recs, which share one schema, as a group body: an Arrow IPC
// stream, uncompressed, because the log is read once, by the flush, on the same machine.
func arrowGroupBody(dst *bytes.Buffer, recs []arrow.RecordBatch) error {
	// Room for the batches' buffers at once (a slice's whole buffers, so at least enough):
	// grown by doubling, the stream's buffer was about half of what encoding it cost.
	size := 1 << 10
	for _, r := range recs {
		for _, col := range r.Columns() {
			for _, buf := range col.Data().Buffers() {
				if buf != nil {
					size += buf.Len()
				}
			}
		}
	}
	dst.Grow(size)
	w := ipc.NewWriter(dst, ipc.WithSchema(recs[0].Schema()))
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			w.Close()
			return err
		}
	}
	return w.Close()
}

// decodeArrowGroup reads a formArrow group body back into its record batches, checks that
// they hold rows rows, and returns the encoder of their rows' NDJSON lines (eachLine).
func decodeArrowGroup(body []byte, rows int) ([]arrow.RecordBatch, *rowjson.Encoder, error) {
	r, err := ipc.NewReader(bytes.NewReader(body), ipc.WithBodySizeLimit(int64(len(body))),
		ipc.WithMetadataSizeLimit(int64(len(body))))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errBadRecord, err)
	}
	defer r.Release()
	var recs []arrow.RecordBatch
	n := 0
	for r.Next() {
		rec := r.RecordBatch()
		rec.Retain()
		recs = append(recs, rec)
		n += int(rec.NumRows())
	}
	if err := r.Err(); err != nil || n != rows {
		releaseRecords(recs)
		return nil, nil, fmt.Errorf("%w: an Arrow group of %d rows holds %d (%v)", errBadRecord, rows, n, err)
	}
	enc, err := rowjson.NewEncoder(r.Schema())
	if err != nil {
		releaseRecords(recs)
		return nil, nil, fmt.Errorf("%w: %v", errBadRecord, err)
	}
	return recs, enc, nil
}

func releaseRecords(recs []arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}

// lineBufs keeps eachLine's line buffer between groups.
var lineBufs = sync.Pool{New: func() any { return new([]byte) }}

// eachLine calls fn with rows from..end of rec, each as the NDJSON line a sender's
// forward body would have carried (enc, made for rec's schema), the row path of a formArrow
// group. The line is valid only during the call.
func eachLine(enc *rowjson.Encoder, rec arrow.RecordBatch, from int, fn func(line []byte)) {
	if from >= int(rec.NumRows()) {
		return // addColumns took them all, as it does most batches
	}
	bp := lineBufs.Get().(*[]byte)
	defer lineBufs.Put(bp)
	for i := from; i < int(rec.NumRows()); i++ {
		*bp = enc.AppendRow((*bp)[:0], rec, i)
		fn(*bp)
	}
}
