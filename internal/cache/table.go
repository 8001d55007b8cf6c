package cache

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/hadoop"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/fsutil"
)

// The field ids of the internal columns (columns.SeqColumn, columns.IngestedAtColumn) in
// every partition table.
const (
	seqFieldID   = 1
	ingestedAtID = 2
	// propMaxSeq records, in the same commit as the rows, the highest seq a table generation
	// holds. Replay skips rows at or below it, which makes replay after a crash between a
	// table commit and the release of the log idempotent.
	propMaxSeq = "hyp.max-seq"
	// propPrunedThrough and propPrunedAt record, in the commit that deletes them, the highest
	// seq retention ever removed and the ingest time (µs) of that row, so that a question
	// about rows no longer cached ("is anything missing below this seq or before this time?")
	// has an exact answer after the rows are gone.
	propPrunedThrough = "hyp.pruned-through-seq"
	propPrunedAt      = "hyp.pruned-through-ingested-at"
	// rowGroupRows bounds a row group so that per-row-group seq statistics prune finely.
	rowGroupRows = 65536
	// targetFileBytes: a data file being written is closed, and the next one started, once
	// it holds this much.
	targetFileBytes = 256 << 20
)

// tableProps are set on every generation: data files get small row groups for pruning (the
// cache writes its files itself, datafile.go; these settings are for the file iceberg-go
// rewrites when retention cuts through one), deletes rewrite files (copy-on-write) so no
// reader ever has to apply delete files, and
// old metadata files are trimmed; with snapshots expired at every commit (generation.commit)
// a table's metadata stays the same size however many commits it takes. Iceberg's
// per-table manifest-list cache is off: the cache reads a manifest list once per commit,
// and an idle cache per table is memory per partition.
var tableProps = iceberg.Properties{
	table.ParquetRowGroupLimitKey:             strconv.Itoa(rowGroupRows),
	table.WriteDeleteModeKey:                  table.WriteModeCopyOnWrite,
	table.MetadataDeleteAfterCommitEnabledKey: "true",
	table.MetadataPreviousVersionsMaxKey:      "4",
	table.ManifestMergeEnabledKey:             "true",
	table.ManifestMinMergeCountKey:            "16",
	table.ReadManifestListCacheEnabledKey:     "false",
	"write.parquet.compression-level":         "1",
	table.WriteTargetFileSizeBytesKey:         strconv.Itoa(targetFileBytes),
}

// FileInfo is what the cache keeps in memory about one live data file: enough to plan an
// incremental scan and to answer status without touching the file or Iceberg manifests.
type FileInfo struct {
	Path          string // local filesystem path
	Rows          int64
	Bytes         int64
	MinSeq        int64
	MaxSeq        int64
	MinIngestedAt int64 // unix micros
	MaxIngestedAt int64
}

// generation is one Iceberg table directory holding a partition's rows. Compaction writes a
// new generation and swaps it in; the old one is removed once no reader holds it.
type generation struct {
	name  string // gen-%08d
	dir   string
	ident table.Identifier
	cat   *hadoop.Catalog
	tbl   *table.Table
	files []FileInfo // sorted by MinSeq; files never overlap in seq
	marks
	// escaped: user columns are stored under physicalName (names.go); false only for
	// generations written before that, whose stored names are the field names.
	escaped bool
	// moved is the directory the metadata was written for, when the home has been moved or
	// copied since (relocate.go); files then names the generation's own copies.
	moved string
	// prevLive are the manifest lists and manifests of the snapshot before the current one,
	// which sweep keeps (nil until the first commit since the table was loaded).
	prevLive map[string]bool
}

// marks are a generation's bounds kept as table properties, carried into every new
// generation by compaction.
type marks struct {
	maxSeq        int64 // highest seq ever committed
	prunedThrough int64 // every row with seq <= prunedThrough was deleted by retention
	prunedAt      int64 // ingest time (µs) of the row at prunedThrough
}

func (m marks) props() iceberg.Properties {
	return iceberg.Properties{
		propMaxSeq:        strconv.FormatInt(m.maxSeq, 10),
		propPrunedThrough: strconv.FormatInt(m.prunedThrough, 10),
		propPrunedAt:      strconv.FormatInt(m.prunedAt, 10),
	}
}

func newCatalog(warehouse string) (*hadoop.Catalog, error) {
	cat, err := hadoop.NewCatalog("hyp", fileURI(warehouse), iceberg.Properties{})
	if err != nil {
		return nil, fmt.Errorf("iceberg catalog at %s: %w", warehouse, err)
	}
	return cat, nil
}

