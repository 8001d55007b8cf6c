package lake

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"

	"github.com/hyp-project/hyp/internal/bounds"
	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/parquetw"
)

// A run's data files are written with parquetw (the cache's and the blob export's writer)
// and described from their own footers with internal/bounds, as the cache's are (bounds
// that hold every value of the file, which iceberg-go's FileToDataFile alone does not give):
// iceberg-go's writer (table.WriteRecords) spent two thirds of an export's CPU in arrow-go's
// column writers. Everything after the []iceberg.DataFile (the commit, Stage, Maintain) is
// unchanged.
//
// The files keep the names iceberg-go's writer gave them, byte for byte: a commit retried
// after this upgrade, of a commit first tried before it, must overwrite the files of that
// first attempt rather than leave them as orphans beside new ones (see fileUUID).
// iceberg-go names a file `{partition id:05d}-{task id}-{write uuid}-{file count:05d}.parquet`
// (table/writer.go dataFileName): partition ids count the partitions in the order the
// records first reach them, task ids count the files of the write in the order they are
// opened, and file counts the files of one partition from 1. It puts a partitioned file
// under `<table location>/data/<partition path>` and the rest under the location
// provider's data location.

// rowGroupRows bounds a data file's row groups, as the cache's; parquetw holds one row
// group per open file.
const rowGroupRows = 64 << 10

// writeRun writes records of one schema (the table's columns, field ids attached) as data
// files of tbl named from id, one partition of tbl's spec at a time, and releases every
// record.
func writeRun(ctx context.Context, tbl *table.Table, recs []arrow.RecordBatch, id uuid.UUID) ([]iceberg.DataFile, error) {
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	props := tbl.Properties()
	if f := props.Get(table.WriteFormatDefaultKey, table.WriteFormatDefaultDefault); !strings.EqualFold(f, "parquet") {
		return nil, fmt.Errorf("table writes %s files: only parquet is written", f)
	}
	fio, err := tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	wfs, ok := fio.(icebergio.WriteFileIO)
	if !ok {
		return nil, fmt.Errorf("the file system of %s cannot write files", tbl.Location())
	}
	spec := tbl.Spec()
	parts, err := splitPartitions(tbl.Schema(), spec, recs)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, p := range parts {
			for _, r := range p.recs {
				r.Release()
			}
		}
	}()
	w := runWriter{
		fs:     wfs,
		schema: fileSchema(recs[0].Schema()),
		id:     id,
		target: props.GetInt64(table.WriteTargetFileSizeBytesKey, table.WriteTargetFileSizeBytesDefault),
	}
	var files []iceberg.DataFile
	for pid, p := range parts {
		loc, err := dataLocations(tbl, p.path)
		if err != nil {
			return nil, err
		}
		paths, err := w.partition(ctx, loc, pid, p.recs)
		if err != nil {
			return nil, err
		}
		for _, path := range paths {
			// The DataFile's counts, bounds and partition come from the footer just
			// written: the bounds of the spec's source column give the partition, so every
			// file holds one partition's rows.
			df, err := bounds.Describe(ctx, fio, path, tbl.Schema(), spec, props)
			if err != nil {
				return nil, fmt.Errorf("describe %s: %w", path, err)
			}
			files = append(files, df)
		}
	}
	return files, nil
}

// fileSchema is the schema a run's files are written with: the records' columns under the
// Parquet names iceberg-go gives them (it rewrites names that are not Avro names), so that a
// reader matching by name finds what it found in iceberg-go's files.
func fileSchema(sc *arrow.Schema) *arrow.Schema {
	fields := sc.Fields()
	for i := range fields {
		fields[i].Name = parquetName(fields[i].Name)
	}
	return arrow.NewSchema(fields, nil)
}

// dataLocations is where iceberg-go puts the data files of the partition at path ("" for
// an unpartitioned table): it overrides the data path with the table location's
// data/<path> for a partitioned file (table/rolling_data_writer.go partitionLocProvider).
func dataLocations(tbl *table.Table, path string) (table.LocationProvider, error) {
	props := tbl.Properties()
	if path != "" {
		root, err := url.Parse(tbl.Location())
		if err != nil {
			return nil, fmt.Errorf("table location %q: %w", tbl.Location(), err)
		}
		props = maps.Clone(props)
		if props == nil {
			props = iceberg.Properties{}
		}
		props[table.WriteDataPathKey] = root.JoinPath("data", path).String()
	}
	return table.LoadLocationProvider(tbl.Location(), props)
}

