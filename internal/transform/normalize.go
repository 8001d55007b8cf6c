package transform

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/hyp-project/hyp/internal/rowjson"
)

// A transform's result is exported by sinks that store, and so accept, only the cache's five
// column types (string, long, double, boolean, timestamptz). SQL can compute any of DuckDB's
// types, so each result column is turned into the cache type that holds its values best:
//
//   - utf8 stays; large_utf8 and string_view become utf8;
//   - int8 … int64 and uint8 … uint64 become int64 (a uint64 above MaxInt64 is an error:
//     rounding it would export a value nobody wrote);
//   - float16, float32, float64 and decimals become float64;
//   - bool stays;
//   - timestamps of any unit and zone become timestamp[us, UTC] (a zone-less timestamp is
//     taken as UTC), and date32 and date64 midnight UTC;
//   - everything else becomes text: binary as base64, times as HH:MM:SS[.ffffff], DuckDB's
//     BIGNUM as its decimal digits, UUIDs in their usual form, and nested values, intervals
//     and unions as JSON (intervals as {"months","days","nanoseconds"}).

var (
	stringType   = arrow.BinaryTypes.String
	int64Type    = arrow.PrimitiveTypes.Int64
	float64Type  = arrow.PrimitiveTypes.Float64
	boolType     = arrow.FixedWidthTypes.Boolean
	timestampUTC = &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
)

// outType is the cache type a column of type t is exported as.
func outType(t arrow.DataType) arrow.DataType {
	switch t.ID() {
	case arrow.STRING, arrow.LARGE_STRING, arrow.STRING_VIEW:
		return stringType
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64, arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64:
		return int64Type
	case arrow.FLOAT16, arrow.FLOAT32, arrow.FLOAT64, arrow.DECIMAL32, arrow.DECIMAL64, arrow.DECIMAL128, arrow.DECIMAL256:
		return float64Type
	case arrow.BOOL:
		return boolType
	case arrow.TIMESTAMP, arrow.DATE32, arrow.DATE64:
		return timestampUTC
	case arrow.DICTIONARY:
		return outType(t.(*arrow.DictionaryType).ValueType)
	case arrow.EXTENSION:
		// UUIDs, BIGNUMs and the like: their text, whatever their storage.
		return stringType
	}
	return stringType
}

// normalize turns the columns of recs (all of schema sc, DuckDB's result) into the cache
// types. The caller keeps its references to recs; the returned records are new references.
func normalize(sc *arrow.Schema, recs []arrow.RecordBatch) (*Result, error) {
	fields := make([]arrow.Field, sc.NumFields())
	for i, f := range sc.Fields() {
		// No metadata: DuckDB's extension tags describe the types converted away here. The
		// internal columns are never null (checkOutput saw to it), as in the cache.
		fields[i] = arrow.Field{Name: f.Name, Type: outType(f.Type), Nullable: !isKept(f.Name)}
		if f.Type.ID() == arrow.EXTENSION || f.HasMetadata() && f.Metadata.FindKey(extensionNameKey) >= 0 {
			fields[i].Type = stringType
		}
	}
	out := &Result{Schema: arrow.NewSchema(fields, nil)}
	for _, rec := range recs {
		if rec.NumRows() == 0 {
			continue
		}
		cols := make([]arrow.Array, rec.NumCols())
		for j := range cols {
			col, err := convertColumn(sc.Field(j), fields[j].Type, rec.Column(j))
			if err != nil {
				for _, c := range cols[:j] {
					c.Release()
				}
				out.Release()
				return nil, err
			}
			cols[j] = col
		}
		nrec := array.NewRecordBatch(out.Schema, cols, rec.NumRows())
		for _, c := range cols {
			c.Release()
		}
		out.Recs = append(out.Recs, nrec)
		out.Rows += rec.NumRows()
	}
	return out, nil
}

// Arrow's field metadata keys for an extension type the reader did not register.
const (
	extensionNameKey = "ARROW:extension:name"
	extensionMetaKey = "ARROW:extension:metadata"
)

