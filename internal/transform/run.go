package transform

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	duckdb "github.com/duckdb/duckdb-go/v2"

	"github.com/hyp-project/hyp/internal/query"
)

// Runner runs transforms: one in-memory DuckDB, safe for concurrent use. Each Apply takes a
// connection of its own from a small pool (at most GOMAXPROCS at once; more callers wait),
// because DuckDB runs a query on its caller's thread here (threads=1) and connections share
// the one database: concurrent units export in parallel without one DuckDB worker pool per
// unit. Each connection shows DuckDB its unit under a view name of its own, so concurrent
// Applies never see each other's rows.
type Runner struct {
	db      *duckdb.Connector
	checker *checker
	slots   chan struct{} // one per connection in use

	mu       sync.Mutex
	sessions int // connections ever opened, to name each one's input view
	idle     []*session
	verdicts map[string]verdict // Check's verdict per SQL text, so each Apply need not parse
	closed   bool

	// wholeColumns switches pass-through columns off (passthrough.go): tests compare the
	// two ways of running a transform.
	wholeColumns bool
}

// maxVerdicts bounds the verdict cache: a daemon has a transform per sink, but a caller
// that makes up SQL (hyp sink preview with an ad-hoc transform, a fuzzer) must not grow it.
const maxVerdicts = 256

type session struct {
	conn  driver.Conn
	arrow *duckdb.Arrow
	// input names the view that shows DuckDB this connection's unit; the SQL reads it as rows
	// through a WITH clause. RegisterView's views are not temporary (duckdb-go calls the C
	// API's duckdb_arrow_scan, which makes them in the database's catalog, where every
	// connection sees them), so each connection has a name of its own.
	input string
	// feed is what the view reads. The view is made once per input schema, not per unit:
	// making one costs more than running a small unit's query (a catalog change, binding,
	// the schema across cgo), and the C API's scan asks the stream behind it for batches anew
	// on every query (it never releases it), so swapping feed's batches is all a unit needs.
	feed *feeder
	// viewSchema is the schema the view was made for; unregister releases its stream.
	viewSchema *arrow.Schema
	unregister func()
}

// feeder is the record reader behind a connection's input view: the batches it holds when
// DuckDB scans the view, then the end.
type feeder struct {
	refs   atomic.Int64
	schema *arrow.Schema
	recs   []arrow.RecordBatch
	next   int
	cur    arrow.RecordBatch
}

func (f *feeder) Retain()                        { f.refs.Add(1) }
func (f *feeder) Release()                       { f.refs.Add(-1) } // holds no references of its own
func (f *feeder) Schema() *arrow.Schema          { return f.schema }
func (f *feeder) RecordBatch() arrow.RecordBatch { return f.cur }
func (f *feeder) Record() arrow.RecordBatch      { return f.cur }
func (f *feeder) Err() error                     { return nil }

func (f *feeder) Next() bool {
	f.cur = nil
	if f.next >= len(f.recs) {
		return false
	}
	f.cur = f.recs[f.next]
	f.next++
	return true
}

// load makes the feeder yield recs from the start.
func (f *feeder) load(recs []arrow.RecordBatch) {
	f.recs, f.next, f.cur = recs, 0, nil
}

// NewRunner opens the Runner's DuckDB and reads, once, which functions transforms may not
// call.
func NewRunner() (*Runner, error) {
	keepHeap()
	ctx := context.Background()
	db, conn, err := openDB(ctx)
	if err != nil {
		return nil, err
	}
	c, err := newChecker(ctx, conn)
	if err == nil {
		var s *session
		if s, err = newSession(conn, 1); err == nil {
			return &Runner{
				db:       db,
				checker:  c,
				slots:    make(chan struct{}, max(1, runtime.GOMAXPROCS(0))),
				sessions: 1,
				idle:     []*session{s},
				verdicts: map[string]verdict{},
			}, nil
		}
	}
	return nil, errors.Join(err, conn.Close(), db.Close())
}

func newSession(conn driver.Conn, id int) (*session, error) {
	a, err := duckdb.NewArrowFromConn(conn)
	if err != nil {
		return nil, fmt.Errorf("transform: DuckDB's Arrow interface: %w", err)
	}
	return &session{conn: conn, arrow: a, input: fmt.Sprintf("hyp_transform_input_%d", id), feed: &feeder{}}, nil
}

