package cache

import (
	"bytes"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/jsonrow"
	"github.com/hyp-project/hyp/internal/rowform"
	"github.com/hyp-project/hyp/internal/rowjson"
)

// batch turns validated NDJSON rows of one partition into Arrow columns. Column types come
// from the dataset (so every partition of a dataset agrees on them); the batch records which
// columns it had to create so the table can be evolved before the append.
//
// A row costs O(its fields), not O(the batch's columns): a column is padded with nulls only
// when it next gets a value, and once more at the end. A dataset where every row brings a
// new field would otherwise cost rows × columns.
type batch struct {
	ds      *dataset
	scanner jsonrow.Scanner
	seqs    *array.Int64Builder
	times   *array.TimestampBuilder
	cols    []*colBuilder
	byName  map[string]int
	// hints[k] is the column the k-th field of the last row with one went to: rows of a
	// source mostly list their fields in one order, and a name compare is cheaper than
	// hashing it.
	hints   []int
	pos     int           // index of the field being taken in the row being added
	touched []*colBuilder // columns given a value in the row being added
	// spare, when set, gives a string column the channel its buffers come back on
	// (colBuilder.spare).
	spare   func(name string) chan stringBufs
	rows    int
	bytes   int // log bytes of the rows held, for the flush's memory bounds
	maxSeq  int64
	scratch []byte
	ovf     []byte // the row's fields beyond MaxColumns, as `,"key":value`...
	ovfText []byte // ...and the object they become
}

type colBuilder struct {
	Column
	b builder
	// lastRows and lastData are the rows and string bytes the column held when record last
	// took it, for reset to reserve.
	lastRows, lastData int
	setRow             int // row whose value is pending in kind/raw; -1 if none
	kind               jsonrow.Kind
	raw                []byte
	num                number
	// spare holds, for a string column, buffers of its earlier chunks that their data file
	// is done with (recycle), for reset to fill instead of allocating: a flush's string data
	// was half of what the daemon allocated under load. A flush's batch gets the
	// partition's, which outlives the round (Partition.spares).
	spare chan stringBufs
}

// handback is a string column's buffers that a chunk's record wraps, to go back to the
// column once the record is written.
type handback struct {
	col  *colBuilder
	bufs stringBufs
}

// spareChunks is how many chunks' buffers a string column keeps: with two, a writer that
// lags the flush (a new data file, a page to compress) left a quarter of the chunks to
// allocate; with four, 2% (OTLP/protobuf at full speed).
const spareChunks = 4

// recycle hands each buffer back to its column, if the column has room for a spare.
func recycle(back []handback) {
	for _, hb := range back {
		select {
		case hb.col.spare <- hb.bufs:
		default: // full, or the column has no spares (nil): the buffers are garbage
		}
	}
}

// number is a JSON number read once: the forms the column types can hold.
type number struct {
	i     int64
	isInt bool // fits int64
	f     float64
	isF   bool // a finite float64 that keeps the literal's magnitude
}

func readNumber(raw []byte) number {
	var n number
	if n.i, n.isInt = jsonrow.NumberIsInt(raw); n.isInt {
		n.f, n.isF = float64(n.i), true
		return n
	}
	f, err := jsonrow.ParseFloat(raw)
	// Out of range (1e400, a 400-digit integer) or flushed to zero from a nonzero literal
	// (1e-400): no column type holds it, so it is kept as its JSON text.
	n.f, n.isF = f, err == nil && (f != 0 || !nonzeroMantissa(raw))
	return n
}

func nonzeroMantissa(raw []byte) bool {
	for _, c := range raw {
		switch {
		case c == 'e' || c == 'E':
			return false
		case c >= '1' && c <= '9':
			return true
		}
	}
	return false
}

func newBatch(ds *dataset) *batch {
	mem := memory.DefaultAllocator
	return &batch{
		ds:     ds,
		seqs:   array.NewInt64Builder(mem),
		times:  array.NewTimestampBuilder(mem, TypeTimestamp.arrow().(*arrow.TimestampType)),
		byName: map[string]int{},
	}
}

// add appends one row, an NDJSON line or a row-form row as form says. The row was validated
// at ingest; an error here means the log was corrupted after validation, or a bug: the
// caller sets the row aside and goes on, and the batch is as it was before the call.
func (b *batch) add(form byte, row []byte, seq, ingestedAtMicros int64) error {
	b.touched, b.ovf, b.pos = b.touched[:0], b.ovf[:0], 0
	var err error
	if form == formRows {
		err = rowform.Fields(row, b.field)
	} else {
		err = b.scanner.Object(row, b.field)
	}
	if err == nil && len(b.ovf) > 0 {
		err = b.setOverflow(b.rows)
	}
	if err != nil {
		b.unset(b.rows)
		return fmt.Errorf("row seq %d: %w", seq, err)
	}
	// Nothing below can fail: a value reaches a column only once accepts or resolve has
	// decided that the column's type holds it.
	for _, c := range b.touched {
		if n := c.b.Len(); n < b.rows {
			c.b.AppendNulls(b.rows - n)
		}
		b.appendValue(c)
		c.setRow = -1
	}
	b.seqs.Append(seq)
	b.times.Append(arrow.Timestamp(ingestedAtMicros))
	b.rows++
	b.maxSeq = seq
	return nil
}

