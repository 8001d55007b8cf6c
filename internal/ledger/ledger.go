// Package ledger owns the central server's durable memory of which sender seqs it has
// already stored, per (gateway, incarnation, dataset, partition) key, so that a row sent again
// is never stored twice, whatever chunk it arrives in, and a reinstalled sender whose seqs
// start again at 1 (a new incarnation, SPEC 5) is never taken for its earlier life.
//
// Each key is a set of closed seq intervals in one bbolt bucket (value = interval end, keyed
// by the big-endian start). Intervals are merged on insert, overlapping or adjacent ones
// fusing, so a contiguous stream of seqs costs one entry however long it runs. Each server
// cache partition (gateway, dataset, partition: every incarnation of a gateway shares it)
// has a checkpoint: the highest seq of the server's own cache whose origin seqs the ledger
// already reflects, from which crash recovery resumes. The ledger also keeps, per (gateway,
// incarnation), when it was first and last seen and how many rows it stored (incarnation.go).
//
// It never decides what a request's intervals are and never touches the cache: it only
// answers and records what it is told. Each Record is durable when it returns nil, and
// concurrent Records share fsyncs: they queue, and one goroutine commits whatever has queued
// in one transaction (group commit), applying them in the order they arrived, so a key's
// Records land in the order they were made. A Record whose update fails takes down no
// other Record of its batch: the batch is then retried one Record at a time.
package ledger

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Key names one sender partition: the sending gateway, the sender's incarnation ("" for
// senders older than incarnations), the dataset and the partition as the sender names it
// (`source=<s>`).
type Key struct {
	Gateway, Incarnation, Dataset, Partition string
}

// Interval is the closed seq range [Start, End].
type Interval struct {
	Start, End int64
}

var (
	intervalsBucket   = []byte("intervals")    // one nested bucket per Key
	checkpointsBucket = []byte("checkpoints")  // encoded Key without incarnation -> big-endian checkpoint
	incarnationBucket = []byte("incarnations") // encoded (gateway, incarnation) -> seen
	metaBucket        = []byte("meta")
	formatKey         = []byte("format")
)

// format is the on-disk layout version; a ledger written in another layout is refused
// rather than misread, because a misread ledger silently stores duplicates or drops rows.
// Format 2 added incarnations; a format 1 ledger is upgraded in place, for free: its keys
// are exactly the incarnation "" keys of format 2 (encodeKey), and an older build refuses
// the upgraded file rather than dedupe a new incarnation's rows against "".
const format = 2

// lockTimeout bounds the wait for another process's lock on the file: a second server on the
// same home should fail fast with a clear message, not hang at startup.
const lockTimeout = time.Second

// Ledger is safe for concurrent use.
type Ledger struct {
	db *bolt.DB

	mu     sync.Mutex
	queue  []*record // Records waiting for the committer, in arrival order
	closed bool
	kick   chan struct{} // one slot: the queue is not empty
	stop   chan struct{} // closed by Close; the committer drains the queue and exits
	exited chan struct{}
	once   sync.Once
	// beforeCommit, when set (tests), runs before each batch is committed, with its size.
	beforeCommit func(n int)
}

// record is one queued Record call.
type record struct {
	name       []byte // encoded key
	cpName     []byte // checkpointName
	ivs        []Interval
	checkpoint int64
	seen       *sighting  // nil: the Record updates no incarnation
	done       chan error // the Record's own outcome, sent once
}

// Open opens (creating if needed) the ledger file at path.
func Open(path string) (*Ledger, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("open ledger %s: locked by another process (is another hyp server running on this home?)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{intervalsBucket, checkpointsBucket, incarnationBucket} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		meta, err := tx.CreateBucketIfNotExists(metaBucket)
		if err != nil {
			return err
		}
		v := meta.Get(formatKey)
		if v == nil || (len(v) == 8 && binary.BigEndian.Uint64(v) == 1) {
			return meta.Put(formatKey, binary.BigEndian.AppendUint64(nil, format))
		}
		if len(v) != 8 || binary.BigEndian.Uint64(v) != format {
			return fmt.Errorf("unsupported ledger format %x (this build reads format %d)", v, format)
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	l := &Ledger{db: db, kick: make(chan struct{}, 1), stop: make(chan struct{}), exited: make(chan struct{})}
	go l.commitLoop()
	return l, nil
}

// Close waits for the Records already made to commit, refuses later ones, and releases the
// file.
func (l *Ledger) Close() error {
	l.once.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		close(l.stop)
	})
	<-l.exited
	if err := l.db.Close(); err != nil {
		return fmt.Errorf("close ledger: %w", err)
	}
	return nil
}

