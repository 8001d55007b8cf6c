package lake

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	iofs "io/fs"
	"maps"
	"slices"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/hyp-project/hyp/internal/bounds"
)

// footerReaders bounds the staged files whose footers CommitStaged reads at once.
const footerReaders = 16

// Staging splits a commit in two for `hyp server` in cluster mode (SPEC 5): any replica
// writes a chunk's rows as data files of the table, durable but referenced by no snapshot,
// and records them elsewhere (PostgreSQL); later the one committer adds every recorded file
// of a table in one snapshot. The files are written with the table's field ids, so the
// commit reads only their footers and never rewrites them.

// StagedFile is one data file Stage wrote.
type StagedFile struct {
	Path  string
	Rows  int64
	Bytes int64
}

// Stage writes the batches' rows as data files of the dataset's table (creating the table
// or growing its schema first, as Commit does) and commits nothing. The batches' records are
// brought to one schema (a column a batch lacks is null in its rows), so that the chunks a
// replica groups (SPEC 5) become one file per partition of the table, not one per chunk;
// only records whose columns cannot share a file (one name, two types) start another run.
// The files are named by id (one uuid per run of records of one schema, derived from it),
// which the caller records before calling, so that files of a stage that was never recorded
// as done can be found and removed (RemoveStaged); a new id per call means a write cut short
// and retried never overwrites a file some record names.
func (l *Lake) Stage(ctx context.Context, dataset string, batches []Batch, id uuid.UUID) ([]StagedFile, error) {
	tbl, err := l.prepare(ctx, dataset, batches)
	if err != nil {
		return nil, err
	}
	var recs []arrow.RecordBatch
	for _, b := range batches {
		r, err := l.project(tbl.Schema(), b)
		if err != nil {
			releaseAll(recs)
			return nil, fmt.Errorf("stage %s %d-%d: %w", b.Unit.Partition, b.Unit.First, b.Unit.Last, err)
		}
		recs = append(recs, r...)
	}
	files, err := writeUnified(ctx, tbl, unify(recs), id)
	if err != nil {
		return nil, fmt.Errorf("stage %d batches in %s: %w", len(batches), tbl.Location(), err)
	}
	out := make([]StagedFile, len(files))
	for i, f := range files {
		out[i] = StagedFile{Path: f.FilePath(), Rows: f.Count(), Bytes: f.FileSizeBytes()}
	}
	return out, nil
}

// writeUnified writes records unify ordered, a run of one schema at a time, the files of
// run i named by stageRunUUID(id, i). It releases the records.
func writeUnified(ctx context.Context, tbl *table.Table, recs []arrow.RecordBatch, id uuid.UUID) ([]iceberg.DataFile, error) {
	var out []iceberg.DataFile
	for run := 0; len(recs) > 0; run++ {
		n := 1
		for n < len(recs) && recs[n].Schema().Equal(recs[0].Schema()) {
			n++
		}
		files, err := writeRun(ctx, tbl, recs[:n], stageRunUUID(id, run))
		recs = recs[n:]
		if err != nil {
			releaseAll(recs)
			return nil, err
		}
		out = append(out, files...)
	}
	return out, nil
}

func releaseAll(recs []arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}

// unify pads projected records (table columns, field ids attached) with null columns so that
// records that can share a file have one schema, its columns in field-id order, and orders
// the records so that each schema's are adjacent. A record takes the first schema its
// columns do not contradict (a column of the same name and another type). It releases what
// it replaces.
func unify(recs []arrow.RecordBatch) []arrow.RecordBatch {
	type set struct {
		fields map[string]arrow.Field
		recs   []arrow.RecordBatch
	}
	var sets []*set
	fits := func(s *set, sc *arrow.Schema) bool {
		for _, f := range sc.Fields() {
			if g, ok := s.fields[f.Name]; ok && !arrow.TypeEqual(g.Type, f.Type) {
				return false
			}
		}
		return true
	}
	for _, r := range recs {
		i := slices.IndexFunc(sets, func(s *set) bool { return fits(s, r.Schema()) })
		if i < 0 {
			sets = append(sets, &set{fields: map[string]arrow.Field{}})
			i = len(sets) - 1
		}
		for _, f := range r.Schema().Fields() {
			sets[i].fields[f.Name] = f
		}
		sets[i].recs = append(sets[i].recs, r)
	}
	out := recs[:0]
	for _, s := range sets {
		fields := slices.SortedFunc(maps.Values(s.fields), func(a, b arrow.Field) int { return cmp.Compare(fieldID(a), fieldID(b)) })
		sc := arrow.NewSchema(fields, nil)
		for _, r := range s.recs {
			if r.Schema().Equal(sc) {
				out = append(out, r)
				continue
			}
			cols := make([]arrow.Array, len(fields))
			for i, f := range fields {
				if j := r.Schema().FieldIndices(f.Name); len(j) > 0 {
					cols[i] = r.Column(j[0])
					cols[i].Retain()
				} else {
					cols[i] = array.MakeArrayOfNull(memory.DefaultAllocator, f.Type, int(r.NumRows()))
				}
			}
			out = append(out, array.NewRecordBatch(sc, cols, r.NumRows()))
			releaseAll([]arrow.RecordBatch{r})
			for _, c := range cols {
				c.Release()
			}
		}
	}
	return out
}

