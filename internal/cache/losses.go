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

// lostDir keeps what the cache could not store (SPEC 9.6): the bytes themselves, never
// deleted by hyp, and lossLog, one JSON line per loss. Like walDir it is not a legal
// dataset name.
const (
	lostDir = "_lost"
	lossLog = "losses.jsonl"
)

// Lost is a range of acknowledged rows the cache could not keep in its tables. Every seq of
// the partition in [FromSeq, ToSeq] may be missing; the bytes that held them are at KeptAt.
type Lost struct {
	Dataset    string    `json:"dataset"`
	Partition  string    `json:"partition"`
	FromSeq    int64     `json:"from_seq"`
	ToSeq      int64     `json:"to_seq"`
	Rows       int64     `json:"rows"`
	Reason     string    `json:"reason"`
	DetectedAt time.Time `json:"detected_at"`
	KeptAt     string    `json:"kept_at"`
}

// losses is the cache's record of them: the log on disk, and its total in memory for the
// metric.
type losses struct {
	dir  string // <cache>/_lost
	mu   sync.Mutex
	rows int64
}

func openLosses(cacheDir string) (*losses, error) {
	l := &losses{dir: filepath.Join(cacheDir, lostDir)}
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

// record keeps the rows of one flush that could not be stored, one file and one loss per
// partition, durably: the caller releases the log segment that held them only after this
// returns. Replaying that segment again writes the same file and adds no second entry.
func (l *losses) record(rows []setAside, now time.Time) ([]Lost, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := fsutil.MkdirAllSync(l.dir); err != nil {
		return nil, fmt.Errorf("losses: %w", err)
	}
	known, err := readLosses(filepath.Dir(l.dir))
	if err != nil {
		return nil, err
	}
	type key struct {
		dataset, partition string
		from               int64
	}
	seen := map[key]bool{}
	for _, x := range known {
		seen[key{x.Dataset, x.Partition, x.FromSeq}] = true
	}
	var out []Lost
	for len(rows) > 0 {
		n := 1
		// One loss is a run of consecutive seqs of one partition, so its range names no
		// row that was stored.
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
			KeptAt:     filepath.Join(l.dir, fmt.Sprintf("%s-seq%020d-%020d.ndjson", first.dataset, first.seq, last.seq)),
		}
		if seen[key{x.Dataset, x.Partition, x.FromSeq}] {
			continue
		}
		var body bytes.Buffer
		for _, r := range group {
			body.Write(r.line)
			body.WriteByte('\n')
		}
		if err := fsutil.WriteFileAtomic(x.KeptAt, body.Bytes(), 0o600); err != nil {
			return out, fmt.Errorf("losses: keep rows: %w", err)
		}
		out = append(out, x)
	}
	if len(out) == 0 {
		return nil, nil
	}
	var buf bytes.Buffer
	for _, x := range out {
		b, _ := json.Marshal(x)
		buf.Write(b)
		buf.WriteByte('\n')
	}
	if err := appendSync(filepath.Join(l.dir, lossLog), buf.Bytes()); err != nil {
		return nil, fmt.Errorf("losses: %w", err)
	}
	for _, x := range out {
		l.rows += x.Rows
	}
	return out, nil
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
	f, err := os.Open(filepath.Join(cacheDir, lostDir, lossLog))
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
