package server

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	flatbuffers "github.com/google/flatbuffers/go"

	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/httpbody"
	"github.com/hyp-project/hyp/internal/jsonrow"
	"github.com/hyp-project/hyp/internal/rowform"
	"github.com/hyp-project/hyp/internal/rowjson"
)

// An Arrow body (SPEC 5) is an Apache Arrow IPC stream: a schema, then record batches whose
// columns are the rows' fields plus `_hyp_ingest_seq` (int64) and `_hyp_ingested_at`
// (timestamp), their buffers compressed with ZSTD or LZ4_FRAME or not at all. It is read in
// two steps. scanArrow walks the stream's messages without decoding a buffer and learns what
// decoding costs: rows, the bytes the IPC reader allocates, the decompressors' windows. The
// handler charges that to the listener's budget, and parseArrow then decodes the stream
// with an allocator that refuses any byte beyond what scanArrow counted, and turns it into
// the chunk parseRows makes of the same rows as NDJSON, under the same rules: the checks of
// the seqs, the ingest times and the internal names run once per column or batch, not per
// JSON field, and each value is written as the JSON text a sender's NDJSON would carry, so
// a unit stores the same rows whichever format it came in.

// arrowMaxWindow bounds a ZSTD frame's window in an Arrow body: a decoder allocates its
// window whatever the frame holds, so a few bytes declaring a large one would cost that
// much memory outside any allocator. 8 MiB is the largest arrow-go's encoder writes, and
// RFC 9659's limit for the zstd content coding.
const arrowMaxWindow = 8 << 20

// lz4Working is what an LZ4_FRAME decompressor may hold: its largest block size, twice.
const lz4Working = 8 << 20

// zstdWorking is what a ZSTD decompressor holds besides its window: its largest block.
const zstdWorking = 128 << 10

// arrowScan is what scanArrow learnt of an Arrow body.
type arrowScan struct {
	rows int // the record batches' declared rows
	// decoded is what the IPC reader allocates to decode the stream: a copy of each
	// message's body, and each compressed buffer's declared uncompressed size.
	decoded int64
	// working is the decompressors' own memory, allocated outside the reader's allocator:
	// the reader decompresses one batch at a time, with a decompressor of its own, so the
	// most one batch's takes (its largest ZSTD window and a block, or lz4Working).
	working int64
}

// badArrow is the refusal of a body that is not a stream scanArrow and parseArrow accept.
func badArrow(format string, args ...any) *httpbody.Error {
	return &httpbody.Error{Status: http.StatusBadRequest, Kind: "bad_arrow", Msg: fmt.Sprintf(format, args...)}
}

// The Arrow IPC schema's flatbuffer fields (format/Message.fbs, Schema.fbs), by slot.
const (
	msgHeaderType = 1 // Message.header_type
	msgHeader     = 2 // Message.header
	msgBodyLength = 3 // Message.bodyLength
	msgMetadata   = 4 // Message.custom_metadata

	schemaFields   = 1 // Schema.fields
	schemaMetadata = 2 // Schema.custom_metadata

	fieldDictionary = 4 // Field.dictionary
	fieldChildren   = 5 // Field.children
	fieldMetadata   = 6 // Field.custom_metadata

	hdrSchema          = 1
	hdrDictionaryBatch = 2
	hdrRecordBatch     = 3

	rbLength      = 0 // RecordBatch.length
	rbBuffers     = 2 // RecordBatch.buffers: struct Buffer {offset: long; length: long}
	rbCompression = 3 // RecordBatch.compression: table BodyCompression {codec: byte}

	codecLZ4  = 0 // CompressionType.LZ4_FRAME, the codec field's default
	codecZstd = 1
)

// slot is the offset of field i in t, 0 when absent.
func slot(t *flatbuffers.Table, i int) flatbuffers.UOffsetT {
	return flatbuffers.UOffsetT(t.Offset(flatbuffers.VOffsetT(4 + 2*i)))
}

// vector returns where the elements of t's vector field i start and how many there are,
// and whether that many elements of elem bytes fit in the buffer: arrow-go allocates a
// slice per vector by the length it declares before reading an element.
func vector(t *flatbuffers.Table, i, elem int) (start flatbuffers.UOffsetT, n int, ok bool) {
	o := slot(t, i)
	if o == 0 {
		return 0, 0, true
	}
	start, n = t.Vector(o), t.VectorLen(o)
	return start, n, n >= 0 && uint64(n)*uint64(elem) <= uint64(len(t.Bytes))-uint64(min(int(start), len(t.Bytes)))
}

