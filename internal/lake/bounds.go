package lake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"golang.org/x/sync/errgroup"

	"github.com/hyp-project/hyp/internal/bounds"
)

// Bounds repair (`hyp sink maintain`): entries added before internal/bounds described files
// may have bounds that leave out values of their file (a row group without statistics was
// skipped) or no bounds for some columns. Maintain reads the footer of every live file, and
// replaces each file whose entry's bounds are not the footer's by a copy of it, described
// from its footer, in one rewrite snapshot, as a compaction replaces files: the same rows,
// other bounds. A copy, because iceberg-go never adds a path the table already holds, and
// a snapshot that removed the file and one that added it back would show streaming readers
// its rows as new. The copy is named after the file (copyName); the file itself goes when
// its last snapshot expires. A file some delete file applies to is left as it is: its copy
// would get a new data sequence number, past those deletes.

// describeAll describes the files at paths, data files of tbl's current spec, from their
// footers as a commit would now, a few at a time.
func describeAll(ctx context.Context, tbl *table.Table, paths []string) ([]iceberg.DataFile, error) {
	fsys, err := tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]iceberg.DataFile, len(paths))
	var g errgroup.Group
	g.SetLimit(footerReaders)
	for i, p := range paths {
		g.Go(func() error {
			df, err := bounds.Describe(ctx, fsys, p, tbl.Schema(), tbl.Spec(), tbl.Properties())
			if err != nil {
				return fmt.Errorf("describe %s: %w", p, err)
			}
			out[i] = df
			return nil
		})
	}
	return out, g.Wait()
}

// wrongBounds returns the paths of the live files of tasks whose entries' bounds are not
// their footers'. Files of an older spec are not checked: the current one would describe
// them as another partition.
func wrongBounds(ctx context.Context, tbl *table.Table, tasks []table.FileScanTask) ([]string, error) {
	spec := tbl.Spec()
	var check []table.FileScanTask
	var paths []string
	for _, t := range tasks {
		if fixable(t) && int(t.File.SpecID()) == spec.ID() {
			check, paths = append(check, t), append(paths, t.File.FilePath())
		}
	}
	dfs, err := describeAll(ctx, tbl, paths)
	if err != nil {
		return nil, err
	}
	var out []string
	for i, t := range check {
		if !bounds.Same(t.File, dfs[i]) {
			out = append(out, paths[i])
		}
	}
	return out, nil
}

// fixable reports whether no delete file applies to the task's file.
func fixable(t table.FileScanTask) bool {
	return len(t.DeleteFiles) == 0 && len(t.EqualityDeleteFiles) == 0 && len(t.DeletionVectorFiles) == 0
}

// copyName is the name of the copy of the data file at path that bounds repair adds: the
// file's own name, so that what protects the file (a pending commit's id in it) protects
// the copy too.
func copyName(path string) string {
	return strings.TrimSuffix(path, ".parquet") + "-bounds.parquet"
}

// copyFile copies the data file at path to copyName(path), through tbl's file system.
func copyFile(ctx context.Context, tbl *table.Table, path string) (string, error) {
	fsys, err := tbl.FS(ctx)
	if err != nil {
		return "", err
	}
	wfs, ok := fsys.(icebergio.WriteFileIO)
	if !ok {
		return "", fmt.Errorf("the file system of %s cannot write files", tbl.Location())
	}
	src, err := fsys.Open(path)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", path, err)
	}
	defer src.Close()
	dst := copyName(path)
	w, err := wfs.Create(dst)
	if err != nil {
		return "", fmt.Errorf("create %s: %w", dst, err)
	}
	if _, err := io.Copy(w, src); err != nil {
		return "", errors.Join(fmt.Errorf("copy %s: %w", path, err), w.Close(), remove(wfs, dst))
	}
	if err := w.Close(); err != nil {
		return "", errors.Join(fmt.Errorf("copy %s: %w", path, err), remove(wfs, dst))
	}
	return dst, nil
}

// fixBounds replaces the live files of tbl whose entries' bounds are wrong by described
// copies, in one rewrite snapshot pinned to the head, and says how many it replaced (would,
// in a dry run). When another writer commits meanwhile, the fix is staged again on the new
// head for the files still live there; a copy whose commit never lands is an orphan.
func (l *Lake) fixBounds(ctx context.Context, dataset string, tbl *table.Table, o MaintainOptions) (*table.Table, int, error) {
	tasks, err := liveTasks(ctx, tbl)
	if err != nil {
		return nil, 0, err
	}
	wrong, err := wrongBounds(ctx, tbl, tasks)
	if err != nil || len(wrong) == 0 || o.DryRun {
		return tbl, len(wrong), err
	}
	copies := make([]string, len(wrong))
	for i, p := range wrong {
		if copies[i], err = copyFile(ctx, tbl, p); err != nil {
			return nil, 0, err
		}
	}
	dfs, err := describeAll(ctx, tbl, copies)
	if err != nil {
		return nil, 0, err
	}
	fixes := make(map[string]iceberg.DataFile, len(wrong))
	for i, p := range wrong {
		fixes[p] = dfs[i]
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