// extensionOf names f's extension type, registered (arr is then an ExtensionArray, whose
// storage is returned) or only tagged in f's metadata, and its metadata.
func extensionOf(f arrow.Field, arr arrow.Array) (name, meta string, storage arrow.Array) {
	if ea, ok := arr.(array.ExtensionArray); ok {
		et := ea.ExtensionType()
		return et.ExtensionName(), et.Serialize(), ea.Storage()
	}
	if f.HasMetadata() {
		if i := f.Metadata.FindKey(extensionNameKey); i >= 0 {
			name = f.Metadata.Values()[i]
		}
		if i := f.Metadata.FindKey(extensionMetaKey); i >= 0 {
			meta = f.Metadata.Values()[i]
		}
	}
	return name, meta, arr
}

// convertColumn returns arr as type to (outType of its type): arr itself, retained, when it
// already is.
func convertColumn(f arrow.Field, to arrow.DataType, arr arrow.Array) (arrow.Array, error) {
	ext, meta, storage := extensionOf(f, arr)
	if ext != "" {
		render := textRenderer(ext, meta)
		return buildStrings(storage, func(dst []byte, i int) []byte { return render(dst, storage, i) }), nil
	}
	if arrow.TypeEqual(arr.DataType(), to) {
		arr.Retain()
		return arr, nil
	}
	mem := memory.DefaultAllocator
	n := arr.Len()
	switch a := arr.(type) {
	case *array.LargeString:
		return buildStrings(a, func(dst []byte, i int) []byte { return append(dst, a.Value(i)...) }), nil
	case *array.StringView:
		return buildStrings(a, func(dst []byte, i int) []byte { return append(dst, a.Value(i)...) }), nil
	case *array.Int8:
		return buildInt64(a, func(i int) (int64, bool) { return int64(a.Value(i)), true })
	case *array.Int16:
		return buildInt64(a, func(i int) (int64, bool) { return int64(a.Value(i)), true })
	case *array.Int32:
		return buildInt64(a, func(i int) (int64, bool) { return int64(a.Value(i)), true })
	case *array.Uint8:
		return buildInt64(a, func(i int) (int64, bool) { return int64(a.Value(i)), true })
	case *array.Uint16:
		return buildInt64(a, func(i int) (int64, bool) { return int64(a.Value(i)), true })
	case *array.Uint32:
		return buildInt64(a, func(i int) (int64, bool) { return int64(a.Value(i)), true })
	case *array.Uint64:
		col, err := buildInt64(a, func(i int) (int64, bool) { v := a.Value(i); return int64(v), v <= math.MaxInt64 })
		if err != nil {
			return nil, refuse("column %q: a value above %d does not fit a long (int64)", f.Name, int64(math.MaxInt64))
		}
		return col, nil
	case *array.Float16:
		return buildFloat64(a, func(i int) float64 { return float64(a.Value(i).Float32()) }), nil
	case *array.Float32:
		return buildFloat64(a, func(i int) float64 { return float64(a.Value(i)) }), nil
	case *array.Decimal32:
		s := a.DataType().(*arrow.Decimal32Type).Scale
		return buildFloat64(a, func(i int) float64 { return a.Value(i).ToFloat64(s) }), nil
	case *array.Decimal64:
		s := a.DataType().(*arrow.Decimal64Type).Scale
		return buildFloat64(a, func(i int) float64 { return a.Value(i).ToFloat64(s) }), nil
	case *array.Decimal128:
		s := a.DataType().(*arrow.Decimal128Type).Scale
		return buildFloat64(a, func(i int) float64 { return a.Value(i).ToFloat64(s) }), nil
	case *array.Decimal256:
		s := a.DataType().(*arrow.Decimal256Type).Scale
		return buildFloat64(a, func(i int) float64 { return a.Value(i).ToFloat64(s) }), nil
	case *array.Timestamp:
		unit := a.DataType().(*arrow.TimestampType).Unit
		if unit == arrow.Microsecond {
			// Only the zone label differs: the same buffers under the UTC type. Arrow
			// timestamps with a zone are instants already; zone-less ones are taken as UTC.
			d := a.Data()
			nd := array.NewData(timestampUTC, d.Len(), d.Buffers(), nil, d.NullN(), d.Offset())
			defer nd.Release()
			return array.MakeFromData(nd), nil
		}
		col, err := buildTimestamp(a, func(i int) (int64, bool) { return toMicros(int64(a.Value(i)), unit) })
		if err != nil {
			return nil, refuse("column %q: a timestamp out of the range of microseconds since 1970", f.Name)
		}
		return col, nil
	case *array.Date32:
		return buildTimestamp(a, func(i int) (int64, bool) { return int64(a.Value(i)) * 86400e6, true })
	case *array.Date64:
		return buildTimestamp(a, func(i int) (int64, bool) { return toMicros(int64(a.Value(i)), arrow.Millisecond) })
	case *array.Null:
		return array.MakeArrayOfNull(mem, stringType, n), nil
	case *array.Dictionary:
		return convertDictionary(f, to, a)
	}
	return buildStrings(arr, func(dst []byte, i int) []byte { return appendText(dst, arr, i) }), nil
}

