package cache

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// copyTree copies a directory as cp -a would: same names, same bytes.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// snapshotTree names every file under dir with its size and modification time.
func snapshotTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				out[p] = fmt.Sprint(info.ModTime().Format(time.RFC3339Nano), " ", info.Size())
			}
		}
		return nil
	})
	return out
}

func TestCopiedAndMovedCachesRunOnTheirOwn(t *testing.T) {
	ctx := context.Background()
	orig := filepath.Join(t.TempDir(), "cache")
	c := openTest(t, orig)
	ingestN(t, c, "web", 0, 100)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ingestN(t, c, "web", 100, 50)
	ingestN(t, c, "db", 1000, 30)
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	before := snapshotTree(t, orig)

	cp := filepath.Join(t.TempDir(), "copy")
	copyTree(t, orig, cp)
	c2 := openTest(t, cp)
	assertIDs(t, c2, "web", 150)
	assertIDs(t, c2, "db", 30)
	ingestN(t, c2, "web", 150, 20)
	if err := c2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Compact(ctx, true, nil); err != nil {
		t.Fatal(err)
	}
	assertIDs(t, c2, "web", 170)
	v, err := c2.View()
	if err != nil {
		t.Fatal(err)
	}
	for _, tv := range v.Tables {
		for _, p := range tv.Partitions {
			for _, f := range p.Files {
				if rel, err := filepath.Rel(cp, f); err != nil || rel[0] == '.' {
					t.Errorf("copy reads %s, outside itself", f)
				}
			}
		}
	}
	v.Release()
	if err := c2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	after := snapshotTree(t, orig)
	for p, st := range after {
		if before[p] != st {
			t.Errorf("the copy changed the original's %s", p)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			t.Errorf("the copy removed the original's %s", p)
		}
	}

	// The original still runs, and so does a home moved away from where it was written.
	c = openTest(t, orig)
	assertIDs(t, c, "web", 150)
	c.Close(ctx)
	moved := filepath.Join(t.TempDir(), "moved")
	if err := os.Rename(orig, moved); err != nil {
		t.Fatal(err)
	}
	r, err := OpenReader(ctx, moved)
	if err != nil {
		t.Fatal(err)
	}
	if st := r.Status(); len(st) != 2 {
		t.Errorf("reader of a moved cache sees %d partitions", len(st))
	}
	c = openTest(t, moved)
	defer c.Close(ctx)
	assertIDs(t, c, "web", 150)
	assertIDs(t, c, "db", 30)
}

// TestLostCurrentPointerDeletesNothing: an empty, garbage or deleted CURRENT file (and one
// naming a generation that is gone) costs no row: the partition takes the generation
// holding the most, and the next open keeps it.
func TestLostCurrentPointerDeletesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		harm func(path string) error
	}{
		{"deleted", os.Remove},
		{"empty", func(p string) error { return os.WriteFile(p, nil, 0o600) }},
		{"garbage", func(p string) error { return os.WriteFile(p, []byte("\x00\x01zz\n"), 0o600) }},
		{"names a missing generation", func(p string) error { return os.WriteFile(p, []byte("gen-00000099\n"), 0o600) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			c := openTest(t, dir)
			ingestN(t, c, "web", 0, 100)
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			ingestN(t, c, "web", 100, 100)
			if _, err := c.Compact(ctx, true, nil); err != nil {
				t.Fatal(err)
			}
			ingestN(t, c, "web", 200, 100)
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			p := layout(dir).partition("logs", "source=web").current()
			if err := tc.harm(p); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				c = openTest(t, dir)
				assertIDs(t, c, "web", 300)
				if err := c.Close(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
