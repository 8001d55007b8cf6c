// Package watermark owns every sink's position: one JSON file per (sink instance, dataset,
// partition) under `sinks/<instance>/watermarks/<dataset>/<partition>.json` (SPEC 2).
//
// A file holds the watermark (every row with seq <= Seq is exported, skipped or recorded as
// a gap), the intent of the unit being shipped (and of the one queued behind it, Next), a
// generation that grows with every write, and what operators need to see (errors, gaps,
// quarantined units). Every write states what it requires of the state (a Requirement: the
// generation it read, the position, the unit in flight), so an operator's rewind and an
// export in flight can never overwrite each other: whichever writes second finds its
// requirement broken and re-reads.
// Before every write the file on disk is compared with what this store last wrote; a file
// changed by hand is adopted as the truth, logged, and never clobbered. The comparison is
// made twice: when the write is decided, and again once the new contents are durable in
// their temp file, just before the rename, so an edit that lands while the write is under
// way (its fsync takes milliseconds) fails the write instead of being overwritten. Only an
// edit in the microseconds between that second look and the rename can still be lost.
//
// The store never reads the cache and never decides what to export.
package watermark

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hyp-project/hyp/internal/fsutil"
	"github.com/hyp-project/hyp/internal/partition"
)

// Version is the file format version this store writes.
const Version = 1

// ErrStale means the state no longer meets a write's Requirement (a rewind, a hand edit
// changed what the write stood on); the caller must re-read and decide again.
var ErrStale = errors.New("watermark changed since it was read")

// Key names one watermark.
type Key struct {
	Instance  string
	Dataset   string
	Partition string
}

func (k Key) String() string { return k.Instance + "/" + k.Dataset + "/" + k.Partition }

// Unit is an export unit: the rows of a partition with seq in (From, Last], whose lowest
// seq is First. It is persisted as an intent before it is shipped, so a retry after a crash
// re-reads exactly these rows and reproduces the same batch id and object key.
type Unit struct {
	From  int64  `json:"from"`
	First int64  `json:"first"`
	Last  int64  `json:"last"`
	Rows  int64  `json:"rows"`
	ID    string `json:"id"`
	// KeyLayout is the blob key layout (blob.Layout) the unit was decided with, so a retry
	// writes the key its first attempt did: 0 (the plain `source=` directories) for units
	// decided before the reserved `_hyp_source=` ones.
	KeyLayout int `json:"key_layout,omitempty"`
	// Commit is set by table sinks, which commit the units of several partitions in one
	// table snapshot: which commit holds the unit and where the table stood before it.
	Commit *TableCommit `json:"commit,omitempty"`
	// Transform is the sink's transform SQL the unit's rows were shaped with when it was
	// decided ("" for none): a retry shapes them the same way, whatever the config says by
	// then.
	Transform string `json:"transform,omitempty"`
	// KeptFirst and KeptLast are the seq bounds of the rows the transform kept, when it kept
	// any: a blob file is named after them, so its name spans exactly its rows, and a retry
	// names it the same whatever became of the rows since.
	KeptFirst int64 `json:"kept_first,omitempty"`
	KeptLast  int64 `json:"kept_last,omitempty"`
}

// TableCommit is the table commit an intent's unit belongs to: ID is recorded in the
// commit's snapshot, and Snapshot is the table's current snapshot (0 for none) when the
// intent was written, so recovery looks for ID only among the snapshots after it.
type TableCommit struct {
	ID       string `json:"id"`
	Snapshot int64  `json:"snapshot"`
}

