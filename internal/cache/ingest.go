package cache

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/jsonrow"
	"github.com/hyp-project/hyp/internal/partition"
	"github.com/hyp-project/hyp/internal/rowform"
	"github.com/hyp-project/hyp/internal/rowjson"
)

// InputError is bad client input. Kind is the error kind of the ingest API
// (bad_json, bad_dataset, bad_source, bad_field); Line is 1-based, 0 if not
// per line.
type InputError struct {
	Kind string
	Line int
	Msg  string
}

func (e *InputError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s: line %d: %s", e.Kind, e.Line, e.Msg)
	}
	return e.Kind + ": " + e.Msg
}

// Result is what an acknowledged request got.
type Result struct {
	Accepted int
	FirstSeq int64
	LastSeq  int64
}

// CheckDataset returns a bad_dataset InputError naming the rule, or nil for a legal name.
func CheckDataset(name string) *InputError {
	if validDataset(name) {
		return nil
	}
	return &InputError{Kind: "bad_dataset", Msg: fmt.Sprintf("dataset name %q must match ^[a-z][a-z0-9_]{0,62}$", name)}
}

type groupBuilder struct {
	name string // partition name
	rows int
	body []byte
}

type grouper struct {
	form   byte // formNDJSON or formRows: what add is given
	groups []*groupBuilder
	index  map[string]*groupBuilder
	// size is the request's bytes: the first group, most often the only one, is given room
	// for all of them at once rather than growing by doubling.
	size int
	// pooled is the first group's body when it came from groupBodies, for release.
	pooled *[]byte
}

// groupBodies keeps the first group body of an ingest request (or the Arrow stream of a
// server's IngestPartitionRecords) between requests: it is about
// the size of the request, so allocating it afresh (a large, zeroed allocation) for every
// request was a good part of what validating one cost, and most of the garbage ingest made.
var groupBodies sync.Pool

// maxPooledBody bounds the bodies groupBodies keeps, so one huge request does not stay
// pinned in the pool.
const maxPooledBody = 4 << 20

// firstBody is a body with room for size bytes, from groupBodies when one is there.
func (g *grouper) firstBody(size int) []byte {
	bp, _ := groupBodies.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	if cap(*bp) < size {
		*bp = make([]byte, 0, size)
	}
	g.pooled = bp
	return (*bp)[:0]
}

// release hands the first group's body back to groupBodies once the request is logged (or
// failed): the log copies what it keeps, so nothing refers to the body after append.
func (g *grouper) release() {
	if g.pooled == nil {
		return
	}
	if len(g.groups) > 0 {
		// The body may have grown past what the pool gave; keep the grown one.
		*g.pooled = g.groups[0].body[:0]
	}
	if cap(*g.pooled) <= maxPooledBody {
		groupBodies.Put(g.pooled)
	}
	g.pooled = nil
}

// add appends a row, an NDJSON line or a row-form row as g.form says, to source's group.
func (g *grouper) add(source string, row []byte) {
	g.group(source).add(g.form, row)
}

// group is source's group, made on first use.
func (g *grouper) group(source string) *groupBuilder {
	gb := g.index[source]
	if gb == nil {
		if g.index == nil {
			g.index = map[string]*groupBuilder{}
		}
		gb = &groupBuilder{name: partition.Name(source)}
		if len(g.groups) == 0 && g.size > 0 {
			gb.body = g.firstBody(g.size)
		}
		g.index[source] = gb
		g.groups = append(g.groups, gb)
	}
	return gb
}

func (gb *groupBuilder) add(form byte, row []byte) {
	gb.rows++
	if form == formRows {
		gb.body = rowform.AppendRow(gb.body, row)
	} else {
		gb.body = append(append(gb.body, row...), '\n')
	}
}

