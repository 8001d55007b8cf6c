// Package wal owns hyp's write-ahead log: append-only segment files of CRC-framed records,
// fsync'd in groups so that many concurrent appenders share one fsync. It never interprets
// a record's payload and never deletes a segment its owner has not released.
//
// A record is durable once Wait returns nil for its ticket. After a crash the tail of the
// newest segment may be torn; readers stop at the first frame that is short or fails its
// checksum, and Open truncates that tail so new records never follow garbage.
package wal

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/hyp-project/hyp/internal/fsutil"
)

const (
	frameHeader = 8 // u32 length, u32 crc32c
	segSuffix   = ".wal"
	// MaxRecord bounds one record so a corrupt length can never make a reader allocate gigabytes.
	MaxRecord = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrClosed is returned by appends after Close.
var ErrClosed = errors.New("wal: closed")

// Log is the writer side. Append and Wait are safe for concurrent use; callers that need
// records in a particular order serialise their Append calls themselves.
type Log struct {
	dir string

	ioMu sync.Mutex // held while bytes go to the segment file; orders writes with Rotate

	mu       sync.Mutex
	cond     *sync.Cond
	buf      []byte // framed records not yet written
	spare    []byte
	appended uint64 // ticket of the last appended record
	synced   uint64 // ticket of the last durable record
	err      error  // sticky: after a failed write or fsync nothing more is acknowledged
	closed   bool

	seg      *os.File
	segIndex uint64
	segSize  int64
	done     chan struct{}
}

// Segment is a sealed segment file that may be read and then released.
type Segment struct {
	Index uint64
	Path  string
}

func segName(i uint64) string { return fmt.Sprintf("%020d%s", i, segSuffix) }

// List returns dir's segments in order.
func List(dir string) ([]Segment, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("wal: list %s: %w", dir, err)
	}
	var segs []Segment
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), segSuffix)
		if !ok {
			continue
		}
		i, err := strconv.ParseUint(name, 10, 64)
		if err != nil {
			continue
		}
		segs = append(segs, Segment{Index: i, Path: filepath.Join(dir, e.Name())})
	}
	slices.SortFunc(segs, func(a, b Segment) int { return int(a.Index - b.Index) })
	return segs, nil
}

// Open starts a fresh segment after every existing one. Existing segments are returned
// sealed, for the owner to replay and release; the newest has any torn tail cut off first.
func Open(dir string) (*Log, []Segment, error) {
	if err := fsutil.MkdirAllSync(dir); err != nil {
		return nil, nil, err
	}
	segs, err := List(dir)
	if err != nil {
		return nil, nil, err
	}
	next := uint64(1)
	if n := len(segs); n > 0 {
		last := segs[n-1]
		valid, err := Read(last.Path, func([]byte) error { return nil })
		if err != nil {
			return nil, nil, err
		}
		if err := os.Truncate(last.Path, valid); err != nil {
			return nil, nil, fmt.Errorf("wal: truncate torn tail of %s: %w", last.Path, err)
		}
		next = last.Index + 1
	}
	l := &Log{dir: dir, done: make(chan struct{})}
	l.cond = sync.NewCond(&l.mu)
	if err := l.openSegment(next); err != nil {
		return nil, nil, err
	}
	go l.syncLoop()
	return l, segs, nil
}

