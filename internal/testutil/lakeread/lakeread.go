// Package lakeread owns reading an Iceberg table the way a stranger to hyp would, for tests
// and benchmarks: the catalog's iceberg_tables row with plain database/sql (or a hadoop
// table's version-hint.text), metadata.json with encoding/json, the manifest list and the
// manifests with its own Avro decoder, and the rows of the live data files with DuckDB's
// read_parquet. It shares nothing with the writer (iceberg-go, internal/lake): a table
// that only hyp's own code can read back is what it exists to catch.
//
// It never writes to a catalog or a warehouse, and is not for production use.
package lakeread

import (
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	_ "github.com/duckdb/duckdb-go/v2" // read_parquet over the live files
	_ "github.com/jackc/pgx/v5/stdlib" // postgres:// catalogs
	_ "modernc.org/sqlite"             // sqlite:/// catalogs
)

// Options say where a table is.
type Options struct {
	// Catalog is an sql catalog's URI (postgres://... or sqlite:///path); empty means a
	// hadoop catalog, whose tables are directories of Warehouse.
	Catalog string
	// CatalogName is the sql catalog's catalog_name ("hyp" when empty).
	CatalogName string
	// Warehouse is the hadoop catalog's root: a local path or s3://bucket/prefix.
	Warehouse string
	Namespace string
	// S3 reads s3:// locations; nil when the table is on local disk.
	S3 *s3.Client
}

// Snapshot is one snapshot as metadata.json records it.
type Snapshot struct {
	ID             int64
	Parent         int64 // 0 for none
	SequenceNumber int64
	TimestampMs    int64
	ManifestList   string
	Summary        map[string]string
}

// Data file kinds (the data_file content field).
const (
	ContentData      = 0
	ContentPosDelete = 1
	ContentEqDelete  = 2
)

// Manifest entry statuses.
const (
	StatusExisting = 0
	StatusAdded    = 1
	StatusDeleted  = 2
)

// DataFile is one live entry of the current snapshot's manifests.
type DataFile struct {
	Path     string
	Content  int // ContentData, ContentPosDelete or ContentEqDelete
	Format   string
	Records  int64
	Size     int64
	Status   int    // StatusAdded or StatusExisting
	Manifest string // the manifest listing it
	// Lower and Upper are the entry's lower_bounds and upper_bounds (fields 125 and 128),
	// Iceberg single-value serialisations by field id.
	Lower, Upper map[int][]byte
}

// Table is what the table's current metadata says.
type Table struct {
	MetadataLocation string
	FormatVersion    int
	Current          *Snapshot // nil before the first commit
	Snapshots        []Snapshot
	// Types are the current schema's top-level columns' types by field id, as
	// metadata.json spells primitive types ("string", "long", "timestamptz", ...).
	Types map[int]string
	// Names and Docs are the current schema's top-level columns' names and docs by
	// field id (no entry for a column without a doc).
	Names, Docs map[int]string
	// Files are the current snapshot's live entries (not DELETED), data and delete files.
	Files []DataFile
	// Duplicates are the paths listed live more than once across the current manifests:
	// each is a data file the table holds twice.
	Duplicates []string

	s3 *s3.Client
}

