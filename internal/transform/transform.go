// Package transform owns sinks' transforms (SPEC 3, `transform:`): checking a sink's row-wise
// SQL `SELECT … FROM rows [WHERE …]` when the config loads, and running it over one export
// unit's Arrow rows in an in-memory DuckDB, turning the result into the cache's five column
// types so that every sink can store it.
//
// It must never read the cache (the rows are handed in), touch files, reach the network, or
// reorder, duplicate or invent rows: every output row is an input row, in input order, under
// its own _hyp_ingest_seq, and a sink's watermark stands on that. Check refuses what could
// break it before anything runs; DuckDB runs with external access switched off and its
// configuration locked, in case a check misses something; and Apply verifies every result
// before handing it back.
package transform

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"

	duckdb "github.com/duckdb/duckdb-go/v2"

	"github.com/hyp-project/hyp/internal/columns"
)

// Error is a transform the rules refuse, a result that breaks them, or SQL that DuckDB
// cannot run over the rows: a problem with the sink's configuration, not with hyp. Msg
// starts with "transform: " and names the problem.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func refuse(format string, args ...any) *Error {
	return &Error{Msg: "transform: " + fmt.Sprintf(format, args...)}
}

// The internal columns every output row must carry unchanged, and the one user-field column
// whose name has the internal prefix (it holds a wide dataset's extra fields and is
// exported like any user column).
const (
	seqColumn      = columns.SeqColumn
	ingestedColumn = columns.IngestedAtColumn
	overflowColumn = columns.OverflowColumn
	internalPrefix = columns.InternalPrefix
)

// relation is the name the unit's rows are queried under.
const relation = "rows"

// dsn configures every database this package opens, from its creation on:
//   - no extension is ever installed or loaded: only the statically linked ones exist;
//   - one thread: results keep the input's order without DuckDB's order-preserving
//     machinery having to work across threads, and a daemon exporting a unit at a time must
//     not grow a worker pool per CPU; concurrent Applies run on their callers' threads;
//   - a memory limit, so that a runaway expression fails its unit instead of the daemon;
//   - plain utf8 strings in Arrow results (no string views, no 64-bit offsets).
//
// The rest is lockSQL's, in its order (options given here are set in no particular order).
const dsn = "?autoinstall_known_extensions=false&autoload_known_extensions=false" +
	"&threads=1&memory_limit=512MB" +
	"&preserve_insertion_order=true&produce_arrow_string_view=false" +
	"&arrow_large_buffer_size=false&arrow_lossless_conversion=false"

// lockSQL runs once per database, on its first connection, in order:
//   - no temporary directory: an in-memory database spills to ./.tmp by default, a file
//     (set first: it cannot change once external access is off);
//   - no external access: no file, no URL, no extension, whatever the SQL says;
//   - UTC, so that casts of timestamps to text, date parts and the like do not depend on the
//     zone of the machine the daemon runs on (ICU's option: the DSN cannot set it);
//   - no pushing of filters or column lists into scans: a unit's rows reach DuckDB through
//     duckdb-go's RegisterView (the C API's duckdb_arrow_scan), whose stream ignores the
//     columns and filters DuckDB's arrow_scan asks of it, so with these optimizers on, a
//     query that reads some of the columns, or filters, gets other columns' values and
//     unfiltered rows (TestApplyRows fails so). Off, every scan reads every column of every
//     row, in order, and filters and projections run above it;
//   - then the configuration is locked, which no SQL can undo.
var lockSQL = []string{
	"SET GLOBAL temp_directory = ''",
	"SET GLOBAL enable_external_access = false",
	"SET GLOBAL TimeZone = 'UTC'",
	"SET GLOBAL disabled_optimizers = 'filter_pushdown,unused_columns'",
	"SET GLOBAL lock_configuration = true",
}

// openDB opens an in-memory DuckDB configured as dsn says and returns it with its first
// connection.
func openDB(ctx context.Context) (*duckdb.Connector, driver.Conn, error) {
	db, err := duckdb.NewConnector(dsn, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("transform: open DuckDB: %w", err)
	}
	conn, err := db.Connect(ctx)
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("transform: connect to DuckDB: %w", err), db.Close())
	}
	for _, q := range lockSQL {
		if _, err := conn.(driver.ExecerContext).ExecContext(ctx, q, nil); err != nil {
			return nil, nil, errors.Join(fmt.Errorf("transform: configure DuckDB (%s): %w", q, err), conn.Close(), db.Close())
		}
	}
	return db, conn, nil
}

// Check parses sql with DuckDB and reports whether it is an allowed transform (a *Error
// naming the first problem), without any rows. It opens and closes a private in-memory DuckDB.
//
// An allowed transform is one SELECT over the relation rows (no schema or catalog, no
// column aliases on it) whose select list keeps _hyp_ingest_seq and _hyp_ingested_at as they
// are, through a * that neither excludes, replaces nor renames them or as the bare columns
// themselves, and names no other column with the prefix _hyp_ in any letter case
// (_hyp_overflow may pass through as itself). Refused: aggregation (GROUP BY, HAVING,
// aggregate functions with or without GROUP BY), joins, ORDER BY, LIMIT and OFFSET, DISTINCT,
// window functions, QUALIFY, set operations, WITH, subqueries, table functions, SAMPLE,
// COLUMNS(…), parameters, functions that read or change the database's state, and anything
// that is not a single SELECT.
func Check(ctx context.Context, sql string) error {
	db, conn, err := openDB(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	defer conn.Close()
	c, err := newChecker(ctx, conn)
	if err != nil {
		return err
	}
	return c.check(ctx, conn, sql)
}