// toMicros converts v in unit to microseconds, flooring nanoseconds, and says whether it fit.
func toMicros(v int64, unit arrow.TimeUnit) (int64, bool) {
	const us, ms = int64(1e6), int64(1e3)
	switch unit {
	case arrow.Second:
		return v * us, v <= math.MaxInt64/us && v >= math.MinInt64/us
	case arrow.Millisecond:
		return v * ms, v <= math.MaxInt64/ms && v >= math.MinInt64/ms
	case arrow.Nanosecond:
		us := v / 1e3
		if v%1e3 < 0 {
			us--
		}
		return us, true
	}
	return v, true
}

// convertDictionary converts the dictionary's values (few) and then looks each row's up.
func convertDictionary(f arrow.Field, to arrow.DataType, a *array.Dictionary) (arrow.Array, error) {
	vf := arrow.Field{Name: f.Name, Type: a.Dictionary().DataType()}
	values, err := convertColumn(vf, to, a.Dictionary())
	if err != nil {
		return nil, err
	}
	defer values.Release()
	b := array.NewBuilder(memory.DefaultAllocator, to)
	defer b.Release()
	b.Reserve(a.Len())
	for i := 0; i < a.Len(); i++ {
		if a.IsNull(i) {
			b.AppendNull()
			continue
		}
		j := a.GetValueIndex(i)
		if values.IsNull(j) {
			b.AppendNull()
			continue
		}
		switch v := values.(type) {
		case *array.String:
			b.(*array.StringBuilder).Append(v.Value(j))
		case *array.Int64:
			b.(*array.Int64Builder).Append(v.Value(j))
		case *array.Float64:
			b.(*array.Float64Builder).Append(v.Value(j))
		case *array.Boolean:
			b.(*array.BooleanBuilder).Append(v.Value(j))
		case *array.Timestamp:
			b.(*array.TimestampBuilder).Append(v.Value(j))
		default:
			return nil, fmt.Errorf("transform: column %q: dictionary values of type %s", f.Name, values.DataType())
		}
	}
	return b.NewArray(), nil
}

func buildStrings(arr arrow.Array, value func(dst []byte, i int) []byte) arrow.Array {
	b := array.NewStringBuilder(memory.DefaultAllocator)
	defer b.Release()
	b.Reserve(arr.Len())
	var buf []byte
	for i := 0; i < arr.Len(); i++ {
		if arr.IsNull(i) {
			b.AppendNull()
			continue
		}
		buf = value(buf[:0], i)
		b.BinaryBuilder.Append(buf)
	}
	return b.NewArray()
}

// builder is what build needs of an arrow-go builder of T.
type builder[T any] interface {
	AppendNull()
	Append(T)
	Reserve(int)
	NewArray() arrow.Array
	Release()
}