func ensureNamespace(ctx context.Context, cat *hadoop.Catalog, ns table.Identifier) error {
	for i := 1; i <= len(ns); i++ {
		err := cat.CreateNamespace(ctx, ns[:i], nil)
		if err != nil && !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
			return fmt.Errorf("create namespace %v: %w", ns[:i], err)
		}
	}
	return nil
}

// createGeneration makes an empty table generation with the given schema, whose user
// column names are stored escaped (names.go) when escaped is set.
func createGeneration(ctx context.Context, cat *hadoop.Catalog, warehouse string, ns table.Identifier, n int, sc *iceberg.Schema, m marks, escaped bool) (*generation, error) {
	if err := ensureNamespace(ctx, cat, ns); err != nil {
		return nil, err
	}
	name := genName(n)
	ident := append(slices.Clone(ns), name)
	dir := string(layout(warehouse).table(ident))
	props := maps.Clone(tableProps)
	maps.Copy(props, m.props())
	if escaped {
		props[propColumnNames] = columnNamesEsc
	}
	// iceberg-go joins file names onto the table location as a URL; a plain path with a
	// space, '%', '?', '#' or non-ASCII would come back escaped or cut, and the files would
	// land elsewhere. Escaped file:// URIs round-trip through its LocalFS.
	props[table.WriteDataPathKey] = fileURI(tableDir(dir).data())
	props[table.WriteMetadataPathKey] = fileURI(tableDir(dir).metadata())
	_, statErr := os.Stat(dir)
	tbl, err := cat.CreateTable(ctx, ident, sc, catalog.WithProperties(props))
	if err != nil {
		if errors.Is(statErr, os.ErrNotExist) {
			// What a create that failed half way (a full disk) left would make every later
			// create of this generation fail as existing; it holds no rows.
			_ = os.RemoveAll(dir)
		}
		return nil, fmt.Errorf("create table %v: %w", ident, err)
	}
	return &generation{name: name, dir: dir, ident: ident, cat: cat, tbl: tbl, marks: m, escaped: escaped}, nil
}

// loadGeneration opens an existing generation and reads its live file list once. It holds
// the generation's readers lock meanwhile, so the writer cannot sweep the manifests it is
// reading (sweep).
func loadGeneration(ctx context.Context, cat *hadoop.Catalog, warehouse string, ns table.Identifier, name string) (*generation, error) {
	ident := append(slices.Clone(ns), name)
	g := &generation{name: name, dir: string(layout(warehouse).table(ident)), ident: ident, cat: cat}
	lk, err := fsutil.SharedLock(tableDir(g.dir).readersLock())
	if err != nil {
		return nil, fmt.Errorf("load table %v: %w", ident, err)
	}
	defer lk.Unlock()
	if g.tbl, err = cat.LoadTable(ctx, ident); err != nil {
		// The catalog loads the newest version; its error does not always say which file.
		td := tableDir(g.dir)
		if vs, verr := td.metadataVersions(); verr == nil && len(vs) > 0 && !strings.Contains(err.Error(), td.metadata()) {
			return nil, fmt.Errorf("load table %v from %s: %w", ident, td.metadataFile(vs[0]), err)
		}
		return nil, fmt.Errorf("load table %v: %w", ident, err)
	}
	if g.moved = g.movedFrom(); g.moved != "" {
		if err := g.readMarks(); err != nil {
			return nil, err
		}
		if g.files, err = g.movedFiles(g.moved); err != nil {
			return nil, err
		}
		return g, nil
	}
	if err := g.reload(ctx); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *generation) readMarks() error {
	props := g.tbl.Properties()
	g.escaped = props[propColumnNames] == columnNamesEsc
	for _, f := range []struct {
		key string
		dst *int64
	}{{propMaxSeq, &g.maxSeq}, {propPrunedThrough, &g.prunedThrough}, {propPrunedAt, &g.prunedAt}} {
		v := props[f.key]
		if v == "" {
			*f.dst = 0
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("table %v: bad %s %q", g.ident, f.key, v)
		}
		*f.dst = n
	}
	return nil
}

// reload rebuilds the file index from the current snapshot's manifests. It costs one read
// of every manifest, so it runs only at open and after rewrites (retention), never per tick.
func (g *generation) reload(ctx context.Context) error {
	if err := g.readMarks(); err != nil {
		return err
	}
	g.files = g.files[:0]
	snap := g.tbl.CurrentSnapshot()
	if snap == nil {
		return nil
	}
	files, err := g.dataFiles(ctx, snap)
	if err != nil {
		return err
	}
	g.files = files
	sortFiles(g.files)
	return nil
}