// show makes the connection's input view read feed under schema, unless it already does.
func (s *session) show(schema *arrow.Schema) error {
	if s.viewSchema != nil && s.viewSchema.Equal(schema) {
		return nil
	}
	s.feed.schema = schema
	s.feed.load(nil)
	unregister, err := s.arrow.RegisterView(s.feed, s.input) // replaces the view of the last schema
	if err != nil {
		return fmt.Errorf("transform: show DuckDB the rows: %w", err)
	}
	if s.unregister != nil {
		s.unregister()
	}
	s.viewSchema, s.unregister = schema, unregister
	return nil
}

// close drops the input view, which would otherwise outlive the stream it reads, and closes
// the connection.
func (s *session) close() error {
	var err error
	if s.unregister != nil {
		_, err = s.conn.(driver.ExecerContext).ExecContext(context.Background(), "DROP VIEW IF EXISTS "+s.input, nil)
		s.unregister()
		s.unregister = nil
	}
	return errors.Join(err, s.conn.Close())
}

// Close closes the DuckDB. Applies still running finish first on their connections;
// Applies after Close fail.
func (r *Runner) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	idle := r.idle
	r.idle = nil
	r.mu.Unlock()
	var errs []error
	for _, s := range idle {
		errs = append(errs, s.close())
	}
	// Connections still in use keep the database alive until they close (DuckDB counts
	// them); closing the connector only drops the Runner's reference.
	errs = append(errs, r.db.Close())
	return errors.Join(errs...)
}

var errClosed = errors.New("transform: the runner is closed")

// take returns an idle connection, or a new one.
func (r *Runner) take(ctx context.Context) (*session, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, errClosed
	}
	if n := len(r.idle); n > 0 {
		s := r.idle[n-1]
		r.idle = r.idle[:n-1]
		r.mu.Unlock()
		return s, nil
	}
	r.sessions++
	id := r.sessions
	r.mu.Unlock()
	conn, err := r.db.Connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("transform: connect to DuckDB: %w", err)
	}
	s, err := newSession(conn, id)
	if err != nil {
		return nil, errors.Join(err, conn.Close())
	}
	return s, nil
}

