package cache

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hyp-project/hyp/internal/fsutil"
)

// Lost is a range of acknowledged rows the cache could not keep in its tables. Every seq in
// [FromSeq, ToSeq] of the partition may be missing (of any partition when damaged log bytes
// hid which one: Dataset and Partition are then empty, and Rows is at most as many rows as
// the damaged bytes could hold); the bytes that held them are at KeptAt.
type Lost struct {
	Dataset    string    `json:"dataset,omitempty"`
	Partition  string    `json:"partition,omitempty"`
	FromSeq    int64     `json:"from_seq"`
	ToSeq      int64     `json:"to_seq"`
	Rows       int64     `json:"rows"`
	Reason     string    `json:"reason"`
	DetectedAt time.Time `json:"detected_at"`
	KeptAt     string    `json:"kept_at"`
}

// losses is the cache's record of them: the log on disk (layout.lost), and its total in
// memory for the metric.
type losses struct {
	root layout
	mu   sync.Mutex
	rows int64
}

func openLosses(cacheDir string) (*losses, error) {
	l := &losses{root: layout(cacheDir)}
	all, err := readLosses(cacheDir)
	if err != nil {
		return nil, err
	}
	for _, x := range all {
		l.rows += x.Rows
	}
	return l, nil
}

// setAside is a row the flush could not store: its line and why.
type setAside struct {
	dataset, partition string
	seq                int64
	line               []byte
	err                error
}

// setAside keeps the rows of one flush that could not be stored, one file and one loss per
// run of consecutive seqs of a partition, and records those losses (see add).
func (l *losses) setAside(rows []setAside, now time.Time) ([]Lost, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	if err := fsutil.MkdirAllSync(l.root.lost()); err != nil {
		return nil, fmt.Errorf("losses: %w", err)
	}
	var out []Lost
	for len(rows) > 0 {
		// One loss is a run of consecutive seqs of one partition, so its range names no
		// row that was stored.
		n := 1
		for n < len(rows) && rows[n].dataset == rows[0].dataset && rows[n].partition == rows[0].partition && rows[n].seq == rows[n-1].seq+1 {
			n++
		}
		group := rows[:n]
		rows = rows[n:]
		first, last := group[0], group[len(group)-1]
		x := Lost{
			Dataset: first.dataset, Partition: first.partition,
			FromSeq: first.seq, ToSeq: last.seq, Rows: int64(len(group)),
			Reason:     "unstorable row: " + first.err.Error(),
			DetectedAt: now.UTC(),
			KeptAt:     l.root.lostRows(first.dataset, first.seq, last.seq),
		}
		var body bytes.Buffer
		for _, r := range group {
			body.Write(r.line)
			body.WriteByte('\n')
		}
		if err := fsutil.WriteFileAtomic(x.KeptAt, body.Bytes(), 0o600); err != nil {
			return nil, fmt.Errorf("losses: keep rows: %w", err)
		}
		out = append(out, x)
	}
	return l.add(out)
}

// keepSegment copies a damaged log segment into the losses directory (once; the copy is
// named after the segment) and returns the copy's path. The owner releases the segment only
// after this, so the damaged bytes are never gone.
func (l *losses) keepSegment(path string) (string, error) {
	dst := l.root.lostSegment(path)
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	if err := fsutil.MkdirAllSync(l.root.lost()); err != nil {
		return "", fmt.Errorf("losses: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("losses: keep damaged segment: %w", err)
	}
	if err := fsutil.WriteFileAtomic(dst, b, 0o600); err != nil {
		return "", fmt.Errorf("losses: keep damaged segment: %w", err)
	}
	return dst, nil
}

// add appends losses to the log durably and returns those it had not recorded before: a
// flush that is replayed after a crash finds the same losses again and adds none twice.
func (l *losses) add(xs []Lost) ([]Lost, error) {
	if len(xs) == 0 {
		return nil, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	known, err := readLosses(string(l.root))
	if err != nil {
		return nil, err
	}
	type key struct {
		dataset, partition string
		from, to           int64
	}
	seen := map[key]bool{}
	for _, x := range known {
		seen[key{x.Dataset, x.Partition, x.FromSeq, x.ToSeq}] = true
	}
	var out []Lost
	var buf bytes.Buffer
	for _, x := range xs {
		k := key{x.Dataset, x.Partition, x.FromSeq, x.ToSeq}
		if seen[k] {
			continue
		}
		seen[k] = true
		b, _ := json.Marshal(x)
		buf.Write(b)
		buf.WriteByte('\n')
		out = append(out, x)
	}
	if len(out) == 0 {
		return nil, nil
	}
	if err := fsutil.MkdirAllSync(l.root.lost()); err != nil {
		return nil, fmt.Errorf("losses: %w", err)
	}
	if err := appendSync(l.root.lossLog(), buf.Bytes()); err != nil {
		return nil, fmt.Errorf("losses: %w", err)
	}
	for _, x := range out {
		l.rows += x.Rows
	}
	return out, nil
}

// walDamage follows a flush through the log to bound what damaged bytes may have held.
// Records are in seq order and every segment starts with a marker, so damage lies after
// the last intact record's seqs (lo) and before the next intact record's first seq.
type walDamage struct {
	lo          int64 // lowest seq the next damage may have held
	activeStart int64 // marker of the active segment: above every seq in sealed ones
	open        *Lost // damage seen, its upper bound not yet
	bytes       int64 // damaged bytes in open
}

// hit notes bytes of damage; consecutive damage before the next intact record is one loss.
func (d *walDamage) hit(bytes int64, kept, why string, now time.Time) {
	if d.open == nil {
		d.open = &Lost{FromSeq: d.lo, Reason: why, DetectedAt: now.UTC(), KeptAt: kept}
	}
	d.bytes += bytes
}

// intact notes an intact record (or marker) holding seqs first..last and closes any open
// damage below it, appending it to lost when it may have held rows.
func (d *walDamage) intact(first, last int64, lost []Lost) []Lost {
	if x := d.open; x != nil {
		d.open = nil
		x.ToSeq = first - 1
		if x.ToSeq >= x.FromSeq {
			// Every seq in the range may be lost, but damaged bytes cannot have held more
			// rows than a row's smallest form ("{}" and a newline) fits in them.
			x.Rows = min(x.ToSeq-x.FromSeq+1, max(d.bytes/3, 1))
			lost = append(lost, *x)
		}
		d.bytes = 0
	}
	d.lo = max(d.lo, last+1)
	return lost
}

func appendSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return fsutil.SyncDir(filepath.Dir(path))
}

// readLosses lists every recorded loss of the cache at cacheDir, oldest first. A line cut
// short by a crash during its append is ignored: the segment it described was not
// released, so the next flush records it again.
func readLosses(cacheDir string) ([]Lost, error) {
	f, err := os.Open(layout(cacheDir).lossLog())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("losses: %w", err)
	}
	defer f.Close()
	var out []Lost
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var x Lost
		if json.Unmarshal(sc.Bytes(), &x) == nil && x.Rows > 0 {
			out = append(out, x)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("losses: %w", err)
	}
	return out, nil
}

// Losses lists the rows the cache lost (SPEC 7 `cache status` losses).
func (c *Cache) Losses() ([]Lost, error) { return readLosses(c.dir) }

// LostRows is how many rows the cache has recorded as lost since it was created.
func (c *Cache) LostRows() int64 {
	c.losses.mu.Lock()
	defer c.losses.mu.Unlock()
	return c.losses.rows
}

// Losses lists the rows the cache lost.
func (r *Reader) Losses() ([]Lost, error) { return readLosses(r.tables.dir) }