// encodeKey length-prefixes every part so that no two keys share a bucket name whatever
// bytes their parts contain. The incarnation is a fourth part only when it is not "", so the
// incarnation "" keys are format 1's keys: three parts never read as four.
func encodeKey(k Key) []byte {
	b := encodeParts(nil, k.Gateway, k.Dataset, k.Partition)
	if k.Incarnation != "" {
		b = encodeParts(b, k.Incarnation)
	}
	return b
}

// checkpointName is the checkpoint's key: the server cache partition, which every
// incarnation of the gateway shares.
func checkpointName(k Key) []byte { return encodeParts(nil, k.Gateway, k.Dataset, k.Partition) }

func encodeParts(b []byte, parts ...string) []byte {
	for _, s := range parts {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

// seqKey encodes a non-negative seq so that byte order is numeric order.
func seqKey(s int64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(s)) }

func decodeSeq(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("corrupt ledger entry: %d bytes, want 8", len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

// Held reports, for each of seqs, whether the ledger holds it for k. seqs must be ascending
// and non-negative. The cost is one cursor seek per run of seqs inside one interval or one
// gap, so a chunk costs O(len(seqs) + intervals touched) whatever the key holds.
func (l *Ledger) Held(k Key, seqs []int64) ([]bool, error) {
	for i, s := range seqs {
		if s < 0 || (i > 0 && s < seqs[i-1]) {
			return nil, fmt.Errorf("ledger held %v: seqs must be ascending and non-negative (index %d is %d)", k, i, s)
		}
	}
	held := make([]bool, len(seqs))
	err := l.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(intervalsBucket).Bucket(encodeKey(k))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for i := 0; i < len(seqs); {
			s := seqs[i]
			ck, cv := c.Seek(seqKey(s))
			var next int64 // start of the first interval above s, if hasNext
			hasNext := false
			if ck != nil {
				st, err := decodeSeq(ck)
				if err != nil {
					return err
				}
				next, hasNext = st, st != s
			}
			if ck == nil || hasNext {
				// Only the interval before the next one can still cover s.
				ck, cv = prevOf(c, ck)
			}
			end := int64(-1)
			if ck != nil {
				e, err := decodeSeq(cv)
				if err != nil {
					return err
				}
				end = e
			}
			if end >= s {
				for ; i < len(seqs) && seqs[i] <= end; i++ {
					held[i] = true
				}
				continue
			}
			// s lies in a gap: everything below the next interval is not held.
			for i < len(seqs) && (!hasNext || seqs[i] < next) {
				i++
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ledger held %v: %w", k, err)
	}
	return held, nil
}

// Record adds ivs to k's set and raises k's checkpoint to checkpoint, in one fsync'd
// transaction: either both are durable or neither is, and they are when Record returns nil.
// The checkpoint never moves down, so a caller with nothing new to reflect passes 0. ivs may
// be in any order and may overlap. Concurrent Records share one transaction (see the
// package doc).
func (l *Ledger) Record(k Key, ivs []Interval, checkpoint int64) error {
	return l.record(k, ivs, checkpoint, nil)
}

func (l *Ledger) record(k Key, ivs []Interval, checkpoint int64, seen *sighting) error {
	norm, err := normalize(ivs)
	if err != nil {
		return fmt.Errorf("ledger record %v: %w", k, err)
	}
	r := &record{name: encodeKey(k), cpName: checkpointName(k), ivs: norm, checkpoint: checkpoint, seen: seen, done: make(chan error, 1)}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return fmt.Errorf("ledger record %v: the ledger is closed", k)
	}
	l.queue = append(l.queue, r)
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default: // a kick is already pending; the committer will find r
	}
	if err := <-r.done; err != nil {
		return fmt.Errorf("ledger record %v: %w", k, err)
	}
	return nil
}

// commitLoop is the one goroutine that writes Records. It commits whatever has queued; the
// Records that arrive while a batch's fsync runs form the next batch, so the batch grows
// with the load and a lone Record waits for nothing but its own fsync.
func (l *Ledger) commitLoop() {
	defer close(l.exited)
	for {
		select {
		case <-l.kick:
		case <-l.stop:
			// Close refuses new Records before stop, so this drains everything made.
			l.commitQueued()
			return
		}
		l.commitQueued()
	}
}

func (l *Ledger) commitQueued() {
	l.mu.Lock()
	batch := l.queue
	l.queue = nil
	l.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	if l.beforeCommit != nil {
		l.beforeCommit(len(batch))
	}
	err := l.db.Update(func(tx *bolt.Tx) error {
		for _, r := range batch {
			if err := r.apply(tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil || len(batch) == 1 {
		for _, r := range batch {
			r.done <- err
		}
		return
	}
	// Nothing of the batch was stored: give each Record its own outcome, in order.
	for _, r := range batch {
		r.done <- l.db.Update(r.apply)
	}
}

// apply writes r into tx.
func (r *record) apply(tx *bolt.Tx) error {
	if len(r.ivs) > 0 {
		b, err := tx.Bucket(intervalsBucket).CreateBucketIfNotExists(r.name)
		if err != nil {
			return err
		}
		for _, iv := range r.ivs {
			if err := insert(b, iv); err != nil {
				return err
			}
		}
	}
	if r.seen != nil {
		if err := r.seen.apply(tx); err != nil {
			return err
		}
	}
	cb := tx.Bucket(checkpointsBucket)
	old, err := checkpointIn(cb, r.cpName)
	if err != nil {
		return err
	}
	if r.checkpoint > old {
		return cb.Put(r.cpName, seqKey(r.checkpoint))
	}
	return nil
}

// normalize sorts and fuses ivs, rejecting any that could not be stored.
func normalize(ivs []Interval) ([]Interval, error) {
	for _, iv := range ivs {
		if iv.Start < 0 || iv.End < iv.Start {
			return nil, fmt.Errorf("bad interval [%d,%d]: want 0 <= start <= end", iv.Start, iv.End)
		}
	}
	out := slices.Clone(ivs)
	slices.SortFunc(out, func(a, b Interval) int { return cmp.Compare(a.Start, b.Start) })
	n := 0
	for _, iv := range out {
		if n > 0 && touches(out[n-1].End, iv.Start) {
			out[n-1].End = max(out[n-1].End, iv.End)
			continue
		}
		out[n] = iv
		n++
	}
	return out[:n], nil
}

// touches reports whether an interval starting at start overlaps or is adjacent to one
// ending at end (start >= the other's start). It avoids end+1, which overflows at MaxInt64.
func touches(end, start int64) bool { return start <= end || start-1 == end }

// insert merges iv into the bucket: it absorbs the interval before it if that one reaches
// iv.Start-1, and every following interval that starts by iv.End+1.
func insert(b *bolt.Bucket, iv Interval) error {
	c := b.Cursor()
	var gone [][]byte
	from := seqKey(iv.Start)
	k, _ := c.Seek(from)
	if pk, pv := prevOf(c, k); pk != nil {
		ps, err := decodeSeq(pk)
		if err != nil {
			return err
		}
		pe, err := decodeSeq(pv)
		if err != nil {
			return err
		}
		if touches(pe, iv.Start) {
			iv.Start, iv.End = ps, max(iv.End, pe)
			gone = append(gone, slices.Clone(pk))
		}
	}
	// prevOf moved the cursor, so seek again rather than rely on where bbolt leaves a cursor
	// that stepped off the front.
	for k, v := c.Seek(from); k != nil; k, v = c.Next() {
		st, err := decodeSeq(k)
		if err != nil {
			return err
		}
		if !touches(iv.End, st) {
			break
		}
		e, err := decodeSeq(v)
		if err != nil {
			return err
		}
		iv.End = max(iv.End, e)
		gone = append(gone, slices.Clone(k))
	}
	// Deleting through the cursor while iterating can skip entries in bbolt, so the fused
	// intervals are deleted once the walk is done.
	for _, g := range gone {
		if err := b.Delete(g); err != nil {
			return err
		}
	}
	return b.Put(seqKey(iv.Start), seqKey(iv.End))
}

// prevOf returns the entry before the one Seek returned as k (the last entry when Seek ran
// off the end), leaving the cursor there.
func prevOf(c *bolt.Cursor, k []byte) ([]byte, []byte) {
	if k == nil {
		return c.Last()
	}
	return c.Prev()
}

// Checkpoint returns the checkpoint of k's server cache partition (k.Incarnation does not
// matter), 0 if none was recorded.
func (l *Ledger) Checkpoint(k Key) (int64, error) {
	var cp int64
	err := l.db.View(func(tx *bolt.Tx) error {
		var err error
		cp, err = checkpointIn(tx.Bucket(checkpointsBucket), checkpointName(k))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("ledger checkpoint %v: %w", k, err)
	}
	return cp, nil
}

func checkpointIn(b *bolt.Bucket, name []byte) (int64, error) {
	v := b.Get(name)
	if v == nil {
		return 0, nil
	}
	return decodeSeq(v)
}
