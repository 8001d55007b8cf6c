package lake

import (
	"context"
	"fmt"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"golang.org/x/sync/errgroup"

	"github.com/hyp-project/hyp/internal/bounds"
)

// Bounds repair (`hyp sink maintain`): entries added before internal/bounds described files
// may have bounds that leave out values of their file (a row group without statistics was
// skipped) or no bounds for some columns. Maintain reads the footer of every live file,
// and replaces each entry whose bounds are not the footer's in one rewrite snapshot: the
// same file, the same rows, other bounds. A file some delete file applies to is left as it
// is: re-adding it would give it a new data sequence number, past those deletes.

// describeAll describes files, data files of tbl's current spec, from their footers as a
// commit would now, a few at a time.
func describeAll(ctx context.Context, tbl *table.Table, files []iceberg.DataFile) ([]iceberg.DataFile, error) {
	fsys, err := tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]iceberg.DataFile, len(files))
	var g errgroup.Group
	g.SetLimit(footerReaders)
	for i, f := range files {
		g.Go(func() error {
			df, err := bounds.Describe(ctx, fsys, f.FilePath(), tbl.Schema(), tbl.Spec(), tbl.Properties())
			if err != nil {
				return fmt.Errorf("describe %s: %w", f.FilePath(), err)
			}
			out[i] = df
			return nil
		})
	}
	return out, g.Wait()
}

// wrongBounds returns the live files of tasks whose entries' bounds are not their footers',
// each with the entry that replaces it, by path. Files of an older spec are not checked:
// the current one would describe them as another partition.
func wrongBounds(ctx context.Context, tbl *table.Table, tasks []table.FileScanTask) (map[string]iceberg.DataFile, error) {
	spec := tbl.Spec()
	var check []iceberg.DataFile
	for _, t := range tasks {
		if fixable(t) && int(t.File.SpecID()) == spec.ID() {
			check = append(check, t.File)
		}
	}
	dfs, err := describeAll(ctx, tbl, check)
	if err != nil {
		return nil, err
	}
	out := map[string]iceberg.DataFile{}
	for i, f := range check {
		if !bounds.Same(f, dfs[i]) {
			out[f.FilePath()] = dfs[i]
		}
	}
	return out, nil
}

// fixable reports whether no delete file applies to the task's file.
func fixable(t table.FileScanTask) bool {
	return len(t.DeleteFiles) == 0 && len(t.EqualityDeleteFiles) == 0 && len(t.DeletionVectorFiles) == 0
}

// fixBounds replaces the entries of tbl's live files whose bounds are wrong, in one
// rewrite snapshot pinned to the head, and says how many it replaced (would, in a dry run).
// When another writer commits meanwhile, the fix is staged again on the new head for the
// files still live there.
func (l *Lake) fixBounds(ctx context.Context, dataset string, tbl *table.Table, o MaintainOptions) (*table.Table, int, error) {
	tasks, err := liveTasks(ctx, tbl)
	if err != nil {
		return nil, 0, err
	}
	fixes, err := wrongBounds(ctx, tbl, tasks)
	if err != nil || len(fixes) == 0 || o.DryRun {
		return tbl, len(fixes), err
	}
	planned, n := headOf(tbl), 0
	next, err := l.pinned(ctx, dataset, tbl, "fix manifest bounds", func(cur *table.Table, tx *table.Transaction) (bool, error) {
		live := tasks
		if headOf(cur) != planned {
			if live, err = liveTasks(ctx, cur); err != nil {
				return false, err
			}
		}
		rw := tx.NewRewrite(carriedMarkers(cur.CurrentSnapshot()))
		n = 0
		for _, t := range live {
			if df, ok := fixes[t.File.FilePath()]; ok && fixable(t) {
				rw.DeleteFile(t.File)
				rw.AddDataFile(df)
				n++
			}
		}
		if n == 0 {
			return false, nil
		}
		return true, rw.Commit(ctx)
	})
	if next == nil {
		return nil, 0, err
	}
	return next, n, err
}
