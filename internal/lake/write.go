package lake

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"

	"github.com/hyp-project/hyp/internal/cache"
)

// Columns every table has besides the user columns (SPEC 6b).
const (
	SourceColumn  = "_hyp_source"
	GatewayColumn = "_hyp_gateway"
)

// Batch is one unit's rows as the cache's scan gives them: the user columns plus
// cache.SeqColumn and cache.IngestedAtColumn. Commit does not release the records.
type Batch struct {
	Unit    Unit
	Source  string // the partition's source, every row's _hyp_source
	Gateway string // every row's _hyp_gateway; empty means the Lake's own gateway
	Records []arrow.RecordBatch
}

var errNoSiblingLeft = errors.New("column type conflicts with the table and with its sibling columns")

// prepare loads (or creates) the dataset's table and adds the columns the batches bring,
// retrying when another writer changed the schema first.
func (l *Lake) prepare(ctx context.Context, dataset string, batches []Batch) (*table.Table, error) {
	for attempt := 1; ; attempt++ {
		tbl, err := l.load(ctx, dataset)
		if err != nil {
			return nil, err
		}
		if tbl == nil {
			if tbl, err = l.create(ctx, dataset); err != nil {
				return nil, err
			}
		}
		adds, err := newColumns(tbl.Schema(), batches)
		if err != nil || len(adds) == 0 {
			return tbl, err
		}
		tx := tbl.NewTransaction()
		us := tx.UpdateSchema(true, false)
		for _, f := range adds {
			us.AddColumn([]string{f.Name}, f.Type, "", false, nil)
		}
		if err := us.Commit(); err != nil {
			return nil, fmt.Errorf("grow schema of %s.%s: %w", l.ns[0], dataset, err)
		}
		next, err := tx.Commit(ctx)
		if err == nil {
			return next, nil
		}
		if !conflict(err) || attempt >= commitAttempts {
			return nil, fmt.Errorf("grow schema of %s.%s: %w", l.ns[0], dataset, err)
		}
		if err := backoff(ctx, attempt); err != nil {
			return nil, err
		}
	}
}

// newColumns are the columns the batches bring that the table does not have yet.
func newColumns(sc *iceberg.Schema, batches []Batch) ([]iceberg.NestedField, error) {
	var adds []iceberg.NestedField
	pending := map[string]iceberg.Type{}
	taken := parquetNames(sc)
	for _, b := range batches {
		for _, r := range b.Records {
			for _, f := range r.Schema().Fields() {
				if f.Name == cache.SeqColumn || f.Name == cache.IngestedAtColumn {
					continue
				}
				t, err := icebergType(f.Type)
				if err != nil {
					return nil, fmt.Errorf("column %q: %w", f.Name, err)
				}
				name, _, known, err := resolve(sc, taken, pending, f.Name, t)
				if err != nil {
					return nil, fmt.Errorf("column %q: %w", f.Name, err)
				}
				if !known {
					pending[name] = t
					taken[parquetName(name)] = name
					adds = append(adds, iceberg.NestedField{Name: name, Type: t})
				}
			}
		}
	}
	return adds, nil
}

// create makes the dataset's table with hyp's own columns; user columns follow as they come.
func (l *Lake) create(ctx context.Context, dataset string) (*table.Table, error) {
	sc := iceberg.NewSchema(0,
		iceberg.NestedField{ID: 1, Name: cache.SeqColumn, Type: iceberg.PrimitiveTypes.Int64},
		iceberg.NestedField{ID: 2, Name: cache.IngestedAtColumn, Type: iceberg.PrimitiveTypes.TimestampTz},
		iceberg.NestedField{ID: 3, Name: SourceColumn, Type: iceberg.PrimitiveTypes.String},
		iceberg.NestedField{ID: 4, Name: GatewayColumn, Type: iceberg.PrimitiveTypes.String},
	)
	opts := []catalog.CreateTableOpt{catalog.WithProperties(tableProps)}
	var tr iceberg.Transform
	switch l.part {
	case "day":
		tr = iceberg.DayTransform{}
	case "hour":
		tr = iceberg.HourTransform{}
	}
	if tr != nil {
		spec := iceberg.NewPartitionSpec(iceberg.PartitionField{SourceIDs: []int{2}, FieldID: 1000, Name: cache.IngestedAtColumn + "_" + l.part, Transform: tr})
		opts = append(opts, catalog.WithPartitionSpec(&spec))
	}
	tbl, err := l.cat.CreateTable(ctx, l.ident(dataset), sc, opts...)
	if errors.Is(err, catalog.ErrTableAlreadyExists) {
		// Another machine created it first.
		tbl, err = l.cat.LoadTable(ctx, l.ident(dataset))
	}
	if err != nil {
		return nil, fmt.Errorf("create table %s.%s: %w", l.ns[0], dataset, err)
	}
	return tbl, nil
}

