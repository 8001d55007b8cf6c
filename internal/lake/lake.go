// Package lake owns exporting units into Iceberg tables (SPEC 6b): one table per dataset in an
// iceberg sink's catalog, its schema grown additively from the cache's columns, and commits
// that carry hyp's markers in their snapshot summary (hyp.gateway, hyp.commit-id, hyp.units),
// so that a writer can tell, after a crash or a commit whose outcome it never heard, whether
// that commit landed.
//
// A commit's data files are named from its commit id, the snapshot it was decided on and the
// unit, so a retried commit rewrites the same files instead of leaving new ones, and a
// recovering commit is made only against a head it has checked for its commit id: a data
// file is never added to a table twice.
//
// It also owns making a local warehouse's files durable before a commit names them
// (durable.go): InstallDurableIO, which the process calls before it loads any table,
// replaces iceberg-go's local file IO for the whole process, and the replacement must leave
// every path outside an open Lake's warehouse as that IO treats it.
//
// The package never reads the cache or the watermarks (the sink decides what a unit holds
// and when to ask), deletes files only in Maintain and only those nothing retained or
// pending can need (maintain.go), and never rewrites a column's type.
package lake

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/hadoop"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	_ "github.com/apache/iceberg-go/io/gocloud/s3" // s3:// warehouses
	"github.com/apache/iceberg-go/table"
	_ "github.com/jackc/pgx/v5/stdlib" // postgres:// catalogs
	_ "modernc.org/sqlite"             // sqlite:/// catalogs

	"github.com/hyp-project/hyp/internal/fsutil"
	"github.com/hyp-project/hyp/internal/icebergpath"
	"github.com/hyp-project/hyp/internal/redact"
)

// Summary keys of every commit hyp makes.
const (
	PropGateway  = "hyp.gateway"
	PropCommitID = "hyp.commit-id"
	PropUnits    = "hyp.units"
)

// PropLastCommit prefixes the table property in which each writer (a sink instance on a
// gateway: `hyp.last-commit.<instance>/<gateway>`) records its newest commit as
// `<commit id>@<base snapshot>@<unix ms>`, set in the same transaction as the commit (tables
// written before the time was added hold the first two only). It tells a
// recovering writer whether its commit landed after the snapshots holding the summary
// markers have been expired. The instance comes first because sink names hold no '/', so
// the key cannot be read two ways; the gateway is there because machines share instance
// names, and the instance because two sinks of one machine may write one table.
const PropLastCommit = "hyp.last-commit."

// CatalogName is the name hyp's tables are registered under in an sql catalog (its
// catalog_name column): a Spark or Trino JDBC catalog reading them must use it.
const CatalogName = "hyp"

// tableProps are set on every table hyp creates. iceberg-go retries no conflicting commit by
// default; several machines appending to one table conflict on every concurrent commit, and
// an append replayed onto the new head is always valid.
var tableProps = iceberg.Properties{
	table.PropertyFormatVersion:               "2",
	table.CommitNumRetriesKey:                 "20",
	table.CommitMinRetryWaitMsKey:             "100",
	table.CommitMaxRetryWaitMsKey:             "10000",
	table.CommitTotalRetryTimeoutMsKey:        "600000",
	table.MetadataDeleteAfterCommitEnabledKey: "true",
	table.MetadataPreviousVersionsMaxKey:      "100",
}

// Options configure a Lake.
type Options struct {
	Catalog     string // sql | hadoop
	URI         string // sql: postgres://... or sqlite:///path
	Warehouse   string // s3://bucket/prefix or an absolute local path
	Namespace   string
	PartitionBy string // day | hour | none
	Region      string
	Endpoint    string
	PathStyle   bool
	Gateway     string // this machine, recorded in _hyp_gateway and hyp.gateway
	Writer      string // the sink instance committing, part of its PropLastCommit key

	// syncFile makes one file of a local warehouse durable: nil is fsync; tests count.
	syncFile func(*os.File) error
}

// Lake is an iceberg sink's catalog and warehouse.
type Lake struct {
	cat  catalog.Catalog
	db   *sql.DB // the sql catalog's database, closed with the Lake
	ns   table.Identifier
	part string
	gw   string
	// lastKey is this writer's PropLastCommit property.
	lastKey string
	// durable ends the fsyncs of a local warehouse's files (durable.go); nil on S3.
	durable func()
}