// Read reads table <o.Namespace>.<name> as it is now.
func Read(ctx context.Context, o Options, name string) (*Table, error) {
	loc, err := metadataLocation(ctx, o, name)
	if err != nil {
		return nil, err
	}
	t := &Table{MetadataLocation: loc, s3: o.S3}
	raw, err := t.fetch(ctx, loc)
	if err != nil {
		return nil, err
	}
	if bytes.HasPrefix(raw, []byte{0x1f, 0x8b}) {
		if raw, err = gunzip(raw); err != nil {
			return nil, fmt.Errorf("metadata %s: %w", loc, err)
		}
	}
	var md struct {
		FormatVersion int    `json:"format-version"`
		Current       *int64 `json:"current-snapshot-id"`
		SchemaID      int    `json:"current-schema-id"`
		Schemas       []struct {
			ID     int `json:"schema-id"`
			Fields []struct {
				ID   int             `json:"id"`
				Name string          `json:"name"`
				Doc  string          `json:"doc"`
				Type json.RawMessage `json:"type"`
			} `json:"fields"`
		} `json:"schemas"`
		Snapshots []struct {
			ID           int64             `json:"snapshot-id"`
			Parent       int64             `json:"parent-snapshot-id"`
			Sequence     int64             `json:"sequence-number"`
			TimestampMs  int64             `json:"timestamp-ms"`
			ManifestList string            `json:"manifest-list"`
			Summary      map[string]string `json:"summary"`
		} `json:"snapshots"`
	}
	if err := json.Unmarshal(raw, &md); err != nil {
		return nil, fmt.Errorf("metadata %s: %w", loc, err)
	}
	t.FormatVersion = md.FormatVersion
	t.Types, t.Names, t.Docs = map[int]string{}, map[int]string{}, map[int]string{}
	for _, sc := range md.Schemas {
		if sc.ID != md.SchemaID {
			continue
		}
		for _, f := range sc.Fields {
			var typ string
			if json.Unmarshal(f.Type, &typ) == nil {
				t.Types[f.ID] = typ
			}
			t.Names[f.ID] = f.Name
			if f.Doc != "" {
				t.Docs[f.ID] = f.Doc
			}
		}
	}
	for _, s := range md.Snapshots {
		t.Snapshots = append(t.Snapshots, Snapshot{ID: s.ID, Parent: s.Parent, SequenceNumber: s.Sequence, TimestampMs: s.TimestampMs, ManifestList: s.ManifestList, Summary: s.Summary})
	}
	if md.Current == nil || *md.Current == -1 {
		return t, nil
	}
	for i := range t.Snapshots {
		if t.Snapshots[i].ID == *md.Current {
			t.Current = &t.Snapshots[i]
		}
	}
	if t.Current == nil {
		return nil, fmt.Errorf("metadata %s: current snapshot %d is not among its snapshots", loc, *md.Current)
	}
	if err := t.readManifests(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// metadataLocation asks the catalog where the table's current metadata file is.
func metadataLocation(ctx context.Context, o Options, name string) (string, error) {
	if o.Catalog == "" {
		return hadoopLocation(ctx, o, name)
	}
	var driver, dsn, query string
	switch {
	case strings.HasPrefix(o.Catalog, "sqlite://"):
		// The catalog names a path; SQLite's file: URI wants it escaped.
		path := (&url.URL{Path: strings.TrimPrefix(o.Catalog, "sqlite://")}).EscapedPath()
		driver, dsn = "sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)"
		query = `SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?`
	case strings.HasPrefix(o.Catalog, "postgres://"), strings.HasPrefix(o.Catalog, "postgresql://"):
		driver, dsn = "pgx", o.Catalog
		query = `SELECT metadata_location FROM iceberg_tables WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3`
	default:
		return "", fmt.Errorf("catalog %q: want postgres://... or sqlite:///path", o.Catalog)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return "", err
	}
	defer db.Close()
	catalog := o.CatalogName
	if catalog == "" {
		catalog = "hyp"
	}
	var loc sql.NullString
	if err := db.QueryRowContext(ctx, query, catalog, o.Namespace, name).Scan(&loc); err != nil {
		return "", fmt.Errorf("catalog row of %s.%s: %w", o.Namespace, name, err)
	}
	if !loc.Valid || loc.String == "" {
		return "", fmt.Errorf("catalog row of %s.%s has no metadata_location", o.Namespace, name)
	}
	return loc.String, nil
}

// hadoopLocation follows version-hint.text to v<N>.metadata.json, then on to any newer
// version: the hint is written after the metadata file, so it may lag one commit.
func hadoopLocation(ctx context.Context, o Options, name string) (string, error) {
	dir := strings.TrimSuffix(o.Warehouse, "/") + "/" + o.Namespace + "/" + name + "/metadata/"
	if !strings.HasPrefix(dir, "s3://") {
		dir = (&url.URL{Scheme: "file", Path: dir}).String()
	}
	t := &Table{s3: o.S3}
	hint, err := t.fetch(ctx, dir+"version-hint.text")
	if err != nil {
		return "", err
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(hint)))
	if err != nil || v < 1 {
		return "", fmt.Errorf("%sversion-hint.text: %q is no version", dir, hint)
	}
	loc := ""
	for ; ; v++ {
		next := ""
		for _, suffix := range []string{".metadata.json", ".gz.metadata.json"} {
			p := dir + "v" + strconv.Itoa(v) + suffix
			if ok, err := t.exists(ctx, p); err != nil {
				return "", err
			} else if ok {
				next = p
				break
			}
		}
		if next == "" {
			break
		}
		loc = next
	}
	if loc == "" {
		return "", fmt.Errorf("%s: version-hint.text names v%s, which does not exist", dir, strings.TrimSpace(string(hint)))
	}
	return loc, nil
}

// readManifests fills Files and Duplicates from the current snapshot's manifest list.
func (t *Table) readManifests(ctx context.Context) error {
	list, err := t.avro(ctx, t.Current.ManifestList)
	if err != nil {
		return err
	}
	seen := map[string]int{}
	for i, r := range list.records {
		m, _ := r.(map[string]any)
		path, ok := m["manifest_path"].(string)
		if !ok {
			return fmt.Errorf("manifest list %s, entry %d: no manifest_path", t.Current.ManifestList, i)
		}
		man, err := t.avro(ctx, path)
		if err != nil {
			return err
		}
		for j, e := range man.records {
			df, live, err := entry(e)
			if err != nil {
				return fmt.Errorf("manifest %s, entry %d: %w", path, j, err)
			}
			if !live {
				continue
			}
			df.Manifest = path
			t.Files = append(t.Files, df)
			if seen[df.Path]++; seen[df.Path] == 2 {
				t.Duplicates = append(t.Duplicates, df.Path)
			}
		}
	}
	return nil
}

// entry reads one manifest entry; live is false for a DELETED one.
func entry(e any) (df DataFile, live bool, err error) {
	m, _ := e.(map[string]any)
	status, ok := m["status"].(int64)
	if !ok {
		return df, false, errors.New("no status")
	}
	if status == StatusDeleted {
		return df, false, nil
	}
	if status != StatusAdded && status != StatusExisting {
		return df, false, fmt.Errorf("status %d", status)
	}
	f, ok := m["data_file"].(map[string]any)
	if !ok {
		return df, false, errors.New("no data_file")
	}
	df.Status = int(status)
	if df.Path, ok = f["file_path"].(string); !ok {
		return df, false, errors.New("no data_file.file_path")
	}
	if c, ok := f["content"].(int64); ok { // absent in format v1: data
		df.Content = int(c)
	}
	df.Format, _ = f["file_format"].(string)
	df.Records, _ = f["record_count"].(int64)
	df.Size, _ = f["file_size_in_bytes"].(int64)
	if df.Lower, err = boundMap(f["lower_bounds"]); err != nil {
		return df, false, fmt.Errorf("lower_bounds: %w", err)
	}
	if df.Upper, err = boundMap(f["upper_bounds"]); err != nil {
		return df, false, fmt.Errorf("upper_bounds: %w", err)
	}
	return df, true, nil
}

// boundMap reads an Iceberg map of field id to bytes, which Avro holds as an array of
// key/value records; absent (null) is an empty map.
func boundMap(v any) (map[int][]byte, error) {
	out := map[int][]byte{}
	if v == nil {
		return out, nil
	}
	kvs, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%T, not an array", v)
	}
	for _, kv := range kvs {
		r, _ := kv.(map[string]any)
		k, kok := r["key"].(int64)
		b, bok := r["value"].([]byte)
		if !kok || !bok {
			return nil, fmt.Errorf("entry %v is not a key and bytes", kv)
		}
		out[int(k)] = b
	}
	return out, nil
}

