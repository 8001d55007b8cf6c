package server

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/httpbody"
	"github.com/hyp-project/hyp/internal/jsonrow"
	"github.com/hyp-project/hyp/internal/partition"
	"github.com/hyp-project/hyp/internal/rowform"
)

// The forward protocol's request headers (SPEC 5).
const (
	headerGateway   = "X-Hyp-Gateway"
	headerPartition = "X-Hyp-Partition"
	headerSeqRange  = "X-Hyp-Seq-Range"
	headerBatchID   = "X-Hyp-Batch-Id"
	// headerIncarnation names the sender's seq space; a chunk without it is of the
	// incarnation "" (older senders).
	headerIncarnation = "X-Hyp-Incarnation"
)

// originSeqColumn is the column of the server's cache that keeps each stored row's sender
// seq; Recover reads it back.
const originSeqColumn = "_hyp_origin_seq"

// originIncarnationColumn keeps, beside the origin seq, the sender's incarnation when it is
// not "": the ledger is keyed by it, so Recover must know it for every row it reads back.
const originIncarnationColumn = "_hyp_origin_incarnation"

// maxBatchID bounds the batch id, which is only logged: it must not let a sender fill logs.
const maxBatchID = 128

// forward is what a chunk's headers declare.
type forward struct {
	gateway, source string
	incarnation     string // "" when the header is absent
	first, last     int64  // the declared seq range, inclusive
	batchID         string
}

// parseForward validates the forward headers. On error the fields parsed so far are set,
// for the log line.
func parseForward(h http.Header) (forward, *httpbody.Error) {
	var fw forward
	var err error
	if fw.gateway, err = single(h, headerGateway); err == nil {
		err = partition.ValidateGateway(fw.gateway)
	}
	if err != nil {
		return fw, badHeader(headerGateway, err)
	}
	if vs := h.Values(headerIncarnation); len(vs) > 0 {
		if fw.incarnation, err = single(h, headerIncarnation); err == nil {
			// The sender's ids are hex; the gateway syntax bounds what a forged one can be.
			err = partition.ValidateGateway(fw.incarnation)
		}
		if err != nil {
			return fw, badHeader(headerIncarnation, err)
		}
	}
	p, err := single(h, headerPartition)
	if err != nil {
		return fw, badHeader(headerPartition, err)
	}
	src, ok := partition.SourceFromName(p)
	if !ok {
		return fw, badHeader(headerPartition, fmt.Errorf("%q is not source=<value> with a valid source", p))
	}
	fw.source = src
	if fw.batchID, err = single(h, headerBatchID); err == nil && !validBatchID(fw.batchID) {
		err = fmt.Errorf("want 1 to %d printable ASCII characters", maxBatchID)
	}
	if err != nil {
		return fw, badHeader(headerBatchID, err)
	}
	r, err := single(h, headerSeqRange)
	if err == nil {
		fw.first, fw.last, err = parseSeqRange(r)
	}
	if err != nil {
		return fw, badHeader(headerSeqRange, err)
	}
	return fw, nil
}

func badHeader(name string, err error) *httpbody.Error {
	return &httpbody.Error{Status: http.StatusBadRequest, Kind: "bad_header", Msg: name + ": " + err.Error()}
}

// single returns a header that must be present exactly once: two values would leave it
// ambiguous which one the sender meant.
func single(h http.Header, name string) (string, error) {
	switch vs := h.Values(name); len(vs) {
	case 0:
		return "", errors.New("missing")
	case 1:
		return vs[0], nil
	default:
		return "", fmt.Errorf("sent %d times", len(vs))
	}
}

