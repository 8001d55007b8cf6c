// Package fsutil owns the few durable-file primitives every state file in hyp is written
// with: temp file, fsync, rename, fsync of the directory. It never decides what to write.
package fsutil

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// WriteFileAtomic replaces path with data so that a crash at any instant leaves either
// the old content or the new one, never a torn mix, and the new name survives power loss.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	return WriteFileAtomicIf(path, data, perm, nil)
}

// WriteFileAtomicIf is WriteFileAtomic that calls before, when not nil, once data is durable
// in the temp file and just before the rename. An error from before leaves path untouched,
// removes the temp file and is returned as it is, so a caller can compare the file it is
// about to replace with what it expects there, in the last moment before replacing it.
func WriteFileAtomicIf(path string, data []byte, perm os.FileMode, before func() error) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("create temp for %s: %w", path, err)
	}
	tmpName := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			_ = tmp.Close()
			_ = os.Remove(tmpName)
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmpName, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("chmod %s: %w", tmpName, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmpName, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmpName, err)
	}
	if before != nil {
		if err := before(); err != nil {
			return err
		}
	}
	if err := os.Rename(tmpName, path); err != nil {
		return fmt.Errorf("rename %s: %w", path, err)
	}
	ok = true
	return SyncDir(dir)
}

// NoSpace reports whether err means the filesystem had no room (ENOSPC) or the owner's quota
// was spent (EDQUOT): both pass once space is freed, unlike other write errors.
func NoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// SyncDir makes directory entries (creates, renames, removes) in dir durable.
func SyncDir(dir string) error { return SyncDirWith(dir, (*os.File).Sync) }

// SyncDirWith is SyncDir with sync doing the fsync, for a caller whose tests count them.
func SyncDirWith(dir string, sync func(*os.File) error) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := sync(d); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}

// MkdirAllSync creates dir and its missing parents and makes each new entry durable.
func MkdirAllSync(dir string) error { return MkdirAllSyncWith(dir, (*os.File).Sync) }

// MkdirAllSyncWith is MkdirAllSync with sync doing the fsyncs.
func MkdirAllSyncWith(dir string, sync func(*os.File) error) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := MkdirAllSyncWith(parent, sync); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return fmt.Errorf("mkdir %s: %w", dir, err)
	}
	return SyncDirWith(parent, sync)
}
