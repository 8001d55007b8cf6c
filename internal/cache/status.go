package cache

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/fsutil"
)

// PartitionStatus is one partition at a glance, from the in-memory file index alone.
type PartitionStatus struct {
	Dataset          string
	Partition        string
	Rows             int64
	Files            int
	Bytes            int64
	MinSeq           int64
	MaxSeq           int64 // highest seq still cached (0 if none)
	HeadSeq          int64 // highest seq ever committed, also after every row was pruned
	PrunedThrough    int64 // highest seq retention deleted (0 = none)
	OldestIngestedAt time.Time
	NewestIngestedAt time.Time
	Generation       string
	// Err is why a read-only opening could not read the partition's table (naming the
	// file); nothing else but the names is set then.
	Err error
}

func (p *Partition) status() PartitionStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := PartitionStatus{Dataset: p.Dataset, Partition: p.Name()}
	if p.gen == nil {
		return st
	}
	st.HeadSeq, st.PrunedThrough, st.Generation, st.Files = p.gen.maxSeq, p.gen.prunedThrough, p.gen.name, len(p.gen.files)
	for i, f := range p.gen.files {
		st.Rows += f.Rows
		st.Bytes += f.Bytes
		if i == 0 {
			st.MinSeq, st.OldestIngestedAt = f.MinSeq, time.UnixMicro(f.MinIngestedAt).UTC()
		}
		st.MaxSeq, st.NewestIngestedAt = f.MaxSeq, time.UnixMicro(f.MaxIngestedAt).UTC()
	}
	return st
}

// Status lists every partition in dataset, then name order.
func (c *Cache) Status() []PartitionStatus { return c.tables.status() }

func (ts *tableSet) status() []PartitionStatus {
	var out []PartitionStatus
	for _, p := range ts.partitions() {
		out = append(out, p.status())
	}
	return out
}

// TableView is a dataset as a query sees it: its columns and, per partition, the live
// data files. The files stay on disk until Release.
type TableView struct {
	Dataset    string
	Columns    []Column // internal columns first
	Partitions []PartitionFiles
	// Unflushed are files of the rows the log holds above their partitions' tables, each of
	// any number of partitions (Cache.Listing); only a listing has them.
	Unflushed []UnflushedFile `json:",omitempty"`
}

// UnflushedFile is a Parquet file of rows not yet flushed into their partitions' tables:
// each row's partition name is in the column of field id PartitionFieldID, every other
// column under its field id in FieldIDs.
type UnflushedFile struct {
	Path             string
	FieldIDs         map[string]int
	PartitionFieldID int
}

// PartitionFiles are one partition's live data files, and the field id under which they
// store each column the partition's table has (files are read by field id: the stored
// names are not the column names). Err, set only by a read-only opening, is why the
// partition's table could not be read: reads of the partition must fail with it.
type PartitionFiles struct {
	Partition string
	Files     []string
	FieldIDs  map[string]int
	Err       error `json:"-"` // never set in a Listing, the only form that travels
}

// View pins the current files of every dataset for a reader.
type View struct {
	Tables  []TableView
	lock    *fsutil.Lock
	scratch string // removed at Release: the view's own files (PinView)
}

// Release lets compaction remove the generations the view pinned, and removes the files
// written for the view alone.
func (v *View) Release() {
	if v.lock != nil {
		v.lock.Unlock()
		v.lock = nil
	}
	if v.scratch != "" {
		os.RemoveAll(v.scratch)
		v.scratch = ""
	}
}

// View pins the cache's current files.
func (c *Cache) View() (*View, error) { return c.tables.view() }

// PinView pins the cache in dir and then asks list for its files: a generation list names
// then stays until Release, since retiring one takes the views lock exclusively, so list
// must describe the cache as it is once the lock is held, never from before (the owner's
// Listing does). scratch, when not empty, is a directory of files list wrote for this view
// alone (the unflushed rows of a Listing): Release removes it, and so does a failed list.
func PinView(dir, scratch string, list func() ([]TableView, error)) (*View, error) {
	v := &View{scratch: scratch}
	lk, err := fsutil.SharedLock(layout(dir).viewsLock())
	if err != nil {
		v.Release()
		return nil, fmt.Errorf("pin the cache for a view: %w", err)
	}
	v.lock = lk
	if v.Tables, err = list(); err != nil {
		v.Release()
		return nil, err
	}
	return v, nil
}

// view pins every partition with one shared lock on the cache's views lock rather than one
// per generation, so a query holds one file descriptor however many partitions it reads.
// The lock is taken before the generations are checked: a generation still there then stays
// until Release, since retiring one takes the views lock exclusively.
func (ts *tableSet) view() (*View, error) {
	if len(ts.partitions()) == 0 {
		tables, err := ts.list()
		return &View{Tables: tables}, err
	}
	return PinView(ts.dir, "", ts.list)
}

// list describes every dataset's live files.
func (ts *tableSet) list() ([]TableView, error) {
	tables, _, err := ts.listHeads()
	return tables, err
}

// partKey names a partition in a dataset.
type partKey struct{ dataset, partition string }