func sortFiles(files []FileInfo) {
	slices.SortFunc(files, func(a, b FileInfo) int {
		switch {
		case a.MinSeq < b.MinSeq:
			return -1
		case a.MinSeq > b.MinSeq:
			return 1
		}
		return 0
	})
}

// dataFiles lists the live data files of snap.
func (g *generation) dataFiles(ctx context.Context, snap *table.Snapshot) ([]FileInfo, error) {
	fio, err := g.tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	return g.readFiles(fio, snap)
}

// readFiles is dataFiles through fio.
func (g *generation) readFiles(fio icebergio.IO, snap *table.Snapshot) ([]FileInfo, error) {
	dfs, err := g.readEntries(fio, snap)
	out := make([]FileInfo, len(dfs))
	for i, df := range dfs {
		out[i] = fileInfo(df)
	}
	return out, err
}

// readEntries is readFiles' DataFiles, as the manifests hold them.
func (g *generation) readEntries(fio icebergio.IO, snap *table.Snapshot) ([]iceberg.DataFile, error) {
	mfs, err := snap.Manifests(fio)
	if err != nil {
		return nil, fmt.Errorf("table %v: read manifest list: %w", g.ident, err)
	}
	var out []iceberg.DataFile
	for _, mf := range mfs {
		if mf.ManifestContent() != iceberg.ManifestContentData {
			return nil, fmt.Errorf("table %v: unexpected delete manifest %s", g.ident, mf.FilePath())
		}
		entries, err := mf.FetchEntries(fio, true)
		if err != nil {
			return nil, fmt.Errorf("table %v: read manifest %s: %w", g.ident, mf.FilePath(), err)
		}
		for _, e := range entries {
			df := e.DataFile()
			if df.ContentType() != iceberg.EntryContentData {
				return nil, fmt.Errorf("table %v: unexpected delete file %s", g.ident, df.FilePath())
			}
			out = append(out, df)
		}
	}
	return out, nil
}

func fileInfo(df iceberg.DataFile) FileInfo {
	lo, hi := df.LowerBoundValues(), df.UpperBoundValues()
	return FileInfo{
		Path:          localPath(df.FilePath()),
		Rows:          df.Count(),
		Bytes:         df.FileSizeBytes(),
		MinSeq:        boundInt64(lo[seqFieldID]),
		MaxSeq:        boundInt64(hi[seqFieldID]),
		MinIngestedAt: boundInt64(lo[ingestedAtID]),
		MaxIngestedAt: boundInt64(hi[ingestedAtID]),
	}
}

func boundInt64(b []byte) int64 {
	if len(b) != 8 {
		return 0
	}
	return int64(binary.LittleEndian.Uint64(b))
}

// fileURI is the escaped file:// URI of a local path.
func fileURI(p string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(p)}).String()
}

// localPath turns a data file location back into a local path.
func localPath(p string) string {
	if strings.HasPrefix(p, "file:") {
		if u, err := url.Parse(p); err == nil {
			return filepath.FromSlash(u.Path)
		}
	}
	return p
}

// append commits rec, which has the table's Arrow schema, as a new data file together with
// the new max seq, in one commit.
func (g *generation) append(ctx context.Context, rec arrow.RecordBatch, maxSeq int64) error {
	w, err := g.fileWriter(ctx)
	if err != nil {
		return fmt.Errorf("table %v: %w", g.ident, err)
	}
	rdr, err := array.NewRecordReader(rec.Schema(), []arrow.RecordBatch{rec})
	if err != nil {
		return err
	}
	defer rdr.Release()
	tx := g.tbl.NewTransaction()
	added, err := w.append(ctx, tx, rdr)
	if err != nil {
		return fmt.Errorf("table %v: append: %w", g.ident, err)
	}
	return g.commitAppend(ctx, tx, added, maxSeq)
}

// commitAppend commits tx, which added the files added holding the rows through maxSeq,
// with the new max seq. The file index takes added as the append described them, which is
// what the commit's manifest holds: reading that back cost a new partition's first commit
// a tenth of its time.
func (g *generation) commitAppend(ctx context.Context, tx *table.Transaction, added []FileInfo, maxSeq int64) error {
	if err := tx.SetProperties(iceberg.Properties{propMaxSeq: strconv.FormatInt(maxSeq, 10)}); err != nil {
		return fmt.Errorf("table %v: set max seq: %w", g.ident, err)
	}
	if err := g.commit(ctx, tx); err != nil {
		return fmt.Errorf("table %v: commit append: %w", g.ident, err)
	}
	g.maxSeq = maxSeq
	g.files = append(g.files, added...)
	sortFiles(g.files)
	return nil
}