// Open connects to the catalog (creating the sqlite file, the local warehouse and the
// namespace when missing).
func Open(ctx context.Context, o Options) (*Lake, error) {
	InstallDurableIO()
	props := iceberg.Properties{}
	warehouse := o.Warehouse
	local := !strings.HasPrefix(warehouse, "s3://")
	if !local {
		if o.Region != "" {
			props["s3.region"] = o.Region
		}
		if o.Endpoint != "" {
			props["s3.endpoint"] = o.Endpoint
			// iceberg-go addresses a custom endpoint path-style unless told otherwise.
			if !o.PathStyle {
				props["s3.force-virtual-addressing"] = "true"
			}
		}
	} else {
		if !filepath.IsAbs(warehouse) {
			return nil, fmt.Errorf("warehouse %q: want an absolute path or s3://", warehouse)
		}
		if o.Catalog == "hadoop" {
			if err := icebergpath.CheckHadoopWarehouse(warehouse); err != nil {
				return nil, err
			}
		}
		if err := fsutil.MkdirAllSync(warehouse); err != nil {
			return nil, fmt.Errorf("warehouse: %w", err)
		}
	}
	l := &Lake{ns: table.Identifier{o.Namespace}, part: o.PartitionBy, gw: o.Gateway, lastKey: PropLastCommit + o.Writer + "/" + o.Gateway}
	if local {
		l.durable = keepDurable(warehouse, o.syncFile)
		warehouse = FileURI(warehouse)
	}
	opened := false
	defer func() {
		if !opened && l.durable != nil {
			l.durable()
		}
	}()
	props["warehouse"] = warehouse
	switch o.Catalog {
	case "sql":
		driver, dialect, dsn, err := sqlSource(o.URI)
		if err != nil {
			return nil, err
		}
		// The driver's errors may quote the data source, as best it can redact it.
		if l.db, err = sql.Open(driver, dsn); err != nil {
			return nil, fmt.Errorf("catalog %s: %w", redact.String(o.URI), redact.Error(err))
		}
		cat, err := sqlcat.NewCatalog(CatalogName, l.db, dialect, props)
		if err != nil {
			l.db.Close()
			return nil, fmt.Errorf("catalog %s: %w", redact.String(o.URI), redact.Error(err))
		}
		l.cat = cat
	case "hadoop":
		if !local {
			// iceberg-go's hadoop catalog commits by rename, which is not atomic on S3.
			return nil, errors.New("the hadoop catalog cannot be used with an s3:// warehouse: use an sql catalog")
		}
		cat, err := hadoop.NewCatalog(CatalogName, warehouse, props)
		if err != nil {
			return nil, fmt.Errorf("catalog: %w", err)
		}
		l.cat = cat
	default:
		return nil, fmt.Errorf("catalog type %q: want sql or hadoop", o.Catalog)
	}
	if err := l.cat.CreateNamespace(ctx, l.ns, nil); err != nil && !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
		l.Close()
		return nil, fmt.Errorf("create namespace %s: %w", o.Namespace, err)
	}
	opened = true
	return l, nil
}

// sqlSource maps a catalog URI to a database/sql driver, bun dialect and data source.
func sqlSource(uri string) (driver string, dialect sqlcat.SupportedDialect, dsn string, err error) {
	switch {
	case strings.HasPrefix(uri, "sqlite://"):
		path := strings.TrimPrefix(uri, "sqlite://")
		if err := fsutil.MkdirAllSync(filepath.Dir(path)); err != nil {
			return "", "", "", fmt.Errorf("catalog %s: %w", uri, err)
		}
		// Several hyp processes (and connections) may share one catalog file: wait for its
		// lock rather than failing the commit. Every transaction begins IMMEDIATE, taking
		// the write lock first: the catalog's transactions read, then write, and in WAL mode
		// SQLite fails such an upgrade at once with SQLITE_BUSY when another writer got in
		// between, without waiting (TestConcurrentWritersNeverDuplicate failed so under
		// load). The path after sqlite:// is a path, not URI text; the driver's file: URI
		// is, and SQLite decodes %XX in it and ends its path at '?' or '#', so the path is
		// escaped as a URI path.
		return "sqlite", sqlcat.SQLite, "file:" + (&url.URL{Path: path}).EscapedPath() + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate", nil
	case strings.HasPrefix(uri, "postgres://"), strings.HasPrefix(uri, "postgresql://"):
		// pgx only sees a URI whose password can be located: its redaction of one that
		// cannot is a guess, and its errors quote the URI.
		if _, err := redact.ParseURI(uri); err != nil {
			return "", "", "", fmt.Errorf("catalog uri %s: %w", redact.String(uri), err)
		}
		return "pgx", sqlcat.Postgres, uri, nil
	}
	return "", "", "", fmt.Errorf("catalog uri %s: want postgres://... or sqlite:///path", redact.String(uri))
}