// Ingest validates an NDJSON body and makes it durable as one atomic request. source, when
// not empty, is the partition for every row; otherwise each row's string field "source",
// else "unknown". Any bad line rejects the whole request and stores nothing.
func (c *Cache) Ingest(dataset, source string, body []byte) (Result, error) {
	if err := CheckDataset(dataset); err != nil {
		return Result{}, err
	}
	if source != "" {
		if err := partition.ValidateSource(source); err != nil {
			return Result{}, &InputError{Kind: "bad_source", Msg: err.Error()}
		}
	}
	var (
		// The row form is a little larger than the JSON it comes from (lengths instead of
		// quotes and separators, and one per row).
		g      = grouper{form: formRows, size: len(body) + len(body)/8 + 64}
		fixed  *groupBuilder // the only group, when source names it
		sc     jsonrow.Scanner
		row    []byte
		rowSrc []byte
	)
	defer g.release()
	if source != "" {
		fixed = g.group(source)
	}
	err := jsonrow.Lines(body, func(lineNo int, line []byte) error {
		rowSrc, row = rowSrc[:0], row[:0]
		hasSrc := false
		// With the partition known up front the row is written in place; otherwise it is
		// built aside until its source field has been seen. A bad field fails the whole
		// request, so a row left half written is never stored.
		at := 0
		if fixed != nil {
			fixed.body, at = rowform.BeginRow(fixed.body)
		}
		// Fields, not Object: a bad line fails the whole request, so what the callback
		// wrote for a line that is then rejected is never stored.
		err := sc.Fields(line, func(f jsonrow.Field) error {
			if msg := columns.CheckFieldName(f.Key); msg != "" {
				return &InputError{Kind: "bad_field", Line: lineNo, Msg: msg}
			}
			if msg := columns.CheckReserved(f.Key); msg != "" {
				return &InputError{Kind: "bad_field", Line: lineNo, Msg: msg}
			}
			if source == "" && f.Kind == jsonrow.String && string(f.Key) == "source" {
				var err error
				rowSrc, err = jsonrow.AppendString(rowSrc[:0], f.Raw)
				hasSrc = err == nil
			}
			if fixed != nil {
				fixed.body = rowform.AppendField(fixed.body, f)
			} else {
				row = rowform.AppendField(row, f)
			}
			return nil
		})
		if err != nil {
			if ie, ok := err.(*InputError); ok {
				return ie
			}
			msg := err.Error()
			if le, ok := err.(*jsonrow.LineError); ok {
				msg = le.Msg
			}
			return &InputError{Kind: "bad_json", Line: lineNo, Msg: msg}
		}
		if fixed != nil {
			rowform.EndRow(fixed.body, at)
			fixed.rows++
			return nil
		}
		if !hasSrc || len(rowSrc) == 0 {
			g.add(partition.Unknown, row)
			return nil
		}
		// A source seen earlier in the request was validated then; looking it up costs no
		// allocation, so a row pays for its source only the first time.
		gb := g.index[string(rowSrc)]
		if gb == nil {
			src := string(rowSrc)
			if err := partition.ValidateSource(src); err != nil {
				return &InputError{Kind: "bad_source", Line: lineNo, Msg: err.Error()}
			}
			gb = g.group(src)
		}
		gb.add(g.form, row)
		return nil
	})
	if err != nil {
		if ie, ok := err.(*InputError); ok {
			return Result{}, ie
		}
		if le, ok := err.(*jsonrow.LineError); ok {
			return Result{}, &InputError{Kind: "bad_json", Line: le.Line, Msg: le.Msg}
		}
		return Result{}, &InputError{Kind: "bad_json", Msg: err.Error()}
	}
	if fixed != nil && fixed.rows == 0 {
		return Result{}, nil // an empty body: nothing to log
	}
	return c.append(dataset, g.form, g.groups)
}

// IngestRows makes rows from a trusted decoder durable as one atomic request.
func (c *Cache) IngestRows(dataset string, rows []rowform.Row) (Result, error) {
	if err := CheckDataset(dataset); err != nil {
		return Result{}, err
	}
	g := grouper{form: formRows, size: 4 * len(rows)}
	defer g.release()
	for _, r := range rows {
		g.size += len(r.Line)
	}
	for _, r := range rows {
		src := r.Source
		if src == "" || partition.ValidateSource(src) != nil {
			src = partition.Unknown
		}
		g.add(src, r.Line)
	}
	return c.append(dataset, g.form, g.groups)
}

// IngestPartitionRows makes a body of rows durable in the partition named partitionName as
// one atomic request. It is how a central server stores forwarded rows, which it has parsed
// and validated itself, as IngestRowGroups is how trusted decoders store theirs: body is
// rows rows, each framed (rowform.BeginRow, rowform.EndRow) in the row form
// (rowform.AppendField, rowform.BeginField, rowform.EndField) of values a jsonrow.Scanner
// accepted under names columns.CheckFieldName accepts, which may carry `_hyp_origin_seq`,
// the sender's seq, but never the columns the cache stamps itself. Only the framing is
// checked; the body is logged as it is, and not retained.
func (c *Cache) IngestPartitionRows(dataset, partitionName string, body []byte, rows int) (Result, error) {
	if err := CheckDataset(dataset); err != nil {
		return Result{}, err
	}
	if _, _, err := partition.Parse(partitionName); err != nil {
		return Result{}, &InputError{Kind: "bad_source", Msg: err.Error()}
	}
	if n, ok := rowform.CountRows(body); !ok || n != rows {
		return Result{}, fmt.Errorf("cache: a body for %s %s holds %d framed rows, not %d", dataset, partitionName, n, rows)
	}
	if rows == 0 {
		return Result{}, nil
	}
	gb := &groupBuilder{name: partitionName, body: body[:len(body):len(body)], rows: rows}
	return c.append(dataset, formRows, []*groupBuilder{gb})
}