func (l *Log) openSegment(i uint64) error {
	f, err := os.OpenFile(filepath.Join(l.dir, segName(i)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("wal: create segment: %w", err)
	}
	if err := fsutil.SyncDir(l.dir); err != nil {
		f.Close()
		return err
	}
	l.seg, l.segIndex, l.segSize = f, i, 0
	return nil
}

// Append frames payload into the log and returns a ticket for Wait. The record is not
// durable until Wait(ticket) returns nil.
func (l *Log) Append(payload []byte) (uint64, error) {
	if len(payload) > MaxRecord {
		return 0, fmt.Errorf("wal: record of %d bytes exceeds %d", len(payload), MaxRecord)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	if l.err != nil {
		return 0, l.err
	}
	var hdr [frameHeader]byte
	binary.LittleEndian.PutUint32(hdr[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(hdr[4:8], crc32.Checksum(payload, castagnoli))
	l.buf = append(l.buf, hdr[:]...)
	l.buf = append(l.buf, payload...)
	l.appended++
	l.cond.Broadcast()
	return l.appended, nil
}

// Wait blocks until the record with ticket is durable, or the log failed.
func (l *Log) Wait(ticket uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.synced < ticket && l.err == nil {
		l.cond.Wait()
	}
	if l.synced >= ticket {
		return nil
	}
	return l.err
}

// syncLoop is the group commit: whatever accumulated while the previous fsync ran goes out
// in one write and one fsync, so throughput grows with concurrency instead of being capped
// by fsync latency.
func (l *Log) syncLoop() {
	defer close(l.done)
	for {
		l.mu.Lock()
		for len(l.buf) == 0 && !l.closed && l.err == nil {
			l.cond.Wait()
		}
		if l.err != nil || (l.closed && len(l.buf) == 0) {
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		l.ioMu.Lock()
		err := l.writeOut()
		l.ioMu.Unlock()
		if err != nil {
			return
		}
	}
}

// writeOut writes and fsyncs everything buffered; the caller holds ioMu.
func (l *Log) writeOut() error {
	l.mu.Lock()
	buf, target := l.buf, l.appended
	l.buf, l.spare = l.spare[:0], nil
	l.mu.Unlock()
	var err error
	if len(buf) > 0 {
		if _, err = l.seg.Write(buf); err == nil {
			err = l.seg.Sync()
		}
		l.segSize += int64(len(buf))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.err = fmt.Errorf("wal: write segment %d: %w", l.segIndex, err)
		l.cond.Broadcast()
		return l.err
	}
	if target > l.synced {
		l.synced = target
	}
	if cap(buf) <= 64<<20 {
		l.spare = buf[:0]
	}
	l.cond.Broadcast()
	return nil
}

// Rotate makes everything appended so far durable, seals the current segment and starts a
// new one. It returns the sealed segment, or ok=false when it held no records.
func (l *Log) Rotate() (Segment, bool, error) {
	l.ioMu.Lock()
	defer l.ioMu.Unlock()
	if err := l.writeOut(); err != nil {
		return Segment{}, false, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return Segment{}, false, ErrClosed
	}
	if l.segSize == 0 {
		return Segment{}, false, nil
	}
	sealed := Segment{Index: l.segIndex, Path: l.seg.Name()}
	if err := l.seg.Close(); err != nil {
		l.err = fmt.Errorf("wal: close segment: %w", err)
		return Segment{}, false, l.err
	}
	if err := l.openSegment(l.segIndex + 1); err != nil {
		l.err = err
		return Segment{}, false, err
	}
	return sealed, true, nil
}

// Size is the number of bytes in the active segment, for rotation decisions.
func (l *Log) Size() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.segSize + int64(len(l.buf))
}

// Close makes pending records durable and closes the active segment.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.cond.Broadcast()
	l.mu.Unlock()
	<-l.done
	l.ioMu.Lock()
	defer l.ioMu.Unlock()
	err := l.writeOut()
	if cerr := l.seg.Close(); err == nil {
		err = cerr
	}
	return err
}

// Release deletes a sealed segment whose records the owner has made durable elsewhere.
func Release(seg Segment) error {
	if err := os.Remove(seg.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("wal: release %s: %w", seg.Path, err)
	}
	return fsutil.SyncDir(filepath.Dir(seg.Path))
}

// Read calls fn for every intact record of a segment file in order and returns the byte
// length of the intact prefix. A short or corrupt frame ends the segment: it can only be
// the torn tail of a write that was never acknowledged.
func Read(path string, fn func(payload []byte) error) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("wal: open %s: %w", path, err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var valid int64
	var hdr [frameHeader]byte
	var payload []byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return valid, nil
		}
		n := binary.LittleEndian.Uint32(hdr[0:4])
		sum := binary.LittleEndian.Uint32(hdr[4:8])
		if n > MaxRecord {
			return valid, nil
		}
		if cap(payload) < int(n) {
			payload = make([]byte, n)
		}
		payload = payload[:n]
		if _, err := io.ReadFull(r, payload); err != nil {
			return valid, nil
		}
		if crc32.Checksum(payload, castagnoli) != sum {
			return valid, nil
		}
		if err := fn(payload); err != nil {
			return valid, err
		}
		valid += frameHeader + int64(n)
	}
}