func (t *Table) avro(ctx context.Context, loc string) (*ocf, error) {
	raw, err := t.fetch(ctx, loc)
	if err != nil {
		return nil, err
	}
	f, err := readOCF(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", loc, err)
	}
	return f, nil
}

// Rows returns the named columns of every row of the live data files (a column a file
// lacks is NULL), as DuckDB scans them. A table with live delete files is refused:
// applying deletes is beyond this reader, and hyp never writes them.
func (t *Table) Rows(ctx context.Context, columns ...string) ([][]any, error) {
	var files []string
	for _, f := range t.Files {
		if f.Content != ContentData {
			return nil, fmt.Errorf("%s is a delete file (content %d): not supported", f.Path, f.Content)
		}
		files = append(files, f.Path)
	}
	if len(files) == 0 || len(columns) == 0 {
		return nil, nil
	}
	scratch, err := os.MkdirTemp("", "lakeread-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	quoted := make([]string, len(files))
	for i, loc := range files {
		p, err := t.local(ctx, loc, filepath.Join(scratch, fmt.Sprintf("%06d.parquet", i)))
		if err != nil {
			return nil, err
		}
		quoted[i] = "'" + strings.ReplaceAll(p, "'", "''") + "'"
	}
	cols := make([]string, len(columns))
	for i, c := range columns {
		cols[i] = `"` + strings.ReplaceAll(c, `"`, `""`) + `"`
	}
	db, err := sql.Open("duckdb", "")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rs, err := db.QueryContext(ctx, fmt.Sprintf("SELECT %s FROM read_parquet([%s], union_by_name = true)", strings.Join(cols, ", "), strings.Join(quoted, ", ")))
	if err != nil {
		return nil, fmt.Errorf("read_parquet over %d files: %w", len(files), err)
	}
	defer rs.Close()
	var out [][]any
	for rs.Next() {
		row := make([]any, len(columns))
		ptrs := make([]any, len(columns))
		for i := range row {
			ptrs[i] = &row[i]
		}
		if err := rs.Scan(ptrs...); err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, rs.Err()
}

// location is a parsed file:// or s3:// location (a bare path is a local file).
type location struct {
	local       string
	bucket, key string
}

func parseLocation(loc string) (location, error) {
	u, err := url.Parse(loc)
	if err != nil {
		return location{}, fmt.Errorf("location %q: %w", loc, err)
	}
	switch u.Scheme {
	case "", "file":
		return location{local: u.Path}, nil
	case "s3", "s3a":
		return location{bucket: u.Host, key: strings.TrimPrefix(u.Path, "/")}, nil
	}
	return location{}, fmt.Errorf("location %q: unsupported scheme", loc)
}

func (t *Table) s3Client(loc string) (*s3.Client, error) {
	if t.s3 == nil {
		return nil, fmt.Errorf("%s: no S3 client given", loc)
	}
	return t.s3, nil
}

func (t *Table) fetch(ctx context.Context, loc string) ([]byte, error) {
	l, err := parseLocation(loc)
	if err != nil {
		return nil, err
	}
	if l.bucket == "" {
		return os.ReadFile(l.local)
	}
	c, err := t.s3Client(loc)
	if err != nil {
		return nil, err
	}
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(l.bucket), Key: aws.String(l.key)})
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", loc, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", loc, err)
	}
	return b, nil
}