// IngestPartitionRecords is IngestPartitionRows for rows that came as Arrow record batches
// (a forwarded Arrow body): they are logged as they are, an Arrow IPC stream (formArrow),
// and the flush takes them column by column where the cache's column rules allow. The
// batches share one schema of columns rowjson can write, each name once, none of them the
// columns the cache stamps itself; a batch's rows are what its NDJSON line would be (a null
// is a field left out). Nothing is retained once it returns.
func (c *Cache) IngestPartitionRecords(dataset, partitionName string, recs []arrow.RecordBatch) (Result, error) {
	if err := CheckDataset(dataset); err != nil {
		return Result{}, err
	}
	if _, _, err := partition.Parse(partitionName); err != nil {
		return Result{}, &InputError{Kind: "bad_source", Msg: err.Error()}
	}
	rows := 0
	for _, r := range recs {
		if !r.Schema().Equal(recs[0].Schema()) {
			return Result{}, fmt.Errorf("cache: record batches for %s %s differ in schema", dataset, partitionName)
		}
		rows += int(r.NumRows())
	}
	if rows == 0 {
		return Result{}, nil
	}
	seen := map[string]bool{columns.SeqColumn: true, columns.IngestedAtColumn: true}
	for _, f := range recs[0].Schema().Fields() {
		if _, _, ok := rowjson.KindOf(f.Type); !ok || seen[f.Name] {
			return Result{}, fmt.Errorf("cache: column %q (%s) of a record batch for %s %s: a name the cache stamps, a name twice, or a type with no JSON form", f.Name, f.Type, dataset, partitionName)
		}
		seen[f.Name] = true
	}
	// Encoded into a body of groupBodies, which the row form's request bodies come from too.
	bp, _ := groupBodies.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	buf := bytes.NewBuffer((*bp)[:0])
	defer func() {
		if buf.Cap() <= maxPooledBody {
			*bp = buf.Bytes()[:0]
			groupBodies.Put(bp)
		}
	}()
	if err := arrowGroupBody(buf, recs); err != nil {
		return Result{}, fmt.Errorf("cache: encoding %d rows for %s %s: %w", rows, dataset, partitionName, err)
	}
	gb := &groupBuilder{name: partitionName, body: buf.Bytes(), rows: rows}
	return c.append(dataset, formArrow, []*groupBuilder{gb})
}

// append assigns seqs and writes one log record under c.mu, so log order is seq order, then
// waits for the group commit outside the lock.
func (c *Cache) append(dataset string, form byte, groups []*groupBuilder) (Result, error) {
	if len(groups) == 0 {
		return Result{}, nil
	}
	rec := record{Form: form, Dataset: dataset, Groups: make([]group, len(groups))}
	total := 0
	for i, gb := range groups {
		rec.Groups[i] = group{Partition: gb.name, Rows: gb.rows, Body: gb.body}
		total += gb.rows
	}
	c.mu.Lock()
	rec.IngestedAt = max(c.now().UnixMicro(), c.lastAt)
	first := c.nextSeq
	seq := first
	for i := range rec.Groups {
		rec.Groups[i].FirstSeq = seq
		seq += int64(rec.Groups[i].Rows)
	}
	if seq > c.reserved {
		if err := c.reserve(seq + seqBlock); err != nil {
			c.mu.Unlock()
			return Result{}, storeError(err)
		}
	}
	// Encoded straight into the log's buffer: a request's rows are copied once on their way
	// to the file, not twice.
	ticket, err := c.wal.AppendFunc(func(dst []byte) []byte { return appendRecord(dst, &rec) }, seq-1)
	if err != nil {
		c.mu.Unlock()
		return Result{}, storeError(err)
	}
	c.nextSeq, c.lastAt = seq, rec.IngestedAt
	c.mu.Unlock()
	if err := c.wal.Wait(ticket); err != nil {
		// The seqs handed out stay used: seqs may skip, they are never reused.
		return Result{}, storeError(err)
	}
	return Result{Accepted: total, FirstSeq: first, LastSeq: seq - 1}, nil
}