func validBatchID(id string) bool {
	if id == "" || len(id) > maxBatchID {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// parseSeqRange parses "A-B": two non-negative decimal seqs, A <= B.
func parseSeqRange(v string) (int64, int64, error) {
	a, b, ok := strings.Cut(v, "-")
	if !ok {
		return 0, 0, fmt.Errorf("%q: want <first>-<last>", v)
	}
	first, ok1 := jsonrow.NumberIsInt([]byte(a))
	last, ok2 := jsonrow.NumberIsInt([]byte(b))
	switch {
	case !ok1 || !ok2 || first < 0 || last < 0:
		return 0, 0, fmt.Errorf("%q: want two non-negative decimal seqs", v)
	case first > last:
		return 0, 0, fmt.Errorf("%q: first seq above last", v)
	}
	return first, last, nil
}

// rowForm is what parseRows makes of each row, for the keeper that stores it.
type rowForm uint8

const (
	// cacheRows is the server cache's row form (rowform.AppendField), each row framed
	// (rowform.BeginRow): the user fields, then `_hyp_origin_seq`, so the cache logs the body
	// as it is, without parsing the rows' JSON again.
	cacheRows rowForm = iota
	// userJSON is a JSON object of the user fields only, their text as sent, for cluster
	// mode's cache.Encoder.
	userJSON
	// columnar is what cluster mode asks of an Arrow body instead of userJSON when its
	// columns allow (passThrough): the body's own batches, as the records cache.Encoder
	// would build from those rows' userJSON text, so a replica never writes and parses
	// each value's text again. parseArrow picks it; no handler asks for it.
	columnar
)

// chunk is a validated body, already in the form its keeper stores.
type chunk struct {
	seqs []int64 // each row's sender seq, strictly ascending
	rows []byte  // the rows one after another, in the form parseRows was asked for
	ends []int   // ends[i] is the end of row i in rows
	// ats[i] is row i's `_hyp_ingested_at` in Unix microseconds.
	ats    []int64
	framed bool     // each row in rows begins with rowform.BeginRow's frame (cacheRows)
	kept   [][]byte // all's result
	fresh  []byte   // freshBody's result when some rows are held
	// recs are the rows in the columnar form, rows and ends then empty; the chunk holds a
	// reference to each.
	recs []arrow.RecordBatch
}

// Chunks are reused: a unit of a forward sink is a few MB of rows, and allocating that
// afresh for every request is most of what makes the server's garbage collector run.
var chunks = sync.Pool{New: func() any { return new(chunk) }}

// maxPooledRows caps the chunks kept for reuse, as httpbody caps its buffers: a forward
// unit's rows fit well below it, and an occasional huge body should not pin its memory.
const maxPooledRows = 8 << 20

// minRowBytes is the shortest line parseRows accepts, `{"_hyp_ingest_seq":1}`: it bounds
// the rows a body can hold, whatever range its sender declares.
const minRowBytes = len(`{"` + columns.SeqColumn + `":1}`)

// release hands c back for reuse; neither it nor any row of it may be used afterwards.
func (c *chunk) release() {
	for _, r := range c.recs {
		r.Release()
	}
	clear(c.recs)
	if cap(c.rows) > maxPooledRows {
		return
	}
	clear(c.kept) // so the pool does not hold row slices of the last body
	*c = chunk{seqs: c.seqs[:0], rows: c.rows[:0], ends: c.ends[:0], ats: c.ats[:0], kept: c.kept[:0], fresh: c.fresh[:0], recs: c.recs[:0]}
	chunks.Put(c)
}

// row is row i, without its frame.
func (c *chunk) row(i int) []byte {
	r := c.framedRow(i)
	if c.framed {
		r = r[4:]
	}
	return r
}

// framedRow is row i as it lies in rows, its frame included.
func (c *chunk) framedRow(i int) []byte {
	start := 0
	if i > 0 {
		start = c.ends[i-1]
	}
	return c.rows[start:c.ends[i]:c.ends[i]]
}

// freshBody returns the framed rows whose held flag is false, in order, and how many:
// rows itself when none is held, which is every chunk but a re-sent one.
func (c *chunk) freshBody(held []bool) ([]byte, int) {
	if !slices.Contains(held, true) {
		return c.rows, len(c.ends)
	}
	c.fresh = c.fresh[:0]
	n := 0
	for i := range c.ends {
		if !held[i] {
			c.fresh = append(c.fresh, c.framedRow(i)...)
			n++
		}
	}
	return c.fresh, n
}

// all returns every row, without its frame; they alias c.rows.
func (c *chunk) all() [][]byte {
	c.kept = c.kept[:0]
	for i := range c.ends {
		c.kept = append(c.kept, c.row(i))
	}
	return c.kept
}

// parseRows validates a chunk's NDJSON body against its declared range and rewrites each row
// in form: the sender's `_hyp_ingest_seq` and `_hyp_ingested_at` go (the server's store
// stamps its own), every other field is kept with its value byte for byte, and in the cache's
// form `_hyp_origin_seq` is appended. Each line must be a JSON object with one positive
// integer `_hyp_ingest_seq`, strictly increasing from line to line, and one RFC 3339
// `_hyp_ingested_at` (bad_ingested_at otherwise: the server never makes up when a row was
// ingested); a `_hyp_overflow` must be what a sender's cache overflowed (overflowCheck), and
// any other `_hyp_` field, in any letter case, is bad_field, so a row can never forge the
// origin seq the ledger trusts.
//
// The declared range must be exactly [first row's seq, last row's seq] (`bad_seq_range`
// otherwise): the ledger records the range, so a range wider than the rows that prove it
// would let one chunk claim seqs it never carried and turn a gateway's later rows into
// "duplicates".
//
// The chunk comes from a pool; the caller may hand it back with release once done with it.
//
// A body of several MiB (a forward unit) is cut at line ends into pieces parsed side by
// side: its sender waits for the answer, and the parse is the largest step of a unit's
// round trip. What a body gives, errors included, does not depend on how it was cut.
func parseRows(body []byte, first, last int64, form rowForm, incarnation string) (*chunk, *httpbody.Error) {
	return parseRowsIn(body, first, last, form, incarnation, parseParts(len(body)))
}

// rowsBound bounds what parse writes for body from incarnation's sender: the rows' bytes,
// at most the body's plus the origin fields and the frame each row gains, and how many
// rows there are. Every row ends at a newline but the last, and none is shorter than
// minRowBytes, so both bound the rows.
func rowsBound(body []byte, incarnation string) (size, rows int) {
	gain := 4 + originBytes(incarnation)
	rows = min(bytes.Count(body, []byte{'\n'}), len(body)/minRowBytes) + 1
	return len(body) + rows*gain, rows
}

// perField is a field's frame in the cache's row form (rowform.BeginField) past its key.
const perField = binary.MaxVarintLen16 + 5

// originBytes bounds what appendOrigin adds to a row.
func originBytes(incarnation string) int {
	n := perField + len(originSeqColumn) + 20
	if incarnation != "" {
		n += perField + len(originIncarnationColumn) + len(incarnation) + 2
	}
	return n
}

// parseCost bounds what parseRows allocates for body: its rows and a seq, an end and a
// time per row, twice over when the body is parsed in pieces that join copies into one
// chunk.
func parseCost(body []byte, incarnation string) int {
	return parseCostIn(body, incarnation, parseParts(len(body)))
}

// parseCostIn is parseCost for a body parsed in parts pieces.
func parseCostIn(body []byte, incarnation string, parts int) int {
	size, rows := rowsBound(body, incarnation)
	// 64 KiB more for the chunk and the pieces themselves and the rounding of each
	// allocation up to the allocator's size classes and pages.
	cost := size + rows*3*8 + 64<<10
	if parts > 1 {
		cost *= 2
	}
	return cost
}

// minPartBytes is the least body a parse piece gets: below it a goroutine costs more than
// it saves.
const minPartBytes = 1 << 20

// parseParts is how many pieces a body of n bytes is parsed in.
func parseParts(n int) int { return max(1, min(runtime.GOMAXPROCS(0), n/minPartBytes)) }

// parseRowsIn is parseRows with the body cut into at most parts pieces.
func parseRowsIn(body []byte, first, last int64, form rowForm, incarnation string, parts int) (*chunk, *httpbody.Error) {
	pieces := cut(body, parts)
	var wg sync.WaitGroup
	for i := 1; i < len(pieces); i++ {
		wg.Go(func() { pieces[i].parse(first, last, form, incarnation, false) })
	}
	pieces[0].parse(first, last, form, incarnation, true)
	wg.Wait()
	c, rerr := join(body, pieces, first, last)
	if rerr != nil {
		c.release()
		return nil, rerr
	}
	return c, nil
}

// piece is one piece of a body, cut after a newline, and what parsing it found. Its line
// numbers count from its own start.
type piece struct {
	body  []byte
	start int // offset of body in the whole
	c     *chunk
	// The seqs and lines of its first and last rows, when it has rows.
	firstSeq, lastSeq   int64
	firstLine, lastLine int
	err                 *rowErr
}

// cut cuts body into at most n pieces of about equal size, each ending at a newline but
// the last.
func cut(body []byte, n int) []piece {
	pieces := make([]piece, 0, n)
	start := 0
	for k := 1; k < n; k++ {
		at := len(body) * k / n
		if at < start {
			continue
		}
		j := bytes.IndexByte(body[at:], '\n')
		if j < 0 {
			break
		}
		pieces = append(pieces, piece{body: body[start : at+j+1], start: start})
		start = at + j + 1
	}
	return append(pieces, piece{body: body[start:], start: start})
}

// parse parses the piece into a chunk of its own. A piece that does not lead the body
// checks nothing of its first row that depends on the rows before it (the order of seqs,
// the first seq being the declared one) nor that row's place in the declared range, which
// comes after those in a row's checks: join checks them, in that order, once it knows the
// row before.
func (p *piece) parse(first, last int64, form rowForm, incarnation string, lead bool) {
	c := chunks.Get().(*chunk)
	p.c = c
	c.framed = form == cacheRows
	body := p.body
	// Sized once to what the rows can take, so that what parseCost charged covers it and
	// the rows never regrow.
	size, n := rowsBound(body, incarnation)
	c.rows = slices.Grow(c.rows[:0], size)
	// The declared range bounds the rows too, but only once parsed: the headers' seqs are
	// non-negative with first <= last, so last-first does not overflow, though +1 might.
	if last-first < int64(n) {
		n = int(last-first) + 1
	}
	c.seqs, c.ends, c.ats = slices.Grow(c.seqs[:0], n), slices.Grow(c.ends[:0], n), slices.Grow(c.ats[:0], n)
	var sc jsonrow.Scanner
	var scratch []byte // a decoded `_hyp_ingested_at`
	var ovf overflowCheck
	prev := int64(0)
	err := jsonrow.Lines(body, func(lineNo int, line []byte) error {
		var (
			seq    int64
			at     int64
			hasSeq bool
			hasAt  bool
			hasOvf bool
			kept   int
			// cursor is where the next field's text starts, for userJSON: just past the
			// '{' or the comma that ends the previous field.
			cursor int
		)
		var frame int // where the row's frame starts, for cacheRows
		if form == userJSON {
			cursor = bytes.IndexByte(line, '{') + 1
			c.rows = append(c.rows, '{')
		} else {
			c.rows, frame = rowform.BeginRow(c.rows)
		}
		// Fields, not Object: a bad line fails the whole chunk, which is then released, so
		// what the callback wrote for a line that is then rejected is never kept.
		err := sc.Fields(line, func(f jsonrow.Field) error {
			var field []byte // the field's text as sent, for userJSON
			if form == userJSON {
				// Raw is a slice of line, so the capacities give its offset without a search.
				valEnd := cap(line) - cap(f.Raw) + len(f.Raw)
				field = line[cursor:valEnd]
				cursor = pastComma(line, valEnd)
			}
			switch {
			case string(f.Key) == columns.SeqColumn:
				v, ok := jsonrow.NumberIsInt(f.Raw)
				switch {
				case hasSeq:
					return rowError("bad_seq", "%s appears twice", columns.SeqColumn)
				case f.Kind != jsonrow.Number || !ok:
					return rowError("bad_seq", "%s must be an integer, got %.40s", columns.SeqColumn, f.Raw)
				}
				seq, hasSeq = v, true
				return nil
			case string(f.Key) == columns.IngestedAtColumn:
				var ok bool
				switch {
				case hasAt:
					return rowError("bad_ingested_at", "%s appears twice", columns.IngestedAtColumn)
				case f.Kind != jsonrow.String:
					return rowError("bad_ingested_at", "%s must be an RFC 3339 time string, got a %s", columns.IngestedAtColumn, f.Kind)
				}
				if at, scratch, ok = parseIngestedAt(f.Raw, scratch); !ok {
					return rowError("bad_ingested_at", "%s %.60s is not an RFC 3339 time", columns.IngestedAtColumn, f.Raw)
				}
				hasAt = true
				return nil
			case columns.CheckFieldName(f.Key) != "":
				return rowError("bad_field", "%s", columns.CheckFieldName(f.Key))
			case string(f.Key) == columns.OverflowColumn:
				if hasOvf {
					return rowError("bad_field", "%s appears twice", columns.OverflowColumn)
				}
				if err := ovf.check(f); err != nil {
					return err
				}
				hasOvf = true
			case columns.CheckReserved(f.Key) != "":
				return rowError("bad_field", "%s", columns.CheckReserved(f.Key))
			}
			if form == cacheRows {
				c.rows = rowform.AppendField(c.rows, f)
				return nil
			}
			if kept > 0 {
				c.rows = append(c.rows, ',')
			}
			c.rows = append(c.rows, field...)
			kept++
			return nil
		})
		firstRow := len(c.seqs) == 0
		switch {
		case err != nil:
			return atLine(lineNo, err)
		case !hasSeq:
			return atLine(lineNo, rowError("bad_seq", "row has no %s", columns.SeqColumn))
		case seq < 1:
			return atLine(lineNo, rowError("bad_seq", "%s %d is not a positive integer", columns.SeqColumn, seq))
		case !hasAt:
			return atLine(lineNo, rowError("bad_ingested_at", "row has no %s", columns.IngestedAtColumn))
		case firstRow && !lead:
			// join's to check against the rows before.
		case !firstRow && seq <= prev:
			return atLine(lineNo, notFollowing(seq, prev))
		case firstRow && seq != first:
			return atLine(lineNo, notFirst(first, last, seq))
		case seq > last:
			return atLine(lineNo, aboveRange(seq, first, last))
		}
		if firstRow {
			p.firstSeq, p.firstLine = seq, lineNo
		}
		prev, p.lastSeq, p.lastLine = seq, seq, lineNo
		c.ats = append(c.ats, at)
		if form == cacheRows {
			c.rows = appendOrigin(c.rows, seq, incarnation)
			rowform.EndRow(c.rows, frame)
		} else {
			c.rows = append(c.rows, '}')
		}
		c.seqs = append(c.seqs, seq)
		c.ends = append(c.ends, len(c.rows))
		return nil
	})
	if err != nil {
		// Lines returns only the callback's errors, and those are all numbered rowErrs.
		p.err = atLine(0, err)
	}
}

// join makes the pieces' chunks one, the first piece's, checking what the pieces could not
// check alone, and returns the error of the earliest line that broke a rule, numbered in
// the whole body. The chunk is returned in every case, for the caller to release; the
// other pieces' chunks are released.
func join(body []byte, pieces []piece, first, last int64) (*chunk, *httpbody.Error) {
	c := pieces[0].c
	defer func() {
		for i := 1; i < len(pieces); i++ {
			pieces[i].c.release()
		}
	}()
	// Line numbers of a later piece start after the lines of those before it; counted only
	// for an error, which is where they are needed.
	lineOf := func(p *piece, line int) int { return bytes.Count(body[:p.start], []byte{'\n'}) + line }
	fail := func(p *piece, e *rowErr) *httpbody.Error {
		return &httpbody.Error{Status: http.StatusBadRequest, Kind: e.kind, Line: lineOf(p, e.line), Msg: e.msg}
	}
	if len(pieces) > 1 {
		// One allocation each for what the pieces hold together, which parseCost charged.
		var size, rows int
		for i := range pieces {
			size, rows = size+len(pieces[i].c.rows), rows+len(pieces[i].c.seqs)
		}
		c.rows = slices.Grow(c.rows, size-len(c.rows))
		c.ends = slices.Grow(c.ends, rows-len(c.ends))
		c.seqs = slices.Grow(c.seqs, rows-len(c.seqs))
		c.ats = slices.Grow(c.ats, rows-len(c.ats))
	}
	var prev int64 // the last seq of the rows so far; 0 before the first
	var lastPiece *piece
	for i := range pieces {
		p := &pieces[i]
		rows := len(p.c.seqs) > 0
		// A piece whose first row failed has no rows: that failure is its error below.
		if i > 0 && rows {
			seq := p.firstSeq
			var e error
			switch {
			case prev > 0 && seq <= prev:
				e = notFollowing(seq, prev)
			case prev == 0 && seq != first:
				e = notFirst(first, last, seq)
			case seq > last:
				e = aboveRange(seq, first, last)
			}
			if e != nil {
				return c, fail(p, atLine(p.firstLine, e))
			}
		}
		if p.err != nil {
			return c, fail(p, p.err)
		}
		if !rows {
			continue
		}
		prev, lastPiece = p.lastSeq, p
		if i > 0 {
			base := len(c.rows)
			c.rows = append(c.rows, p.c.rows...)
			for _, end := range p.c.ends {
				c.ends = append(c.ends, base+end)
			}
			c.seqs = append(c.seqs, p.c.seqs...)
			c.ats = append(c.ats, p.c.ats...)
		}
	}
	switch {
	case lastPiece == nil:
		return c, &httpbody.Error{Status: http.StatusBadRequest, Kind: "bad_seq_range",
			Msg: fmt.Sprintf("%s %d-%d, but the chunk has no rows", headerSeqRange, first, last)}
	case prev != last:
		return c, &httpbody.Error{Status: http.StatusBadRequest, Kind: "bad_seq_range", Line: lineOf(lastPiece, lastPiece.lastLine),
			Msg: fmt.Sprintf("%s declares %d-%d, but the last row's %s is %d", headerSeqRange, first, last, columns.SeqColumn, prev)}
	}
	return c, nil
}

// appendOrigin appends to a row in the cache's form being built the fields that keep its
// sender seq and incarnation (originSeqColumn, originIncarnationColumn): at most
// originBytes(incarnation) bytes.
func appendOrigin(dst []byte, seq int64, incarnation string) []byte {
	var f int
	dst, f = rowform.BeginField(dst, originSeqColumn)
	dst = strconv.AppendInt(dst, seq, 10)
	rowform.EndField(dst, f)
	if incarnation != "" {
		// parseForward admitted only [A-Za-z0-9._-]: the JSON string needs no escape.
		dst, f = rowform.BeginField(dst, originIncarnationColumn)
		dst = append(append(append(dst, '"'), incarnation...), '"')
		rowform.EndField(dst, f)
	}
	return dst
}

func notFollowing(seq, prev int64) error {
	return rowError("bad_seq", "%s %d does not follow %d: seqs must increase line to line", columns.SeqColumn, seq, prev)
}

func notFirst(first, last, seq int64) error {
	return rowError("bad_seq_range", "%s declares %d-%d, but the first row's %s is %d", headerSeqRange, first, last, columns.SeqColumn, seq)
}

func aboveRange(seq, first, last int64) error {
	return rowError("bad_seq_range", "%s %d is above the declared range %d-%d", columns.SeqColumn, seq, first, last)
}

// pastComma returns the offset just past the comma that follows a value ending at i, or the
// offset of the closing '}' when the value was the last one.
func pastComma(line []byte, i int) int {
	for i < len(line) && (line[i] == ' ' || line[i] == '\t' || line[i] == '\n' || line[i] == '\r') {
		i++
	}
	if i < len(line) && line[i] == ',' {
		return i + 1
	}
	return i
}

// rowErr is a row that broke a rule; line is filled in once the row is known.
type rowErr struct {
	kind string
	line int
	msg  string
}

func (e *rowErr) Error() string { return fmt.Sprintf("%s: line %d: %s", e.kind, e.line, e.msg) }

func rowError(kind, format string, args ...any) error {
	return &rowErr{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// atLine numbers the error of row lineNo, which is either a rule the row broke or a
// *jsonrow.LineError for a line that is not a JSON object.
func atLine(lineNo int, err error) *rowErr {
	if re, ok := err.(*rowErr); ok {
		if lineNo > 0 {
			re.line = lineNo
		}
		return re
	}
	msg := err.Error()
	if le, ok := err.(*jsonrow.LineError); ok {
		msg = fmt.Sprintf("%s at offset %d", le.Msg, le.Offset)
	}
	return &rowErr{kind: "bad_json", line: lineNo, msg: msg}
}