// build makes, with b (which it releases), the array of value(i) for every i of arr, null
// where arr is null; a value out of range (ok false) fails it.
func build[T any](b builder[T], arr arrow.Array, value func(i int) (T, bool)) (arrow.Array, error) {
	defer b.Release()
	b.Reserve(arr.Len())
	for i := 0; i < arr.Len(); i++ {
		if arr.IsNull(i) {
			b.AppendNull()
			continue
		}
		v, ok := value(i)
		if !ok {
			return nil, fmt.Errorf("out of range")
		}
		b.Append(v)
	}
	return b.NewArray(), nil
}

func buildInt64(arr arrow.Array, value func(i int) (int64, bool)) (arrow.Array, error) {
	return build[int64](array.NewInt64Builder(memory.DefaultAllocator), arr, value)
}

func buildFloat64(arr arrow.Array, value func(i int) float64) arrow.Array {
	col, _ := build[float64](array.NewFloat64Builder(memory.DefaultAllocator), arr, func(i int) (float64, bool) { return value(i), true })
	return col // never out of range
}

func buildTimestamp(arr arrow.Array, value func(i int) (int64, bool)) (arrow.Array, error) {
	return build[arrow.Timestamp](array.NewTimestampBuilder(memory.DefaultAllocator, timestampUTC), arr, func(i int) (arrow.Timestamp, bool) {
		v, ok := value(i)
		return arrow.Timestamp(v), ok
	})
}

// textRenderer renders the values of an extension type (from its storage): UUIDs in their
// usual form, DuckDB's BIGNUM as decimal digits, anything else by its storage.
func textRenderer(ext, meta string) func(dst []byte, storage arrow.Array, i int) []byte {
	switch ext {
	case "arrow.uuid":
		return func(dst []byte, storage arrow.Array, i int) []byte {
			if b, ok := binaryValue(storage, i); ok && len(b) == 16 {
				return appendUUID(dst, b)
			}
			return appendText(dst, storage, i)
		}
	case "arrow.opaque":
		var m struct {
			TypeName string `json:"type_name"`
		}
		_ = json.Unmarshal([]byte(meta), &m)
		if m.TypeName == "bignum" || m.TypeName == "varint" {
			return func(dst []byte, storage arrow.Array, i int) []byte {
				if b, ok := binaryValue(storage, i); ok {
					if s, ok := bignumText(b); ok {
						return append(dst, s...)
					}
				}
				return appendText(dst, storage, i)
			}
		}
	}
	return appendText
}

func binaryValue(arr arrow.Array, i int) ([]byte, bool) {
	switch a := arr.(type) {
	case *array.Binary:
		return a.Value(i), true
	case *array.LargeBinary:
		return a.Value(i), true
	case *array.BinaryView:
		return a.Value(i), true
	case *array.FixedSizeBinary:
		return a.Value(i), true
	}
	return nil, false
}

func appendUUID(dst, b []byte) []byte {
	const hexDigits = "0123456789abcdef"
	for j, c := range b {
		if j == 4 || j == 6 || j == 8 || j == 10 {
			dst = append(dst, '-')
		}
		dst = append(dst, hexDigits[c>>4], hexDigits[c&0xf])
	}
	return dst
}

// bignumText decodes DuckDB's BIGNUM (formerly VARINT): a 3-byte big-endian header whose top
// bit is set for a number >= 0 and whose other 23 bits count the bytes of the magnitude,
// then the magnitude, big-endian; a negative number has every bit, header included,
// inverted. False when b is not that.
func bignumText(b []byte) (string, bool) {
	if len(b) < 4 {
		return "", false
	}
	neg := b[0]&0x80 == 0
	header := uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
	mag := append([]byte(nil), b[3:]...)
	if neg {
		header = ^header
		for i := range mag {
			mag[i] = ^mag[i]
		}
	}
	if int(header&0x7fffff) != len(mag) {
		return "", false
	}
	n := new(big.Int).SetBytes(mag)
	if neg {
		n.Neg(n)
	}
	return n.String(), true
}

