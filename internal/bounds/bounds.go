// Package bounds owns the lower and upper bounds (Iceberg data_file fields 125 and 128) of
// the Parquet data files hyp adds to Iceberg tables, the cache's own and the iceberg sinks'
// alike: every bound holds every non-null value of its column in the file (SPEC 6b), so an
// engine that skips files by them never skips a row it should return.
//
// A file's bounds come from its footer, by field id (a dotted name such as service.name is
// one column, not a path), over every row group: a column with one row group whose chunk
// has values but no statistics gets no bounds, where iceberg-go v0.7.0's FileToDataFile
// builds them from the other row groups alone. Strings are truncated per the table's
// metrics mode (truncate(16) by default) as Iceberg truncates them, and the empty string is
// a lower bound like any other, where iceberg-go drops it.
//
// It never reads rows, and never writes a file, a manifest or a table: callers add what
// Describe returns, and decide what to do with entries Check finds wrong.
package bounds

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/schema"
	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/hyp-project/hyp/internal/truncate"
)

// Describe returns the DataFile of the Parquet file at path, a data file of a table with
// schema sc, spec and props: its counts, sizes and partition as table.FileToDataFile
// finds them, its bounds from its footer (Of).
func Describe(ctx context.Context, fio icebergio.IO, path string, sc *iceberg.Schema, spec iceberg.PartitionSpec, props iceberg.Properties) (iceberg.DataFile, error) {
	df, err := table.FileToDataFile(ctx, fio, path, sc, spec, table.UnsortedSortOrderID, props)
	if err != nil {
		return nil, err
	}
	md, err := footer(fio, path)
	if err != nil {
		return nil, err
	}
	lo, hi, err := Of(md, sc, props)
	if err != nil {
		return nil, fmt.Errorf("bounds of %s: %w", path, err)
	}
	return withBounds(df, sc, spec, lo, hi)
}

// Same reports whether the bounds of a and b are the same, column by column.
func Same(a, b iceberg.DataFile) bool {
	return maps.EqualFunc(a.LowerBoundValues(), b.LowerBoundValues(), bytes.Equal) &&
		maps.EqualFunc(a.UpperBoundValues(), b.UpperBoundValues(), bytes.Equal)
}

func footer(fio icebergio.IO, path string) (*metadata.FileMetaData, error) {
	f, err := fio.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	rdr, err := file.NewParquetReader(f)
	if err != nil {
		return nil, fmt.Errorf("read the footer of %s: %w", path, err)
	}
	return rdr.MetaData(), nil
}

// withBounds is df with bounds lo and hi in place of its own. iceberg-go's DataFile has no
// setter, so it is built again from what df says; partition values of date, time,
// timestamp, decimal and uuid results need their Avro logical type, which df does not
// say, so it is found as table.FileToDataFile finds it, from the spec.
func withBounds(df iceberg.DataFile, sc *iceberg.Schema, spec iceberg.PartitionSpec, lo, hi map[int][]byte) (iceberg.DataFile, error) {
	logical := map[int]string{}
	for _, f := range spec.Fields() {
		src, ok := sc.FindFieldByID(f.SourceID())
		if !ok {
			continue
		}
		switch f.Transform.ResultType(src.Type).(type) {
		case iceberg.DateType:
			logical[f.FieldID] = "date"
		case iceberg.TimeType:
			logical[f.FieldID] = "time-micros"
		case iceberg.TimestampType, iceberg.TimestampTzType:
			logical[f.FieldID] = "timestamp-micros"
		case iceberg.DecimalType:
			logical[f.FieldID] = "decimal"
		case iceberg.UUIDType:
			logical[f.FieldID] = "uuid"
		}
	}
	b, err := iceberg.NewDataFileBuilder(spec, df.ContentType(), df.FilePath(), df.FileFormat(), df.Partition(), logical, nil, df.Count(), df.FileSizeBytes())
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", df.FilePath(), err)
	}
	b.ColumnSizes(df.ColumnSizes()).ValueCounts(df.ValueCounts()).NullValueCounts(df.NullValueCounts()).NaNValueCounts(df.NaNValueCounts())
	if s := df.SplitOffsets(); s != nil {
		b.SplitOffsets(s)
	}
	if id := df.SortOrderID(); id != nil {
		b.SortOrderID(*id)
	}
	if len(lo) > 0 {
		b.LowerBoundValues(lo)
	}
	if len(hi) > 0 {
		b.UpperBoundValues(hi)
	}
	return b.Build(), nil
}