// checkSchema checks what arrow-go reads of a schema message before hyp sees the schema:
// every vector it sizes a slice by fits the message, and no field has children or a
// dictionary, which hyp never takes and whose nesting the reader would follow as deep as
// the offsets lead, cycles included.
func checkSchema(msg *flatbuffers.Table) *httpbody.Error {
	o := slot(msg, msgHeader)
	if o == 0 {
		return badArrow("the Arrow IPC schema message has no schema")
	}
	sc := flatbuffers.Table{Bytes: msg.Bytes, Pos: msg.Indirect(o + msg.Pos)}
	_, _, ok1 := vector(&sc, schemaMetadata, 4)
	start, n, ok2 := vector(&sc, schemaFields, 4)
	if !ok1 || !ok2 {
		return badArrow("the Arrow IPC schema declares more entries than it holds")
	}
	for i := range n {
		at := start + flatbuffers.UOffsetT(4*i)
		f := flatbuffers.Table{Bytes: sc.Bytes, Pos: sc.Indirect(at)}
		_, children, ok1 := vector(&f, fieldChildren, 4)
		_, _, ok2 := vector(&f, fieldMetadata, 4)
		switch {
		case !ok1 || !ok2:
			return badArrow("an Arrow IPC schema field declares more entries than it holds")
		case children > 0:
			return badArrow("column %d is nested: hyp takes flat columns only", i)
		case slot(&f, fieldDictionary) != 0:
			return badArrow("column %d is dictionary-encoded: hyp takes plain columns only", i)
		}
	}
	return nil
}

// scanArrow walks body's IPC messages and checks what no decoder would check before
// allocating: every buffer inside its message's body, every compressed buffer's declared
// size, its ZSTD frames' windows, and what the buffers decode into against maxBody, the
// bound a body has after decompression (413 beyond). It reads flatbuffers that come from outside,
// whose accessors index without checking: an index out of range is a malformed stream,
// recovered into bad_arrow.
func scanArrow(body []byte, maxBody int64) (sc arrowScan, rerr *httpbody.Error) {
	defer func() {
		if p := recover(); p != nil {
			sc, rerr = arrowScan{}, badArrow("the Arrow IPC stream's metadata is malformed: %v", p)
		}
	}()
	sawSchema := false
	for pos := 0; ; {
		if len(body)-pos < 4 {
			if pos == len(body) {
				break // a stream may end without its end-of-stream marker
			}
			return arrowScan{}, badArrow("the Arrow IPC stream ends inside a message")
		}
		n := binary.LittleEndian.Uint32(body[pos:])
		pos += 4
		if n == 0xFFFFFFFF { // the continuation marker, then the metadata's length
			if len(body)-pos < 4 {
				return arrowScan{}, badArrow("the Arrow IPC stream ends inside a message")
			}
			n = binary.LittleEndian.Uint32(body[pos:])
			pos += 4
		}
		if n == 0 {
			break // end of stream
		}
		if uint64(n) > uint64(len(body)-pos) || n < 4 {
			return arrowScan{}, badArrow("an Arrow IPC message declares %d bytes of metadata, beyond the body", n)
		}
		meta := body[pos : pos+int(n)]
		pos += int(n)
		msg := flatbuffers.Table{Bytes: meta, Pos: flatbuffers.GetUOffsetT(meta)}
		var bodyLen int64
		if o := slot(&msg, msgBodyLength); o != 0 {
			bodyLen = msg.GetInt64(o + msg.Pos)
		}
		if bodyLen < 0 || bodyLen > int64(len(body)-pos) {
			return arrowScan{}, badArrow("an Arrow IPC message declares a body of %d bytes, beyond the request body", bodyLen)
		}
		mbody := body[pos : pos+int(bodyLen)]
		pos += int(bodyLen)
		sc.decoded += int64(n) + bodyLen
		if _, _, ok := vector(&msg, msgMetadata, 4); !ok {
			return arrowScan{}, badArrow("an Arrow IPC message declares more metadata than it holds")
		}
		var kind byte
		if o := slot(&msg, msgHeaderType); o != 0 {
			kind = msg.GetByte(o + msg.Pos)
		}
		switch kind {
		case hdrSchema:
			if sawSchema {
				return arrowScan{}, badArrow("the Arrow IPC stream has a second schema")
			}
			sawSchema = true
			if err := checkSchema(&msg); err != nil {
				return arrowScan{}, err
			}
			continue
		case hdrRecordBatch:
		case hdrDictionaryBatch:
			return arrowScan{}, badArrow("the Arrow IPC stream has a dictionary batch: hyp takes no dictionary-encoded columns")
		default:
			return arrowScan{}, badArrow("the Arrow IPC stream has a message of type %d, not a record batch", kind)
		}
		if !sawSchema {
			return arrowScan{}, badArrow("the Arrow IPC stream has a record batch before its schema")
		}
		o := slot(&msg, msgHeader)
		if o == 0 {
			return arrowScan{}, badArrow("an Arrow IPC record batch message has no header")
		}
		rb := flatbuffers.Table{Bytes: meta, Pos: msg.Indirect(o + msg.Pos)}
		if err := sc.batch(&rb, mbody); err != nil {
			return arrowScan{}, err
		}
		if sc.decoded > maxBody {
			return arrowScan{}, tooLarge
		}
	}
	if !sawSchema {
		return arrowScan{}, badArrow("the body is not an Arrow IPC stream (no schema message)")
	}
	return sc, nil
}

