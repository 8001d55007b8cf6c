package cache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/apache/iceberg-go/table"

	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/fsutil"
	"github.com/hyp-project/hyp/internal/partition"
)

type partitionRecord struct {
	Dataset   string `json:"dataset"`
	Partition string `json:"partition"`
}

// loadTables reads every partition's current generation. The writer (gc=true) also removes
// generations left behind by an interrupted compaction or an earlier swap, and sets aside a
// generation whose table cannot be read, recording the loss through lost first.
func loadTables(ctx context.Context, dir string, gc bool, lost func(Lost) error) (*tableSet, error) {
	return loadTablesBroken(ctx, dir, gc, lost, nil)
}

// brokenPartition is a partition whose table a read-only opening could not read.
type brokenPartition struct {
	dataset, partition string
	err                error
}

// loadTablesBroken is loadTables, except that when broken is set (read-only openings, which
// may not set anything aside), a partition whose table cannot be read goes to broken
// instead of failing the whole load: the others are read on.
func loadTablesBroken(ctx context.Context, dir string, gc bool, lost func(Lost) error, broken func(brokenPartition)) (*tableSet, error) {
	cat, err := newCatalog(dir)
	if err != nil {
		return nil, err
	}
	ts := &tableSet{dir: dir, cat: cat, ds: map[string]*dataset{}, lost: lost}
	dents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return ts, nil
		}
		return nil, err
	}
	for _, de := range dents {
		if !de.IsDir() || !validDataset(de.Name()) {
			continue
		}
		ds := ts.dataset(de.Name())
		pents, err := os.ReadDir(layout(dir).dataset(de.Name()))
		if err != nil {
			return nil, err
		}
		for _, pe := range pents {
			if !pe.IsDir() {
				continue
			}
			pdir := layout(dir).partition(de.Name(), pe.Name())
			p, err := ts.loadPartition(ctx, ds, pdir, gc)
			if err != nil && gc && damaged(err) {
				// One partition's unreadable table must not keep the cache, and every other
				// partition, from starting: its generation is kept aside as a loss and the
				// partition goes on from an earlier generation or afresh.
				if err = ts.setAsideGeneration(pdir, ds.name, err); err == nil {
					p, err = ts.loadPartition(ctx, ds, pdir, gc)
				}
			}
			if err != nil && broken != nil && ctx.Err() == nil {
				broken(brokenPartition{dataset: ds.name, partition: partitionName(pdir), err: err})
				continue
			}
			if err != nil {
				return nil, err
			}
			if p != nil {
				ds.parts[p.name] = p
				if p.gen != nil {
					ds.learn(p.gen.columns())
				}
			}
		}
	}
	return ts, nil
}

func (ts *tableSet) loadPartition(ctx context.Context, ds *dataset, pdir partitionDir, gc bool) (*Partition, error) {
	b, err := os.ReadFile(pdir.record())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // not created far enough to hold data
	}
	if err != nil {
		return nil, err
	}
	var rec partitionRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("%s: %w", pdir.record(), err)
	}
	if _, _, err := partition.Parse(rec.Partition); err != nil {
		return nil, fmt.Errorf("%s: %w", pdir.record(), err)
	}
	p := &Partition{Dataset: ds.name, name: rec.Partition, dir: pdir}
	if gc {
		if err := clearClaims(pdir); err != nil {
			return nil, err
		}
	}
	cur, err := os.ReadFile(pdir.current())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	curName := strings.TrimSpace(string(cur))
	// CURRENT is one small pointer; losing it must never cost the data it points at. When
	// it is missing, empty or names no generation, the partition takes the generation that
	// holds the most (highest committed seq, then newest), and keeps every other one.
	recovered := false
	if _, ok := genNumber(curName); !ok || !genExists(string(pdir.generation(curName))) {
		best, err := ts.bestGeneration(ctx, p)
		if err != nil {
			return nil, err
		}
		if best != "" {
			ts.notes = append(ts.notes, fmt.Sprintf("partition %s/%s: %s is %q; using %s, the generation holding the most, and keeping the others",
				ds.name, rec.Partition, currentFile, curName, best))
			curName, recovered = best, true
			if gc {
				if err := setCurrent(pdir, curName); err != nil {
					return nil, err
				}
			}
		}
	}
	if curName != "" {
		if gc {
			if err := ts.setAsideBadMetadata(p, curName); err != nil {
				return nil, err
			}
		}
		g, err := loadGeneration(ctx, ts.cat, ts.dir, ts.namespace(p), curName)
		if err != nil {
			return nil, err
		}
		p.gen = g
		// Before anything commits on top of the table or removes a generation, so a data
		// file a lost metadata file no longer names is still there to put back.
		if gc {
			if err := ts.recoverFiles(ctx, p); err != nil {
				return nil, err
			}
			if err := ts.fixVersionHint(p); err != nil {
				return nil, err
			}
		}
	}
	if gc && !recovered {
		ents, _ := os.ReadDir(string(pdir))
		for _, e := range ents {
			if _, ok := genNumber(e.Name()); ok && e.IsDir() && e.Name() != curName {
				p.retired = append(p.retired, &generation{name: e.Name(), dir: string(pdir.generation(e.Name()))})
			}
		}
		p.collect(ts.dir)
	}
	return p, nil
}

