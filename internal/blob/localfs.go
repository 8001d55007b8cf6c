package blob

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hyp-project/hyp/internal/fsutil"
)

// tempDirName is hidden so Hive-style readers and shell globs over the root skip it.
const tempDirName = ".hyp-tmp"

// LocalFS is a Destination in a local directory tree. Files appear atomically: Put renames a
// complete, fsynced file into place, so a crash at any instant leaves either no file at the
// key or the whole one, plus at most a leftover temp file under <root>/.hyp-tmp.
//
// LocalFS records no unit id: a key names a dataset, partition and seq range, and one root
// belongs to one daemon, so the same key always means the same rows and a retried Put
// simply replaces the file with an identical one.
type LocalFS struct {
	root string
}

// NewLocalFS returns a LocalFS rooted at root; the root is created on the first Put.
func NewLocalFS(root string) *LocalFS { return &LocalFS{root: filepath.Clean(root)} }

// TempDir is <root>/.hyp-tmp: on the root's filesystem, so Put's final step is a rename.
func (l *LocalFS) TempDir() string { return filepath.Join(l.root, tempDirName) }

func (l *LocalFS) String() string { return l.root }

// Clean removes leftover temp files of crashed exports. Call it only while no export to this
// root is in flight (at daemon start), since it cannot tell a leftover from a file being
// written.
func (l *LocalFS) Clean() error {
	if err := os.RemoveAll(l.TempDir()); err != nil {
		return fmt.Errorf("clean %s: %w", l.TempDir(), err)
	}
	return nil
}

// Put fsyncs localPath, renames it to the key and fsyncs the directory, so the file is
// durable under its final name when Put returns nil. localPath must be on the root's
// filesystem (use CreateTemp).
func (l *LocalFS) Put(ctx context.Context, obj Object, localPath string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put %s: %w", obj.Key, err)
	}
	if err := checkLocalKey(obj.Key); err != nil {
		return fmt.Errorf("put %q in %s: %w", obj.Key, l.root, err)
	}
	dst := filepath.Join(l.root, filepath.FromSlash(obj.Key))
	if err := syncFile(localPath); err != nil {
		return err
	}
	dir := filepath.Dir(dst)
	if err := fsutil.MkdirAllSync(dir); err != nil {
		return fmt.Errorf("put %s: %w", dst, err)
	}
	if err := os.Rename(localPath, dst); err != nil {
		return fmt.Errorf("put %s: %w", dst, err)
	}
	if err := fsutil.SyncDir(dir); err != nil {
		return fmt.Errorf("put %s: %w", dst, err)
	}
	return nil
}

// syncFile makes the file's contents durable and readable like the directories around it
// (CreateTemp makes files private): exports are meant to be read by other tools.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open export file: %w", err)
	}
	defer f.Close()
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return nil
}

// checkLocalKey refuses keys that would land outside the root or in the temp directory.
// Key never builds such keys; this guards the filesystem against a caller's mistake.
func checkLocalKey(key string) error {
	if key == "" {
		return fmt.Errorf("empty key")
	}
	for i, seg := range strings.Split(key, "/") {
		switch {
		case seg == "", seg == ".", seg == "..":
			return fmt.Errorf("key segment %q is not a file name", seg)
		case i == 0 && seg == tempDirName:
			return fmt.Errorf("key is inside the temp directory")
		case strings.ContainsRune(seg, 0):
			return fmt.Errorf("key contains NUL")
		}
	}
	return nil
}