// batch adds one record batch, whose body is mbody, to sc.
func (sc *arrowScan) batch(rb *flatbuffers.Table, mbody []byte) *httpbody.Error {
	var rows int64
	if o := slot(rb, rbLength); o != 0 {
		rows = rb.GetInt64(o + rb.Pos)
	}
	codec := -1
	if o := slot(rb, rbCompression); o != 0 {
		bc := flatbuffers.Table{Bytes: rb.Bytes, Pos: rb.Indirect(o + rb.Pos)}
		codec = codecLZ4
		if o := slot(&bc, 0); o != 0 {
			codec = int(bc.GetByte(o + bc.Pos))
		}
		if codec != codecLZ4 && codec != codecZstd {
			return badArrow("an Arrow IPC record batch names compression codec %d, not LZ4_FRAME or ZSTD", codec)
		}
	}
	var decoded, window int64
	if o := slot(rb, rbBuffers); o != 0 {
		vec, n := rb.Vector(o), rb.VectorLen(o) // both add the table's position themselves
		for i := range n {
			at := int(vec) + 16*i
			off := int64(binary.LittleEndian.Uint64(rb.Bytes[at:]))
			length := int64(binary.LittleEndian.Uint64(rb.Bytes[at+8:]))
			if off < 0 || length < 0 || off > int64(len(mbody)) || length > int64(len(mbody))-off {
				return badArrow("an Arrow IPC buffer lies outside its message's body")
			}
			if codec < 0 || length == 0 {
				continue
			}
			buf := mbody[off : off+length]
			if len(buf) < 8 {
				return badArrow("a compressed Arrow IPC buffer has no length prefix")
			}
			size := int64(binary.LittleEndian.Uint64(buf))
			switch {
			case size == -1: // stored uncompressed after the prefix
				continue
			case size < 0:
				return badArrow("a compressed Arrow IPC buffer declares %d bytes", size)
			}
			decoded += size
			if codec == codecZstd {
				w, err := zstdWindow(buf[8:])
				if err != nil {
					return badArrow("a ZSTD buffer of the Arrow IPC stream: %v", err)
				}
				window = max(window, w)
			}
		}
	}
	switch codec {
	case codecZstd:
		sc.working = max(sc.working, window+zstdWorking)
	case codecLZ4:
		sc.working = max(sc.working, lz4Working)
	}
	// Every row has a seq, 8 bytes of some buffer: a batch claiming more rows than its
	// buffers could hold would only make the seqs' slices large.
	if rows < 0 || rows > (int64(len(mbody))+decoded)/8 {
		return badArrow("an Arrow IPC record batch declares %d rows, more than its buffers hold", rows)
	}
	sc.rows += int(rows)
	sc.decoded += decoded
	return nil
}