// resolve finds the table column a cache column of type t goes to, by the cache's own rule
// for values of conflicting types (see the README): a column keeps its first type, a double
// column takes longs, and any other conflict goes to the sibling `<name>__<type>`. known is
// false for a column the table does not have yet (it is to be added as name of type t).
//
// A new name that iceberg-go could not write to Parquet beside the existing columns (it
// rewrites names that are not Avro names, so `a.b` and a literal `a_x2Eb` would both be
// `a_x2Eb`, and the empty name has no Parquet name at all) is a conflict too: otherwise one
// row with such a field would fail every commit of its dataset. taken maps the Parquet
// names in use to their columns.
func resolve(sc *iceberg.Schema, taken map[string]string, pending map[string]iceberg.Type, name string, t iceberg.Type) (target string, cast, known bool, err error) {
	for range 3 {
		var have iceberg.Type
		if f, ok := sc.FindFieldByName(name); ok {
			have = f.Type
		} else if p, ok := pending[name]; ok {
			have = p
		} else if pq := parquetName(name); pq != "" && taken[pq] == "" {
			return name, false, false, nil
		}
		switch {
		case have == nil:
		case have.Equals(t):
			return name, false, true, nil
		case have.Equals(iceberg.PrimitiveTypes.Float64) && t.Equals(iceberg.PrimitiveTypes.Int64):
			return name, true, true, nil
		}
		name = name + "__" + typeName(t)
	}
	return "", false, false, errNoSiblingLeft
}

// parquetName is the name iceberg-go gives a column in Parquet files; "" when it has none.
func parquetName(name string) string {
	sc, err := iceberg.SanitizeColumnNames(iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: name, Type: iceberg.PrimitiveTypes.String}))
	if err != nil {
		return ""
	}
	return sc.Field(0).Name
}

// parquetNames maps the Parquet names of sc's columns to the columns.
func parquetNames(sc *iceberg.Schema) map[string]string {
	out := make(map[string]string, sc.NumFields())
	for _, f := range sc.Fields() {
		out[parquetName(f.Name)] = f.Name
	}
	return out
}

// typeName is the cache's name of a column type, used in sibling column names.
func typeName(t iceberg.Type) string {
	switch t.(type) {
	case iceberg.Int64Type:
		return "long"
	case iceberg.Float64Type:
		return "double"
	case iceberg.BooleanType:
		return "boolean"
	case iceberg.TimestampTzType:
		return "timestamptz"
	}
	return "string"
}

func icebergType(t arrow.DataType) (iceberg.Type, error) {
	switch t.ID() {
	case arrow.STRING, arrow.LARGE_STRING:
		return iceberg.PrimitiveTypes.String, nil
	case arrow.INT64:
		return iceberg.PrimitiveTypes.Int64, nil
	case arrow.FLOAT64:
		return iceberg.PrimitiveTypes.Float64, nil
	case arrow.BOOL:
		return iceberg.PrimitiveTypes.Bool, nil
	case arrow.TIMESTAMP:
		return iceberg.PrimitiveTypes.TimestampTz, nil
	}
	return nil, fmt.Errorf("arrow type %s has no table column type", t)
}

// fileUUID names the data files of one run of a unit's records: the same commit decided on
// the same snapshot always writes the same names.
func fileUUID(c Commit, u Unit, run int) uuid.UUID {
	return uuid.NewSHA1(uuid.NameSpaceURL, fmt.Appendf(nil, "hyp:%s:%d:%s:%s:%d:%d:%d", c.ID, c.Base, u.Dataset, u.Partition, u.First, u.Last, run))
}

