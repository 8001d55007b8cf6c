package fsutil

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ErrLocked is returned by TryLock when another process (or file description) holds the lock.
var ErrLocked = errors.New("locked by another process")

// Lock is an advisory flock(2) on a file. flock is tied to the open file description, so two
// Locks in one process on the same path exclude each other just like two processes do.
type Lock struct{ f *os.File }

func openLockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	return f, nil
}

// TryLock takes an exclusive lock without waiting.
func TryLock(path string) (*Lock, error) { return lock(path, unix.LOCK_EX|unix.LOCK_NB) }

// SharedLock takes a shared lock, waiting for an exclusive holder to let go.
func SharedLock(path string) (*Lock, error) { return lock(path, unix.LOCK_SH) }

func lock(path string, how int) (*Lock, error) {
	f, err := openLockFile(path)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, ErrLocked
		}
		return nil, fmt.Errorf("flock %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// Unlock releases the lock.
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
