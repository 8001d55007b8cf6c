package lakeread

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// BoundsHold checks a manifest entry's bounds against the rows of its data file, a local
// Parquet file read with arrow-go's reader (which shares no code with hyp's writer or
// iceberg-go's bounds): every bound of a column must hold every non-null, non-NaN value of
// it in the file, decoded by its Iceberg type (types, by field id). It returns the field
// ids of the columns that hold a non-null value but lack a lower or an upper bound.
func BoundsHold(path string, lower, upper map[int][]byte, types map[int]string) (unbounded []int, err error) {
	pf, fr, err := openParquet(path)
	if err != nil {
		return nil, err
	}
	defer pf.Close()
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer tbl.Release()
	for i, f := range tbl.Schema().Fields() {
		k := f.Metadata.FindKey("PARQUET:field_id")
		if k < 0 {
			continue
		}
		id, err := strconv.Atoi(f.Metadata.Values()[k])
		if err != nil {
			return nil, fmt.Errorf("column %s: field id: %w", f.Name, err)
		}
		lo, hasLo := lower[id]
		hi, hasHi := upper[id]
		seen := false
		for _, chunk := range tbl.Column(i).Data().Chunks() {
			for r := range chunk.Len() {
				if chunk.IsNull(r) {
					continue
				}
				v, ok := encode(chunk, r)
				if !ok {
					continue // NaN: bounds leave it out
				}
				seen = true
				if hasLo && compare(types[id], lo, v) > 0 {
					return nil, fmt.Errorf("column %s (field %d): lower bound %.40q is above the value %.40q", f.Name, id, lo, v)
				}
				if hasHi && compare(types[id], hi, v) < 0 {
					return nil, fmt.Errorf("column %s (field %d): upper bound %.40q is below the value %.40q", f.Name, id, hi, v)
				}
			}
		}
		if seen && (!hasLo || !hasHi) {
			unbounded = append(unbounded, id)
		}
	}
	return unbounded, nil
}

// encode is a cell in Iceberg's single-value serialisation.
func encode(a arrow.Array, i int) ([]byte, bool) {
	le := binary.LittleEndian
	switch a := a.(type) {
	case *array.String:
		return []byte(a.Value(i)), true
	case *array.Binary:
		return a.Value(i), true
	case *array.Int64:
		return le.AppendUint64(nil, uint64(a.Value(i))), true
	case *array.Int32:
		return le.AppendUint32(nil, uint32(a.Value(i))), true
	case *array.Timestamp:
		// Iceberg's timestamps (not timestamp_ns) are microseconds, as hyp writes them.
		if u := a.DataType().(*arrow.TimestampType).Unit; u != arrow.Microsecond {
			panic(fmt.Sprintf("bounds of a timestamp in %s", u))
		}
		return le.AppendUint64(nil, uint64(a.Value(i))), true
	case *array.Float64:
		if math.IsNaN(a.Value(i)) {
			return nil, false
		}
		return le.AppendUint64(nil, math.Float64bits(a.Value(i))), true
	case *array.Boolean:
		if a.Value(i) {
			return []byte{1}, true
		}
		return []byte{0}, true
	}
	panic(fmt.Sprintf("bounds of %s", a.DataType()))
}

// compare orders two serialised values of Iceberg type typ: numbers by value (-0 below
// +0, as Iceberg's Java comparators order them), strings and binary as unsigned bytes.
func compare(typ string, a, b []byte) int {
	le := binary.LittleEndian
	switch typ {
	case "long", "timestamp", "timestamptz":
		return cmpNum(int64(le.Uint64(a)), int64(le.Uint64(b)))
	case "int", "date":
		return cmpNum(int32(le.Uint32(a)), int32(le.Uint32(b)))
	case "double":
		x, y := math.Float64frombits(le.Uint64(a)), math.Float64frombits(le.Uint64(b))
		if x == y {
			return cmpNum(boolInt(!math.Signbit(x)), boolInt(!math.Signbit(y)))
		}
		return cmpNum(x, y)
	}
	return bytes.Compare(a, b)
}

