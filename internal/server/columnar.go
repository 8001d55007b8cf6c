package server

import (
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/httpbody"
	"github.com/hyp-project/hyp/internal/rowjson"
)

// A cluster replica stages forwarded rows as the records cache.Encoder builds from their
// JSON text, and a single-node server's cache flushes them as its batch builds them from
// that text. An Arrow body's batches mostly are such records already: a sender's cache scan
// made them under the same column rules. passThrough keeps a batch as it came when the
// Encoder, given the batch's rows as userJSON text, would build the same columns with the
// same values, and refuses it otherwise (the body is then decoded into rows, as before):
//
//   - every user column is string, int64, float64 or bool (the text path turns a timestamp
//     or a large_string column into a string column);
//   - every string is valid UTF-8 and every float64 finite (rowjson.SameAsText);
//   - no name twice, and no more columns than the Encoder takes before it overflows
//     (cache.MaxColumns, one kept for columns.OverflowColumn);
//   - a column with no value in the batch is left out (the Encoder never sees its name).
//
// The columns may come in another order than the Encoder's (the order in which the rows
// first give them a value); a lake table resolves columns by name, so only a new table's
// column order can differ. TestPassThroughMatchesEncoder holds the two paths together.

// distinctNames reports whether no user column's name comes twice; a stream where one does
// goes the text path, whose Encoder decides which value a row keeps.
func distinctNames(cols []arrowColumn) bool {
	seen := make(map[string]struct{}, len(cols))
	for _, c := range cols {
		if _, ok := seen[c.name]; ok {
			return false
		}
		seen[c.name] = struct{}{}
	}
	return true
}

// passThrough returns the batch the decoder's columns are bound to (batch has checked its
// seqs, times and overflow values) as the record cache.Encoder would build: the seq column,
// the ingest times in microseconds, then the user columns with a value. errNotColumnar when
// the Encoder would build something else.
func (d *arrowDecoder) passThrough(rec arrow.RecordBatch, n int) (arrow.RecordBatch, *httpbody.Error) {
	fields := make([]arrow.Field, 2, 2+len(d.cols))
	fields[0] = arrow.Field{Name: columns.SeqColumn, Type: arrow.PrimitiveTypes.Int64, Nullable: false}
	fields[1] = arrow.Field{Name: columns.IngestedAtColumn, Type: ingestedAtType, Nullable: false}
	seqs := rec.Column(d.seqAt)
	if seqs.Len() != n {
		return nil, errNotColumnar
	}
	// The ingest times as the Encoder stamps them, whatever unit the sender chose: 8 bytes a
	// row, charged like the rows' text would be.
	if rerr := d.out.charge(8 * n); rerr != nil {
		return nil, rerr
	}
	ats := append([]int64(nil), d.c.ats[len(d.c.ats)-n:]...) // d.c.ats is reused by the next chunk
	data := array.NewData(ingestedAtType, n, []*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int64Traits.CastToBytes(ats))}, nil, 0, 0)
	defer data.Release()
	times := array.NewTimestampData(data)
	defer times.Release()
	cols := make([]arrow.Array, 2, 2+len(d.cols))
	cols[0], cols[1] = seqs, times
	user := 0
	for j := range d.cols {
		c := &d.cols[j]
		arr := rec.Column(c.index)
		if arr.Len() != n {
			return nil, errNotColumnar
		}
		if arr.NullN() == n {
			continue
		}
		switch c.kind {
		case rowjson.KindString, rowjson.KindFloat64, rowjson.KindInt64, rowjson.KindBool:
		default:
			return nil, errNotColumnar
		}
		if !rowjson.SameAsText(arr) {
			return nil, errNotColumnar
		}
		if !c.overflow {
			user++
		}
		fields = append(fields, arrow.Field{Name: c.name, Type: arr.DataType(), Nullable: true})
		cols = append(cols, arr)
	}
	if user > cache.MaxColumns-1 {
		return nil, errNotColumnar
	}
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, int64(n)), nil
}

// ingestedAtType is the Encoder's type of columns.IngestedAtColumn.
var ingestedAtType = &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}

// freshRecords returns the chunk's columnar rows whose held flag is false as the record
// batches the server's cache logs (cache.IngestPartitionRecords): each row's user columns,
// then its sender seq and incarnation in the columns parseRows's cacheRows give every row
// (originSeqColumn, originIncarnationColumn), so the cache stores the same row whichever
// format it came in. The caller releases them.
func (c *chunk) freshRecords(held []bool, incarnation string) []arrow.RecordBatch {
	sc := c.recs[0].Schema()
	fields := append(slices.Clip(sc.Fields()[2:]), arrow.Field{Name: originSeqColumn, Type: arrow.PrimitiveTypes.Int64})
	if incarnation != "" {
		fields = append(fields, arrow.Field{Name: originIncarnationColumn, Type: arrow.BinaryTypes.String})
	}
	out := arrow.NewSchema(fields, nil)
	var recs []arrow.RecordBatch
	at := 0 // the chunk's row index of rec's first row
	for _, rec := range c.recs {
		n := int(rec.NumRows())
		var inc arrow.Array
		if incarnation != "" {
			inc = repeated(incarnation, n)
		}
		for lo := 0; lo < n; {
			if held[at+lo] {
				lo++
				continue
			}
			hi := lo + 1
			for hi < n && !held[at+hi] {
				hi++
			}
			cols := make([]arrow.Array, 0, len(fields))
			for j := 2; j < int(rec.NumCols()); j++ {
				cols = append(cols, array.NewSlice(rec.Column(j), int64(lo), int64(hi)))
			}
			cols = append(cols, array.NewSlice(rec.Column(0), int64(lo), int64(hi)))
			if inc != nil {
				cols = append(cols, array.NewSlice(inc, int64(lo), int64(hi)))
			}
			recs = append(recs, array.NewRecordBatch(out, cols, int64(hi-lo)))
			for _, col := range cols {
				col.Release()
			}
			lo = hi
		}
		if inc != nil {
			inc.Release()
		}
		at += n
	}
	return recs
}

// repeated is a string column of n values s.
func repeated(s string, n int) arrow.Array {
	offs := make([]int32, n+1)
	for i := range offs {
		offs[i] = int32(i * len(s))
	}
	data := array.NewData(arrow.BinaryTypes.String, n, []*memory.Buffer{nil,
		memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(offs)), memory.NewBufferBytes([]byte(strings.Repeat(s, n)))}, nil, 0, 0)
	defer data.Release()
	return array.MakeFromData(data)
}

func releaseRecords(recs []arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}
