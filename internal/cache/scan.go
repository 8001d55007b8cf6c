package cache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/fsutil"
)

// ErrGenerationGone means a reader raced a compaction; reopening the cache resolves it.
var ErrGenerationGone = errors.New("table generation was replaced while opening; retry")

// ErrNoPartition is returned for a partition the cache does not hold.
var ErrNoPartition = errors.New("no such partition")

// ScanStats says how much a scan touched; tests and benchmarks use it to prove that a scan
// costs O(new rows), not O(partition).
type ScanStats struct {
	FilesOpened   int
	RowGroupsRead int
	RowsRead      int64
	RowsReturned  int64
}

// pinned is a consistent view of one partition: the files overlapping a seq range in one
// generation, kept alive by a shared lock on that generation until release.
type pinned struct {
	files  []FileInfo
	schema *arrow.Schema // current table schema under logical names, no field ids
	ids    []int         // field id of each schema column
	head   int64
	marks  marks
	lock   *fsutil.Lock
}

func (v *pinned) release() { v.lock.Unlock() }

// pin captures the files of p that may hold seqs in (since, until]. With no such file it
// takes no lock and opens nothing.
func (p *Partition) pin(since, until int64) (*pinned, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gen == nil {
		return &pinned{}, nil
	}
	g := p.gen
	v := &pinned{head: g.maxSeq, marks: g.marks}
	// Files are sorted and disjoint in seq, so the candidates are one contiguous run.
	lo := sort.Search(len(g.files), func(i int) bool { return g.files[i].MaxSeq > since })
	for i := lo; i < len(g.files) && g.files[i].MinSeq <= until; i++ {
		v.files = append(v.files, g.files[i])
	}
	if len(v.files) == 0 {
		return v, nil
	}
	sc, ids, err := g.readSchema()
	if err != nil {
		return nil, err
	}
	v.schema, v.ids = sc, ids
	lk, err := fsutil.SharedLock(tableDir(g.dir).readersLock())
	if err != nil {
		return nil, err
	}
	// A reader in another process may have loaded a generation that the writer retired and
	// removed before the lock was taken: the caller reopens and sees the new one.
	if !genExists(g.dir) {
		lk.Unlock()
		return nil, ErrGenerationGone
	}
	v.lock = lk
	return v, nil
}

// Scan calls fn with the partition's rows whose seq is in (since, until], in seq order, as
// record batches in the partition's current schema. It opens only data files whose seq
// bounds overlap the range and reads only overlapping row groups; a scan with since at or
// above the head seq opens nothing. fn must not retain a batch past its return without
// calling Retain.
func (c *Cache) Scan(ctx context.Context, dataset, partitionName string, since, until int64, fn func(arrow.RecordBatch) error) (ScanStats, error) {
	p := c.tables.lookup(dataset, partitionName)
	if p == nil {
		return ScanStats{}, fmt.Errorf("%w: %s/%s", ErrNoPartition, dataset, partitionName)
	}
	return p.scan(ctx, since, until, fn)
}

func (p *Partition) scan(ctx context.Context, since, until int64, fn func(arrow.RecordBatch) error) (ScanStats, error) {
	var st ScanStats
	if since >= until {
		return st, nil
	}
	v, err := p.pin(since, until)
	if err != nil {
		return st, err
	}
	if len(v.files) == 0 {
		return st, nil
	}
	defer v.release()
	for _, f := range v.files {
		if err := readFile(ctx, f.Path, v.schema, v.ids, since, until, scanBatchRows, &st, fn); err != nil {
			return st, fmt.Errorf("scan %s/%s %s: %w", p.Dataset, p.Name(), f.Path, err)
		}
	}
	return st, nil
}

