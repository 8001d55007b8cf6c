package transform

import (
	"encoding/binary"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Pass-through columns.
//
// Most transforms keep most columns as they are (SELECT * EXCLUDE … REPLACE … WHERE …), and
// moving a column's values through DuckDB and back is most of what such a transform costs:
// DuckDB copies every value of its result into its own vectors, then into new Arrow arrays,
// twice the unit's bytes for columns the SQL never looks at. So Apply shows DuckDB, in place
// of each column the SQL cannot see but through a top-level *, the row's position in the unit
// (int64), and puts the column's own values back, taken at the kept rows, after the query:
// DuckDB then copies 8 bytes a row for such a column, whatever it holds.
//
// That is only right if the SQL's result cannot depend on such a column's values, and each
// output column of its name is the column itself. The tree says which names the SQL may
// read or produce otherwise (opaque); a column the SQL could reach in another way (a
// positional reference, the whole row as a struct) switches the scheme off. A star inside
// an expression, COLUMNS(…) and * LIKE are refused by Check. And each output column taken
// for a pass-through must hold, row by row, exactly the position of its row's input row,
// or the unit runs again with every column's values: a rule missed here costs time, never
// a wrong row.

// passShape is what Apply needs of an allowed transform's tree for pass-through columns:
// the lower-case names a pass-through column must not have, or ok false when no column may
// pass through.
func passShape(tree any, referenced []string) (opaque map[string]bool, ok bool) {
	opaque = map[string]bool{}
	for _, name := range referenced {
		opaque[name] = true
	}
	ok = true
	var fromAlias string
	walkJSON(tree, func(m map[string]any) {
		if m["type"] == "BASE_TABLE" {
			fromAlias, _ = m["alias"].(string)
		}
	})
	walkJSON(tree, func(m map[string]any) {
		if a, _ := m["alias"].(string); a != "" && m["class"] != nil {
			opaque[strings.ToLower(a)] = true // an output name the SQL makes
		}
		switch m["class"] {
		case "POSITIONAL_REFERENCE":
			ok = false // #k names a column by its place
		case "COLUMN_REF":
			parts := asList(m["column_names"])
			for _, p := range parts {
				if s, _ := p.(string); s != "" {
					opaque[strings.ToLower(s)] = true // a struct's field or a lambda's parameter, maybe
				}
			}
			if len(parts) == 1 {
				if s, _ := parts[0].(string); strings.EqualFold(s, relation) || fromAlias != "" && strings.EqualFold(s, fromAlias) {
					ok = false // the whole row as a struct
				}
			}
		case "STAR":
			for _, e := range asList(m["rename_list"]) {
				if kv, _ := e.(map[string]any); kv != nil {
					if to, _ := kv["value"].(string); to != "" {
						opaque[strings.ToLower(to)] = true
					}
				}
			}
		}
	})
	return opaque, ok
}

// passable reports whether a column of type t passes through: strings, whose bytes DuckDB
// copies twice on the way out. A fixed-width column costs DuckDB what its placeholder would,
// so it goes through as it is.
func passable(t arrow.DataType) bool { return t.ID() == arrow.STRING }

// passThrough replaces, in what DuckDB is shown, every column of in that may pass through
// by its rows' positions in the unit; it records which. It changes nothing when opaque is nil.
func (in *input) passThrough(opaque map[string]bool) {
	if opaque == nil || len(in.recs) == 0 {
		return
	}
	fields := slices.Clone(in.schema.Fields())
	for i, f := range fields {
		if isKept(f.Name) || opaque[strings.ToLower(f.Name)] || !passable(f.Type) {
			continue
		}
		if in.passed == nil {
			in.passed = map[string]int{}
		}
		in.passed[f.Name] = i
		fields[i] = arrow.Field{Name: f.Name, Type: int64Type, Nullable: true}
	}
	if in.passed == nil {
		return
	}
	in.shownSchema = arrow.NewSchema(fields, nil)
	base := 0
	for _, rec := range in.recs {
		n := int(rec.NumRows())
		vals := make([]int64, n)
		for k := range vals {
			vals[k] = int64(base + k)
		}
		data := array.NewData(int64Type, n, []*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int64Traits.CastToBytes(vals))}, nil, 0, 0)
		pos := array.NewInt64Data(data)
		data.Release() // pos holds it
		cols := slices.Clone(rec.Columns())
		for _, i := range in.passed {
			cols[i] = pos
		}
		in.shown = append(in.shown, array.NewRecordBatch(in.shownSchema, cols, rec.NumRows()))
		pos.Release()
		in.starts = append(in.starts, base)
		base += n
	}
}

