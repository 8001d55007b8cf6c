package lake

import (
	"context"
	"encoding/json"
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

	"github.com/hyp-project/hyp/internal/columns"
)

// Columns every table has besides the user columns (SPEC 6b).
const (
	SourceColumn  = "_hyp_source"
	GatewayColumn = "_hyp_gateway"
)

// Batch is one unit's rows as the cache's scan gives them: the user columns plus
// columns.SeqColumn and columns.IngestedAtColumn. Commit does not release the records.
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
		if err != nil {
			return nil, err
		}
		if len(adds) == 0 {
			return l.completeNameMapping(ctx, dataset, tbl)
		}
		tx := tbl.NewTransaction()
		us := tx.UpdateSchema(true, false)
		for _, f := range adds {
			us.AddColumn([]string{f.Name}, f.Type, f.Doc, false, nil)
		}
		if err := us.Commit(); err != nil {
			return nil, fmt.Errorf("grow schema of %s.%s: %w", l.ns[0], dataset, err)
		}
		next, err := tx.Commit(ctx)
		if err == nil {
			return l.completeNameMapping(ctx, dataset, next)
		}
		if !conflict(err) || attempt >= commitAttempts {
			return nil, fmt.Errorf("grow schema of %s.%s: %w", l.ns[0], dataset, err)
		}
		if err := backoff(ctx, attempt); err != nil {
			return nil, err
		}
	}
}

// completeNameMapping makes the table's schema.name-mapping.default list every column.
// iceberg-go writes the mapping once, at the first commit of files, and never grows it with
// the schema, so a reader that maps files by name (files without field ids: a migrated
// table's) would miss every column added since. A table no commit has written yet has no
// mapping, which iceberg-go then writes whole.
func (l *Lake) completeNameMapping(ctx context.Context, dataset string, tbl *table.Table) (*table.Table, error) {
	for attempt := 1; ; attempt++ {
		nm := tbl.NameMapping()
		if nm == nil || mapsEvery(nm, tbl.Schema()) {
			return tbl, nil
		}
		b, err := json.Marshal(tbl.Schema().NameMapping())
		if err != nil {
			return nil, err
		}
		tx := tbl.NewTransaction()
		if err := tx.SetProperties(iceberg.Properties{table.DefaultNameMappingKey: string(b)}); err != nil {
			return nil, err
		}
		next, err := tx.Commit(ctx)
		if err == nil {
			return next, nil
		}
		if !conflict(err) || attempt >= commitAttempts {
			return nil, fmt.Errorf("complete the name mapping of %s.%s: %w", l.ns[0], dataset, err)
		}
		if err := backoff(ctx, attempt); err != nil {
			return nil, err
		}
		if tbl, err = l.load(ctx, dataset); err != nil {
			return nil, err
		}
	}
}

// mapsEvery reports whether nm names every top-level column of sc (hyp's tables have no
// nested ones).
func mapsEvery(nm iceberg.NameMapping, sc *iceberg.Schema) bool {
	ids := make(map[int]bool, len(nm))
	for _, f := range nm {
		if f.FieldID != nil {
			ids[*f.FieldID] = true
		}
	}
	for _, f := range sc.Fields() {
		if !ids[f.ID] {
			return false
		}
	}
	return true
}

// newColumns are the columns the batches bring that the table does not have yet.
func newColumns(sc *iceberg.Schema, batches []Batch) ([]iceberg.NestedField, error) {
	var adds []iceberg.NestedField
	cols := newColumnNames(sc)
	for _, b := range batches {
		for _, r := range b.Records {
			for _, f := range r.Schema().Fields() {
				if f.Name == columns.SeqColumn || f.Name == columns.IngestedAtColumn {
					continue
				}
				t, err := icebergType(f.Type)
				if err != nil {
					return nil, fmt.Errorf("column %q: %w", f.Name, err)
				}
				col, _, known, err := cols.resolve(f.Name, t)
				if err != nil {
					return nil, fmt.Errorf("column %q: %w", f.Name, err)
				}
				if !known {
					adds = append(adds, cols.add(col, t))
				}
			}
		}
	}
	return adds, nil
}