// fieldID is the table field id project attached to f.
func fieldID(f arrow.Field) int {
	v, _ := f.Metadata.GetValue(table.ArrowParquetFieldIDKey)
	id, _ := strconv.Atoi(v)
	return id
}

// stageRunUUID names the files of one run of a stage's records.
func stageRunUUID(id uuid.UUID, run int) uuid.UUID {
	return uuid.NewSHA1(id, []byte(strconv.Itoa(run)))
}

// RemoveStaged removes the files of stages ids of the dataset's table that no snapshot
// references, however young: the caller knows that nothing will ever commit them (their
// stage was abandoned). It returns how many it removed.
func (l *Lake) RemoveStaged(ctx context.Context, dataset string, ids []uuid.UUID) (int, error) {
	tbl, err := l.load(ctx, dataset)
	if err != nil || tbl == nil {
		return 0, err
	}
	return removeUnreferenced(ctx, tbl, 0, false, func(orphans []string) []string {
		var runs []string
		for _, id := range ids {
			runs = append(runs, runsAmong(orphans, func(run int) uuid.UUID { return stageRunUUID(id, run) })...)
		}
		var doomed []string
		named := containsAny(runs)
		for _, f := range orphans {
			if named(f) {
				doomed = append(doomed, f)
			}
		}
		return doomed
	})
}

// StagedCommit is one snapshot of staged files.
type StagedCommit struct {
	Dataset string
	ID      string // names the commit in hyp.commit-id; decided before the commit
	// Base is the table's head when the commit was decided, as in Commit: the files are
	// added only if no snapshot after it carries ID.
	Base  int64
	Paths []string
	Units []Unit // what the files hold, recorded in hyp.units
}

// CommitStaged adds staged files to the dataset's table in one snapshot, unless a snapshot
// after c.Base already carries c.ID (Result.Already).
func (l *Lake) CommitStaged(ctx context.Context, c StagedCommit) (Result, error) {
	tbl, err := l.load(ctx, c.Dataset)
	if err != nil {
		return Result{}, err
	}
	if tbl == nil {
		return Result{}, fmt.Errorf("commit staged files to %s.%s: the table does not exist", l.ns[0], c.Dataset)
	}
	if l.landed(tbl, c.ID, c.Base) {
		return Result{Already: true}, nil
	}
	fsys, err := tbl.FS(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("commit staged files to %s.%s: %w", l.ns[0], c.Dataset, err)
	}
	var res Result
	files := make([]iceberg.DataFile, len(c.Paths))
	// A footer read is one object-store round trip: a commit of a few thousand staged files
	// would spend most of the commit interval waiting on them one by one.
	var g errgroup.Group
	g.SetLimit(footerReaders)
	for i, p := range c.Paths {
		g.Go(func() error {
			// The current schema holds every field the file's schema had: schemas only grow.
			df, err := bounds.Describe(ctx, fsys, p, tbl.Schema(), tbl.Spec(), tbl.Properties())
			if err != nil {
				return fmt.Errorf("staged file %s: %w", p, err)
			}
			files[i] = df
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return Result{}, err
	}
	files, replaced, err := mergeSmall(ctx, tbl, c.ID, files)
	if err != nil {
		return Result{}, fmt.Errorf("commit staged files to %s.%s: %w", l.ns[0], c.Dataset, err)
	}
	for _, df := range files {
		res.Files++
		res.Rows += df.Count()
		res.Bytes += df.FileSizeBytes()
	}
	uj, err := json.Marshal(c.Units)
	if err != nil {
		return Result{}, err
	}
	props := iceberg.Properties{PropGateway: l.gw, PropCommitID: c.ID, PropUnits: string(uj)}
	snap, already, err := l.addFiles(ctx, tbl, c.Dataset, c.ID, c.Base, files, props)
	if already {
		return Result{Already: true}, err
	}
	if err != nil {
		return res, err
	}
	res.Snapshot = snap
	res.Merged = len(replaced)
	// The merged files hold the replaced ones' rows in the snapshot that just landed, so
	// nothing will ever read these; one left by a failure here is an orphan the table's
	// upkeep removes.
	for _, p := range replaced {
		if err := fsys.Remove(p); err != nil && !errors.Is(err, iofs.ErrNotExist) {
			res.Leftover++
		}
	}
	return res, nil
}
