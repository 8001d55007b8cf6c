package query

import (
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzReadOnlyGuard holds the read-only guard to what it is for: whatever SQL it is given,
// accepted or refused, nothing on disk changes: no cache file is rewritten and no file
// appears, in the cache or in a directory a COPY or EXPORT could write to.
func FuzzReadOnlyGuard(f *testing.F) {
	fx := newFixture(f)
	dir := f.TempDir()
	target := filepath.Join(dir, "out.csv")
	cacheFile := fx.tables[0].Partitions[0].Files[0]
	for _, s := range writeStatements(target, cacheFile, dir) {
		f.Add(s)
	}
	for _, s := range []string{
		"SELECT * FROM logs", "SELECT count(*) FROM read_parquet(" + quoteString(fx.stray) + ")",
		"FROM logs", "EXPLAIN SELECT 1", "SHOW TABLES", "DESCRIBE logs", "SUMMARIZE logs",
		"WITH a AS (SELECT 1) SELECT * FROM a", "SELECT 1 /* ; COPY */", "SELECT ';' AS s",
		"VALUES (1)", "TABLE logs", "PIVOT logs ON msg", "select\t1;", `SELECT "msg" FROM logs`,
		"EXPLAIN ANALYZE SELECT 1", "SELECT * FROM glob('" + dir + "/*')",
	} {
		f.Add(s)
	}
	roots := []string{filepath.Dir(filepath.Dir(cacheFile)), filepath.Dir(fx.stray), dir}
	before := snapshot(f, roots)
	f.Fuzz(func(t *testing.T, sql string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = Run(ctx, fx.tables, sql, Options{Format: FormatJSONL}, io.Discard)
		after := snapshot(t, roots)
		for p, st := range after {
			if was, ok := before[p]; !ok || was != st {
				t.Fatalf("%q changed %s (%v -> %v)", sql, p, was, st)
			}
		}
		for p := range before {
			if _, ok := after[p]; !ok {
				t.Fatalf("%q removed %s", sql, p)
			}
		}
	})
}

type fileState struct {
	size int64
	mod  time.Time
}

func snapshot(t testing.TB, roots []string) map[string]fileState {
	t.Helper()
	out := map[string]fileState{}
	for _, root := range roots {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			if !d.IsDir() {
				out[p] = fileState{info.Size(), info.ModTime()}
			} else if p != root {
				out[p] = fileState{-1, time.Time{}}
			}
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	return out
}