// Gap is rows a sink will never export, with why: the Rows rows of the partition with seq
// in From..To, both inclusive.
type Gap struct {
	From   int64     `json:"from_seq"`
	To     int64     `json:"to_seq"`
	Rows   int64     `json:"rows"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
	// Pending marks a gap written before the delete that causes it (an intent): it becomes
	// final once the delete is known to have happened, and is dropped if it did not.
	Pending bool `json:"pending,omitempty"`
}

// Rewind records an operator's move of the watermark: who asked, for what target, and
// where it went from and to.
type Rewind struct {
	At     time.Time `json:"at"`
	By     string    `json:"by"`
	Target string    `json:"target"`
	From   int64     `json:"from_seq"`
	To     int64     `json:"to_seq"`
}

// Quarantined is a unit the destination refused as poison; its rows are kept in File.
type Quarantined struct {
	First  int64     `json:"first_seq"`
	Last   int64     `json:"last_seq"`
	Rows   int64     `json:"rows"`
	File   string    `json:"file"`
	Status int       `json:"status,omitempty"`
	Error  string    `json:"error"`
	At     time.Time `json:"at"`
}

// State is one watermark file.
type State struct {
	Version      int       `json:"version"`
	Dataset      string    `json:"dataset"`
	Partition    string    `json:"partition"`
	Seq          int64     `json:"seq"`
	ExportedRows int64     `json:"exported_rows"`
	UpdatedAt    time.Time `json:"updated_at"`
	Generation   int64     `json:"generation"`
	Intent       *Unit     `json:"intent,omitempty"`
	// Next is the unit after Intent, decided and durable before Intent is settled so that it
	// may ship the moment Intent is delivered (a forward sink's pipeline): it starts where
	// Intent ends, and it goes when Intent is dropped or replaced other than by settling.
	Next         *Unit      `json:"next,omitempty"`
	LastExportAt *time.Time `json:"last_export_at,omitempty"`
	LastError    string     `json:"last_error,omitempty"`
	WithheldRows int64      `json:"withheld_rows,omitempty"`
	// FilteredRows counts the exported rows the sink's transform dropped (they count in
	// ExportedRows too: the watermark passed them).
	FilteredRows int64         `json:"filtered_rows,omitempty"`
	Gaps         []Gap         `json:"gaps,omitempty"`
	Quarantined  []Quarantined `json:"quarantined,omitempty"`
	LastRewind   *Rewind       `json:"last_rewind,omitempty"`
}

// maxGeneration bounds a generation read from a file, so that adopting an edit (which
// moves above it) can never overflow; it is also the largest integer JSON tools keep exact.
const maxGeneration = 1 << 53

// maxListed bounds the gaps and quarantined units a file keeps, so a sink that keeps
// failing cannot grow its state file without limit; the oldest entries go first.
const maxListed = 100

// Store reads and writes watermark files under root (`<home>/sinks`).
type Store struct {
	root string
	log  *slog.Logger
	now  func() time.Time
	// writeFile makes a state file durable (fsutil.WriteFileAtomicIf), calling unchanged
	// just before the rename; tests put faults in.
	writeFile func(path string, data []byte, perm os.FileMode, unchanged func() error) error
	// beforeWrite, in tests, runs as a write starts, where an edit by hand can land.
	beforeWrite func(path string)

	mu    sync.Mutex
	known map[Key]*entry
}

// entry is what the store last observed of one file. Generations handed out for a key never
// repeat within a store: any change it did not make itself (an edit, a file appearing or
// disappearing) moves the generation above everything seen before, so a writer that decided
// on an older observation always fails its compare-and-set.
type entry struct {
	mu      sync.Mutex // serialises read-compare-write of this key
	seen    bool       // observed at least once
	written []byte     // bytes last written or read; nil when the file was last seen missing
	gen     int64      // generation of the last observation
}

// Open returns a store rooted at root. It creates nothing until the first write.
func Open(root string, log *slog.Logger, now func() time.Time, opts ...Option) *Store {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	s := &Store{root: root, log: log, now: now, known: map[Key]*entry{}, writeFile: fsutil.WriteFileAtomicIf}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Option changes how a Store is opened.
type Option func(*Store)

// WithWriteFile replaces how state files are written (temp, fsync, rename, fsync of the
// directory), so tests can make a write fail the way a full or failing disk does.
func WithWriteFile(fn func(path string, data []byte, perm os.FileMode) error) Option {
	return func(s *Store) {
		s.writeFile = func(path string, data []byte, perm os.FileMode, unchanged func() error) error {
			if err := unchanged(); err != nil {
				return err
			}
			return fn(path, data, perm)
		}
	}
}

// errChangedBehind fails a write whose file changed on disk after the write was decided.
var errChangedBehind = errors.New("watermark file changed on disk while it was being written")

// Path is the file of k.
func (s *Store) Path(k Key) (string, error) {
	seg, err := partition.PathSegment(k.Partition)
	if err != nil {
		return "", err
	}
	return filepath.Join(s.root, k.Instance, "watermarks", k.Dataset, seg+".json"), nil
}

func (s *Store) entry(k Key) *entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.known[k]
	if e == nil {
		e = &entry{}
		s.known[k] = e
	}
	return e
}

// Get returns the current state of k: a zero state (Seq 0, Generation 0) if no file exists.
// A file that changed since this store last saw it is adopted and logged.
func (s *Store) Get(k Key) (State, error) {
	e := s.entry(k)
	e.mu.Lock()
	defer e.mu.Unlock()
	return s.read(k, e)
}

// maxAdoptTries bounds how often read adopts an edit that is itself edited again while it
// is written back, so a file rewritten without pause fails the read instead of spinning.
const maxAdoptTries = 3

// read loads the file under e.mu, noticing edits made behind the store's back.
func (s *Store) read(k Key, e *entry) (State, error) {
	for tries := 1; ; tries++ {
		st, err := s.readOnce(k, e)
		if !errors.Is(err, errChangedBehind) || tries == maxAdoptTries {
			return st, err
		}
	}
}

// readOnce is one attempt of read: errChangedBehind when the file changed again while an
// edit was being adopted.
func (s *Store) readOnce(k Key, e *entry) (State, error) {
	path, err := s.Path(k)
	if err != nil {
		return State{}, err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		if e.written != nil {
			s.log.Warn("watermark file removed behind the daemon; starting that partition from seq 0", "sink", k.Instance, "dataset", k.Dataset, "partition", k.Partition, "file", path)
			e.written = nil
			e.gen++
		}
		e.seen = true
		return State{Version: Version, Dataset: k.Dataset, Partition: k.Partition, Generation: e.gen}, nil
	}
	if err != nil {
		return State{}, fmt.Errorf("read watermark %s: %w", path, err)
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return State{}, fmt.Errorf("watermark %s is not valid JSON (fix or remove it): %w", path, err)
	}
	if st.Seq < 0 {
		return State{}, fmt.Errorf("watermark %s: seq %d is negative", path, st.Seq)
	}
	if st.Generation < 0 || st.Generation > maxGeneration {
		return State{}, fmt.Errorf("watermark %s: generation %d is out of range 0..%d (fix or remove the field)", path, st.Generation, maxGeneration)
	}
	if st.Intent != nil && st.Intent.From != st.Seq {
		// An intent belongs to the watermark it was written at; an edit that moved the seq
		// leaves it meaningless, and exporting from the new seq is what the operator asked.
		st.Intent = nil
	}
	if st.Next != nil && (st.Intent == nil || st.Next.From != st.Intent.Last) {
		st.Next = nil // likewise: a queued unit belongs to the intent it follows
	}
	st.Dataset, st.Partition = k.Dataset, k.Partition
	if e.seen && !bytes.Equal(e.written, b) {
		// An edit may keep (or lack) the generation number; the adopted values are written
		// back under a generation above every one seen, so nothing decided earlier can
		// overwrite them.
		var prev State
		_ = json.Unmarshal(e.written, &prev)
		st.Generation = max(st.Generation, e.gen) + 1
		s.log.Warn("watermark file changed on disk behind the daemon; honouring it", "sink", k.Instance, "dataset", k.Dataset, "partition", k.Partition, "file", path, "seq", st.Seq, "previous_seq", prev.Seq, "generation", st.Generation)
		return st, s.write(k, e, st, b)
	}
	e.seen, e.written, e.gen = true, b, st.Generation
	return st, nil
}

// write makes st the file of k if the file still holds expect (nil: no file) once st is
// durable beside it; else it fails with errChangedBehind and leaves the file as it is.
func (s *Store) write(k Key, e *entry, st State, expect []byte) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	path, err := s.Path(k)
	if err != nil {
		return err
	}
	if err := fsutil.MkdirAllSync(filepath.Dir(path)); err != nil {
		return err
	}
	if s.beforeWrite != nil {
		s.beforeWrite(path)
	}
	unchanged := func() error {
		now, err := os.ReadFile(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if expect == nil {
				return nil
			}
			return errChangedBehind
		case err != nil:
			return fmt.Errorf("read %s before replacing it: %w", path, err)
		case expect == nil || !bytes.Equal(now, expect):
			return errChangedBehind
		}
		return nil
	}
	if err := s.writeFile(path, b, 0o600, unchanged); err != nil {
		return fmt.Errorf("write watermark %s: %w", k, err)
	}
	e.seen, e.written, e.gen = true, b, st.Generation
	return nil
}

// A Requirement is what a write needs of the state it changes. The store checks it against
// the current state (an edit by hand adopted first) and, when it does not hold, writes
// nothing and returns ErrStale. As iceberg-go's commit requirements do, a writer states what
// its decision stands on rather than which version of the file it read, so a write that
// changed nothing it stands on (retention's gap bookkeeping, an error noted) does not make
// it stale, while a rewind or an edit of the position or the intent always does.
type Requirement struct {
	kind reqKind
	gen  int64
	seq  int64
	unit Unit
	next Unit
}

type reqKind int

const (
	reqNone reqKind = iota
	reqGeneration
	reqPosition
	reqIntent
	reqQueue
)

// AtGeneration requires that nothing was written since the caller read generation gen: the
// compare-and-set of writers that rewrite the whole decision (an operator's rewind).
func AtGeneration(gen int64) Requirement { return Requirement{kind: reqGeneration, gen: gen} }

// AtPosition requires the watermark at seq with no unit in flight: what deciding the next
// unit above seq stands on.
func AtPosition(seq int64) Requirement { return Requirement{kind: reqPosition, seq: seq} }

// HoldsIntent requires u still in flight and the watermark still at seq, as the caller
// found them: what settling, retrying or dropping u stands on. (seq is u.From for a unit
// this process decided; a hand edit may have left another beside an intent, which then
// stands as found.)
func HoldsIntent(seq int64, u Unit) Requirement {
	return Requirement{kind: reqIntent, seq: seq, unit: u}
}

// HoldsQueue is HoldsIntent also requiring next queued behind u (State.Next): what
// settling u while next ships stands on.
func HoldsQueue(seq int64, u, next Unit) Requirement {
	return Requirement{kind: reqQueue, seq: seq, unit: u, next: next}
}

// Anyway requires nothing: for notes (an error) that hold whatever the position is.
func Anyway() Requirement { return Requirement{} }

// holds reports whether st meets r.
func (r Requirement) holds(st State) bool {
	switch r.kind {
	case reqGeneration:
		return st.Generation == r.gen
	case reqPosition:
		return st.Seq == r.seq && st.Intent == nil
	case reqIntent:
		return st.Intent != nil && st.Seq == r.seq && sameUnit(*st.Intent, r.unit)
	case reqQueue:
		return st.Intent != nil && st.Seq == r.seq && sameUnit(*st.Intent, r.unit) && st.Next != nil && sameUnit(*st.Next, r.next)
	}
	return true
}

// sameUnit compares two units field by field (Commit by value).
func sameUnit(a, b Unit) bool {
	ac, bc := a.Commit, b.Commit
	a.Commit, b.Commit = nil, nil
	if a != b || (ac == nil) != (bc == nil) {
		return false
	}
	return ac == nil || *ac == *bc
}

// Holds reports whether the state of k meets req now: what a caller about to act on a
// decision written earlier (a queued unit it is to ship) checks first, so that a rewind
// or an edit that landed since wins before the act rather than after it.
func (s *Store) Holds(k Key, req Requirement) (bool, error) {
	st, err := s.Get(k)
	return err == nil && req.holds(st), err
}

// Update is Apply requiring generation gen (AtGeneration).
func (s *Store) Update(k Key, gen int64, fn func(*State) error) (State, error) {
	return s.Apply(k, AtGeneration(gen), fn)
}

// Apply applies fn to the state of k and writes it, if the state meets req. Otherwise it
// returns the current state and ErrStale, writing nothing. A nil error from fn with no
// change still writes, bumping the generation. fn returning an error aborts the update with
// that error.
func (s *Store) Apply(k Key, req Requirement, fn func(*State) error) (State, error) {
	e := s.entry(k)
	e.mu.Lock()
	defer e.mu.Unlock()
	cur, err := s.read(k, e)
	if err != nil {
		return State{}, err
	}
	if !req.holds(cur) {
		return cur, ErrStale
	}
	next := cur
	next.Gaps = append([]Gap(nil), cur.Gaps...)
	next.Quarantined = append([]Quarantined(nil), cur.Quarantined...)
	if err := fn(&next); err != nil {
		return cur, err
	}
	if next.Next != nil && (next.Intent == nil || next.Next.From != next.Intent.Last) {
		next.Next = nil // a queued unit goes with the intent it follows (a rewind, a drop)
	}
	next.Version = Version
	next.Dataset, next.Partition = k.Dataset, k.Partition
	next.Generation = cur.Generation + 1
	next.UpdatedAt = s.now().UTC()
	if len(next.Gaps) > maxListed {
		next.Gaps = next.Gaps[len(next.Gaps)-maxListed:]
	}
	if len(next.Quarantined) > maxListed {
		next.Quarantined = next.Quarantined[len(next.Quarantined)-maxListed:]
	}
	if err := s.write(k, e, next, e.written); err != nil {
		if errors.Is(err, errChangedBehind) {
			// Edited while this write was under way: the next read adopts the edit.
			return cur, ErrStale
		}
		return cur, err
	}
	return next, nil
}
