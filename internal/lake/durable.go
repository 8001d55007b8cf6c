package lake

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	icebergio "github.com/apache/iceberg-go/io"

	"github.com/hyp-project/hyp/internal/fsutil"
)

// iceberg-go writes every file of a commit (data files, manifests, manifest list, table
// metadata) through the file IO its registry gives for the location's scheme, and only then
// commits to the catalog. Its local IO never fsyncs, so on a local warehouse a power loss
// after a commit (durable in SQLite or PostgreSQL, or a rename for the hadoop catalog)
// could leave the catalog naming files the disk never kept, and the sink's watermark past
// rows the table no longer has. durableFS replaces that IO (InstallDurableIO): under the
// warehouse of an open Lake a created file is fsync'd before its Close returns, new
// directories and renames are fsync'd in their parents, so nothing a commit names can be
// taken back.
//
// The registry is iceberg-go's and process-wide, so the set of warehouses is too. Every
// other local path passes through unchanged: the cache's own tables recover a lost commit
// from their log (internal/cache, recover.go), and a sync per commit would cost them per
// partition.

// warehouses are the local warehouses of the open Lakes, by directory.
var warehouses = struct {
	mu    sync.Mutex
	roots map[string]*warehouseRoot
}{roots: map[string]*warehouseRoot{}}

// installDurable makes InstallDurableIO's swap happen once in a process.
var installDurable sync.Once

// InstallDurableIO swaps durableFS in for iceberg-go's local file IO (the "file" scheme and
// scheme-less locations) for the whole process. It must be called once before any iceberg
// table is loaded: cmd/hyp's main calls it first thing, node.Open before it opens the cache
// (whose tables iceberg-go's hadoop catalog keeps on local disk), and Open before it opens
// a catalog. Only the first call swaps; a later one returns once that swap is done, having
// done nothing, so every place that may come first calls it.
//
// It must come before any goroutine can look the IO up: iceberg-go's registry can only
// Unregister a scheme and Register it again, so a table load elsewhere in the process (the
// cache's flush) that fell between the two would find no IO for file locations and fail.
// Until a Lake opens, durableFS is exactly iceberg-go's local IO, so swapping early changes
// nothing for the cache.
//
// If nothing calls it before a Lake opens, that Lake's Open does, so a local warehouse's
// commits are durable all the same; what is lost is the ordering: the swap then happens
// while anything else in the process that uses iceberg-go (a cache already open, say) may
// be loading a table through the registry, and such a load can fail. A process, or a test
// binary, that opens a cache and then a Lake must therefore call it before opening the
// cache (a test binary in its TestMain). A process that never calls it and never opens a
// Lake keeps iceberg-go's own local IO, which is all the cache needs.
func InstallDurableIO() {
	installDurable.Do(func() {
		// The built-in local IO serves both "file" and scheme-less locations.
		for _, scheme := range []string{"file", ""} {
			icebergio.Unregister(scheme)
			icebergio.Register(scheme, func(context.Context, *url.URL, map[string]string) (icebergio.IO, error) {
				return durableFS{}, nil
			})
		}
	})
}

type warehouseRoot struct {
	open int                  // Lakes open on it
	sync func(*os.File) error // (*os.File).Sync; tests count the calls
}

// keepDurable makes the files iceberg-go writes under dir durable until the returned func
// is called (a Lake's Close). syncFile is what makes one file durable; nil is fsync.
func keepDurable(dir string, syncFile func(*os.File) error) (release func()) {
	if syncFile == nil {
		syncFile = (*os.File).Sync
	}
	dir = filepath.Clean(dir)
	warehouses.mu.Lock()
	defer warehouses.mu.Unlock()
	r := warehouses.roots[dir]
	if r == nil {
		r = &warehouseRoot{sync: syncFile}
		warehouses.roots[dir] = r
	}
	r.open++
	var once sync.Once
	return func() {
		once.Do(func() {
			warehouses.mu.Lock()
			defer warehouses.mu.Unlock()
			if r.open--; r.open == 0 {
				delete(warehouses.roots, dir)
			}
		})
	}
}

// syncerFor is how files at path are made durable: nil when path is under no open Lake's
// warehouse.
func syncerFor(path string) func(*os.File) error {
	path = filepath.Clean(path)
	warehouses.mu.Lock()
	defer warehouses.mu.Unlock()
	for dir, r := range warehouses.roots {
		if strings.HasPrefix(path, dir+string(filepath.Separator)) {
			return r.sync
		}
	}
	return nil
}

// durableFS is iceberg-go's local IO, with every write under an open Lake's warehouse made
// durable before it returns.
type durableFS struct{ icebergio.LocalFS }

// localName is the path a location names, as iceberg-go's local IO reads it.
func localName(name string) string {
	if p, ok := localFile(name); ok {
		return p
	}
	return name
}

func (d durableFS) Create(name string) (icebergio.FileWriter, error) {
	path := localName(name)
	sync := syncerFor(path)
	if sync == nil {
		return d.LocalFS.Create(name)
	}
	if err := fsutil.MkdirAllSyncWith(filepath.Dir(path), sync); err != nil {
		return nil, err
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &durableFile{File: f, sync: sync}, nil
}

func (d durableFS) WriteFile(name string, content []byte) error {
	w, err := d.Create(name)
	if err != nil {
		return err
	}
	if _, err := w.Write(content); err != nil {
		return errors.Join(err, w.Close())
	}
	return w.Close()
}

func (d durableFS) MkdirAll(name string) error {
	path := localName(name)
	if sync := syncerFor(path); sync != nil {
		return fsutil.MkdirAllSyncWith(path, sync)
	}
	return d.LocalFS.MkdirAll(name)
}

func (d durableFS) Rename(oldpath, newpath string) error {
	if err := d.LocalFS.Rename(oldpath, newpath); err != nil {
		return err
	}
	return syncRenamed(localName(oldpath), localName(newpath))
}

func (d durableFS) RenameNoReplace(oldpath, newpath string) error {
	if err := d.LocalFS.RenameNoReplace(oldpath, newpath); err != nil {
		return err
	}
	return syncRenamed(localName(oldpath), localName(newpath))
}

// syncRenamed makes a rename under a warehouse durable: both directories it changed.
func syncRenamed(oldpath, newpath string) error {
	sync := syncerFor(newpath)
	if sync == nil {
		return nil
	}
	err := fsutil.SyncDirWith(filepath.Dir(newpath), sync)
	if od := filepath.Dir(oldpath); od != filepath.Dir(newpath) {
		err = errors.Join(err, fsutil.SyncDirWith(od, sync))
	}
	return err
}

// durableFile is a file created under a warehouse: Close returns once the file and its
// name are on disk.
type durableFile struct {
	*os.File
	sync func(*os.File) error
}

func (f *durableFile) Close() error {
	err := f.sync(f.File)
	if err != nil {
		err = fmt.Errorf("fsync %s: %w", f.Name(), err)
	}
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsutil.SyncDirWith(filepath.Dir(f.Name()), f.sync)
	}
	return err
}