// FileURI is the file:// URI of a local path, escaped so that iceberg-go, which joins file
// names onto locations as URLs, keeps every byte of it.
func FileURI(path string) string { return (&url.URL{Scheme: "file", Path: path}).String() }

// localFile is the local path a table location names, read the way iceberg-go's local file
// IO reads it: a file: URI decoded, a location with no scheme taken as written (it is not
// URI text); ok is false for a location of another scheme.
func localFile(location string) (path string, ok bool) {
	if strings.HasPrefix(location, "file:") {
		u, err := url.Parse(location)
		return u.Path, err == nil
	}
	return location, !strings.Contains(location, "://")
}

// Close releases the catalog.
func (l *Lake) Close() error {
	if l.durable != nil {
		l.durable()
	}
	var err error
	if c, ok := l.cat.(interface{ Close() error }); ok {
		err = c.Close()
	}
	if l.db != nil {
		err = errors.Join(err, l.db.Close())
	}
	return err
}

func (l *Lake) ident(dataset string) table.Identifier {
	return append(table.Identifier{l.ns[0]}, dataset)
}

// Unit is one partition's seq range in a commit, as recorded in hyp.units.
type Unit struct {
	Dataset   string `json:"dataset"`
	Partition string `json:"partition"`
	First     int64  `json:"first_seq"`
	Last      int64  `json:"last_seq"`
	Rows      int64  `json:"rows"`
}

// CommitID names a commit from what it holds only: the same gateway committing the same
// units always gets the same id, so a retry after a crash looks for the right one. The
// incarnation (the sender cache's seq space, SPEC 5) is part of it, so a reinstalled machine
// whose seqs start again at 1 never finds its earlier life's commit and takes its rows for
// committed; "" (a cache made before incarnations) leaves the id what it was. A gateway id
// never holds \x01, so the two never run together.
func CommitID(gateway, incarnation string, units []Unit) string {
	h := sha256.New()
	h.Write([]byte(gateway))
	if incarnation != "" {
		h.Write([]byte("\x01" + incarnation))
	}
	for _, u := range units {
		fmt.Fprintf(h, "\x00%s\x00%s\x00%d\x00%d", u.Dataset, u.Partition, u.First, u.Last)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// load returns the dataset's table, or nil when it does not exist yet.
func (l *Lake) load(ctx context.Context, dataset string) (*table.Table, error) {
	tbl, err := l.cat.LoadTable(ctx, l.ident(dataset))
	if errors.Is(err, catalog.ErrNoSuchTable) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load table %s.%s: %w", l.ns[0], dataset, err)
	}
	return tbl, nil
}

// Head is the dataset table's current snapshot id: 0 when the table or its first snapshot
// does not exist yet.
func (l *Lake) Head(ctx context.Context, dataset string) (int64, error) {
	tbl, err := l.load(ctx, dataset)
	if err != nil || tbl == nil {
		return 0, err
	}
	return headOf(tbl), nil
}

func headOf(tbl *table.Table) int64 {
	if s := tbl.CurrentSnapshot(); s != nil {
		return s.SnapshotID
	}
	return 0
}

// Committed reports whether the commit id decided on snapshot base landed in the table.
func (l *Lake) Committed(ctx context.Context, dataset, id string, base int64) (bool, error) {
	tbl, err := l.load(ctx, dataset)
	if err != nil || tbl == nil {
		return false, err
	}
	return l.landed(tbl, id, base), nil
}

// commitMark is what PropLastCommit holds for a commit made at.
func commitMark(id string, base int64, at time.Time) string {
	return fmt.Sprintf("%s@%d@%d", id, base, at.UnixMilli())
}

// parseMark reads a PropLastCommit value; at is zero when the mark has no time.
func parseMark(mark string) (id string, base int64, at time.Time, ok bool) {
	f := strings.Split(mark, "@")
	if len(f) < 2 || len(f) > 3 {
		return "", 0, time.Time{}, false
	}
	base, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return "", 0, time.Time{}, false
	}
	if len(f) == 3 {
		ms, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return "", 0, time.Time{}, false
		}
		at = time.UnixMilli(ms).UTC()
	}
	return f[0], base, at, true
}