// commit commits tx, keeping only the snapshot it makes: the cache reads nothing but the
// current snapshot's files (scans, retention and compaction use the live file list), and
// every snapshot kept would make each later commit rewrite and hold a larger metadata.
// Files of the expired snapshots are left to sweep.
func (g *generation) commit(ctx context.Context, tx *table.Transaction) error {
	if err := tx.ExpireSnapshots(table.WithRetainLast(1), table.WithOlderThan(0), table.WithPostCommit(false)); err != nil {
		return fmt.Errorf("expire snapshots: %w", err)
	}
	if g.prevLive == nil {
		// The first commit since the table was loaded: what its snapshot needs is kept
		// one commit longer (sweep), so it is read before it changes.
		g.prevLive, _ = g.metadataFiles(ctx)
	}
	tbl, err := tx.Commit(ctx)
	if err != nil {
		return err
	}
	// The table Commit returns keeps every earlier version of the metadata reachable, so a
	// generation held would grow with the square of its commits; a fresh load holds one.
	if fresh, err := g.cat.LoadTable(ctx, g.ident); err == nil {
		tbl = fresh
	}
	g.tbl = tbl
	g.sweep(ctx)
	return nil
}

// sweep deletes the manifest lists and manifests neither the table's snapshot nor the one
// it replaced refers to any more. The one it replaced stays readable because losing the
// newest metadata file must not cost the table: the catalog then loads the version before,
// and recovery (recover.go) re-adds what the lost commit added. Readers need them only
// while they load the table, which they do under a shared readers lock, so sweep runs only
// when it gets that lock exclusively; otherwise the next commit (or the compaction that
// retires the generation) takes them. Data files are never swept here: a reader that pinned
// the generation may still read one that retention dropped.
func (g *generation) sweep(ctx context.Context) {
	live, err := g.metadataFiles(ctx)
	if err != nil {
		return
	}
	prev := g.prevLive
	g.prevLive = live
	avro, err := tableDir(g.dir).metadataAvro()
	if err != nil {
		return
	}
	var candidates []string
	for _, p := range avro {
		if !live[p] && !prev[p] {
			candidates = append(candidates, p)
		}
	}
	if len(candidates) == 0 {
		return
	}
	lk, err := fsutil.TryLock(tableDir(g.dir).readersLock())
	if err != nil {
		return
	}
	defer lk.Unlock()
	for _, p := range candidates {
		_ = os.Remove(p)
	}
}

// metadataFiles are the local paths of the manifest lists and manifests the table's
// snapshots refer to.
func (g *generation) metadataFiles(ctx context.Context) (map[string]bool, error) {
	fio, err := g.tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	for _, snap := range g.tbl.Metadata().Snapshots() {
		live[localPath(snap.ManifestList)] = true
		mfs, err := snap.Manifests(fio)
		if err != nil {
			return nil, fmt.Errorf("table %v: read manifest list: %w", g.ident, err)
		}
		for _, mf := range mfs {
			live[localPath(mf.FilePath())] = true
		}
	}
	return live, nil
}

// addColumns evolves the table schema with new nullable columns.
func (g *generation) addColumns(ctx context.Context, cols []Column) error {
	tx := g.tbl.NewTransaction()
	us := tx.UpdateSchema(true, false)
	for _, c := range cols {
		us = us.AddColumn([]string{g.stored(c.Name)}, c.Type.iceberg(), "", false, nil)
	}
	if err := us.Commit(); err != nil {
		return fmt.Errorf("table %v: add columns: %w", g.ident, err)
	}
	if err := g.commit(ctx, tx); err != nil {
		return fmt.Errorf("table %v: commit schema: %w", g.ident, err)
	}
	return g.dropOldSchemas(ctx)
}

// dropOldSchemas removes every schema but the current one and the one the current snapshot
// was written with. Iceberg keeps each schema version in the table metadata, so a table
// that gains a column per commit would otherwise carry (and rewrite, and parse, at every
// commit) a metadata file growing with the square of its columns.
func (g *generation) dropOldSchemas(ctx context.Context) error {
	keep := map[int]bool{g.tbl.Schema().ID: true}
	if snap := g.tbl.CurrentSnapshot(); snap != nil && snap.SchemaID != nil {
		keep[*snap.SchemaID] = true
	}
	var old []int
	for _, sc := range g.tbl.Metadata().Schemas() {
		if !keep[sc.ID] {
			old = append(old, sc.ID)
		}
	}
	if len(old) == 0 {
		return nil
	}
	reqs := []table.Requirement{table.AssertTableUUID(g.tbl.Metadata().TableUUID()), table.AssertCurrentSchemaID(g.tbl.Schema().ID)}
	if _, _, err := g.cat.CommitTable(ctx, g.ident, reqs, []table.Update{table.NewRemoveSchemasUpdate(old)}); err != nil {
		return fmt.Errorf("table %v: drop old schemas: %w", g.ident, err)
	}
	tbl, err := g.cat.LoadTable(ctx, g.ident)
	if err != nil {
		return fmt.Errorf("table %v: reload after dropping old schemas: %w", g.ident, err)
	}
	g.tbl = tbl
	return nil
}