func (t *Table) exists(ctx context.Context, loc string) (bool, error) {
	l, err := parseLocation(loc)
	if err != nil {
		return false, err
	}
	if l.bucket == "" {
		_, err := os.Stat(l.local)
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return err == nil, err
	}
	c, err := t.s3Client(loc)
	if err != nil {
		return false, err
	}
	_, err = c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(l.bucket), Key: aws.String(l.key)})
	var nf interface{ ErrorCode() string }
	if errors.As(err, &nf) && (nf.ErrorCode() == "NotFound" || nf.ErrorCode() == "NoSuchKey") {
		return false, nil
	}
	return err == nil, err
}

// local is a data file's local path: itself on local disk, else a copy at dst.
func (t *Table) local(ctx context.Context, loc, dst string) (string, error) {
	l, err := parseLocation(loc)
	if err != nil {
		return "", err
	}
	if l.bucket == "" {
		return l.local, nil
	}
	b, err := t.fetch(ctx, loc)
	if err != nil {
		return "", err
	}
	return dst, os.WriteFile(dst, b, 0o600)
}

func gunzip(b []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// SummaryInt is a snapshot summary's integer value (0 when absent or not a number).
func (s Snapshot) SummaryInt(key string) int64 {
	v, _ := strconv.ParseInt(s.Summary[key], 10, 64)
	return v
}