// zstdWindow walks the ZSTD frames of b, as a decoder would read them, and returns the
// largest window one of them declares; a window beyond arrowMaxWindow, or bytes that are
// not whole frames, are an error.
func zstdWindow(b []byte) (int64, error) {
	var most int64
	for len(b) > 0 {
		if len(b) < 5 {
			return 0, errors.New("truncated frame")
		}
		magic := binary.LittleEndian.Uint32(b)
		if magic&0xFFFFFFF0 == 0x184D2A50 { // a skippable frame: its size, then that many bytes
			if len(b) < 8 || uint64(binary.LittleEndian.Uint32(b[4:])) > uint64(len(b)-8) {
				return 0, errors.New("truncated skippable frame")
			}
			b = b[8+int(binary.LittleEndian.Uint32(b[4:])):]
			continue
		}
		if magic != 0xFD2FB528 {
			return 0, errors.New("not a zstd frame")
		}
		fhd := b[4]
		p := 5
		single := fhd&0x20 != 0
		if fhd&0x08 != 0 {
			return 0, errors.New("reserved frame header bit set")
		}
		var window int64
		if !single {
			if len(b) <= p {
				return 0, errors.New("truncated frame header")
			}
			exp, mant := int64(b[p]>>3), int64(b[p]&7)
			base := int64(1) << (10 + exp)
			window = base + base/8*mant
			p++
		}
		p += [4]int{0, 1, 2, 4}[fhd&3] // dictionary id
		fcsLen := [4]int{0, 2, 4, 8}[fhd>>6]
		if fcsLen == 0 && single {
			fcsLen = 1
		}
		if len(b) < p+fcsLen {
			return 0, errors.New("truncated frame header")
		}
		if single {
			var fcs uint64
			for i := fcsLen - 1; i >= 0; i-- {
				fcs = fcs<<8 | uint64(b[p+i])
			}
			if fcsLen == 2 {
				fcs += 256
			}
			window = int64(min(fcs, 1<<62))
		}
		p += fcsLen
		if window > arrowMaxWindow {
			return 0, fmt.Errorf("frame window of %d bytes, above the %d a server takes", window, arrowMaxWindow)
		}
		most = max(most, window)
		for last := false; !last; {
			if len(b) < p+3 {
				return 0, errors.New("truncated block")
			}
			h := uint32(b[p]) | uint32(b[p+1])<<8 | uint32(b[p+2])<<16
			last, p = h&1 != 0, p+3
			switch size := int(h >> 3); (h >> 1) & 3 {
			case 0, 2: // raw, compressed
				p += size
			case 1: // RLE: one byte repeated
				p++
			default:
				return 0, errors.New("reserved block type")
			}
			if p > len(b) {
				return 0, errors.New("truncated block")
			}
		}
		if fhd&0x04 != 0 { // content checksum
			p += 4
		}
		if p > len(b) {
			return 0, errors.New("truncated checksum")
		}
		b = b[p:]
	}
	return most, nil
}

// arrowCost is what the handler charges for an Arrow body before parseArrow runs: what the
// IPC reader and the decompressors allocate, and a seq, an end and a time per row, plus
// 64 KiB for the chunk and the reader's own state. The rows' text is charged as it grows
// (rowsOut), since only decoding tells how much of it escapes.
func arrowCost(sc arrowScan) int {
	return int(sc.decoded+sc.working) + sc.rows*3*8 + 64<<10
}

// limitAllocator is the IPC reader's allocator: it hands out at most left bytes, what
// scanArrow counted and the handler charged, so no stream allocates beyond what it was
// charged for, whatever its metadata claims. A refusal panics, which the reader turns into
// its error, and is remembered for the reply.
type limitAllocator struct {
	left int64
	over bool
}

// errArrowMemory is the panic of a refused allocation.
var errArrowMemory = errors.New("the Arrow IPC stream decodes into more memory than its buffers declare")

func (a *limitAllocator) take(n int) {
	if int64(n) > a.left {
		a.over = true
		panic(errArrowMemory)
	}
	a.left -= int64(n)
}

func (a *limitAllocator) Allocate(n int) []byte {
	a.take(n)
	return memory.DefaultAllocator.Allocate(n)
}

func (a *limitAllocator) Reallocate(n int, b []byte) []byte {
	a.take(max(n-len(b), 0))
	return memory.DefaultAllocator.Reallocate(n, b)
}

func (a *limitAllocator) Free(b []byte) { memory.DefaultAllocator.Free(b) }

// arrowColumn is one user column of an Arrow body (_hyp_overflow among them).
type arrowColumn struct {
	index    int
	name     string
	key      []byte       // `"name":`, for userJSON
	frame    int          // the bytes a field of it costs in the cache's row form past its value
	kind     rowjson.Kind // how its values become JSON text
	perSec   int64        // rowjson.KindTimestamp's unit
	overflow bool         // columns.OverflowColumn: each value must be one JSON object

	// The batch at hand's column, one of them set as kind says.
	valid  []byte // validity bitmap; nil when the batch has no nulls here
	offset int    // of the batch's values in valid
	str    *array.String
	lstr   *array.LargeString
	i64    []int64
	f64    []float64
	bools  *array.Boolean
	ts     []arrow.Timestamp
}