// partitionName is the name of the partition at pdir: from its record, or, when that
// cannot be read, its directory's name.
func partitionName(pdir partitionDir) string {
	var rec partitionRecord
	if b, err := os.ReadFile(pdir.record()); err == nil && json.Unmarshal(b, &rec) == nil && rec.Partition != "" {
		return rec.Partition
	}
	return filepath.Base(string(pdir))
}

// bestGeneration names the generation of p holding the most: the highest committed seq,
// then the highest number; "" when p has none that loads.
func (ts *tableSet) bestGeneration(ctx context.Context, p *Partition) (string, error) {
	ents, err := os.ReadDir(string(p.dir))
	if err != nil {
		return "", err
	}
	best, bestSeq, bestN := "", int64(-1), -1
	for _, e := range ents {
		n, ok := genNumber(e.Name())
		if !ok || !e.IsDir() || !genExists(string(p.dir.generation(e.Name()))) {
			continue
		}
		g, err := loadGeneration(ctx, ts.cat, ts.dir, ts.namespace(p), e.Name())
		if err != nil {
			continue // an interrupted creation: nothing to read
		}
		if seq := g.maxSeq; seq > bestSeq || seq == bestSeq && n > bestN {
			best, bestSeq, bestN = e.Name(), seq, n
		}
	}
	return best, nil
}