// appendText appends value i (not null) of arr as the text a string column holds for it:
// the value itself for binary (base64), times and durations, JSON for everything else.
func appendText(dst []byte, arr arrow.Array, i int) []byte {
	if b, ok := binaryValue(arr, i); ok {
		return base64.StdEncoding.AppendEncode(dst, b)
	}
	switch a := arr.(type) {
	case *array.Time32:
		return appendTime(dst, int64(a.Value(i)), a.DataType().(*arrow.Time32Type).Unit)
	case *array.Time64:
		return appendTime(dst, int64(a.Value(i)), a.DataType().(*arrow.Time64Type).Unit)
	case *array.Duration:
		return append(dst, a.ValueStr(i)...)
	case *array.Dictionary:
		return appendText(dst, a.Dictionary(), a.GetValueIndex(i))
	case *array.RunEndEncoded:
		return appendText(dst, a.Values(), a.GetPhysicalIndex(i))
	}
	return appendJSON(dst, arr, i)
}

// appendTime writes a time of day as HH:MM:SS, with the fraction of a second when there is
// one, trailing zeros trimmed.
func appendTime(dst []byte, v int64, unit arrow.TimeUnit) []byte {
	perSec := rowjson.PerSecond(unit)
	sec, frac := v/perSec, v%perSec
	dst = fmt.Appendf(dst, "%02d:%02d:%02d", sec/3600, sec/60%60, sec%60)
	if frac != 0 {
		digits := len(strconv.FormatInt(perSec, 10)) - 1
		f := fmt.Sprintf("%0*d", digits, frac)
		for f[len(f)-1] == '0' {
			f = f[:len(f)-1]
		}
		dst = append(append(dst, '.'), f...)
	}
	return dst
}