// arrowColumns checks an Arrow body's schema as parseRows checks each row's keys, and
// returns the user columns and where the seq and ingest time columns are.
func arrowColumns(sc *arrow.Schema) (cols []arrowColumn, seqAt, timeAt int, perSec int64, rerr *httpbody.Error) {
	seqAt, timeAt = -1, -1
	hasOvf := false
	for i, f := range sc.Fields() {
		key := []byte(f.Name)
		switch {
		case f.Name == columns.SeqColumn:
			switch {
			case seqAt >= 0:
				return nil, 0, 0, 0, fieldError("bad_seq", "%s appears twice", columns.SeqColumn)
			case f.Type.ID() != arrow.INT64:
				return nil, 0, 0, 0, fieldError("bad_seq", "%s must be an int64 column, got %s", columns.SeqColumn, f.Type)
			}
			seqAt = i
			continue
		case f.Name == columns.IngestedAtColumn:
			switch {
			case timeAt >= 0:
				return nil, 0, 0, 0, fieldError("bad_ingested_at", "%s appears twice", columns.IngestedAtColumn)
			case f.Type.ID() != arrow.TIMESTAMP:
				return nil, 0, 0, 0, fieldError("bad_ingested_at", "%s must be a timestamp column, got %s", columns.IngestedAtColumn, f.Type)
			}
			timeAt, perSec = i, rowjson.PerSecond(f.Type.(*arrow.TimestampType).Unit)
			continue
		case !utf8.Valid(key):
			return nil, 0, 0, 0, fieldError("bad_field", "field name %q is not valid UTF-8", f.Name)
		case columns.CheckFieldName(key) != "":
			return nil, 0, 0, 0, fieldError("bad_field", "%s", columns.CheckFieldName(key))
		case f.Name == columns.OverflowColumn:
			if hasOvf {
				return nil, 0, 0, 0, fieldError("bad_field", "%s appears twice", columns.OverflowColumn)
			}
			hasOvf = true
		case columns.CheckReserved(key) != "":
			return nil, 0, 0, 0, fieldError("bad_field", "%s", columns.CheckReserved(key))
		}
		c := arrowColumn{index: i, name: f.Name, overflow: f.Name == columns.OverflowColumn,
			key:   append(rowjson.AppendString(nil, f.Name), ':'),
			frame: binary.PutUvarint(make([]byte, binary.MaxVarintLen64), uint64(len(f.Name))) + len(f.Name) + 5}
		var ok bool
		if c.kind, c.perSec, ok = rowjson.KindOf(f.Type); !ok {
			return nil, 0, 0, 0, fieldError("bad_field", "column %q has type %s: hyp stores string, large_string, int64, float64, bool and timestamp columns", f.Name, f.Type)
		}
		if c.overflow && c.kind != rowjson.KindString && c.kind != rowjson.KindLargeString {
			return nil, 0, 0, 0, fieldError("bad_field", "%s must be a string column holding one JSON object per row, got %s", columns.OverflowColumn, f.Type)
		}
		cols = append(cols, c)
	}
	switch {
	case seqAt < 0:
		return nil, 0, 0, 0, fieldError("bad_seq", "the stream has no %s column", columns.SeqColumn)
	case timeAt < 0:
		return nil, 0, 0, 0, fieldError("bad_ingested_at", "the stream has no %s column", columns.IngestedAtColumn)
	}
	return cols, seqAt, timeAt, perSec, nil
}