// field takes one field of the row being added (row b.rows).
func (b *batch) field(f jsonrow.Field) error {
	pos := b.pos
	b.pos++
	if f.Kind == jsonrow.Null {
		return nil
	}
	var num number
	if f.Kind == jsonrow.Number {
		num = readNumber(f.Raw)
	}
	// A batch column named like the key has the dataset's type for that name, so when it
	// accepts the value the full resolution would pick it too.
	i, ok := b.named(pos, f.Key)
	if !ok || !b.cols[i].accepts(f.Kind, num) {
		if i, ok = b.column(string(f.Key), f.Kind, num); !ok {
			b.ovf = append(b.ovf, ',')
			b.ovf = append(rowjson.AppendString(b.ovf, string(f.Key)), ':')
			b.ovf = append(b.ovf, f.Raw...)
			return nil
		}
	}
	b.set(b.cols[i], b.rows, f.Kind, f.Raw, num)
	return nil
}

// named is byName[key], tried first at the column the field at pos went to last time.
func (b *batch) named(pos int, key []byte) (int, bool) {
	if pos < len(b.hints) {
		if i := b.hints[pos]; i >= 0 && b.cols[i].Name == string(key) {
			return i, true
		}
	}
	i, ok := b.byName[string(key)]
	if ok {
		for len(b.hints) <= pos {
			b.hints = append(b.hints, -1)
		}
		b.hints[pos] = i
	}
	return i, ok
}

func (b *batch) set(c *colBuilder, row int, k jsonrow.Kind, raw []byte, num number) {
	if c.setRow != row {
		b.touched = append(b.touched, c)
	}
	c.setRow, c.kind, c.raw, c.num = row, k, raw, num
}

func (b *batch) unset(row int) {
	for _, c := range b.touched {
		if c.setRow == row {
			c.setRow = -1
		}
	}
	b.touched = b.touched[:0]
}

// setOverflow stores the row's fields beyond the column cap as one JSON object in
// columns.OverflowColumn. A row that already carries that column (a forwarded row stored by
// a central server) keeps its own: when it is an object, or a string holding exactly one
// (what a sender's NDJSON export makes of its overflow column), the new fields join that
// object; any other value, which a server refuses (SPEC 5) but an older one logged, is kept
// whole in the object under columns.OverflowColumn's own name. No value is ever dropped.
func (b *batch) setOverflow(row int) error {
	i, _ := b.column(columns.OverflowColumn, jsonrow.String, number{})
	c := b.cols[i]
	b.ovfText = append(b.ovfText[:0], '{')
	b.ovfText = append(b.ovfText, b.ovf[1:]...)
	if c.setRow == row {
		own := c.raw
		if c.kind == jsonrow.String {
			text, err := jsonrow.AppendString(b.scratch[:0], c.raw)
			if err != nil {
				return err
			}
			b.scratch, own = text, text
		}
		if c.kind == jsonrow.Object || c.kind == jsonrow.String && b.scanner.Object(own, nil) == nil {
			// Validated as one object: what lies between its braces is its members or blank.
			own = bytes.TrimSpace(own)
			if members := bytes.TrimSpace(own[1 : len(own)-1]); len(members) > 0 {
				b.ovfText = append(append(b.ovfText, ','), members...)
			}
		} else {
			b.ovfText = append(b.ovfText, ',')
			b.ovfText = append(rowjson.AppendString(b.ovfText, columns.OverflowColumn), ':')
			b.ovfText = append(b.ovfText, c.raw...)
		}
	}
	b.ovfText = append(b.ovfText, '}')
	b.set(c, row, jsonrow.Object, b.ovfText, number{})
	return nil
}

// accepts is the fast path: the value's kind fits the column as it is.
func (c *colBuilder) accepts(k jsonrow.Kind, n number) bool {
	switch c.Type {
	case TypeString:
		return true
	case TypeBoolean:
		return k == jsonrow.Bool
	case TypeDouble:
		return k == jsonrow.Number && n.isF
	case TypeLong:
		return k == jsonrow.Number && n.isInt
	}
	return false
}

// column finds or creates the builder for the column a value resolves to; false when the
// dataset is at MaxColumns and the value's column would be a new one.
func (b *batch) column(key string, k jsonrow.Kind, n number) (int, bool) {
	name, t, ok := b.ds.resolve(key, valueType(k, n))
	if !ok {
		return 0, false
	}
	return b.builder(name, t), true
}

