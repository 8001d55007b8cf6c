package cache

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go"

	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/jsonrow"
)

// ColType is the type of a user column. JSON gives four kinds of scalar; nested objects and
// arrays are kept as their JSON text in string columns.
type ColType uint8

const (
	TypeString ColType = iota + 1
	TypeLong
	TypeDouble
	TypeBoolean
	TypeTimestamp // internal _hyp_ingested_at only
)

func (t ColType) String() string {
	switch t {
	case TypeString:
		return "string"
	case TypeLong:
		return "long"
	case TypeDouble:
		return "double"
	case TypeBoolean:
		return "boolean"
	case TypeTimestamp:
		return "timestamptz"
	}
	return "unknown"
}

func (t ColType) iceberg() iceberg.Type {
	switch t {
	case TypeLong:
		return iceberg.PrimitiveTypes.Int64
	case TypeDouble:
		return iceberg.PrimitiveTypes.Float64
	case TypeBoolean:
		return iceberg.PrimitiveTypes.Bool
	case TypeTimestamp:
		return iceberg.PrimitiveTypes.TimestampTz
	}
	return iceberg.PrimitiveTypes.String
}

func (t ColType) arrow() arrow.DataType {
	switch t {
	case TypeLong:
		return arrow.PrimitiveTypes.Int64
	case TypeDouble:
		return arrow.PrimitiveTypes.Float64
	case TypeBoolean:
		return arrow.FixedWidthTypes.Boolean
	case TypeTimestamp:
		return &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
	}
	return arrow.BinaryTypes.String
}

func typeOfIceberg(t iceberg.Type) (ColType, bool) {
	switch t.(type) {
	case iceberg.StringType:
		return TypeString, true
	case iceberg.Int64Type:
		return TypeLong, true
	case iceberg.Float64Type:
		return TypeDouble, true
	case iceberg.BooleanType:
		return TypeBoolean, true
	case iceberg.TimestampTzType:
		return TypeTimestamp, true
	}
	return 0, false
}

// Column is a named, typed column.
type Column struct {
	Name string
	Type ColType
}

// valueType is the column type a JSON value asks for when its column is new. A number no
// numeric type holds is kept as its JSON text.
func valueType(k jsonrow.Kind, n number) ColType {
	switch k {
	case jsonrow.Number:
		switch {
		case n.isInt:
			return TypeLong
		case n.isF:
			return TypeDouble
		}
	case jsonrow.Bool:
		return TypeBoolean
	}
	return TypeString
}

// conflictColumn names the sibling column that takes values whose type conflicts with the
// column's established type (see resolve).
func conflictColumn(name string, t ColType) string { return name + "__" + t.String() }

// resolve decides where a value of type vt goes, given the dataset's established column
// types. The rule, documented in the README, never drops a value:
//   - a new column takes the value's type;
//   - a string column takes any value, non-strings as their JSON text;
//   - a double column takes integers as doubles;
//   - any other mismatch goes to the sibling column `<name>__<type>` of the value's type.
func resolve(types map[string]ColType, name string, vt ColType) (string, ColType) {
	for range 3 {
		t, ok := types[name]
		switch {
		case !ok:
			return name, vt
		case t == vt, t == TypeString, t == TypeDouble && vt == TypeLong:
			return name, t
		}
		name = conflictColumn(name, vt)
	}
	return name, TypeString
}

// internalFields are the first two fields of every partition table.
func internalFields() []iceberg.NestedField {
	return []iceberg.NestedField{
		{ID: seqFieldID, Name: columns.SeqColumn, Type: iceberg.PrimitiveTypes.Int64, Required: true},
		{ID: ingestedAtID, Name: columns.IngestedAtColumn, Type: iceberg.PrimitiveTypes.TimestampTz, Required: true},
	}
}

// newTableSchema builds a fresh table schema with the internal columns then cols, stored
// under their escaped names (names.go).
func newTableSchema(cols []Column) *iceberg.Schema {
	fields := internalFields()
	for i, c := range cols {
		fields = append(fields, iceberg.NestedField{ID: ingestedAtID + 1 + i, Name: physicalName(c.Name), Type: c.Type.iceberg()})
	}
	return iceberg.NewSchema(0, fields...)
}