// write writes every batch as data files of tbl without committing them.
func (l *Lake) write(ctx context.Context, tbl *table.Table, c Commit) ([]iceberg.DataFile, error) {
	var files []iceberg.DataFile
	for _, b := range c.Batches {
		recs, err := l.project(tbl.Schema(), b)
		if err != nil {
			return nil, fmt.Errorf("unit %s %d-%d: %w", b.Unit.Partition, b.Unit.First, b.Unit.Last, err)
		}
		// A writer takes one schema; a unit read across cache files of different widths
		// comes as several runs.
		for run := 0; len(recs) > 0; run++ {
			n := 1
			for n < len(recs) && recs[n].Schema().Equal(recs[0].Schema()) {
				n++
			}
			df, err := writeRun(ctx, tbl, recs[:n], fileUUID(c, b.Unit, run))
			recs = recs[n:]
			if err != nil {
				for _, r := range recs {
					r.Release()
				}
				return nil, fmt.Errorf("write unit %s %d-%d to %s: %w", b.Unit.Partition, b.Unit.First, b.Unit.Last, tbl.Location(), err)
			}
			files = append(files, df...)
		}
	}
	return files, nil
}

// project turns a unit's cache records into records of the table's columns (field ids
// attached), adding _hyp_source and _hyp_gateway.
func (l *Lake) project(sc *iceberg.Schema, b Batch) ([]arrow.RecordBatch, error) {
	var out []arrow.RecordBatch
	taken := parquetNames(sc)
	fail := func(err error) ([]arrow.RecordBatch, error) {
		for _, r := range out {
			r.Release()
		}
		return nil, err
	}
	for _, rec := range b.Records {
		n := rec.NumRows()
		if n == 0 {
			continue
		}
		var fields []arrow.Field
		var cols []arrow.Array
		field := func(name string, t arrow.DataType, col arrow.Array) error {
			f, ok := sc.FindFieldByName(name)
			if !ok {
				return fmt.Errorf("table has no column %q", name)
			}
			fields = append(fields, arrow.Field{Name: name, Type: t, Nullable: true,
				Metadata: arrow.NewMetadata([]string{table.ArrowParquetFieldIDKey}, []string{strconv.Itoa(f.ID)})})
			cols = append(cols, col)
			return nil
		}
		var built []arrow.Array // arrays made here, released once the record holds them
		release := func() {
			for _, a := range built {
				a.Release()
			}
		}
		for i, f := range rec.Schema().Fields() {
			col := rec.Column(i)
			name := f.Name
			if name != cache.SeqColumn && name != cache.IngestedAtColumn {
				t, err := icebergType(f.Type)
				if err != nil {
					release()
					return fail(err)
				}
				target, cast, known, err := resolve(sc, taken, nil, name, t)
				if err == nil && !known {
					err = fmt.Errorf("table has no column for %q", name)
				}
				if err != nil {
					release()
					return fail(err)
				}
				name = target
				if cast {
					d, err := compute.CastArray(context.Background(), col, compute.SafeCastOptions(arrow.PrimitiveTypes.Float64))
					if err != nil {
						release()
						return fail(fmt.Errorf("column %q as double: %w", f.Name, err))
					}
					built = append(built, d)
					col = d
				}
			}
			if err := field(name, col.DataType(), col); err != nil {
				release()
				return fail(err)
			}
		}
		gw := b.Gateway
		if gw == "" {
			gw = l.gw
		}
		for _, c := range []struct{ name, value string }{{SourceColumn, b.Source}, {GatewayColumn, gw}} {
			a := constString(c.value, int(n))
			built = append(built, a)
			if err := field(c.name, arrow.BinaryTypes.String, a); err != nil {
				release()
				return fail(err)
			}
		}
		out = append(out, array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, n))
		release()
	}
	return out, nil
}

// constString is n copies of v, its buffers built directly: appending through a builder
// was a tenth of a commit's CPU.
func constString(v string, n int) arrow.Array {
	offsets := make([]int32, n+1)
	for i := range offsets {
		offsets[i] = int32(i * len(v))
	}
	d := array.NewData(arrow.BinaryTypes.String, n, []*memory.Buffer{nil,
		memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(offsets)),
		memory.NewBufferBytes([]byte(strings.Repeat(v, n)))}, nil, 0, 0)
	defer d.Release()
	return array.NewStringData(d)
}