// Of returns the bounds, by field id, of the file whose footer is md, a data file of a
// table with schema sc and props. A column gets bounds only if every row group's chunk of
// it that holds a value has statistics; a column the schema does not have, or whose
// Parquet type does not carry its Iceberg type as Iceberg serialises it, gets none.
func Of(md *metadata.FileMetaData, sc *iceberg.Schema, props iceberg.Properties) (lower, upper map[int][]byte, err error) {
	lower, upper = map[int][]byte{}, map[int][]byte{}
	for i := range md.Schema.NumColumns() {
		col := md.Schema.Column(i)
		id := int(col.SchemaNode().FieldID())
		field, ok := sc.FindFieldByID(id)
		if !ok || col.MaxRepetitionLevel() > 0 {
			continue
		}
		name, _ := sc.FindColumnName(id)
		width, ok, err := truncation(props, name)
		if err != nil {
			return nil, nil, err
		}
		if !ok || !carries(col, field.Type) {
			continue
		}
		lo, hi, ok, err := extremes(md, i)
		if err != nil {
			return nil, nil, fmt.Errorf("column %s: %w", name, err)
		}
		if !ok {
			continue
		}
		lo, hi, ok = truncated(field.Type, lo, hi, width)
		lower[id] = lo
		if ok {
			upper[id] = hi
		}
	}
	return lower, upper, nil
}

// carries reports whether a Parquet column holds field type t in Iceberg's single-value
// serialisation once its bounds are encoded as Parquet plain values are.
func carries(col *schema.Column, t iceberg.Type) bool {
	p := col.PhysicalType()
	switch t.(type) {
	case iceberg.StringType, iceberg.BinaryType:
		return p == parquet.Types.ByteArray
	case iceberg.Int64Type:
		return p == parquet.Types.Int64
	case iceberg.Int32Type, iceberg.DateType:
		return p == parquet.Types.Int32
	case iceberg.Float64Type:
		return p == parquet.Types.Double
	case iceberg.Float32Type:
		return p == parquet.Types.Float
	case iceberg.BooleanType:
		return p == parquet.Types.Boolean
	case iceberg.TimestampType, iceberg.TimestampTzType:
		ts, ok := col.LogicalType().(schema.TimestampLogicalType)
		return p == parquet.Types.Int64 && ok && ts.TimeUnit() == schema.TimeUnitMicros
	}
	return false
}

// extremes merges the statistics of column i over every row group: the least minimum and
// the greatest maximum, as plain-encoded values. ok is false when some chunk holding a
// value has no bounds.
func extremes(md *metadata.FileMetaData, i int) (lo, hi []byte, ok bool, err error) {
	for g := range md.NumRowGroups() {
		rg := md.RowGroup(g)
		cc, err := rg.ColumnChunk(i)
		if err != nil {
			return nil, nil, false, err
		}
		st, err := cc.Statistics()
		if err != nil {
			return nil, nil, false, err
		}
		if st != nil && st.HasNullCount() && st.NullCount() == cc.NumValues() {
			continue // only nulls: nothing to bound
		}
		if st == nil || !st.HasMinMax() {
			return nil, nil, false, nil
		}
		cmin, cmax, ok := plain(st)
		if !ok {
			return nil, nil, false, nil
		}
		if lo == nil || less(st.Type(), cmin, lo) {
			lo = cmin
		}
		if hi == nil || less(st.Type(), hi, cmax) {
			hi = cmax
		}
	}
	return lo, hi, lo != nil, nil
}

