package cache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	icebergio "github.com/apache/iceberg-go/io"
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
	files, err := g.readFiles(movedIO{g: g, from: from}, snap)
	if err != nil {
		return nil, err
	}
	for i := range files {
		if files[i].Path, err = g.here(from, files[i].Path); err != nil {
			return nil, err
		}
	}
	sortFiles(files)
	return files, nil
}

// movedIO opens, for a name under from, the generation's own copy of that file; it opens
// nothing else and removes nothing.
type movedIO struct {
	g    *generation
	from string
}

func (m movedIO) Open(name string) (icebergio.File, error) {
	local, err := m.g.here(m.from, name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return os.Open(local)
}

func (m movedIO) Remove(name string) error {
	return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrPermission}
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
			if err := c.rebuild(ctx, p, p.gen, 0); err != nil {
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