// listHeads describes every dataset's live files, and gives each partition's head: its
// table's max seq when its files were listed, so every row at or below it is in them (or
// was pruned) and none above it is.
func (ts *tableSet) listHeads() ([]TableView, map[partKey]int64, error) {
	parts := ts.partitions()
	ts.mu.RLock()
	names := make([]string, 0, len(ts.ds))
	for n := range ts.ds {
		names = append(names, n)
	}
	ts.mu.RUnlock()
	slices.Sort(names)
	// A partition whose lock is held (by a flush committing to it, mostly) is listed after
	// the others. Waiting for each in turn would walk the partitions in step with a flush
	// that commits them in name order, as one does after a burst of new gateways: the
	// listing would take as long as the flush it means not to wait for.
	live := make([]liveFiles, len(parts))
	var busy []int
	for i, p := range parts {
		if !p.mu.TryLock() {
			busy = append(busy, i)
			continue
		}
		live[i] = p.liveFiles()
		p.mu.Unlock()
	}
	for _, i := range busy {
		p := parts[i]
		p.mu.Lock()
		live[i] = p.liveFiles()
		p.mu.Unlock()
	}
	byDataset := map[string][]int{}
	for i, p := range parts {
		if live[i].err != nil {
			return nil, nil, live[i].err
		}
		byDataset[p.Dataset] = append(byDataset[p.Dataset], i)
	}
	var tables []TableView
	heads := make(map[partKey]int64, len(parts))
	for _, name := range names {
		tv := TableView{Dataset: name, Columns: ts.dataset(name).viewColumns()}
		for _, i := range byDataset[name] {
			tv.Partitions = append(tv.Partitions, PartitionFiles{Partition: parts[i].Name(), Files: live[i].files, FieldIDs: live[i].ids})
			heads[partKey{name, parts[i].Name()}] = live[i].head
		}
		tables = append(tables, tv)
	}
	return tables, heads, nil
}

// viewColumns are the dataset's columns as a view has them: internal columns first.
func (d *dataset) viewColumns() []Column {
	return append([]Column{{columns.SeqColumn, TypeLong}, {columns.IngestedAtColumn, TypeTimestamp}}, d.columns()...)
}

// liveFiles are a partition's live data files (their paths and field ids) and its head
// (maxSeq), taken together.
type liveFiles struct {
	files []string
	ids   map[string]int
	head  int64
	err   error
}

// liveFiles lists the partition's live files; the caller holds p.mu. A generation that is
// gone was retired after this reader loaded it: the caller reopens and sees its successor.
func (p *Partition) liveFiles() liveFiles {
	if p.gen == nil {
		return liveFiles{}
	}
	if len(p.gen.files) == 0 {
		return liveFiles{head: p.gen.maxSeq} // every row pruned
	}
	if !genExists(p.gen.dir) {
		return liveFiles{err: ErrGenerationGone}
	}
	out := make([]string, len(p.gen.files))
	for i, f := range p.gen.files {
		out[i] = f.Path
	}
	return liveFiles{files: out, ids: p.gen.fieldIDs(), head: p.gen.maxSeq}
}

// Reader is a read-only opening of a cache that another process may be writing. It sees
// what was committed to the tables when it opened; it never writes. A partition whose table
// it cannot read fails only that partition: Status shows it with its error, and View
// hands it on for its reads to fail.
type Reader struct {
	tables *tableSet
	broken []brokenPartition // sorted by dataset, then partition
}

// OpenReader loads the committed tables without taking the writer lock.
func OpenReader(ctx context.Context, dir string) (*Reader, error) {
	if err := checkDir(dir); err != nil {
		return nil, err
	}
	r := &Reader{}
	ts, err := loadTablesBroken(ctx, dir, false, nil, func(b brokenPartition) { r.broken = append(r.broken, b) })
	if err != nil {
		return nil, err
	}
	slices.SortFunc(r.broken, func(a, b brokenPartition) int {
		return cmp.Or(strings.Compare(a.dataset, b.dataset), strings.Compare(a.partition, b.partition))
	})
	r.tables = ts
	return r, nil
}

// Status lists every partition, those it could not read with their error.
func (r *Reader) Status() []PartitionStatus {
	out := r.tables.status()
	for _, b := range r.broken {
		out = append(out, PartitionStatus{Dataset: b.dataset, Partition: b.partition, Err: b.err})
	}
	slices.SortStableFunc(out, func(a, b PartitionStatus) int {
		return cmp.Or(strings.Compare(a.Dataset, b.Dataset), strings.Compare(a.Partition, b.Partition))
	})
	return out
}

// View pins the current files; a partition it could not read is in it with its error.
func (r *Reader) View() (*View, error) {
	v, err := r.tables.view()
	if err != nil || len(r.broken) == 0 {
		return v, err
	}
	for _, b := range r.broken {
		i := slices.IndexFunc(v.Tables, func(t TableView) bool { return t.Dataset == b.dataset })
		if i < 0 {
			v.Tables = append(v.Tables, TableView{Dataset: b.dataset, Columns: []Column{{columns.SeqColumn, TypeLong}, {columns.IngestedAtColumn, TypeTimestamp}}})
			i = len(v.Tables) - 1
		}
		v.Tables[i].Partitions = append(v.Tables[i].Partitions, PartitionFiles{Partition: b.partition, Err: b.err})
	}
	slices.SortFunc(v.Tables, func(a, b TableView) int { return strings.Compare(a.Dataset, b.Dataset) })
	for _, t := range v.Tables {
		slices.SortStableFunc(t.Partitions, func(a, b PartitionFiles) int { return strings.Compare(a.Partition, b.Partition) })
	}
	return v, nil
}

// Columns returns a dataset's user columns, or false if the cache has no such dataset.
func (r *Reader) Columns(dataset string) ([]Column, bool) { return r.tables.columns(dataset) }

// Columns returns a dataset's user columns, or false if the cache has no such dataset.
func (c *Cache) Columns(dataset string) ([]Column, bool) { return c.tables.columns(dataset) }

func (ts *tableSet) columns(dataset string) ([]Column, bool) {
	d := ts.lookupDataset(dataset)
	if d == nil {
		return nil, false
	}
	return d.columns(), true
}