// builder finds or creates the builder of column name of type t, a column of the dataset.
func (b *batch) builder(name string, t ColType) int {
	if i, ok := b.byName[name]; ok && b.cols[i].Type == t {
		return i
	}
	c := &colBuilder{Column: Column{Name: name, Type: t}, setRow: -1}
	if t == TypeString {
		sb := &stringCol{}
		c.b = sb
		if b.spare != nil {
			c.spare = b.spare(name)
			// The first chunk of a round fills what the last round's gave back.
			select {
			case sp := <-c.spare:
				sb.adopt(sp)
			default:
			}
		}
	} else {
		c.b = array.NewBuilder(memory.DefaultAllocator, t.arrow())
	}
	b.cols = append(b.cols, c)
	if _, ok := b.byName[name]; ok {
		b.hints = b.hints[:0] // they may name the column byName no longer does
	}
	b.byName[name] = len(b.cols) - 1
	return len(b.cols) - 1
}

func (b *batch) appendValue(c *colBuilder) {
	switch bl := c.b.(type) {
	case *stringCol:
		v := c.raw
		if c.kind == jsonrow.String {
			if bytes.IndexByte(v, '\\') < 0 {
				// Validated at ingest: without an escape the text between the quotes is the value.
				v = v[1 : len(v)-1]
			} else {
				b.scratch, _ = jsonrow.AppendString(b.scratch[:0], v)
				v = b.scratch
			}
		}
		bl.Append(v)
	case *array.Int64Builder:
		bl.Append(c.num.i)
	case *array.Float64Builder:
		bl.Append(c.num.f)
	case *array.BooleanBuilder:
		bl.Append(c.raw[0] == 't')
	}
}

// newColumns lists the batch's columns that are not yet in have.
func (b *batch) newColumns(have []Column) []Column {
	known := make(map[string]bool, len(have))
	for _, c := range have {
		known[c.Name] = true
	}
	var out []Column
	for _, c := range b.cols {
		if !known[c.Name] {
			out = append(out, c.Column)
		}
	}
	return out
}

// record assembles the batch in the layout of sc (the table's Arrow schema, stored names,
// which logical turns back into column names): internal columns, then every table column,
// null where the batch has none.
func (b *batch) record(sc *arrow.Schema, logical func(string) string) (arrow.RecordBatch, error) {
	rec, _, err := b.recordHanding(sc, logical)
	return rec, err
}

// recordHanding is record, also returning the string buffers the record wraps, which the
// caller may hand back (recycle) once nothing reads the record any more.
func (b *batch) recordHanding(sc *arrow.Schema, logical func(string) string) (arrow.RecordBatch, []handback, error) {
	var back []handback
	arrs := make([]arrow.Array, 0, sc.NumFields())
	defer func() {
		for _, a := range arrs {
			a.Release()
		}
	}()
	for _, f := range sc.Fields() {
		switch f.Name {
		case columns.SeqColumn:
			arrs = append(arrs, b.seqs.NewArray())
			continue
		case columns.IngestedAtColumn:
			arrs = append(arrs, b.times.NewArray())
			continue
		}
		i, ok := b.byName[logical(f.Name)]
		if !ok {
			arrs = append(arrs, array.MakeArrayOfNull(memory.DefaultAllocator, f.Type, b.rows))
			continue
		}
		col := b.cols[i]
		cb := col.b
		if n := cb.Len(); n < b.rows {
			cb.AppendNulls(b.rows - n)
		}
		col.lastRows = b.rows
		if sb, ok := cb.(*stringCol); ok {
			col.lastData = sb.DataLen()
			back = append(back, handback{col, sb.bufs()})
		}
		a := cb.NewArray()
		if !arrow.TypeEqual(a.DataType(), f.Type) {
			a.Release()
			return nil, nil, fmt.Errorf("column %q: batch type %s, table type %s", f.Name, a.DataType(), f.Type)
		}
		arrs = append(arrs, a)
	}
	rec := array.NewRecordBatch(sc, arrs, int64(b.rows))
	return rec, back, nil
}

// reset empties a batch whose rows record has just taken (its builders are empty again),
// keeping its columns for the rows to come. Each builder is given the room its last chunk
// took, so the next chunk, most often alike, is one allocation per column rather than a
// series of doublings that copy what was appended.
func (b *batch) reset() {
	b.seqs.Reserve(b.rows)
	b.times.Reserve(b.rows)
	for _, c := range b.cols {
		if sb, ok := c.b.(*stringCol); ok {
			select {
			case sp := <-c.spare:
				sb.adopt(sp)
			default:
			}
			sb.ReserveData(c.lastData)
		}
		c.b.Reserve(c.lastRows)
	}
	b.rows, b.bytes = 0, 0
}

func (b *batch) release() {
	b.seqs.Release()
	b.times.Release()
	for _, c := range b.cols {
		c.b.Release()
	}
}