// appendJSON appends value i of arr as JSON. Strings are JSON strings; numbers JSON numbers
// (decimals exactly, NaN and infinities null, as rowjson writes them); timestamps RFC 3339
// strings in UTC; dates "YYYY-MM-DD"; binary base64 strings; lists arrays; structs objects;
// maps objects whose keys are the keys' text; unions the chosen member's value.
func appendJSON(dst []byte, arr arrow.Array, i int) []byte {
	if arr.IsNull(i) {
		return append(dst, "null"...)
	}
	if b, ok := binaryValue(arr, i); ok {
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, b)
		return append(dst, '"')
	}
	switch a := arr.(type) {
	case *array.Null:
		return append(dst, "null"...)
	case *array.Boolean:
		return strconv.AppendBool(dst, a.Value(i))
	case *array.Int8:
		return strconv.AppendInt(dst, int64(a.Value(i)), 10)
	case *array.Int16:
		return strconv.AppendInt(dst, int64(a.Value(i)), 10)
	case *array.Int32:
		return strconv.AppendInt(dst, int64(a.Value(i)), 10)
	case *array.Int64:
		return strconv.AppendInt(dst, a.Value(i), 10)
	case *array.Uint8:
		return strconv.AppendUint(dst, uint64(a.Value(i)), 10)
	case *array.Uint16:
		return strconv.AppendUint(dst, uint64(a.Value(i)), 10)
	case *array.Uint32:
		return strconv.AppendUint(dst, uint64(a.Value(i)), 10)
	case *array.Uint64:
		return strconv.AppendUint(dst, a.Value(i), 10)
	case *array.Float16:
		return rowjson.AppendFloat(dst, float64(a.Value(i).Float32()))
	case *array.Float32:
		return rowjson.AppendFloat(dst, float64(a.Value(i)))
	case *array.Float64:
		return rowjson.AppendFloat(dst, a.Value(i))
	case *array.Decimal32:
		return append(dst, a.Value(i).ToString(a.DataType().(*arrow.Decimal32Type).Scale)...)
	case *array.Decimal64:
		return append(dst, a.Value(i).ToString(a.DataType().(*arrow.Decimal64Type).Scale)...)
	case *array.Decimal128:
		return append(dst, a.Value(i).ToString(a.DataType().(*arrow.Decimal128Type).Scale)...)
	case *array.Decimal256:
		return append(dst, a.Value(i).ToString(a.DataType().(*arrow.Decimal256Type).Scale)...)
	case *array.String:
		return rowjson.AppendString(dst, a.Value(i))
	case *array.LargeString:
		return rowjson.AppendString(dst, a.Value(i))
	case *array.StringView:
		return rowjson.AppendString(dst, a.Value(i))
	case *array.Timestamp:
		return rowjson.AppendTimestamp(dst, int64(a.Value(i)), rowjson.PerSecond(a.DataType().(*arrow.TimestampType).Unit))
	case *array.Date32:
		return append(append(append(dst, '"'), a.Value(i).ToTime().Format(time.DateOnly)...), '"')
	case *array.Date64:
		return append(append(append(dst, '"'), a.Value(i).ToTime().Format(time.DateOnly)...), '"')
	case *array.Time32, *array.Time64, *array.Duration:
		dst = append(dst, '"')
		dst = appendText(dst, arr, i)
		return append(dst, '"')
	case *array.MonthInterval:
		return fmt.Appendf(dst, `{"months":%d,"days":0,"nanoseconds":0}`, a.Value(i))
	case *array.DayTimeInterval:
		v := a.Value(i)
		return fmt.Appendf(dst, `{"months":0,"days":%d,"nanoseconds":%d}`, v.Days, int64(v.Milliseconds)*1e6)
	case *array.MonthDayNanoInterval:
		v := a.Value(i)
		return fmt.Appendf(dst, `{"months":%d,"days":%d,"nanoseconds":%d}`, v.Months, v.Days, v.Nanoseconds)
	case *array.Map:
		return appendMap(dst, a, i)
	case array.ListLike:
		start, end := a.ValueOffsets(i)
		values := a.ListValues()
		dst = append(dst, '[')
		for j := start; j < end; j++ {
			if j > start {
				dst = append(dst, ',')
			}
			dst = appendJSON(dst, values, int(j))
		}
		return append(dst, ']')
	case *array.Struct:
		st := a.DataType().(*arrow.StructType)
		dst = append(dst, '{')
		for j := 0; j < a.NumField(); j++ {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = rowjson.AppendString(dst, st.Field(j).Name)
			dst = append(dst, ':')
			dst = appendJSON(dst, a.Field(j), i)
		}
		return append(dst, '}')
	case *array.SparseUnion:
		return appendJSON(dst, a.Field(a.ChildID(i)), i)
	case *array.DenseUnion:
		return appendJSON(dst, a.Field(a.ChildID(i)), int(a.ValueOffset(i)))
	case *array.Dictionary:
		return appendJSON(dst, a.Dictionary(), a.GetValueIndex(i))
	case *array.RunEndEncoded:
		return appendJSON(dst, a.Values(), a.GetPhysicalIndex(i))
	case array.ExtensionArray:
		return appendJSON(dst, a.Storage(), i)
	}
	return rowjson.AppendString(dst, arr.ValueStr(i))
}

// appendMap writes a map as a JSON object. Keys must be strings there: a string key is
// itself, any other the text of its JSON (1 becomes "1").
func appendMap(dst []byte, a *array.Map, i int) []byte {
	start, end := a.ValueOffsets(i)
	keys, items := a.Keys(), a.Items()
	dst = append(dst, '{')
	var kbuf []byte
	for j := int(start); j < int(end); j++ {
		if j > int(start) {
			dst = append(dst, ',')
		}
		switch k := keys.(type) {
		case *array.String:
			dst = rowjson.AppendString(dst, k.Value(j))
		default:
			kbuf = appendJSON(kbuf[:0], keys, j)
			if len(kbuf) >= 2 && kbuf[0] == '"' {
				dst = append(dst, kbuf...)
			} else {
				dst = rowjson.AppendString(dst, string(kbuf))
			}
		}
		dst = append(dst, ':')
		dst = appendJSON(dst, items, j)
	}
	return append(dst, '}')
}
