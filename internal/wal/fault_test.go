package wal

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
)

// faultFile is a segment file whose writes and fsyncs fail on demand; a failing write gets
// partial bytes onto the file first, as a real short write does.
type faultFile struct {
	*os.File
	mu       sync.Mutex
	writeErr error
	partial  int
	syncErr  error
}

func (f *faultFile) Write(b []byte) (int, error) {
	f.mu.Lock()
	err, partial := f.writeErr, f.partial
	f.mu.Unlock()
	if err != nil {
		n, _ := f.File.Write(b[:min(partial, len(b))])
		return n, err
	}
	return f.File.Write(b)
}

func (f *faultFile) Sync() error {
	f.mu.Lock()
	err := f.syncErr
	f.mu.Unlock()
	if err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *faultFile) set(writeErr, syncErr error, partial int) {
	f.mu.Lock()
	f.writeErr, f.syncErr, f.partial = writeErr, syncErr, partial
	f.mu.Unlock()
}

// faultyLog opens a log whose segment files are faultFiles; cur returns the active one.
func faultyLog(t *testing.T, dir string) (*Log, func() *faultFile) {
	t.Helper()
	var mu sync.Mutex
	var last *faultFile
	l, _, err := open(dir, first, func(path string) (segmentFile, error) {
		f, err := createSegment(path)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		last = &faultFile{File: f.(*os.File)}
		return last, nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l, func() *faultFile { mu.Lock(); defer mu.Unlock(); return last }
}

func appendWait(l *Log, p string) error {
	tk, err := l.Append([]byte(p), 0)
	if err != nil {
		return err
	}
	return l.Wait(tk)
}

func TestNoSpaceFailsOnlyItsRecords(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{{"ENOSPC", syscall.ENOSPC}, {"EDQUOT", &os.PathError{Op: "write", Path: "x", Err: syscall.EDQUOT}}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l, cur := faultyLog(t, dir)
			if err := appendWait(l, "before"); err != nil {
				t.Fatal(err)
			}
			cur().set(tc.err, nil, 5)
			for i := range 3 {
				if err := appendWait(l, fmt.Sprintf("full-%d", i)); !errors.Is(err, ErrNoSpace) {
					t.Fatalf("append on a full disk: %v, want ErrNoSpace", err)
				}
			}
			if l.Err() != nil {
				t.Fatalf("a full disk made the log fail: %v", l.Err())
			}
			// Space is back: the log takes records again, with no restart.
			cur().set(nil, nil, 0)
			if err := appendWait(l, "after"); err != nil {
				t.Fatalf("append once there is space: %v", err)
			}
			if _, _, err := l.Rotate(markerAt); err != nil {
				t.Fatal(err)
			}
			l.Close()
			segs, _ := List(dir)
			got, dmg := readAll(t, segs)
			if len(got) != 2 || string(got[0]) != "before" || string(got[1]) != "after" || len(dmg) != 0 {
				t.Fatalf("log holds %q, damage %v: the partial writes were not cut", got, dmg)
			}
		})
	}
}

func TestFailedFsyncIsSticky(t *testing.T) {
	l, cur := faultyLog(t, t.TempDir())
	defer l.Close()
	if err := appendWait(l, "ok"); err != nil {
		t.Fatal(err)
	}
	cur().set(nil, syscall.EIO, 0)
	var failed *FailedError
	if err := appendWait(l, "lost"); !errors.As(err, &failed) {
		t.Fatalf("after a failed fsync: %v, want *FailedError", err)
	}
	cur().set(nil, nil, 0)
	if err := appendWait(l, "later"); !errors.As(err, &failed) {
		t.Fatalf("a failed fsync must stay failed: %v", err)
	}
	if !errors.As(l.Err(), &failed) {
		t.Fatalf("Err() = %v", l.Err())
	}
}

func TestRotateOnAFullDiskKeepsWriting(t *testing.T) {
	dir := t.TempDir()
	l, _, err := open(dir, first, func(path string) (segmentFile, error) {
		if _, err := os.Stat(path); err == nil || len(path) == 0 {
			return nil, err
		}
		segs, _ := List(dir)
		if len(segs) >= 1 {
			return nil, &os.PathError{Op: "open", Path: path, Err: syscall.ENOSPC}
		}
		return createSegment(path)
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := appendWait(l, "one"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Rotate(markerAt); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("rotate with no room for a segment: %v", err)
	}
	if err := appendWait(l, "two"); err != nil || l.Err() != nil {
		t.Fatalf("append after a refused rotation: %v (%v)", err, l.Err())
	}
}
