package cache

import (
	"bytes"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/hyp-project/hyp/internal/jsonrow"
)

// batch turns validated NDJSON rows of one partition into Arrow columns. Column types come
// from the dataset (so every partition of a dataset agrees on them); the batch records which
// columns it had to create so the table can be evolved before the append.
type batch struct {
	ds      *dataset
	scanner jsonrow.Scanner
	seqs    *array.Int64Builder
	times   *array.TimestampBuilder
	cols    []*colBuilder
	byName  map[string]int
	rows    int
	maxSeq  int64
	scratch []byte
}

type colBuilder struct {
	Column
	b      array.Builder
	setRow int // row whose value is pending in kind/raw; -1 if none
	kind   jsonrow.Kind
	raw    []byte
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

// add appends one row. The line was validated at ingest; an error here means the log was
// corrupted after validation.
func (b *batch) add(line []byte, seq, ingestedAtMicros int64) error {
	row := b.rows
	err := b.scanner.Object(line, func(f jsonrow.Field) error {
		if f.Kind == jsonrow.Null {
			return nil
		}
		// A batch column named like the key has the dataset's type for that name, so when
		// it accepts the value the full resolution would pick it too.
		i, ok := b.byName[string(f.Key)]
		if !ok || !b.cols[i].accepts(f.Kind, f.Raw) {
			i = b.column(string(f.Key), f.Kind, f.Raw)
		}
		c := b.cols[i]
		c.setRow, c.kind, c.raw = row, f.Kind, f.Raw
		return nil
	})
	if err != nil {
		return fmt.Errorf("row seq %d: %w", seq, err)
	}
	for _, c := range b.cols {
		if c.setRow != row {
			c.b.AppendNull()
			continue
		}
		if err := b.appendValue(c); err != nil {
			return fmt.Errorf("row seq %d column %q: %w", seq, c.Name, err)
		}
		c.setRow = -1
	}
	b.seqs.Append(seq)
	b.times.Append(arrow.Timestamp(ingestedAtMicros))
	b.rows++
	b.maxSeq = seq
	return nil
}

// accepts is the fast path: the value's kind fits the column as it is.
func (c *colBuilder) accepts(k jsonrow.Kind, raw []byte) bool {
	switch c.Type {
	case TypeString:
		return true
	case TypeBoolean:
		return k == jsonrow.Bool
	case TypeDouble:
		return k == jsonrow.Number
	case TypeLong:
		if k != jsonrow.Number {
			return false
		}
		_, ok := jsonrow.NumberIsInt(raw)
		return ok
	}
	return false
}

// column finds or creates the builder for the column a value resolves to.
func (b *batch) column(key string, k jsonrow.Kind, raw []byte) int {
	name, t := b.ds.resolve(key, k, raw)
	if i, ok := b.byName[name]; ok && b.cols[i].Type == t {
		return i
	}
	c := &colBuilder{Column: Column{Name: name, Type: t}, setRow: -1}
	c.b = array.NewBuilder(memory.DefaultAllocator, t.arrow())
	c.b.AppendNulls(b.rows)
	b.cols = append(b.cols, c)
	b.byName[name] = len(b.cols) - 1
	return len(b.cols) - 1
}

func (b *batch) appendValue(c *colBuilder) error {
	switch bl := c.b.(type) {
	case *array.StringBuilder:
		v := c.raw
		if c.kind == jsonrow.String {
			if bytes.IndexByte(v, '\\') < 0 {
				v = v[1 : len(v)-1]
			} else {
				var err error
				if b.scratch, err = jsonrow.AppendString(b.scratch[:0], v); err != nil {
					return err
				}
				v = b.scratch
			}
		}
		bl.BinaryBuilder.Append(v)
	case *array.Int64Builder:
		n, ok := jsonrow.NumberIsInt(c.raw)
		if !ok {
			return fmt.Errorf("not an integer: %s", c.raw)
		}
		bl.Append(n)
	case *array.Float64Builder:
		f, err := jsonrow.ParseFloat(c.raw)
		if err != nil {
			return err
		}
		bl.Append(f)
	case *array.BooleanBuilder:
		bl.Append(c.raw[0] == 't')
	default:
		return fmt.Errorf("unsupported builder %T", c.b)
	}
	return nil
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

// record assembles the batch in the layout of sc (the table's Arrow schema): internal
// columns, then every table column, null where the batch has none.
func (b *batch) record(sc *arrow.Schema) (arrow.RecordBatch, error) {
	arrs := make([]arrow.Array, 0, sc.NumFields())
	defer func() {
		for _, a := range arrs {
			a.Release()
		}
	}()
	for _, f := range sc.Fields() {
		switch f.Name {
		case SeqColumn:
			arrs = append(arrs, b.seqs.NewArray())
			continue
		case IngestedAtColumn:
			arrs = append(arrs, b.times.NewArray())
			continue
		}
		i, ok := b.byName[f.Name]
		if !ok {
			arrs = append(arrs, array.MakeArrayOfNull(memory.DefaultAllocator, f.Type, b.rows))
			continue
		}
		a := b.cols[i].b.NewArray()
		if !arrow.TypeEqual(a.DataType(), f.Type) {
			a.Release()
			return nil, fmt.Errorf("column %q: batch type %s, table type %s", f.Name, a.DataType(), f.Type)
		}
		arrs = append(arrs, a)
	}
	rec := array.NewRecordBatch(sc, arrs, int64(b.rows))
	return rec, nil
}

func (b *batch) release() {
	b.seqs.Release()
	b.times.Release()
	for _, c := range b.cols {
		c.b.Release()
	}
}