// plain returns a chunk's bounds as plain-encoded values (little-endian numbers, raw
// bytes), which for the types carries accepts is Iceberg's serialisation too. A float bound
// that is NaN bounds nothing.
func plain(st metadata.TypedStatistics) (lo, hi []byte, ok bool) {
	le := binary.LittleEndian
	switch s := st.(type) {
	case *metadata.ByteArrayStatistics:
		return bytes.Clone(s.Min()), bytes.Clone(s.Max()), true
	case *metadata.Int64Statistics:
		return le.AppendUint64(nil, uint64(s.Min())), le.AppendUint64(nil, uint64(s.Max())), true
	case *metadata.Int32Statistics:
		return le.AppendUint32(nil, uint32(s.Min())), le.AppendUint32(nil, uint32(s.Max())), true
	case *metadata.Float64Statistics:
		if math.IsNaN(s.Min()) || math.IsNaN(s.Max()) {
			return nil, nil, false
		}
		// -0 and +0 compare equal: the lower bound is -0 and the upper +0, which hold both.
		lo, hi := s.Min(), s.Max()
		if lo == 0 {
			lo = math.Copysign(0, -1)
		}
		if hi == 0 {
			hi = 0
		}
		return le.AppendUint64(nil, math.Float64bits(lo)), le.AppendUint64(nil, math.Float64bits(hi)), true
	case *metadata.Float32Statistics:
		lo, hi := s.Min(), s.Max()
		if lo != lo || hi != hi {
			return nil, nil, false
		}
		if lo == 0 {
			lo = float32(math.Copysign(0, -1))
		}
		if hi == 0 {
			hi = 0
		}
		return le.AppendUint32(nil, math.Float32bits(lo)), le.AppendUint32(nil, math.Float32bits(hi)), true
	case *metadata.BooleanStatistics:
		b := func(v bool) []byte {
			if v {
				return []byte{1}
			}
			return []byte{0}
		}
		return b(s.Min()), b(s.Max()), true
	}
	return nil, nil, false
}

// less orders two plain-encoded values of physical type t.
func less(t parquet.Type, a, b []byte) bool {
	le := binary.LittleEndian
	switch t {
	case parquet.Types.Int64:
		return int64(le.Uint64(a)) < int64(le.Uint64(b))
	case parquet.Types.Int32:
		return int32(le.Uint32(a)) < int32(le.Uint32(b))
	case parquet.Types.Double:
		x, y := math.Float64frombits(le.Uint64(a)), math.Float64frombits(le.Uint64(b))
		return x < y || (x == y && math.Signbit(x) && !math.Signbit(y))
	case parquet.Types.Float:
		x, y := math.Float32frombits(le.Uint32(a)), math.Float32frombits(le.Uint32(b))
		return x < y || (x == y && math.Signbit(float64(x)) && !math.Signbit(float64(y)))
	}
	return bytes.Compare(a, b) < 0 // booleans (false < true) and byte arrays, unsigned
}

// truncated truncates a column's merged bounds to width (0: not at all), strings by
// characters and binary by bytes; ok is false when no upper bound of that width exists.
func truncated(t iceberg.Type, lo, hi []byte, width int) (tlo, thi []byte, ok bool) {
	var u truncate.Unit
	switch t.(type) {
	case iceberg.StringType:
		u = truncate.Runes
	case iceberg.BinaryType:
		u = truncate.Bytes
	default:
		return lo, hi, true
	}
	if width == 0 {
		return lo, hi, true
	}
	l, _ := truncate.Lower(string(lo), width, u)
	h, _, ok := truncate.Upper(string(hi), width, u)
	return []byte(l), []byte(h), ok
}

var truncateMode = regexp.MustCompile(`^truncate\((\d+)\)$`)

// truncation is the metrics mode of column name in props, as Iceberg reads
// write.metadata.metrics.*: ok false for none and counts (no bounds), width 0 for full.
func truncation(props iceberg.Properties, name string) (width int, ok bool, err error) {
	mode := props.Get(table.DefaultWriteMetricsModeKey, table.DefaultWriteMetricsModeDefault)
	if m, set := props[table.MetricsModeColumnConfPrefix+"."+name]; set {
		mode = m
	}
	switch m := strings.ToLower(strings.TrimSpace(mode)); m {
	case "none", "counts":
		return 0, false, nil
	case "full":
		return 0, true, nil
	default:
		if g := truncateMode.FindStringSubmatch(m); g != nil {
			if n, err := strconv.Atoi(g[1]); err == nil && n > 0 {
				return n, true, nil
			}
		}
	}
	return 0, false, errors.New("metrics mode " + strconv.Quote(mode) + " is not none, counts, full or truncate(n)")
}
