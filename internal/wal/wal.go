// Package wal owns hyp's write-ahead log: append-only segment files of CRC-framed records,
// fsync'd in groups so that many concurrent appenders share one fsync, and snapshots of it
// for readers that must not hold up its writer. It never interprets a record's payload and
// never deletes a segment its owner has not released.
//
// A record is durable once Wait returns nil for its ticket. Bytes that hold no intact
// record are damage, and damage costs only the bytes it hits: a reader resynchronises on the
// next frame whose length and checksum hold and reads on, reporting each damaged span to its
// owner. The one exception is a torn tail, the unacknowledged end of the newest segment
// after a crash (damage with no intact record after it): Open keeps its bytes beside the
// segment and cuts it off, so new records never follow garbage.
package wal

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

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

// ErrNoSpace fails the records of a write the filesystem had no room for. It is not
// sticky: the partial bytes are cut off, nothing written before is touched, and the log
// takes records again at once, so ingest succeeds again as soon as there is space.
var ErrNoSpace = errors.New("wal: no space left on the device")

// FailedError is the sticky failure of a log that can no longer vouch for what it wrote (a
// failed fsync, a write it could not undo): nothing more is acknowledged until the process
// restarts and replays what is on disk.
type FailedError struct{ Err error }

func (e *FailedError) Error() string { return "wal: failed, restart needed: " + e.Err.Error() }
func (e *FailedError) Unwrap() error { return e.Err }

// segmentFile is what the log needs of a segment file; tests put faults in through
// Log.create.
type segmentFile interface {
	Write([]byte) (int, error)
	Sync() error
	Truncate(int64) error
	Seek(int64, int) (int64, error)
	Close() error
	Name() string
}

func createSegment(path string) (segmentFile, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
}

// failedRange is tickets from..to whose write failed with err.
type failedRange struct {
	from, to uint64
	err      error
}

