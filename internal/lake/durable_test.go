package lake

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	icebergio "github.com/apache/iceberg-go/io"
)

// Every file a commit leaves in a local warehouse (data files, manifests, manifest lists,
// table metadata, the hadoop catalog's version files) and every directory entry naming one
// are fsync'd by the time the commit returns, for both catalogs; a Lake closed stops it.
func TestLocalWarehouseIsDurable(t *testing.T) {
	for _, cat := range []string{"sql", "hadoop"} {
		t.Run(cat, func(t *testing.T) {
			dir := t.TempDir()
			// By inode: the hadoop catalog writes a file under a temporary name and renames it.
			var mu sync.Mutex
			synced := map[uint64]bool{}
			inode := func(fi fs.FileInfo) uint64 { return fi.Sys().(*syscall.Stat_t).Ino }
			o := Options{Catalog: cat, Warehouse: filepath.Join(dir, "warehouse"), Namespace: "hyp", PartitionBy: "day", Gateway: "gw-a",
				syncFile: func(f *os.File) error {
					fi, err := f.Stat()
					if err != nil {
						return err
					}
					mu.Lock()
					synced[inode(fi)] = true
					mu.Unlock()
					return f.Sync()
				}}
			if cat == "sql" {
				o.URI = "sqlite://" + filepath.Join(dir, "catalog", "cat.db")
			}
			l, err := Open(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			c := commitOf("gw-a", batch(t, "source=web", 1, 5, arrow.PrimitiveTypes.Int64))
			if _, err := l.Commit(context.Background(), c); err != nil {
				t.Fatal(err)
			}
			files := 0
			err = filepath.WalkDir(o.Warehouse, func(path string, d fs.DirEntry, err error) error {
				if err != nil || path == o.Warehouse {
					return err
				}
				fi, err := os.Stat(path)
				if err != nil {
					return err
				}
				parent, err := os.Stat(filepath.Dir(path))
				if err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				if !d.IsDir() {
					files++
					if !synced[inode(fi)] {
						t.Errorf("%s was never fsync'd", path)
					}
				}
				if !synced[inode(parent)] {
					t.Errorf("the directory holding %s was never fsync'd", path)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if files < 4 {
				t.Fatalf("%d files in the warehouse after a commit", files)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if syncerFor(filepath.Join(o.Warehouse, "x")) != nil {
				t.Fatal("the warehouse is still synced after its Lake closed")
			}
		})
	}
}

// InstallDurableIO swaps the local IO once, however often and from however many goroutines
// it is called, and both local forms of a location get durableFS afterwards.
func TestInstallDurableIOIsIdempotent(t *testing.T) {
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(InstallDurableIO)
	}
	wg.Wait()
	InstallDurableIO()
	for _, loc := range []string{"file:///tmp/x", "/tmp/x"} {
		fsys, err := icebergio.LoadFS(context.Background(), nil, loc)
		if err != nil {
			t.Fatalf("%s: %v", loc, err)
		}
		if _, ok := fsys.(durableFS); !ok {
			t.Errorf("%s: the IO is %T, not durableFS", loc, fsys)
		}
	}
}