func cmpNum[T int32 | int64 | float64 | int](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// FooterHolds checks the statistics in a local Parquet file's footer against the rows,
// both read with arrow-go: every column chunk's min and max hold every non-null, non-NaN
// value of the chunk (a signed zero either side of a zero bound, as the Parquet format
// allows), and its null count, when given, is the chunk's nulls. It returns the names of
// the columns one of whose chunks holds a value but has no min and max. Only flat schemas
// (one leaf per top-level column), as hyp writes them, are read.
func FooterHolds(path string) (unstated []string, err error) {
	pf, fr, err := openParquet(path)
	if err != nil {
		return nil, err
	}
	defer pf.Close()
	md := pf.MetaData()
	if n := md.Schema.NumColumns(); n != md.Schema.Root().NumFields() {
		return nil, fmt.Errorf("%s: %d leaf columns under %d top-level ones: nested schemas are not read", path, n, md.Schema.Root().NumFields())
	}
	lacking := map[string]bool{}
	for rg := range md.NumRowGroups() {
		for j := range md.Schema.NumColumns() {
			name := md.Schema.Column(j).Name()
			chunked, err := fr.RowGroup(rg).Column(j).Read(context.Background())
			if err != nil {
				return nil, fmt.Errorf("%s: row group %d, column %s: %w", path, rg, name, err)
			}
			has, err := chunkHolds(md, rg, j, chunked)
			chunked.Release()
			if err != nil {
				return nil, fmt.Errorf("%s: row group %d, column %s: %w", path, rg, name, err)
			}
			if !has && !lacking[name] {
				lacking[name] = true
				unstated = append(unstated, name)
			}
		}
	}
	return unstated, nil
}

// chunkHolds checks column j of row group rg against its values; it reports false when
// the chunk holds a value but its statistics have no min and max.
func chunkHolds(md *metadata.FileMetaData, rg, j int, values *arrow.Chunked) (bool, error) {
	rgm := md.RowGroup(rg)
	cc, err := rgm.ColumnChunk(j)
	if err != nil {
		return false, err
	}
	st, err := cc.Statistics()
	if err != nil {
		return false, err
	}
	lo, hi, typ, ok := statBounds(st)
	nulls, seen := 0, false
	for _, chunk := range values.Chunks() {
		for r := range chunk.Len() {
			if chunk.IsNull(r) {
				nulls++
				continue
			}
			v, finite := encode(chunk, r)
			if !finite {
				continue
			}
			seen = true
			if ok && compareStat(typ, lo, v) > 0 {
				return false, fmt.Errorf("min %.40q is above the value %.40q", lo, v)
			}
			if ok && compareStat(typ, hi, v) < 0 {
				return false, fmt.Errorf("max %.40q is below the value %.40q", hi, v)
			}
		}
	}
	if st != nil && st.HasNullCount() && st.NullCount() != int64(nulls) {
		return false, fmt.Errorf("null count %d, the chunk holds %d nulls", st.NullCount(), nulls)
	}
	return ok || !seen, nil
}

// statBounds is a chunk's min and max in Iceberg's single-value serialisation (so encode's
// values compare with them), and the Iceberg type they compare as.
func statBounds(st metadata.TypedStatistics) (lo, hi []byte, typ string, ok bool) {
	if st == nil || !st.HasMinMax() {
		return nil, nil, "", false
	}
	le := binary.LittleEndian
	switch s := st.(type) {
	case *metadata.ByteArrayStatistics:
		return s.Min(), s.Max(), "string", true
	case *metadata.Int64Statistics:
		return le.AppendUint64(nil, uint64(s.Min())), le.AppendUint64(nil, uint64(s.Max())), "long", true
	case *metadata.Int32Statistics:
		return le.AppendUint32(nil, uint32(s.Min())), le.AppendUint32(nil, uint32(s.Max())), "int", true
	case *metadata.Float64Statistics:
		return le.AppendUint64(nil, math.Float64bits(s.Min())), le.AppendUint64(nil, math.Float64bits(s.Max())), "double", true
	case *metadata.BooleanStatistics:
		return []byte{byte(boolInt(s.Min()))}, []byte{byte(boolInt(s.Max()))}, "boolean", true
	}
	panic(fmt.Sprintf("statistics of %s", st.Type()))
}

// compareStat is compare, except that a zero statistic holds zeros of either sign.
func compareStat(typ string, stat, v []byte) int {
	if typ == "double" {
		le := binary.LittleEndian
		return cmpNum(math.Float64frombits(le.Uint64(stat)), math.Float64frombits(le.Uint64(v)))
	}
	return compare(typ, stat, v)
}

// openParquet opens path with arrow-go's Parquet reader; the caller closes the first result.
func openParquet(path string) (*file.Reader, *pqarrow.FileReader, error) {
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return nil, nil, err
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		pf.Close()
		return nil, nil, err
	}
	return pf, fr, nil
}