// Log is the writer side. Append and Wait are safe for concurrent use; callers that need
// records in a particular order serialise their Append calls themselves.
type Log struct {
	dir string

	ioMu sync.Mutex // held while bytes go to the segment file; orders writes with Rotate

	mu         sync.Mutex
	cond       *sync.Cond
	buf        []byte // framed records not yet written
	spare      []byte
	appended   uint64 // ticket of the last appended record
	synced     uint64 // ticket of the last record written out, durable unless in failed
	failed     []failedRange
	bufPos     int64 // position of the last record appended
	writtenPos int64 // position of the last record written out
	err        error // sticky (*FailedError): after a failed fsync nothing more is acknowledged
	closed     bool
	create     func(path string) (segmentFile, error)
	onSync     func(time.Duration) // how long each group fsync took; nil for nobody

	seg       segmentFile
	segIndex  uint64
	segSize   int64 // bytes written out to seg; changed under ioMu and mu both, so either reads it
	firstSize int64 // bytes of the segment's first record, which alone does not need sealing
	done      chan struct{}
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

// Open starts a fresh segment after every existing one, whose first record is the payload
// first returns: it gets the sealed segments, read nothing yet, so the owner can compute from
// them what the new segment starts with (hyp's cache writes there the next seq, which bounds
// any damage found later). Existing segments are returned sealed, for the owner to replay and
// release; the newest has any torn tail cut off first.
//
// onSync, when not nil, is told how long each fsync of the group commit took (the daemon's
// hyp_wal_fsync_seconds); it runs on the log's writer and must not block.
func Open(dir string, first func(sealed []Segment) ([]byte, error), onSync func(time.Duration)) (*Log, []Segment, error) {
	return open(dir, first, createSegment, onSync)
}

func open(dir string, first func(sealed []Segment) ([]byte, error), create func(string) (segmentFile, error), onSync func(time.Duration)) (*Log, []Segment, error) {
	if err := fsutil.MkdirAllSync(dir); err != nil {
		return nil, nil, err
	}
	segs, err := List(dir)
	if err != nil {
		return nil, nil, err
	}
	next := uint64(1)
	if n := len(segs); n > 0 {
		if err := cutTornTail(segs[n-1].Path); err != nil {
			return nil, nil, err
		}
		next = segs[n-1].Index + 1
	}
	payload, err := first(segs)
	if err != nil {
		return nil, nil, err
	}
	l := &Log{dir: dir, done: make(chan struct{}), create: create, onSync: onSync}
	l.cond = sync.NewCond(&l.mu)
	if err := l.openSegment(next); err != nil {
		return nil, nil, err
	}
	l.buf = appendFrame(l.buf, payload)
	l.firstSize = int64(len(l.buf))
	if err := l.writeOut(); err != nil {
		l.seg.Close()
		return nil, nil, err
	}
	go l.syncLoop()
	return l, segs, nil
}

// cutTornTail truncates the newest segment after its last intact record when what follows
// is what a crash during a write leaves: zeroes, or a frame the file ends inside of. Those
// bytes were never acknowledged. Anything else after the last intact record (a whole frame
// whose checksum fails) is damage, left for the owner to report. Cut bytes other than
// zeroes are kept next to the segment, as <segment>.torn-<offset>.
func cutTornTail(path string) error {
	var tail *Damage
	end, err := Read(path, func(int64, []byte) error { return nil }, func(d Damage) error {
		tail = &d
		return nil
	})
	if err != nil {
		return err
	}
	if tail == nil || tail.Offset < end {
		return nil // damage, if any, lies between intact records: the owner reports it
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("wal: read torn tail of %s: %w", path, err)
	}
	cut := b[end:]
	zeroes := strings.Trim(string(cut), "\x00") == ""
	if !zeroes && len(cut) >= frameHeader && int64(binary.LittleEndian.Uint32(cut)) <= int64(len(cut)-frameHeader) {
		return nil
	}
	if !zeroes {
		if err := fsutil.WriteFileAtomic(fmt.Sprintf("%s.torn-%d", path, end), cut, 0o600); err != nil {
			return fmt.Errorf("wal: keep torn tail of %s: %w", path, err)
		}
	}
	if err := os.Truncate(path, end); err != nil {
		return fmt.Errorf("wal: truncate torn tail of %s: %w", path, err)
	}
	return nil
}

func appendFrame(dst, payload []byte) []byte {
	at := len(dst)
	dst = append(append(dst, make([]byte, frameHeader)...), payload...)
	putHeader(dst[at:])
	return dst
}

// putHeader fills in the header of the frame that is the whole of frame.
func putHeader(frame []byte) {
	payload := frame[frameHeader:]
	binary.LittleEndian.PutUint32(frame[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(frame[4:8], crc32.Checksum(payload, castagnoli))
}

func (l *Log) openSegment(i uint64) error {
	f, err := l.create(filepath.Join(l.dir, segName(i)))
	if err != nil {
		return fmt.Errorf("wal: create segment: %w", err)
	}
	if err := fsutil.SyncDir(l.dir); err != nil {
		// Gone again, so the next attempt can create it afresh.
		f.Close()
		os.Remove(f.Name())
		return err
	}
	l.seg, l.segIndex, l.segSize = f, i, 0
	return nil
}

// Append frames payload into the log and returns a ticket for Wait. The record is not
// durable until Wait(ticket) returns nil. pos is the owner's position of the record (hyp's
// cache gives the last seq it holds); positions must grow with append order, and the log
// uses them only to tell Rotate where the sealed segment ends. An empty payload is
// refused: a run of zero bytes would otherwise read as intact empty records.
func (l *Log) Append(payload []byte, pos int64) (uint64, error) {
	if len(payload) == 0 || len(payload) > MaxRecord {
		return 0, recordSizeError(len(payload))
	}
	return l.AppendFunc(func(dst []byte) []byte { return append(dst, payload...) }, pos)
}

func recordSizeError(n int) error {
	return fmt.Errorf("wal: record of %d bytes is outside 1..%d", n, MaxRecord)
}

// AppendFunc is Append for a payload that encode appends to dst, so that an owner that
// builds its records from parts writes them straight into the log's buffer instead of into
// a buffer of its own that Append then copies. encode runs with the log locked: it must
// only append, and must not call the log.
func (l *Log) AppendFunc(encode func(dst []byte) []byte, pos int64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	if l.err != nil {
		return 0, l.err
	}
	at := len(l.buf)
	l.buf = encode(append(l.buf, make([]byte, frameHeader)...))
	if n := len(l.buf) - at - frameHeader; n == 0 || n > MaxRecord {
		l.buf = l.buf[:at]
		return 0, recordSizeError(n)
	}
	putHeader(l.buf[at:])
	l.bufPos = pos
	l.appended++
	l.cond.Broadcast()
	return l.appended, nil
}

// Wait blocks until the record with ticket is durable, or its write failed (ErrNoSpace),
// or the log failed (*FailedError).
func (l *Log) Wait(ticket uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.synced < ticket && l.err == nil {
		l.cond.Wait()
	}
	for _, f := range l.failed {
		if f.from <= ticket && ticket <= f.to {
			return f.err
		}
	}
	if l.synced >= ticket {
		return nil
	}
	return l.err
}

// Err is the log's sticky failure, or nil while it takes records.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
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

// writeOut writes and fsyncs everything buffered; the caller holds ioMu. A write that
// runs out of space fails only its own records: the bytes it got onto the file are cut off
// again and the log goes on. Any other failure, and a failed fsync (after which the kernel
// may have dropped dirty pages it will never write), is sticky.
func (l *Log) writeOut() error {
	l.mu.Lock()
	buf, target, from, pos := l.buf, l.appended, l.synced+1, l.bufPos
	l.buf, l.spare = l.spare[:0], nil
	l.mu.Unlock()
	var err error
	var noSpace bool
	var wrote int64
	if len(buf) > 0 {
		if _, err = l.seg.Write(buf); err == nil {
			start := time.Now()
			err = l.seg.Sync()
			if l.onSync != nil {
				l.onSync(time.Since(start))
			}
			if err == nil {
				wrote = int64(len(buf))
			}
		} else if fsutil.NoSpace(err) {
			noSpace = true
			if terr := l.undo(); terr != nil {
				err, noSpace = fmt.Errorf("%w; cutting the partial write: %v", err, terr), false
			}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case noSpace:
		l.failed = append(l.failed, failedRange{from, target, ErrNoSpace})
		if len(l.failed) > 64 {
			// A waiter wakes as soon as its range is added; the oldest are long read.
			l.failed = l.failed[len(l.failed)-64:]
		}
	case err != nil:
		l.err = &FailedError{Err: fmt.Errorf("write segment %d: %w", l.segIndex, err)}
		l.cond.Broadcast()
		return l.err
	}
	if target > l.synced {
		l.synced = target
	}
	l.segSize += wrote
	if len(buf) > 0 {
		l.writtenPos = max(l.writtenPos, pos)
	}
	if cap(buf) <= 64<<20 {
		l.spare = buf[:0]
	}
	l.cond.Broadcast()
	return nil
}

// undo cuts the segment back to its last complete write.
func (l *Log) undo() error {
	if err := l.seg.Truncate(l.segSize); err != nil {
		return err
	}
	_, err := l.seg.Seek(l.segSize, io.SeekStart)
	return err
}

// Rotate makes everything appended so far durable, seals the current segment and starts a
// new one whose first record is first(next), where next is one above the position of the
// last record in the sealed segment, so at or below that of every record after it. It
// returns the sealed segment, or ok=false when it held no records but its first. Records
// appended while it runs go to the new segment, after first's.
func (l *Log) Rotate(first func(next int64) []byte) (Segment, bool, error) {
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
	if l.segSize <= l.firstSize {
		return Segment{}, false, nil
	}
	// The next segment is created before this one is closed: a full disk that refuses the
	// new file leaves the log writing where it was, not stopped.
	old := l.seg
	sealed := Segment{Index: l.segIndex, Path: old.Name()}
	if err := l.openSegment(l.segIndex + 1); err != nil {
		return Segment{}, false, err
	}
	if err := old.Close(); err != nil {
		l.err = &FailedError{Err: fmt.Errorf("close segment %d: %w", sealed.Index, err)}
		return Segment{}, false, l.err
	}
	marker := first(l.writtenPos + 1)
	l.buf = append(appendFrame(l.spare[:0], marker), l.buf...)
	l.spare = nil
	l.firstSize = int64(frameHeader + len(marker))
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

// Snapshot is every record of the log acknowledged when it was taken, open for reading: the
// sealed segments the owner has not released, and the active one up to the last record
// written out (every record Wait has returned nil for is there). It holds the segment files
// open, so a segment the owner releases afterwards stays readable through it: the owner can
// take a snapshot, then pair it with what it keeps elsewhere, and read at leisure while
// records are appended and segments rotated and released. A segment released before the
// snapshot opened it is left out: the owner releases only segments whose records it keeps
// elsewhere.
type Snapshot struct {
	segs []snapSegment
}

type snapSegment struct {
	path string
	f    *os.File
	size int64 // bytes to read
}

// Snapshot opens the log's segments, holding off writes and Rotate for as long as it takes
// to list and open them.
func (l *Log) Snapshot() (*Snapshot, error) {
	l.ioMu.Lock()
	defer l.ioMu.Unlock()
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	segs, err := List(l.dir)
	if err != nil {
		return nil, err
	}
	s := &Snapshot{}
	for _, seg := range segs {
		f, err := os.Open(seg.Path)
		if errors.Is(err, os.ErrNotExist) {
			continue // released since List
		}
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("wal: snapshot: %w", err)
		}
		size := int64(math.MaxInt64) // sealed: no longer written
		if seg.Index == l.segIndex {
			// Under ioMu: nothing is being written, and segSize ends at a record's end.
			size = l.segSize
		}
		s.segs = append(s.segs, snapSegment{seg.Path, f, size})
	}
	return s, nil
}

// Read calls fn for every intact record of the snapshot, segment after segment, in log
// order; damage is skipped (it is the owner's to report when it replays the log).
func (s *Snapshot) Read(fn func(payload []byte) error) error {
	for _, seg := range s.segs {
		if _, err := read(io.NewSectionReader(seg.f, 0, seg.size), seg.path, func(_ int64, p []byte) error { return fn(p) }, nil); err != nil {
			return err
		}
	}
	return nil
}

// Close closes the snapshot's files.
func (s *Snapshot) Close() {
	for _, seg := range s.segs {
		seg.f.Close()
	}
	s.segs = nil
}

// Damage is a span [Offset, End) of a segment that holds no intact record: a length out of
// range, a checksum that does not match, or a frame the file ends inside of.
type Damage struct {
	Path        string
	Offset, End int64
}

// Read calls fn for every intact record of a segment file in order, with its offset, and
// damaged for every span that is not one, in file order; it resynchronises after damage on
// the next frame whose length and checksum hold. It returns the offset just past the last
// intact record. An error from fn or damaged stops it and is returned; a nil damaged skips
// damage silently, for readers that only need the intact records.
func Read(path string, fn func(off int64, payload []byte) error, damaged func(Damage) error) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("wal: open %s: %w", path, err)
	}
	defer f.Close()
	return read(io.NewSectionReader(f, 0, math.MaxInt64), path, fn, damaged)
}

// read is Read over the bytes of f, the segment at path.
func read(f *io.SectionReader, path string, fn func(off int64, payload []byte) error, damaged func(Damage) error) (int64, error) {
	if damaged == nil {
		damaged = func(Damage) error { return nil }
	}
	// Smaller than a typical record on purpose: bufio hands a read at least as large as its
	// buffer straight to the file, so most of a record's bytes are copied once, from the
	// page cache into payload, rather than through the buffer as well.
	r := bufio.NewReaderSize(f, 64<<10)
	var off, end int64
	var hdr [frameHeader]byte
	var payload []byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF {
				return end, nil
			}
			break // a frame the file ends inside of
		}
		n := binary.LittleEndian.Uint32(hdr[0:4])
		if n == 0 || n > MaxRecord {
			break
		}
		if cap(payload) < int(n) {
			payload = make([]byte, n)
		}
		payload = payload[:n]
		if _, err := io.ReadFull(r, payload); err != nil {
			break
		}
		if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(hdr[4:8]) {
			break
		}
		if err := fn(off, payload); err != nil {
			return end, err
		}
		off += frameHeader + int64(n)
		end = off
	}
	// Damage is rare: read the rest whole and search it for intact frames.
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return end, fmt.Errorf("wal: read %s: %w", path, err)
	}
	rest, err := io.ReadAll(f)
	if err != nil {
		return end, fmt.Errorf("wal: read %s: %w", path, err)
	}
	for len(rest) > 0 {
		skip := resync(rest)
		if skip > 0 {
			if err := damaged(Damage{Path: path, Offset: off, End: off + int64(skip)}); err != nil {
				return end, err
			}
			off, rest = off+int64(skip), rest[skip:]
		}
		for {
			n, ok := frameAt(rest, 0)
			if !ok {
				break
			}
			if err := fn(off, rest[frameHeader:frameHeader+n]); err != nil {
				return end, err
			}
			off, rest = off+int64(frameHeader+n), rest[frameHeader+n:]
			end = off
		}
	}
	return end, nil
}

// frameAt reports whether b[i:] starts with an intact frame, and its payload length.
func frameAt(b []byte, i int) (int, bool) {
	if len(b)-i < frameHeader {
		return 0, false
	}
	n := int(binary.LittleEndian.Uint32(b[i:]))
	if n == 0 || n > MaxRecord || n > len(b)-i-frameHeader {
		return 0, false
	}
	p := b[i+frameHeader : i+frameHeader+n]
	return n, crc32.Checksum(p, castagnoli) == binary.LittleEndian.Uint32(b[i+4:])
}

// resync is the offset of the first intact frame in b, or len(b). A random position passes
// for a frame only if 32 bits of checksum match by chance.
func resync(b []byte) int {
	for i := range len(b) {
		if _, ok := frameAt(b, i); ok {
			return i
		}
	}
	return len(b)
}
