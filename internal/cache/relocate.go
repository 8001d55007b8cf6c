package cache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/apache/iceberg-go"
)

// Iceberg metadata names every file by its absolute path. A home moved to another path, or
// copied (a cloned disk image, a restored backup), still holds metadata naming the old
// place: read as written, a moved home would not start and a copied one would read, and
// append to, the original's files. So a generation that finds itself somewhere other than
// where its metadata says is read through its own copies of those files (the same names
// under its own directory), and the writer moves it into a new generation whose metadata is
// its own before anything is written; nothing outside the home is ever opened.

// movedFrom returns the directory the generation's metadata was written for when that is
// not the directory it is in now, else "".
func (g *generation) movedFrom() string {
	was := filepath.Clean(localPath(g.tbl.Location()))
	if was == filepath.Clean(g.dir) {
		return ""
	}
	a, errA := os.Stat(was)
	b, errB := os.Stat(g.dir)
	if errA == nil && errB == nil && os.SameFile(a, b) {
		return "" // the same directory under another name (a symlink)
	}
	return was
}

// here maps a path the metadata names under from onto the generation's own directory.
func (g *generation) here(from, p string) (string, error) {
	p = localPath(p)
	rel, err := filepath.Rel(from, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("table %v: file %s is outside the table's directory %s", g.ident, p, from)
	}
	return filepath.Join(g.dir, rel), nil
}

// movedFiles lists the live data files of a generation written for directory from, read
// from its own copies of the manifests and named under its own directory.
func (g *generation) movedFiles(from string) ([]FileInfo, error) {
	snap := g.tbl.CurrentSnapshot()
	if snap == nil {
		return nil, nil
	}
	open := func(p string) (*os.File, error) {
		local, err := g.here(from, p)
		if err != nil {
			return nil, err
		}
		return os.Open(local)
	}
	f, err := open(snap.ManifestList)
	if err != nil {
		return nil, fmt.Errorf("table %v: read manifest list: %w", g.ident, err)
	}
	mfs, err := iceberg.ReadManifestList(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("table %v: read manifest list: %w", g.ident, err)
	}
	var out []FileInfo
	for _, mf := range mfs {
		if mf.ManifestContent() != iceberg.ManifestContentData {
			return nil, fmt.Errorf("table %v: unexpected delete manifest %s", g.ident, mf.FilePath())
		}
		f, err := open(mf.FilePath())
		if err != nil {
			return nil, fmt.Errorf("table %v: read manifest: %w", g.ident, err)
		}
		entries, err := iceberg.ReadManifest(mf, f, true)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("table %v: read manifest %s: %w", g.ident, mf.FilePath(), err)
		}
		for _, e := range entries {
			df := e.DataFile()
			if df.ContentType() != iceberg.EntryContentData {
				return nil, fmt.Errorf("table %v: unexpected delete file %s", g.ident, df.FilePath())
			}
			fi := fileInfo(df)
			if fi.Path, err = g.here(from, df.FilePath()); err != nil {
				return nil, err
			}
			out = append(out, fi)
		}
	}
	sortFiles(out)
	return out, nil
}

// relocate moves every partition whose current generation was written somewhere else
// into a new generation of its own: its files hard-linked (or copied) in, its metadata
// written here. It runs at open, before the first flush can append to such a generation.
func (c *Cache) relocate(ctx context.Context) error {
	var errs []error
	for _, p := range c.tables.partitions() {
		p.mu.Lock()
		moved := p.gen != nil && p.gen.moved != ""
		var from string
		if moved {
			from = p.gen.moved
			_, err := c.rebuild(ctx, p, 0)
			if err != nil {
				errs = append(errs, fmt.Errorf("relocate %s/%s from %s: %w", p.Dataset, p.Name(), from, err))
			}
		}
		p.mu.Unlock()
		if moved {
			c.log.Warn("cache table was written at another path (the home was moved or copied); it now has metadata of its own here",
				"dataset", p.Dataset, "partition", p.Name(), "written_at", from)
		}
	}
	return errors.Join(errs...)
}