// create makes the dataset's table with hyp's own columns; user columns follow as they come.
func (l *Lake) create(ctx context.Context, dataset string) (*table.Table, error) {
	sc := iceberg.NewSchema(0,
		iceberg.NestedField{ID: 1, Name: columns.SeqColumn, Type: iceberg.PrimitiveTypes.Int64},
		iceberg.NestedField{ID: 2, Name: columns.IngestedAtColumn, Type: iceberg.PrimitiveTypes.TimestampTz},
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
		spec := iceberg.NewPartitionSpec(iceberg.PartitionField{SourceIDs: []int{2}, FieldID: 1000, Name: columns.IngestedAtColumn + "_" + l.part, Transform: tr})
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

// columnNames answers which table column a cache column goes to. Its state is the table's
// schema plus the columns a prepare is about to add (pending), so a batch that brings two
// new columns resolves the second against the first.
type columnNames struct {
	sc      *iceberg.Schema
	taken   map[string]string       // Parquet names in use -> their columns
	pending map[string]iceberg.Type // columns about to be added -> their types
	// twins maps a cache name to the column it was given as a case twin (see column),
	// from the table's docs and the pending columns.
	twins map[string]string
	// twinOf maps a case-twin column resolve proposed to the cache name it is for, until add.
	twinOf map[string]string
	// folded holds the lower case of every column name.
	folded map[string]bool
}

// twinDoc marks, in a column's doc, the cache name a case-twin column holds, so every
// writer (and a later run) maps that name to it.
const twinDoc = "hyp: values of the field "

func newColumnNames(sc *iceberg.Schema) *columnNames {
	c := &columnNames{sc: sc, taken: parquetNames(sc), pending: map[string]iceberg.Type{}, twins: map[string]string{}, twinOf: map[string]string{}, folded: map[string]bool{}}
	for _, f := range sc.Fields() {
		if from, ok := strings.CutPrefix(f.Doc, twinDoc); ok {
			c.twins[from] = f.Name
		}
		c.folded[strings.ToLower(f.Name)] = true
	}
	return c
}

// column is the table column that holds the cache column name, and whether it exists yet.
// Names that differ only in letter case are one column to Spark (case-insensitive by
// default) and Trino (which lower-cases names), which then refuse the table, so only the
// first such name to reach the table keeps its name; each later one gets `<name>__2`,
// `<name>__3`, … (the first that folds to no column), marked in its doc (twinDoc). A
// column's name is never changed once added, so the numbering follows the table's history,
// not byte order as the cache's query names do.
func (c *columnNames) column(name string) (col string, exists bool) {
	if col, ok := c.twins[name]; ok {
		return col, true
	}
	if f, ok := c.sc.FindFieldByName(name); ok && !strings.HasPrefix(f.Doc, twinDoc) {
		return name, true
	}
	if _, ok := c.pending[name]; ok {
		return name, true
	}
	if !c.folded[strings.ToLower(name)] {
		return name, false
	}
	for k := 2; ; k++ {
		col = name + "__" + strconv.Itoa(k)
		if !c.folded[strings.ToLower(col)] {
			return col, false
		}
	}
}

// typeOf is the type of an existing or pending column.
func (c *columnNames) typeOf(col string) iceberg.Type {
	if f, ok := c.sc.FindFieldByName(col); ok {
		return f.Type
	}
	return c.pending[col]
}

// add records the column col of type t as pending and returns it to be added, with the
// cache name it holds in its doc when it is a case twin.
func (c *columnNames) add(col string, t iceberg.Type) iceberg.NestedField {
	c.pending[col] = t
	c.taken[parquetName(col)] = col
	c.folded[strings.ToLower(col)] = true
	f := iceberg.NestedField{Name: col, Type: t}
	if from, ok := c.twinOf[col]; ok {
		f.Doc = twinDoc + from
		c.twins[from] = col
	}
	return f
}

// resolve finds the table column a cache column of type t goes to, by the cache's own rule
// for values of conflicting types (see the README): a column keeps its first type, a double
// column takes longs, and any other conflict goes to the sibling `<name>__<type>`, each
// name through column's case rule. known is false for a column the table does not have yet
// (it is to be added, with add, as col of type t).
//
// A new name that iceberg-go could not write to Parquet beside the existing columns (it
// rewrites names that are not Avro names, so `a.b` and a literal `a_x2Eb` would both be
// `a_x2Eb`, and the empty name has no Parquet name at all) is a conflict too: otherwise one
// row with such a field would fail every commit of its dataset.
func (c *columnNames) resolve(name string, t iceberg.Type) (col string, cast, known bool, err error) {
	for range 3 {
		col, exists := c.column(name)
		if !exists {
			if pq := parquetName(col); pq != "" && c.taken[pq] == "" {
				if col != name {
					c.twinOf[col] = name
				}
				return col, false, false, nil
			}
		} else {
			switch have := c.typeOf(col); {
			case have.Equals(t):
				return col, false, true, nil
			case have.Equals(iceberg.PrimitiveTypes.Float64) && t.Equals(iceberg.PrimitiveTypes.Int64):
				return col, true, true, nil
			}
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
	names := newColumnNames(sc)
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
			if name != columns.SeqColumn && name != columns.IngestedAtColumn {
				t, err := icebergType(f.Type)
				if err != nil {
					release()
					return fail(err)
				}
				target, cast, known, err := names.resolve(name, t)
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