// give returns s to the pool, unless the Runner closed meanwhile or s failed in a way that
// may have left it unusable.
func (r *Runner) give(s *session, broken bool) {
	r.mu.Lock()
	if !r.closed && !broken {
		r.idle = append(r.idle, s)
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	_ = s.close()
}

// verdict is Check's verdict on one SQL text, the columns an allowed one names, and the
// names no column may pass through under (nil: none may; passthrough.go).
type verdict struct {
	referenced []string
	opaque     map[string]bool
	err        error
}

// verdict is Check's verdict on sql, from the cache or from DuckDB's parser on s.
func (r *Runner) verdict(ctx context.Context, s *session, sql string) verdict {
	r.mu.Lock()
	v, ok := r.verdicts[sql]
	r.mu.Unlock()
	if ok {
		return v
	}
	refs, opaque, err := r.checker.judge(ctx, s.conn, sql)
	v = verdict{referenced: refs, opaque: opaque, err: err}
	var te *Error
	if err != nil && !errors.As(err, &te) {
		return v // DuckDB failed to answer: no verdict to keep
	}
	r.mu.Lock()
	if len(r.verdicts) >= maxVerdicts {
		clear(r.verdicts)
	}
	r.verdicts[sql] = v
	r.mu.Unlock()
	return v
}

// check is Check on the Runner's DuckDB, without the verdict cache.
func (r *Runner) check(ctx context.Context, sql string) error {
	s, err := r.take(ctx)
	if err != nil {
		return err
	}
	defer r.give(s, false)
	return r.checker.check(ctx, s.conn, sql)
}

// Apply runs sql (already Checked; Apply checks again and refuses the same way) over recs,
// which share schema and hold a unit's rows in _hyp_ingest_seq order: user columns plus
// _hyp_ingest_seq (int64) and _hyp_ingested_at (timestamp[us, tz=UTC]). The relation is
// named rows. The result's records are owned by the caller (Release each).
//
// Each input column is queried under its query name (query.Names): of columns whose names
// differ only in case, which DuckDB cannot tell apart, the first in byte order keeps its
// name and the k-th is `<name>__k`; a * exports them under those names.
//
// The result always has the schema the SQL gives (normalized to the cache's types), even
// over zero rows; Rows == 0 means nothing to export. A *Error is the transform's fault
// (refused, failing over these rows, or a result that breaks the rules: a row out of order,
// repeated or not the input's, a lost internal column, a bad column name); other errors are
// the caller's (a bad input) or the engine's.
func (r *Runner) Apply(ctx context.Context, sql string, schema *arrow.Schema, recs []arrow.RecordBatch) (*Result, error) {
	in, err := newInput(schema, recs)
	if err != nil {
		return nil, err
	}
	defer in.release()
	select {
	case r.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("transform: %w", ctx.Err())
	}
	defer func() { <-r.slots }()
	s, err := r.take(ctx)
	if err != nil {
		return nil, err
	}
	v := r.verdict(ctx, s, sql)
	if v.err != nil {
		r.give(s, false)
		return nil, v.err
	}
	in.fill(v.referenced)
	if !r.wholeColumns {
		in.passThrough(v.opaque)
	}
	res, err := s.run(ctx, sql, in)
	r.give(s, err != nil && !isTransformError(err))
	return res, err
}

func isTransformError(err error) bool {
	var te *Error
	return errors.As(err, &te)
}

// input is a unit's rows as DuckDB is shown them.
type input struct {
	schema *arrow.Schema       // fields renamed to their query names, no metadata
	recs   []arrow.RecordBatch // recs under schema (new references)
	seqs   []*array.Int64      // each record's _hyp_ingest_seq
	names  map[string]bool     // the input's column names

	// With pass-through columns (passthrough.go), DuckDB is shown shown instead of recs:
	// each column named in passed (by its index in schema) holds its rows' positions.
	passed      map[string]int
	shownSchema *arrow.Schema
	shown       []arrow.RecordBatch
	starts      []int // recs[k]'s first row's position
}

// newInput checks what Apply requires of its input and renames its columns. A renamed
// record shares the caller's arrays: only the schema is new.
func newInput(schema *arrow.Schema, recs []arrow.RecordBatch) (*input, error) {
	if schema == nil {
		return nil, errors.New("transform: Apply without a schema")
	}
	cols := make([]query.Column, schema.NumFields())
	in := &input{names: make(map[string]bool, len(cols))}
	for i, f := range schema.Fields() {
		cols[i] = query.Column{Name: f.Name}
		in.names[f.Name] = true
	}
	names := query.Names(cols)
	fields := make([]arrow.Field, len(cols))
	seqIdx := -1
	for i, f := range schema.Fields() {
		fields[i] = arrow.Field{Name: names[i], Type: f.Type, Nullable: f.Nullable}
		switch f.Name {
		case seqColumn:
			if f.Type.ID() != arrow.INT64 {
				return nil, fmt.Errorf("transform: input column %s is %s, not int64", seqColumn, f.Type)
			}
			seqIdx = i
		case ingestedColumn:
			if f.Type.ID() != arrow.TIMESTAMP {
				return nil, fmt.Errorf("transform: input column %s is %s, not a timestamp", ingestedColumn, f.Type)
			}
		}
	}
	if seqIdx < 0 || !in.names[ingestedColumn] {
		return nil, fmt.Errorf("transform: the input lacks %s or %s", seqColumn, ingestedColumn)
	}
	in.schema = arrow.NewSchema(fields, nil)
	last, first := int64(0), true
	for k, rec := range recs {
		if int(rec.NumCols()) != len(fields) {
			in.release()
			return nil, fmt.Errorf("transform: input record %d has %d columns, the schema %d", k, rec.NumCols(), len(fields))
		}
		for j, c := range rec.Columns() {
			if !arrow.TypeEqual(c.DataType(), fields[j].Type) {
				in.release()
				return nil, fmt.Errorf("transform: input record %d column %q is %s, the schema says %s", k, fields[j].Name, c.DataType(), fields[j].Type)
			}
		}
		seq := rec.Column(seqIdx).(*array.Int64)
		if seq.NullN() > 0 {
			in.release()
			return nil, fmt.Errorf("transform: input record %d has a null %s", k, seqColumn)
		}
		for _, v := range seq.Int64Values() {
			if !first && v <= last {
				in.release()
				return nil, fmt.Errorf("transform: input rows are not in ascending %s order (%d after %d)", seqColumn, v, last)
			}
			first, last = false, v
		}
		if rec.NumRows() == 0 {
			continue
		}
		in.recs = append(in.recs, array.NewRecordBatch(in.schema, rec.Columns(), rec.NumRows()))
		in.seqs = append(in.seqs, seq)
	}
	return in, nil
}

// fill adds, for each column the transform names that the input lacks (referenced, lower
// case), a column of NULL strings under that name: a sink covers datasets and partitions of
// different shapes, and a query reads a column a partition never had as NULL too. Internal
// names are never made up.
func (in *input) fill(referenced []string) {
	have := make(map[string]bool, in.schema.NumFields())
	for _, f := range in.schema.Fields() {
		have[strings.ToLower(f.Name)] = true
	}
	var extra []string
	for _, name := range referenced {
		if !have[name] && !hasInternalPrefix(name) {
			extra = append(extra, name)
		}
	}
	if len(extra) == 0 {
		return
	}
	fields := slices.Clone(in.schema.Fields())
	for _, name := range extra {
		fields = append(fields, arrow.Field{Name: name, Type: arrow.BinaryTypes.String, Nullable: true})
	}
	in.schema = arrow.NewSchema(fields, nil)
	for i, rec := range in.recs {
		cols := slices.Clone(rec.Columns())
		var nulls []arrow.Array
		for range extra {
			a := array.MakeArrayOfNull(memory.DefaultAllocator, arrow.BinaryTypes.String, int(rec.NumRows()))
			nulls = append(nulls, a)
			cols = append(cols, a)
		}
		in.recs[i] = array.NewRecordBatch(in.schema, cols, rec.NumRows())
		rec.Release()
		for _, a := range nulls {
			a.Release() // the new record holds them
		}
	}
}

func (in *input) release() {
	in.wholeColumns()
	for _, rec := range in.recs {
		rec.Release()
	}
	in.recs = nil
}

// wholeColumns undoes passThrough: DuckDB is shown every column's values.
func (in *input) wholeColumns() {
	for _, rec := range in.shown {
		rec.Release()
	}
	in.passed, in.shownSchema, in.shown, in.starts = nil, nil, nil, nil
}

// run shows DuckDB the input as this connection's view, runs sql over it as rows, checks
// the result and normalizes its types.
//
// Every statement that binds the view asks its stream for the schema, and DuckDB's C arrow
// scan drops the release callback of what it gets; patches/duckdb-go.patch makes the
// stream hand out one schema for its life, so that costs nothing (TestApplyDoesNotLeak).
//
// sql follows the WITH clause as it is: Check saw to it that it is one SELECT (or FROM or
// TABLE or a parenthesized query) with no WITH of its own, whose text parses whole.
func (s *session) run(ctx context.Context, sql string, in *input) (*Result, error) {
	schema, recs := in.schema, in.recs
	if in.passed != nil {
		schema, recs = in.shownSchema, in.shown
	}
	if err := s.show(schema); err != nil {
		return nil, err
	}
	s.feed.load(recs)
	defer s.feed.load(nil)
	out, err := s.arrow.QueryContext(ctx, "WITH "+relation+" AS (SELECT * FROM "+s.input+") "+sql)
	if err != nil {
		return nil, runError(ctx, err)
	}
	defer out.Release()
	var raw []arrow.RecordBatch
	defer func() {
		for _, rec := range raw {
			rec.Release()
		}
	}()
	for out.Next() {
		rec := out.RecordBatch()
		rec.Retain()
		raw = append(raw, rec)
	}
	if err := out.Err(); err != nil {
		return nil, runError(ctx, err)
	}
	kept := &seqs{cols: in.seqs}
	if err := checkOutput(out.Schema(), raw, kept, in.names); err != nil {
		return nil, err
	}
	res, err := normalize(out.Schema(), raw)
	if err != nil || in.passed == nil || in.restore(res, kept.kept) {
		return res, err
	}
	// A column taken for a pass-through is not one: run again with every column's values.
	res.Release()
	in.wholeColumns()
	return s.run(ctx, sql, in)
}

// runError sorts a failure to run the SQL: the caller's context ended, or DuckDB's engine
// broke (neither the transform's fault), or else DuckDB could not run this SQL over these
// rows (a *Error: a cast that fails, error(), a function applied to the wrong type...).
func runError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("transform: %w", ctx.Err())
	}
	var de *duckdb.Error
	if errors.As(err, &de) {
		switch de.Type {
		case duckdb.ErrorTypeFatal, duckdb.ErrorTypeInternal, duckdb.ErrorTypeConnection:
			return fmt.Errorf("transform: DuckDB failed: %w", err)
		}
		return refuse("%s", de.Msg)
	}
	return refuse("%v", err)
}

// Result is what a transform made of a unit.
type Result struct {
	Schema *arrow.Schema
	Recs   []arrow.RecordBatch
	Rows   int64 // rows out (sum of Recs' rows)
}

// Release releases the result's records.
func (r *Result) Release() {
	for _, rec := range r.Recs {
		rec.Release()
	}
	r.Recs = nil
}