func fieldError(kind, format string, args ...any) *httpbody.Error {
	return &httpbody.Error{Status: http.StatusBadRequest, Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// The ingest times an NDJSON body can carry: RFC 3339 writes years 0000 to 9999.
var (
	minIngestedAt = time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	maxIngestedAt = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC).UnixMicro()
)

// arrowDecoder turns an Arrow body's batches into a chunk.
type arrowDecoder struct {
	c           *chunk
	out         rowsOut
	form        rowForm
	first, last int64
	incarnation string
	cols        []arrowColumn
	seqAt       int
	timeAt      int
	perSec      int64
	prev        int64 // the last seq so far, 0 before the first row
	line        int   // rows before the batch at hand, for error lines
	ovf         jsonrow.Scanner
	fixedPerRow int // a row's bytes in form besides its values and their fields
}

// parseArrow decodes an Arrow body scanArrow accepted into the chunk parseRows would make of
// the same rows as NDJSON (parseRows's doc says what is checked), charging the rows' text to
// m as it grows. Its error lines count rows from 1 across the stream.
//
// Both keepers get the columnar form instead when every batch allows it (passThrough): the
// same checks run, and the batches are kept as they came.
func parseArrow(body []byte, sc arrowScan, first, last int64, form rowForm, incarnation string, m httpbody.Meter) (*chunk, *httpbody.Error) {
	if form == userJSON || form == cacheRows {
		c, rerr := decodeArrow(body, sc, first, last, columnar, incarnation, m)
		if rerr == nil && form == cacheRows {
			// The cache encodes the batches into its log record, about their decoded size,
			// with the origin columns: charged as the row form's text is.
			if rerr = (&rowsOut{meter: m}).charge(int(sc.decoded) + len(c.seqs)*(12+len(incarnation))); rerr != nil {
				c.release()
				c = nil
			}
		}
		if rerr != errNotColumnar {
			return c, rerr
		}
	}
	return decodeArrow(body, sc, first, last, form, incarnation, m)
}

// errNotColumnar stops decodeArrow at a batch passThrough cannot keep as it came; the body
// is then decoded again into rows. It never reaches a sender.
var errNotColumnar = &httpbody.Error{Status: http.StatusInternalServerError, Kind: "not_columnar"}

func decodeArrow(body []byte, sc arrowScan, first, last int64, form rowForm, incarnation string, m httpbody.Meter) (*chunk, *httpbody.Error) {
	alloc := &limitAllocator{left: sc.decoded + 64<<10}
	r, err := ipc.NewReader(bytes.NewReader(body), ipc.WithAllocator(alloc),
		ipc.WithBodySizeLimit(int64(len(body))), ipc.WithMetadataSizeLimit(int64(len(body))))
	if err != nil {
		return nil, badArrow("reading the Arrow IPC stream: %v", err)
	}
	defer r.Release()
	cols, seqAt, timeAt, perSec, rerr := arrowColumns(r.Schema())
	if rerr != nil {
		return nil, rerr
	}
	if form == columnar && !distinctNames(cols) {
		return nil, errNotColumnar
	}
	c := chunks.Get().(*chunk)
	c.framed = form == cacheRows
	c.seqs, c.ends, c.ats = slices.Grow(c.seqs[:0], sc.rows), slices.Grow(c.ends[:0], sc.rows), slices.Grow(c.ats[:0], sc.rows)
	d := &arrowDecoder{c: c, out: rowsOut{buf: c.rows[:0], meter: m}, form: form, first: first, last: last,
		incarnation: incarnation, cols: cols, seqAt: seqAt, timeAt: timeAt, perSec: perSec}
	if form == cacheRows {
		d.fixedPerRow = 4 + originBytes(incarnation)
	} else {
		d.fixedPerRow = 2 + len(cols) // braces and commas
	}
	for r.Next() {
		if rerr = d.batch(r.RecordBatch()); rerr != nil {
			break
		}
	}
	c.rows = d.out.buf
	switch {
	case rerr != nil:
	case alloc.over:
		rerr = badArrow("%v", errArrowMemory)
	case r.Err() != nil:
		rerr = badArrow("reading the Arrow IPC stream: %v", r.Err())
	case len(c.seqs) == 0:
		rerr = &httpbody.Error{Status: http.StatusBadRequest, Kind: "bad_seq_range",
			Msg: fmt.Sprintf("%s %d-%d, but the chunk has no rows", headerSeqRange, first, last)}
	case d.prev != last:
		rerr = &httpbody.Error{Status: http.StatusBadRequest, Kind: "bad_seq_range", Line: len(c.seqs),
			Msg: fmt.Sprintf("%s declares %d-%d, but the last row's %s is %d", headerSeqRange, first, last, columns.SeqColumn, d.prev)}
	}
	if rerr != nil {
		c.release()
		return nil, rerr
	}
	return c, nil
}

// batch checks one record batch and appends its rows to the chunk.
func (d *arrowDecoder) batch(rec arrow.RecordBatch) *httpbody.Error {
	n := int(rec.NumRows())
	seqCol, timeCol := rec.Column(d.seqAt).(*array.Int64), rec.Column(d.timeAt).(*array.Timestamp)
	seqs, times := seqCol.Int64Values(), timeCol.TimestampValues()
	if len(seqs) < n || len(times) < n {
		return badArrow("a record batch's columns are shorter than its %d rows", n)
	}
	fail := func(i int, err error) *httpbody.Error {
		re := err.(*rowErr)
		return &httpbody.Error{Status: http.StatusBadRequest, Kind: re.kind, Line: d.line + i + 1, Msg: re.msg}
	}
	// The row checks in parseRows's order, over the two columns at once.
	for i := range n {
		seq := seqs[i]
		switch {
		case seqCol.IsNull(i):
			return fail(i, rowError("bad_seq", "row has no %s", columns.SeqColumn))
		case seq < 1:
			return fail(i, rowError("bad_seq", "%s %d is not a positive integer", columns.SeqColumn, seq))
		case timeCol.IsNull(i):
			return fail(i, rowError("bad_ingested_at", "row has no %s", columns.IngestedAtColumn))
		case d.prev > 0 && seq <= d.prev:
			return fail(i, notFollowing(seq, d.prev))
		case d.prev == 0 && seq != d.first:
			return fail(i, notFirst(d.first, d.last, seq))
		case seq > d.last:
			return fail(i, aboveRange(seq, d.first, d.last))
		}
		at, ok := micros(int64(times[i]), d.perSec)
		if !ok {
			return fail(i, rowError("bad_ingested_at", "%s %d (1/%d s) is not a time RFC 3339 can write", columns.IngestedAtColumn, times[i], d.perSec))
		}
		d.prev = seq
		d.c.ats = append(d.c.ats, at)
	}
	d.c.seqs = append(d.c.seqs, seqs[:n]...)
	// The rows' text: an estimate of the batch's (its strings unescaped) charged at once,
	// and each row's bound checked before it is written.
	estimate := n * d.fixedPerRow
	for j := range d.cols {
		if rerr := d.cols[j].bind(rec.Column(d.cols[j].index), n); rerr != nil {
			return rerr
		}
		estimate += d.cols[j].textBytes(n) + n*(d.cols[j].frame+len(d.cols[j].key))
		if d.cols[j].overflow {
			if i, err := d.cols[j].checkOverflow(&d.ovf, n); err != nil {
				return fail(i, err)
			}
		}
	}
	if d.form == columnar {
		kept, rerr := d.passThrough(rec, n)
		if rerr != nil {
			return rerr
		}
		d.c.recs = append(d.c.recs, kept)
		d.line += n
		return nil
	}
	if rerr := d.out.ensure(estimate); rerr != nil {
		return rerr
	}
	for i := range n {
		if rerr := d.row(i, seqs[i]); rerr != nil {
			return rerr
		}
	}
	d.line += n
	return nil
}

// micros converts v, in units of 1/perSec seconds, to Unix microseconds, false when the
// time is outside what an NDJSON body's RFC 3339 time can be.
func micros(v, perSec int64) (int64, bool) {
	var us int64
	if perSec >= 1e6 {
		us = v / (perSec / 1e6)
	} else {
		k := 1e6 / perSec
		if v > maxIngestedAt/k || v < minIngestedAt/k {
			return 0, false
		}
		us = v * k
	}
	return us, us >= minIngestedAt && us <= maxIngestedAt
}

// row writes row i of the batch the columns are bound to, with its seq.
func (d *arrowDecoder) row(i int, seq int64) *httpbody.Error {
	bound := d.fixedPerRow
	for j := range d.cols {
		bound += d.cols[j].frame + len(d.cols[j].key) + d.cols[j].valueBound(i)
	}
	if rerr := d.out.ensure(bound); rerr != nil {
		return rerr
	}
	dst := d.out.buf
	if d.form == cacheRows {
		var frame int
		dst, frame = rowform.BeginRow(dst)
		for j := range d.cols {
			c := &d.cols[j]
			if c.null(i) {
				continue
			}
			var f int
			dst, f = rowform.BeginField(dst, c.name)
			dst = c.appendValue(dst, i)
			rowform.EndField(dst, f)
		}
		dst = appendOrigin(dst, seq, d.incarnation)
		rowform.EndRow(dst, frame)
	} else {
		dst = append(dst, '{')
		kept := 0
		for j := range d.cols {
			c := &d.cols[j]
			if c.null(i) {
				continue
			}
			if kept > 0 {
				dst = append(dst, ',')
			}
			dst = c.appendValue(append(dst, c.key...), i)
			kept++
		}
		dst = append(dst, '}')
	}
	d.out.buf = dst
	d.c.ends = append(d.c.ends, len(dst))
	return nil
}

// bind points c at its column arr of a batch of n rows.
func (c *arrowColumn) bind(arr arrow.Array, n int) *httpbody.Error {
	c.valid, c.offset = nil, arr.Data().Offset()
	if arr.NullN() > 0 {
		c.valid = arr.NullBitmapBytes()
		if len(c.valid)*8 < c.offset+n {
			return badArrow("column %q's validity bitmap is shorter than its rows", c.name)
		}
	}
	short := false
	switch c.kind {
	case rowjson.KindString:
		c.str = arr.(*array.String)
		short = !validOffsets(c.str.ValueOffsets(), len(c.str.ValueBytes()), n)
	case rowjson.KindLargeString:
		c.lstr = arr.(*array.LargeString)
		short = !validOffsets(c.lstr.ValueOffsets(), len(c.lstr.ValueBytes()), n)
	case rowjson.KindInt64:
		c.i64 = arr.(*array.Int64).Int64Values()
		short = len(c.i64) < n
	case rowjson.KindFloat64:
		c.f64 = arr.(*array.Float64).Float64Values()
		short = len(c.f64) < n
	case rowjson.KindBool:
		c.bools = arr.(*array.Boolean)
		short = arr.Len() < n || len(arr.Data().Buffers()[1].Bytes())*8 < c.offset+n
	case rowjson.KindTimestamp:
		c.ts = arr.(*array.Timestamp).TimestampValues()
		short = len(c.ts) < n
	}
	if short {
		return badArrow("column %q's buffers do not hold its %d rows", c.name, n)
	}
	return nil
}

// validOffsets reports whether offs are n+1 ascending offsets into size bytes of values.
func validOffsets[T int32 | int64](offs []T, size, n int) bool {
	if len(offs) < n+1 || offs[0] < 0 || int64(offs[n]) > int64(size) {
		return false
	}
	for i := range n {
		if offs[i] > offs[i+1] {
			return false
		}
	}
	return true
}

func (c *arrowColumn) null(i int) bool {
	return c.valid != nil && !bitutil.BitIsSet(c.valid, c.offset+i)
}

// textBytes is the text of the column's values in the batch, strings before escaping.
func (c *arrowColumn) textBytes(n int) int {
	switch c.kind {
	case rowjson.KindString:
		offs := c.str.ValueOffsets()
		return int(offs[n]-offs[0]) + 2*n
	case rowjson.KindLargeString:
		offs := c.lstr.ValueOffsets()
		return int(offs[n]-offs[0]) + 2*n
	case rowjson.KindBool:
		return 5 * n
	}
	return 20 * n
}

// valueBound bounds the JSON text of value i: a string's every byte may take six
// (`\u00XX`), an invalid UTF-8 byte becomes U+FFFD's three, and a timestamp of any int64 is
// a year of up to 12 digits.
func (c *arrowColumn) valueBound(i int) int {
	switch c.kind {
	case rowjson.KindString:
		return 6*c.str.ValueLen(i) + 2
	case rowjson.KindLargeString:
		return 6*c.lstr.ValueLen(i) + 2
	case rowjson.KindTimestamp:
		return 48
	}
	return 32
}

// appendValue appends value i as the JSON text a sender's NDJSON gives it (rowjson).
func (c *arrowColumn) appendValue(dst []byte, i int) []byte {
	switch c.kind {
	case rowjson.KindString:
		return rowjson.AppendString(dst, c.str.Value(i))
	case rowjson.KindLargeString:
		return rowjson.AppendString(dst, c.lstr.Value(i))
	case rowjson.KindInt64:
		return strconv.AppendInt(dst, c.i64[i], 10)
	case rowjson.KindFloat64:
		return rowjson.AppendFloat(dst, c.f64[i])
	case rowjson.KindBool:
		return strconv.AppendBool(dst, c.bools.Value(i))
	}
	return rowjson.AppendTimestamp(dst, int64(c.ts[i]), c.perSec)
}

// checkOverflow checks that each of the batch's values of _hyp_overflow holds exactly one
// JSON object, as overflowCheck checks a string one in NDJSON, and returns the first row
// that does not.
func (c *arrowColumn) checkOverflow(sc *jsonrow.Scanner, n int) (int, error) {
	for i := range n {
		if c.null(i) {
			continue
		}
		var v string
		if c.kind == rowjson.KindString {
			v = c.str.Value(i)
		} else {
			v = c.lstr.Value(i)
		}
		if err := sc.Object([]byte(v), nil); err != nil {
			return i, rowError("bad_field", "%s is a string that does not hold exactly one JSON object (%v): %.60q", columns.OverflowColumn, err, v)
		}
	}
	return 0, nil
}

// rowsOut is the chunk's rows under way, whose growth is charged to the request's meter
// before it is allocated.
type rowsOut struct {
	buf   []byte
	meter httpbody.Meter
}

// ensure makes room for n more bytes, growing by at least a quarter so a batch's rows
// grow a few times, each charged first.
func (o *rowsOut) ensure(n int) *httpbody.Error {
	if cap(o.buf)-len(o.buf) >= n {
		return nil
	}
	grow := max(n, cap(o.buf)/4)
	if rerr := o.charge(len(o.buf) + grow - cap(o.buf)); rerr != nil {
		return rerr
	}
	o.buf = slices.Grow(o.buf, grow)
	return nil
}

// charge charges n bytes to the request's meter.
func (o *rowsOut) charge(n int) *httpbody.Error {
	if err := o.meter.Charge(n); err != nil {
		var he *httpbody.Error
		if errors.As(err, &he) {
			return he
		}
		return &httpbody.Error{Status: http.StatusServiceUnavailable, Kind: "unavailable", Msg: err.Error()}
	}
	return nil
}