// Batch sizes. A whole-file read (compaction) takes row-group-sized batches. A scan takes
// smaller ones: its caller often wants only the next few thousand rows (a forward unit is
// 10,000) and stops there, and every row of a batch is decoded whether it is taken or not,
// so a 64k-row batch for a 10k-row unit decoded six rows for each one shipped. 5,000 divides
// the sinks' unit sizes (10,000 and 250,000 rows), so a unit, which starts where its scan
// seeks to, ends at the end of a batch.
const (
	fileBatchRows = 64 << 10
	scanBatchRows = 5000
)

// scanFile reads the rows of one data file with seq in (since, until] and hands them to fn
// laid out as out, whose column i is the file's column with field id ids[i].
func scanFile(ctx context.Context, path string, out *arrow.Schema, ids []int, since, until int64, st *ScanStats, fn func(arrow.RecordBatch) error) error {
	return readFile(ctx, path, out, ids, since, until, fileBatchRows, st, fn)
}

// readFile is scanFile in batches of batchRows. Rows of the first row group read that lie at
// or below since are skipped without being decoded, so a scan that resumes in the middle of a
// row group (the next unit of a partition) does not decode the rows before it again.
func readFile(ctx context.Context, path string, out *arrow.Schema, ids []int, since, until int64, batchRows int64, st *ScanStats, fn func(arrow.RecordBatch) error) (err error) {
	defer recoverDamage(&err)
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return err
	}
	defer pf.Close()
	st.FilesOpened++
	md := pf.MetaData()
	seqCol := md.Schema.ColumnIndexByName(columns.SeqColumn)
	if seqCol < 0 {
		return fmt.Errorf("no %s column", columns.SeqColumn)
	}
	var groups []int
	for i := 0; i < md.NumRowGroups(); i++ {
		lo, hi, ok := rowGroupBounds(md.RowGroup(i), seqCol)
		if ok && (hi <= since || lo > until) {
			continue
		}
		groups = append(groups, i)
	}
	if len(groups) == 0 {
		return nil
	}
	st.RowGroupsRead += len(groups)
	// PreAllocBinaryData gives a string column's builder its batch's bytes at once, from the
	// column chunk's size, where it grew by doubling, one value at a time: BenchmarkScan
	// 224-237 ns and 412 bytes a row against 275-321 ns and 718.
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: batchRows, Parallel: false, PreAllocBinaryData: true}, memory.DefaultAllocator)
	if err != nil {
		return err
	}
	skip, err := rowsThrough(ctx, fr, groups[0], seqCol, since)
	if err != nil {
		return err
	}
	rr, err := fr.GetRecordReader(ctx, nil, groups)
	if err != nil {
		return err
	}
	defer rr.Release()
	if skip > 0 {
		if err := rr.SeekToRow(skip); err != nil {
			return fmt.Errorf("seek to row %d of row group %d: %w", skip, groups[0], err)
		}
	}
	for rr.Next() {
		rec := rr.RecordBatch()
		st.RowsRead += rec.NumRows()
		sliced, err := sliceSeqRange(rec, since, until)
		if err != nil {
			return err
		}
		if sliced == nil {
			continue
		}
		norm, err := conform(sliced, out, ids)
		sliced.Release()
		if err != nil {
			return err
		}
		st.RowsReturned += norm.NumRows()
		err = fn(norm)
		norm.Release()
		if err != nil {
			return err
		}
	}
	return rr.Err()
}

// rowsThrough counts the rows of row group g with seq <= since; they lead the group, which
// is in seq order. A group whose seqs run without a gap is counted from its statistics;
// another reads its seq column alone.
func rowsThrough(ctx context.Context, fr *pqarrow.FileReader, g, seqCol int, since int64) (int64, error) {
	rg := fr.ParquetReader().MetaData().RowGroup(g)
	lo, hi, ok := rowGroupBounds(rg, seqCol)
	switch {
	case ok && lo > since:
		return 0, nil
	case ok && hi-lo+1 == rg.NumRows():
		return since - lo + 1, nil
	}
	field := slices.IndexFunc(fr.Manifest.Fields, func(f pqarrow.SchemaField) bool { return f.ColIndex == seqCol })
	if field < 0 {
		return 0, fmt.Errorf("no %s field", columns.SeqColumn)
	}
	col, err := fr.RowGroup(g).Column(field).Read(ctx)
	if err != nil {
		return 0, fmt.Errorf("read %s of row group %d: %w", columns.SeqColumn, g, err)
	}
	defer col.Release()
	var n int64
	for _, c := range col.Chunks() {
		seqs, ok := c.(*array.Int64)
		if !ok {
			return 0, fmt.Errorf("%s is %s", columns.SeqColumn, c.DataType())
		}
		vals := seqs.Int64Values()
		k := sort.Search(len(vals), func(i int) bool { return vals[i] > since })
		n += int64(k)
		if k < len(vals) {
			break
		}
	}
	return n, nil
}