// landed decides whether commit id, decided on base, is in tbl: this writer's
// PropLastCommit names it, or a retained snapshot after base carries its id.
//
// The property is exact: a writer's commits to one table are sequential, and the sink
// resolves every intent before it makes its next commit, so the property names the newest
// commit this writer made, which is either the one in doubt (landed) or an earlier one (it
// did not land), whatever snapshots expiry has removed. The snapshots still answer for
// tables this writer last wrote before the property existed. When base itself has been
// expired, which snapshots came after it is unknown (a rewind may have committed the same
// id before it), so a property that says no is final then.
func (l *Lake) landed(tbl *table.Table, id string, base int64) bool {
	mark, marked := tbl.Properties()[l.lastKey]
	if mid, mbase, _, ok := parseMark(mark); marked && ok && mid == id && mbase == base {
		return true
	}
	md := tbl.Metadata()
	if marked && base != 0 && md.SnapshotByID(base) == nil {
		return false
	}
	return committedIn(md, id, base)
}

// committedIn reports whether a snapshot after base (every retained one when base is 0
// or has been expired) carries commit id.
func committedIn(md table.Metadata, id string, base int64) bool {
	var after int64 = -1
	if base != 0 {
		if s := md.SnapshotByID(base); s != nil {
			after = s.SequenceNumber
		}
	}
	for _, s := range md.Snapshots() {
		if s.SequenceNumber > after && s.Summary != nil && s.Summary.Properties[PropCommitID] == id {
			return true
		}
	}
	return false
}

// LastCommit is the newest commit this writer made to the dataset's table, for status;
// ok is false when there is none. The writer's PropLastCommit names it even after expiry
// and compaction have removed its snapshot; tables written before the mark carried a time
// are answered from the retained snapshots.
func (l *Lake) LastCommit(ctx context.Context, dataset string) (id string, at time.Time, ok bool, err error) {
	tbl, err := l.load(ctx, dataset)
	if err != nil || tbl == nil {
		return "", time.Time{}, false, err
	}
	if id, _, at, ok := parseMark(tbl.Properties()[l.lastKey]); ok && !at.IsZero() {
		return id, at, true, nil
	}
	snaps := tbl.Metadata().Snapshots()
	for i := len(snaps) - 1; i >= 0; i-- {
		s := snaps[i]
		if s.Summary != nil && s.Summary.Properties[PropGateway] == l.gw && s.Summary.Properties[PropCommitID] != "" {
			return s.Summary.Properties[PropCommitID], time.UnixMilli(s.TimestampMs).UTC(), true, nil
		}
	}
	return "", time.Time{}, false, nil
}

// Result is what a commit did.
type Result struct {
	Snapshot int64 // the table's snapshot holding the commit (0 when Already)
	Files    int
	Rows     int64
	Bytes    int64
	Already  bool // a recovering commit found its id already in the table: nothing was added
	// Merged counts the small staged files whose rows a staged commit added in merged
	// files instead (merge.go); Files counts what the snapshot added. Leftover counts
	// those that could not be removed after the commit: orphans the table's upkeep removes.
	Merged, Leftover int
}

// Commit is one table commit: every batch's rows in one snapshot.
type Commit struct {
	Dataset string
	ID      string // CommitID of the units
	// Base is the table's snapshot (0 for none) when the commit was decided: the commit is
	// made only if no snapshot after it carries ID already, which covers a retry after a
	// crash or after an error whose outcome was unknown. It is also part of the data files'
	// names, so a re-export of the same seqs after a rewind never reuses the name of a file
	// an older snapshot references.
	Base    int64
	Batches []Batch
}

// ErrGaveUp means a commit lost the race for the table's head too many times in a row;
// the next tick tries again.
var ErrGaveUp = errors.New("the table kept changing under the commit")

