// Package query owns running read-only SQL over cache files through an
// in-memory DuckDB; it never writes to the cache and never downloads
// extensions.
package query

import (
	"bufio"
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	duckdb "github.com/duckdb/duckdb-go/v2"
)

// Column is one column of a table's current schema.
type Column struct {
	Name string
	// Type is one of "string", "long", "double", "boolean", "timestamptz".
	Type string
}

// Partition is one partition of a table and its live Parquet data files.
type Partition struct {
	Name  string   // e.g. "source=web"; the value of _hyp_partition
	Files []string // absolute paths; may be empty
	// FieldIDs gives, per column name, the Parquet field id the files store it under;
	// a column without one is NULL in this partition.
	FieldIDs map[string]int
	// Err, when set, is why the partition cannot be read: every read of it fails with it.
	Err error
}

// MixedFile is a Parquet file of rows of any number of partitions: each row's partition
// name is in the column of field id PartitionFieldID, and FieldIDs gives, per column name,
// the field id it is stored under (a column without one is NULL in the file).
type MixedFile struct {
	Path             string
	FieldIDs         map[string]int
	PartitionFieldID int
}

// Table is one dataset, queried under its Name.
type Table struct {
	Name string
	// Columns is the full current schema in order, internal columns included.
	Columns    []Column
	Partitions []Partition
	// Mixed are files of rows of several partitions (the cache's rows not yet flushed).
	Mixed []MixedFile
}

// Options tune Run.
type Options struct {
	// Internal exposes _hyp_ingest_seq, _hyp_ingested_at and the virtual
	// _hyp_partition column.
	Internal bool
	// Format is "table" (the default), "json", "jsonl" or "csv".
	Format string
}

// UsageError reports a problem with the SQL or options the user gave, as
// opposed to a failure of the cache or the engine.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// dsn switches extension auto-install and auto-load off from the start:
// nothing may be fetched, and only the statically linked extensions exist.
const dsn = "?autoinstall_known_extensions=false&autoload_known_extensions=false"

// Run opens an in-memory DuckDB, defines one view per table over its files,
// runs sql and writes the result to w in opts.Format.
//
// sql must be exactly one read statement (SELECT, WITH ... SELECT, VALUES,
// EXPLAIN, DESCRIBE, SUMMARIZE or SHOW); anything else, and any error DuckDB
// reports about the SQL, comes back as a *UsageError.
func Run(ctx context.Context, tables []Table, sql string, opts Options, w io.Writer) (err error) {
	format := opts.Format
	if format == "" {
		format = FormatTable
	}
	newWriter, err := writerFor(format)
	if err != nil {
		return err
	}
	views := make([]string, 0, len(tables))
	for _, t := range tables {
		v, err := viewSQL(t, opts.Internal)
		if err != nil {
			return fmt.Errorf("query: %w", err)
		}
		views = append(views, v)
	}

	// DuckDB spills large sorts and joins to its temp directory, which for an
	// in-memory database is ./.tmp; a private one keeps the working directory
	// (possibly the cache) untouched.
	spill, err := os.MkdirTemp("", "hyp-query-")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(spill)) }()

	connector, err := duckdb.NewConnector(dsn, nil)
	if err != nil {
		return fmt.Errorf("query: open duckdb: %w", err)
	}
	defer func() { err = errors.Join(err, connector.Close()) }()
	dc, err := connector.Connect(ctx)
	if err != nil {
		return fmt.Errorf("query: connect duckdb: %w", err)
	}
	conn := dc.(*duckdb.Conn)
	defer func() { err = errors.Join(err, conn.Close()) }()

	// Order matters: temp_directory and allowed_paths can only be changed
	// while external access is on, and lock_configuration keeps the query
	// from turning any of it back.
	setup := append([]string{
		"SET TimeZone = 'UTC'",
		"SET temp_directory = " + quoteString(spill),
		allowedPathsSQL(tables),
		"SET enable_external_access = false",
	}, views...)
	setup = append(setup, "SET lock_configuration = true")
	for _, s := range setup {
		if _, err := conn.ExecContext(ctx, s, nil); err != nil {
			return fmt.Errorf("query: set up views: %w", err)
		}
	}

	stmt, err := prepareReadOnly(conn, sql)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stmt.Close()) }()
	return query(ctx, stmt, newWriter, w)
}

func query(ctx context.Context, stmt *duckdb.Stmt, newWriter writerFunc, w io.Writer) (err error) {
	rows, err := stmt.QueryContext(ctx, nil)
	if err != nil {
		return sqlError(err)
	}
	defer func() { err = errors.Join(err, rows.Close()) }()

	names := rows.Columns()
	cols := make([]resultColumn, len(names))
	for i, name := range names {
		info, err := stmt.ColumnTypeInfo(i)
		if err != nil {
			return fmt.Errorf("query: column %q: %w", name, err)
		}
		cols[i] = resultColumn{name: name, info: info}
	}
	out, err := newWriter(bufio.NewWriter(w), cols)
	if err != nil {
		return err
	}
	vals := make([]driver.Value, len(cols))
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := rows.Next(vals); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("query: read result: %w", err)
		}
		if err := out.writeRow(vals); err != nil {
			return err
		}
	}
	return out.close()
}

// sqlError turns DuckDB's complaints about the statement into a UsageError
// carrying DuckDB's message; failures of the engine, the files or the
// context stay plain errors.
func sqlError(err error) error {
	var de *duckdb.Error
	if !errors.As(err, &de) {
		return err
	}
	if i := strings.Index(de.Msg, unreadablePartition); i >= 0 {
		return errors.New(de.Msg[i:])
	}
	switch de.Type {
	case duckdb.ErrorTypeIO, duckdb.ErrorTypeInterrupt, duckdb.ErrorTypeFatal,
		duckdb.ErrorTypeInternal, duckdb.ErrorTypeOutOfMemory, duckdb.ErrorTypeConnection:
		return err
	}
	return &UsageError{Msg: de.Msg}
}