// rowGroupBounds are the min and max of an int64 (or timestamp) column in a row group.
func rowGroupBounds(rg *metadata.RowGroupMetaData, col int) (int64, int64, bool) {
	cc, err := rg.ColumnChunk(col)
	if err != nil {
		return 0, 0, false
	}
	stats, err := cc.Statistics()
	if err != nil || stats == nil || !stats.HasMinMax() {
		return 0, 0, false
	}
	s, ok := stats.(*metadata.Int64Statistics)
	if !ok {
		return 0, 0, false
	}
	return s.Min(), s.Max(), true
}

// sliceSeqRange cuts rec to rows with seq in (since, until]. Rows within a file are in seq
// order, so the range is contiguous. It returns nil for no rows.
func sliceSeqRange(rec arrow.RecordBatch, since, until int64) (arrow.RecordBatch, error) {
	idx := rec.Schema().FieldIndices(columns.SeqColumn)
	if len(idx) == 0 {
		return nil, fmt.Errorf("no %s column", columns.SeqColumn)
	}
	seqs, ok := rec.Column(idx[0]).(*array.Int64)
	if !ok {
		return nil, fmt.Errorf("%s is %s", columns.SeqColumn, rec.Column(idx[0]).DataType())
	}
	vals := seqs.Int64Values()
	lo := sort.Search(len(vals), func(i int) bool { return vals[i] > since })
	hi := sort.Search(len(vals), func(i int) bool { return vals[i] > until })
	if lo >= hi {
		return nil, nil
	}
	return rec.NewSlice(int64(lo), int64(hi)), nil
}

// conform lays rec out in schema out, matching columns by field id (ids[i] is out's column
// i): same field order, typed nulls for columns the file predates. Matching by id keeps a
// file readable whatever name its writer stored a column under.
func conform(rec arrow.RecordBatch, out *arrow.Schema, ids []int) (arrow.RecordBatch, error) {
	byID := make(map[int]int, rec.NumCols())
	for j, f := range rec.Schema().Fields() {
		if id, ok := fieldID(f); ok {
			byID[id] = j
		}
	}
	cols := make([]arrow.Array, out.NumFields())
	var made []arrow.Array
	defer func() {
		for _, a := range made {
			a.Release()
		}
	}()
	for i, f := range out.Fields() {
		j, ok := byID[ids[i]]
		if !ok {
			a := array.MakeArrayOfNull(memory.DefaultAllocator, f.Type, int(rec.NumRows()))
			made = append(made, a)
			cols[i] = a
			continue
		}
		a := rec.Column(j)
		if !arrow.TypeEqual(a.DataType(), f.Type) {
			return nil, fmt.Errorf("column %q is %s in the file, %s in the table", f.Name, a.DataType(), f.Type)
		}
		cols[i] = a
	}
	return array.NewRecordBatch(out, cols, rec.NumRows()), nil
}

// fieldID is the Parquet field id pqarrow reports in a column's metadata.
func fieldID(f arrow.Field) (int, bool) {
	i := f.Metadata.FindKey("PARQUET:field_id")
	if i < 0 {
		return 0, false
	}
	id, err := strconv.Atoi(f.Metadata.Values()[i])
	return id, err == nil
}