// runWriter writes one run's files; it counts the files of the run, as iceberg-go's task
// ids do.
type runWriter struct {
	fs     icebergio.WriteFileIO
	schema *arrow.Schema
	id     uuid.UUID
	target int64 // bytes after which a file is closed and the partition's next one started
	tasks  int
}

// partition writes the records of partition pid into files of about w.target bytes at most
// and returns their locations.
func (w *runWriter) partition(ctx context.Context, loc table.LocationProvider, pid int, recs []arrow.RecordBatch) ([]string, error) {
	var done []string
	var cur *lakeFile
	for _, rec := range recs {
		if err := ctx.Err(); err != nil {
			if cur != nil {
				return nil, cur.abort(w.fs, err)
			}
			return nil, err
		}
		if cur == nil {
			var err error
			if cur, err = w.create(loc.NewDataLocation(fmt.Sprintf("%05d-%d-%s-%05d.parquet", pid, w.tasks, w.id, len(done)+1))); err != nil {
				return nil, err
			}
			w.tasks++
		}
		if err := cur.pw.Write(rec); err != nil {
			return nil, cur.abort(w.fs, err)
		}
		if cur.pw.Size() >= w.target {
			if err := cur.finish(w.fs); err != nil {
				return nil, err
			}
			done, cur = append(done, cur.path), nil
		}
	}
	if cur != nil {
		if err := cur.finish(w.fs); err != nil {
			return nil, err
		}
		done = append(done, cur.path)
	}
	return done, nil
}

// lakeFile is a data file being written.
type lakeFile struct {
	path string
	f    icebergio.FileWriter
	bw   *bufio.Writer
	pw   *parquetw.Writer
}

func (w *runWriter) create(path string) (*lakeFile, error) {
	f, err := w.fs.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	// parquetw writes page by page; an S3 writer buffers its parts itself, a local file
	// does not.
	d := &lakeFile{path: path, f: f, bw: bufio.NewWriterSize(f, 256<<10)}
	d.pw = parquetw.NewWriter(d.bw, w.schema, parquetw.Options{
		RowGroupRows: rowGroupRows,
		// Unique per row, so a dictionary never pays off.
		Plain: []string{columns.SeqColumn, columns.IngestedAtColumn},
	})
	return d, nil
}

// finish writes the footer and closes the file (for S3, completes the upload); on failure
// the file is removed.
func (d *lakeFile) finish(fsys icebergio.WriteFileIO) error {
	err := d.pw.Close()
	if err == nil {
		err = d.bw.Flush()
	}
	if err != nil {
		return d.abort(fsys, err)
	}
	if err := d.f.Close(); err != nil {
		return errors.Join(fmt.Errorf("write %s: %w", d.path, err), remove(fsys, d.path))
	}
	return nil
}

// abort gives up on a file that has no footer, as iceberg-go's writer did: nothing names it.
func (d *lakeFile) abort(fsys icebergio.WriteFileIO, cause error) error {
	return errors.Join(fmt.Errorf("write %s: %w", d.path, cause), d.f.Close(), remove(fsys, d.path))
}

func remove(fsys icebergio.WriteFileIO, path string) error {
	if err := fsys.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) && !os.IsNotExist(err) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// part is one partition's share of a run: slices of the run's records, in their order.
type part struct {
	path string // the partition path, "" for an unpartitioned table
	recs []arrow.RecordBatch
}

// timeUnits are the transforms splitPartitions computes itself, as the width of their
// unit in microseconds: the only ones a table hyp creates has (SPEC 6b, partition_by).
var timeUnits = map[string]int64{
	iceberg.DayTransform{}.String():  86_400_000_000,
	iceberg.HourTransform{}.String(): 3_600_000_000,
}