// deleteThrough removes every row with seq <= cut. Whole files go; the boundary file is
// rewritten (copy-on-write), so the table never holds delete files.
// The cut and its row's ingest time become the generation's pruned mark in the same commit.
func (g *generation) deleteThrough(ctx context.Context, cut, cutAt int64) error {
	tx, err := g.planDelete(ctx, g.tbl, cut)
	if err != nil {
		return err
	}
	return g.commitDelete(ctx, tx, cut, cutAt)
}

// planDelete writes, from the table as base was, what deleting every row with seq <= cut
// takes (the rewritten boundary file, manifests), without committing: it reads and writes
// files only, so it can run outside the partition lock.
func (g *generation) planDelete(ctx context.Context, base *table.Table, cut int64) (*table.Transaction, error) {
	tx := base.NewTransaction()
	if err := tx.Delete(ctx, iceberg.LessThanEqual(iceberg.Reference(columns.SeqColumn), cut), nil); err != nil {
		return nil, fmt.Errorf("table %v: delete seq <= %d: %w", g.ident, cut, err)
	}
	return tx, nil
}

// commitDelete commits a planned delete with the pruned mark it sets; the marks are taken
// now, under the partition lock, so an append's max seq is never written back.
func (g *generation) commitDelete(ctx context.Context, tx *table.Transaction, cut, cutAt int64) error {
	m := g.marks
	if cut > m.prunedThrough {
		m.prunedThrough, m.prunedAt = cut, max(m.prunedAt, cutAt)
	}
	if err := tx.SetProperties(m.props()); err != nil {
		return fmt.Errorf("table %v: %w", g.ident, err)
	}
	if err := g.commit(ctx, tx); err != nil {
		return fmt.Errorf("table %v: commit delete: %w", g.ident, err)
	}
	return g.reload(ctx)
}

// columns returns the table's columns other than the internal ones, in schema order,
// under their logical names.
func (g *generation) columns() []Column {
	var out []Column
	for _, f := range g.tbl.Schema().Fields() {
		if f.ID == seqFieldID || f.ID == ingestedAtID {
			continue
		}
		if t, ok := typeOfIceberg(f.Type); ok {
			out = append(out, Column{Name: g.logical(f.Name), Type: t})
		}
	}
	return out
}

// stored is the name the table stores a logical column under.
func (g *generation) stored(name string) string {
	if g.escaped {
		return physicalName(name)
	}
	return name
}

// logical is the column name a stored name stands for.
func (g *generation) logical(stored string) string {
	if g.escaped {
		return logicalName(stored)
	}
	return stored
}

// fieldIDs maps every column's logical name to its field id.
func (g *generation) fieldIDs() map[string]int {
	fields := g.tbl.Schema().Fields()
	out := make(map[string]int, len(fields))
	for _, f := range fields {
		out[g.logical(f.Name)] = f.ID
	}
	return out
}

// readSchema is the table's current schema as readers see it: every column (internal ones
// first) under its logical name, without field-id metadata, and each column's field id.
// Data files are matched to it by field id, never by name, so a file keeps being read right
// whatever its writer called the column.
func (g *generation) readSchema() (*arrow.Schema, []int, error) {
	sc := g.tbl.Schema()
	fields := make([]arrow.Field, 0, sc.NumFields())
	ids := make([]int, 0, sc.NumFields())
	for _, f := range sc.Fields() {
		t, ok := typeOfIceberg(f.Type)
		if !ok {
			return nil, nil, fmt.Errorf("table %v: column %q has type %s, which the cache never writes", g.ident, f.Name, f.Type)
		}
		fields = append(fields, arrow.Field{Name: g.logical(f.Name), Type: t.arrow(), Nullable: !f.Required})
		ids = append(ids, f.ID)
	}
	return arrow.NewSchema(fields, nil), ids, nil
}

func genExists(genDir string) bool {
	_, err := os.Stat(tableDir(genDir).metadata())
	return err == nil
}