func validDataset(name string) bool {
	if len(name) == 0 || len(name) > 63 || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// ValidDataset reports whether name is a legal dataset name (SPEC 2).
func ValidDataset(name string) bool { return validDataset(name) }

func (ts *tableSet) namespace(p *Partition) table.Identifier {
	return table.Identifier{p.Dataset, filepath.Base(string(p.dir))}
}

func (ts *tableSet) dataset(name string) *dataset {
	ts.mu.RLock()
	d := ts.ds[name]
	ts.mu.RUnlock()
	if d != nil {
		return d
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if d = ts.ds[name]; d == nil {
		d = &dataset{name: name, types: map[string]ColType{}, parts: map[string]*Partition{}}
		ts.ds[name] = d
	}
	return d
}

// lookupDataset is the dataset named name, or nil when the cache has none: unlike dataset,
// it never makes one.
func (ts *tableSet) lookupDataset(name string) *dataset {
	ts.mu.RLock()
	defer ts.mu.RUnlock()
	return ts.ds[name]
}

// partition returns the partition named name, registering it (its directory) if new. Its
// record (partition.json) is written with its first table (createFirstGeneration): a flush
// registers partitions one after another as it reads the log, but commits them in
// parallel, and a directory without a record is skipped at load, as one never committed to.
func (ts *tableSet) partition(ds *dataset, name string) (*Partition, error) {
	ts.mu.RLock()
	p := ds.parts[name]
	ts.mu.RUnlock()
	if p != nil {
		return p, nil
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if p = ds.parts[name]; p != nil {
		return p, nil
	}
	seg, err := partition.PathSegment(name)
	if err != nil {
		return nil, err
	}
	pdir := layout(ts.dir).partition(ds.name, seg)
	if err := fsutil.MkdirAllSync(string(pdir)); err != nil {
		return nil, err
	}
	p = &Partition{Dataset: ds.name, name: name, dir: pdir}
	ds.parts[name] = p
	return p, nil
}

// createFirstGeneration writes p's record, then creates its first table, which becomes
// current.
func (ts *tableSet) createFirstGeneration(ctx context.Context, p *Partition, cols []*colBuilder) (*generation, error) {
	b, _ := json.Marshal(partitionRecord{Dataset: p.Dataset, Partition: p.name})
	if err := fsutil.WriteFileAtomic(p.dir.record(), b, 0o600); err != nil {
		return nil, fmt.Errorf("partition %s/%s: %w", p.Dataset, p.name, err)
	}
	uc := make([]Column, len(cols))
	for i, c := range cols {
		uc[i] = c.Column
	}
	return ts.newGeneration(ctx, p, 1, uc, 0)
}

// newGeneration creates generation n of p; it becomes current only through setCurrent.
func (ts *tableSet) newGeneration(ctx context.Context, p *Partition, n int, cols []Column, maxSeq int64) (*generation, error) {
	g, err := createGeneration(ctx, ts.cat, ts.dir, ts.namespace(p), n, newTableSchema(cols), marks{maxSeq: maxSeq}, true)
	if err != nil {
		return nil, err
	}
	if err := setCurrent(p.dir, g.name); err != nil {
		// Never current, so empty and unread: it goes, or the next attempt at generation n
		// (the next flush) would find it and fail for good (a full disk did this).
		if rerr := os.RemoveAll(g.dir); rerr != nil {
			return nil, fmt.Errorf("%w (and removing the table it was to point at: %v)", err, rerr)
		}
		return nil, err
	}
	return g, nil
}

// setCurrent is the atomic switch between generations.
func setCurrent(pdir partitionDir, name string) error {
	return fsutil.WriteFileAtomic(pdir.current(), []byte(name+"\n"), 0o600)
}

// partitions returns every partition, sorted by dataset then name.
func (ts *tableSet) partitions() []*Partition {
	ts.mu.RLock()
	defer ts.mu.RUnlock()
	var out []*Partition
	for _, d := range ts.ds {
		for _, p := range d.parts {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *Partition) int {
		if c := strings.Compare(a.Dataset, b.Dataset); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	return out
}

func (ts *tableSet) lookup(dataset, name string) *Partition {
	ts.mu.RLock()
	defer ts.mu.RUnlock()
	if d := ts.ds[dataset]; d != nil {
		return d.parts[name]
	}
	return nil
}

func (ts *tableSet) maxSeq() int64 {
	var m int64
	for _, p := range ts.partitions() {
		m = max(m, p.maxSeq())
	}
	return m
}

func (ts *tableSet) maxIngestedAt() int64 {
	var m int64
	for _, p := range ts.partitions() {
		p.mu.Lock()
		if p.gen != nil {
			for _, f := range p.gen.files {
				m = max(m, f.MaxIngestedAt)
			}
		}
		p.mu.Unlock()
	}
	return m
}

// collect deletes retired generations that no reader holds. Readers hold a shared flock on
// the generation's lock file, or, for a whole-cache view, on the cache's views lock; an
// exclusive try-lock fails while any of them reads.
func (p *Partition) collect(cacheDir string) {
	kept := p.retired[:0]
	for _, g := range p.retired {
		lk, err := fsutil.TryLock(tableDir(g.dir).readersLock())
		if err != nil {
			kept = append(kept, g)
			continue
		}
		vlk, err := fsutil.TryLock(layout(cacheDir).viewsLock())
		if err != nil {
			lk.Unlock()
			kept = append(kept, g)
			continue
		}
		trash := p.dir.trash(g.name)
		rerr := os.Rename(g.dir, trash)
		vlk.Unlock()
		lk.Unlock()
		if rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			kept = append(kept, g)
			continue
		}
		_ = os.RemoveAll(trash)
	}
	p.retired = kept
	// Leftovers of a crash during removal.
	for _, t := range p.dir.trashLeft() {
		_ = os.RemoveAll(t)
	}
}

// damaged tells an unreadable table (a missing or garbled metadata, manifest or data file)
// from a failure to read it at all (permissions, I/O errors, a cancelled open), which must
// stop the open rather than set anything aside.
func damaged(err error) bool {
	return !errors.Is(err, fs.ErrPermission) && !errors.Is(err, syscall.EIO) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// setAsideGeneration moves the current generation of the partition at pdir, whose table cannot be
// read, to <pdir>/.damaged-<generation>-<time> (kept, never deleted) and clears CURRENT.
// The loss, recorded before anything moves, is the seq range its data files' own
// statistics give, which may include rows an earlier retention had already deleted.
func (ts *tableSet) setAsideGeneration(pdir partitionDir, dataset string, cause error) error {
	b, err := os.ReadFile(pdir.record())
	if err != nil {
		return errors.Join(cause, err)
	}
	var rec partitionRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return errors.Join(cause, err)
	}
	cur, err := os.ReadFile(pdir.current())
	name := strings.TrimSpace(string(cur))
	if _, ok := genNumber(name); err != nil || !ok {
		return cause
	}
	gdir := pdir.generation(name)
	x := Lost{Dataset: dataset, Partition: rec.Partition, Reason: "unreadable table: " + cause.Error(), DetectedAt: time.Now().UTC()}
	files := gdir.dataFiles()
	for _, f := range files {
		fi, err := footerInfo(f)
		if err != nil || fi.Rows == 0 {
			continue
		}
		if x.Rows == 0 || fi.MinSeq < x.FromSeq {
			x.FromSeq = fi.MinSeq
		}
		x.ToSeq, x.Rows = max(x.ToSeq, fi.MaxSeq), x.Rows+fi.Rows
	}
	x.KeptAt = pdir.damaged(name, time.Now())
	if err := ts.lost(x); err != nil {
		return errors.Join(cause, err)
	}
	if err := os.Rename(string(gdir), x.KeptAt); err != nil {
		return errors.Join(cause, err)
	}
	if err := fsutil.SyncDir(string(pdir)); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(pdir.current(), nil, 0o600)
}

// footerInfo describes a data file from its own footer alone: its size, rows and the seq
// and ingest-time bounds of its row groups' statistics.
func footerInfo(path string) (fi FileInfo, err error) {
	defer recoverDamage(&err)
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return FileInfo{}, err
	}
	defer pf.Close()
	st, err := os.Stat(path)
	if err != nil {
		return FileInfo{}, err
	}
	md := pf.MetaData()
	fi = FileInfo{Path: path, Rows: md.NumRows, Bytes: st.Size()}
	for _, c := range []struct {
		name   string
		lo, hi *int64
	}{{columns.SeqColumn, &fi.MinSeq, &fi.MaxSeq}, {columns.IngestedAtColumn, &fi.MinIngestedAt, &fi.MaxIngestedAt}} {
		col := md.Schema.ColumnIndexByName(c.name)
		if col < 0 {
			return FileInfo{}, fmt.Errorf("%s: no %s column", path, c.name)
		}
		for i := 0; i < md.NumRowGroups(); i++ {
			l, h, ok := rowGroupBounds(md.RowGroup(i), col)
			if !ok {
				return FileInfo{}, fmt.Errorf("%s: row group %d has no %s statistics", path, i, c.name)
			}
			if i == 0 || l < *c.lo {
				*c.lo = l
			}
			*c.hi = max(*c.hi, h)
		}
	}
	return fi, nil
}

// clearClaims removes the metadata-version claims a writer killed inside a commit left
// behind (iceberg-go's hadoop catalog treats one as a live writer for a minute, so the
// first commit after a restart would fail until then). Only the writer calls it, under the
// cache's lock: no other committer can own a claim. The commit a claim stood for never
// completed, and the log still holds its rows.
func clearClaims(pdir partitionDir) error {
	gens, err := pdir.generationDirs()
	if err != nil {
		return err
	}
	var claims []string
	for _, g := range gens {
		claims = append(claims, g.claims()...)
	}
	for _, c := range claims {
		if err := os.Remove(c); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove stale metadata claim: %w", err)
		}
	}
	return nil
}