// restore puts the pass-through columns' values into res, whose rows are the input's rows at
// kept (ascending positions): for each output column named as a passed column, the column's
// input values at those rows, in the input's type. It reports false, leaving res as it is,
// if any such column does not hold exactly its rows' positions.
func (in *input) restore(res *Result, kept []int) bool {
	var which []int // result columns to restore
	for j, f := range res.Schema.Fields() {
		if _, ok := in.passed[f.Name]; !ok {
			continue
		}
		if f.Type.ID() != arrow.INT64 {
			return false
		}
		which = append(which, j)
	}
	off := 0
	for _, rec := range res.Recs {
		n := int(rec.NumRows())
		for _, j := range which {
			col := rec.Column(j).(*array.Int64)
			if col.NullN() > 0 {
				return false
			}
			for k, v := range col.Int64Values() {
				if v != int64(kept[off+k]) {
					return false
				}
			}
		}
		off += n
	}
	if len(which) == 0 {
		return true
	}
	fields := slices.Clone(res.Schema.Fields())
	for _, j := range which {
		fields[j].Type = in.schema.Field(in.passed[fields[j].Name]).Type
	}
	schema := arrow.NewSchema(fields, nil)
	srcs := make([][]arrow.Array, len(which)) // each restored column's input pieces
	for w, j := range which {
		src := in.passed[fields[j].Name]
		for _, inRec := range in.recs {
			srcs[w] = append(srcs[w], inRec.Column(src))
		}
	}
	off = 0
	for r, rec := range res.Recs {
		n := int(rec.NumRows())
		cols := slices.Clone(rec.Columns())
		var made []arrow.Array
		for w, j := range which {
			cols[j] = gather(srcs[w], in.starts, kept[off:off+n])
			made = append(made, cols[j])
		}
		res.Recs[r] = array.NewRecordBatch(schema, cols, rec.NumRows())
		rec.Release()
		for _, a := range made {
			a.Release()
		}
		off += n
	}
	res.Schema = schema
	return true
}

// gather returns the values at the ascending unit positions pos of a string column held in
// pieces, srcs[k] holding the rows from starts[k] on. Rows that follow each other in one piece are
// copied as a run; when pos is one run, the result is a slice of its piece (no copy).
func gather(srcs []arrow.Array, starts []int, pos []int) arrow.Array {
	type run struct{ src, lo, hi int } // srcs[src]'s rows [lo, hi)
	var runs []run
	k := 0
	for _, p := range pos {
		for p >= starts[k]+srcs[k].Len() {
			k++
		}
		i := p - starts[k]
		if n := len(runs); n > 0 && runs[n-1].src == k && runs[n-1].hi == i {
			runs[n-1].hi++
			continue
		}
		runs = append(runs, run{k, i, i + 1})
	}
	if len(runs) == 1 {
		return array.NewSlice(srcs[runs[0].src], int64(runs[0].lo), int64(runs[0].hi))
	}
	n := len(pos)
	var validity []byte
	nulls := 0
	for _, r := range runs {
		if srcs[r.src].NullN() > 0 {
			validity = make([]byte, bitutil.BytesForBits(int64(n)))
			break
		}
	}
	if validity != nil {
		at := 0
		for _, r := range runs {
			s := srcs[r.src]
			for i := r.lo; i < r.hi; i++ {
				if s.IsValid(i) {
					bitutil.SetBit(validity, at)
				} else {
					nulls++
				}
				at++
			}
		}
	}
	size := 0
	for _, r := range runs {
		offs := srcs[r.src].(*array.String).ValueOffsets()
		size += int(offs[r.hi] - offs[r.lo])
	}
	offsets := make([]byte, 4*(n+1))
	data := make([]byte, 0, size)
	at := 0
	for _, r := range runs {
		s := srcs[r.src].(*array.String)
		offs := s.ValueOffsets() // absolute offsets into the data buffer, len+1 of them
		first, last := int(offs[r.lo]), int(offs[r.hi])
		shift := len(data) - first
		for i := r.lo; i < r.hi; i++ {
			binary.LittleEndian.PutUint32(offsets[4*at:], uint32(int(offs[i])+shift))
			at++
		}
		if last > first {
			data = append(data, s.Data().Buffers()[2].Bytes()[first:last]...)
		}
	}
	binary.LittleEndian.PutUint32(offsets[4*n:], uint32(len(data)))
	buffers := []*memory.Buffer{nil, memory.NewBufferBytes(offsets), memory.NewBufferBytes(data)}
	if validity != nil {
		buffers[0] = memory.NewBufferBytes(validity)
	}
	ad := array.NewData(stringType, n, buffers, nil, nulls, 0)
	defer ad.Release()
	return array.MakeFromData(ad)
}