const commitAttempts = 30

// Commit writes every batch's rows as data files and commits them in one snapshot, unless
// a snapshot after c.Base already holds c.ID (then Result.Already is set and nothing is
// added).
//
// Every attempt is pinned to the head it checked for c.ID. A concurrent commit therefore
// fails the attempt instead of letting iceberg-go replay it onto a head that might hold
// this very commit (landed from an attempt whose answer was lost); the loop re-reads the
// head, looks for c.ID again and retries. iceberg-go's sql catalog reports most such
// conflicts as a failed requirement rather than table.ErrCommitFailed, and retries neither
// kind by itself when the branch is pinned.
func (l *Lake) Commit(ctx context.Context, c Commit) (Result, error) {
	var res Result
	tbl, err := l.prepare(ctx, c.Dataset, c.Batches)
	if err != nil {
		return res, err
	}
	if l.landed(tbl, c.ID, c.Base) {
		return Result{Already: true}, nil
	}
	files, err := l.write(ctx, tbl, c)
	if err != nil {
		return res, err
	}
	for _, f := range files {
		res.Files++
		res.Rows += f.Count()
		res.Bytes += f.FileSizeBytes()
	}
	units := make([]Unit, len(c.Batches))
	for i, b := range c.Batches {
		units[i] = b.Unit
	}
	uj, err := json.Marshal(units)
	if err != nil {
		return res, err
	}
	props := iceberg.Properties{PropGateway: l.gw, PropCommitID: c.ID, PropUnits: string(uj)}
	snap, already, err := l.addFiles(ctx, tbl, c.Dataset, c.ID, c.Base, files, props)
	if already {
		return Result{Already: true}, err
	}
	res.Snapshot = snap
	return res, err
}

// addFiles commits files in one snapshot pinned to the head it checked for id (see Commit
// for why a commit is never replayed onto a head it has not checked), recording id in this
// writer's PropLastCommit in the same transaction; after a conflict it re-reads the head and
// looks for id again.
func (l *Lake) addFiles(ctx context.Context, tbl *table.Table, dataset, id string, base int64, files []iceberg.DataFile, props iceberg.Properties) (snapshot int64, already bool, err error) {
	for attempt := 1; ; attempt++ {
		tx := tbl.NewTransaction()
		if err := tx.AssertRefSnapshotID(table.MainBranch); err != nil {
			return 0, false, err
		}
		if err := tx.SetProperties(iceberg.Properties{l.lastKey: commitMark(id, base, time.Now())}); err != nil {
			return 0, false, err
		}
		// The duplicate check reads every manifest of the table; the markers make it
		// unnecessary, since a file name belongs to one commit.
		if err := tx.AddDataFiles(ctx, files, props, table.WithoutDuplicateCheck()); err != nil {
			return 0, false, fmt.Errorf("stage commit to %s.%s: %w", l.ns[0], dataset, err)
		}
		next, err := tx.Commit(ctx)
		if err == nil {
			return headOf(next), false, nil
		}
		if !conflict(err) {
			return 0, false, fmt.Errorf("commit to %s.%s: %w", l.ns[0], dataset, err)
		}
		if attempt >= commitAttempts {
			return 0, false, fmt.Errorf("commit to %s.%s: %w after %d attempts: %v", l.ns[0], dataset, ErrGaveUp, attempt, err)
		}
		if err := backoff(ctx, attempt); err != nil {
			return 0, false, err
		}
		if tbl, err = l.load(ctx, dataset); err != nil {
			return 0, false, err
		}
		if l.landed(tbl, id, base) {
			return 0, true, nil
		}
	}
}

// backoff waits before attempt+1 of a commit that conflicted, jittered so that writers
// that collided once do not collide again in step.
func backoff(ctx context.Context, attempt int) error {
	wait := time.Duration(rand.Int64N(int64(min(attempt, 10)) * int64(40*time.Millisecond)))
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(wait):
		return nil
	}
}

// conflict reports whether a commit failed because the table moved under it: nothing of it
// was committed. iceberg-go has no sentinel for a failed requirement, only its message.
func conflict(err error) bool {
	return errors.Is(err, table.ErrCommitFailed) || strings.Contains(strings.ToLower(err.Error()), "requirement failed:")
}