// splitPartitions slices recs by the partition of spec each row belongs to, the
// partitions in the order their first rows come in (iceberg-go's partition ids). The slices
// share the records' buffers.
func splitPartitions(sc *iceberg.Schema, spec iceberg.PartitionSpec, recs []arrow.RecordBatch) ([]part, error) {
	if spec.IsUnpartitioned() {
		out := part{}
		for _, r := range recs {
			r.Retain()
			out.recs = append(out.recs, r)
		}
		return []part{out}, nil
	}
	if spec.NumFields() != 1 {
		return nil, fmt.Errorf("partition spec %s: only a day or an hour of a timestamp is written", spec)
	}
	field := spec.Field(0)
	width, ok := timeUnits[field.Transform.String()]
	name, named := sc.FindColumnName(field.SourceID())
	if !ok || !named {
		return nil, fmt.Errorf("partition spec %s: only a day or an hour of a timestamp is written", spec)
	}
	col := recs[0].Schema().FieldIndices(name)
	if len(col) != 1 {
		return nil, fmt.Errorf("partition source column %q is not in the records", name)
	}
	var parts []part
	index := map[partKey]int{}
	add := func(k partKey, rec arrow.RecordBatch, from, to int64) error {
		i, ok := index[k]
		if !ok {
			path, err := partitionPath(sc, spec, k)
			if err != nil {
				return err
			}
			i = len(parts)
			index[k] = i
			parts = append(parts, part{path: path})
		}
		parts[i].recs = append(parts[i].recs, rec.NewSlice(from, to))
		return nil
	}
	release := func() {
		for _, p := range parts {
			for _, r := range p.recs {
				r.Release()
			}
		}
	}
	for _, rec := range recs {
		ts, ok := rec.Column(col[0]).(*array.Timestamp)
		if !ok {
			release()
			return nil, fmt.Errorf("partition source column %q is %s, not a timestamp", name, rec.Column(col[0]).DataType())
		}
		toMicros, err := microsOf(ts.DataType().(*arrow.TimestampType).Unit)
		if err != nil {
			release()
			return nil, err
		}
		key := func(i int) partKey {
			if ts.IsNull(i) {
				return partKey{null: true}
			}
			return partKey{unit: floorDiv(toMicros(int64(ts.Value(i))), width)}
		}
		// Rows come in seq order, so ingest times, and their partitions, come in runs.
		n := ts.Len()
		start, k := 0, key(0)
		for i := 1; i <= n; i++ {
			var next partKey
			if i < n {
				if next = key(i); next == k {
					continue
				}
			}
			if err := add(k, rec, int64(start), int64(i)); err != nil {
				release()
				return nil, err
			}
			start, k = i, next
		}
	}
	return parts, nil
}

// partKey is a row's partition: its source value's day or hour since the epoch.
type partKey struct {
	unit int64
	null bool
}

// partitionPath is the path iceberg-go gives partition k's files, from the spec's own
// transform of a value in k (the one FileToDataFile will find in the file's bounds).
func partitionPath(sc *iceberg.Schema, spec iceberg.PartitionSpec, k partKey) (string, error) {
	v := partValue{nil}
	if !k.null {
		out := spec.Field(0).Transform.Apply(iceberg.Optional[iceberg.Literal]{Valid: true, Val: iceberg.TimestampLiteral(k.unit * timeUnits[spec.Field(0).Transform.String()])})
		if !out.Valid {
			return "", fmt.Errorf("partition spec %s: no partition for %d", spec, k.unit)
		}
		v[0] = out.Val.Any()
	}
	return spec.PartitionToPath(v, sc), nil
}

// partValue is a partition tuple as iceberg.PartitionSpec.PartitionToPath reads it.
type partValue []any

func (p partValue) Size() int        { return len(p) }
func (p partValue) Get(i int) any    { return p[i] }
func (p partValue) Set(i int, v any) { p[i] = v }

func microsOf(u arrow.TimeUnit) (func(int64) int64, error) {
	switch u {
	case arrow.Second:
		return func(v int64) int64 { return v * 1_000_000 }, nil
	case arrow.Millisecond:
		return func(v int64) int64 { return v * 1_000 }, nil
	case arrow.Microsecond:
		return func(v int64) int64 { return v }, nil
	case arrow.Nanosecond:
		return func(v int64) int64 { return floorDiv(v, 1_000) }, nil
	}
	return nil, fmt.Errorf("timestamp unit %s", u)
}

// floorDiv rounds toward minus infinity, as Iceberg's time transforms do.
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}
