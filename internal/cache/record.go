package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/hyp-project/hyp/internal/rowform"
	"github.com/hyp-project/hyp/internal/rowjson"
)

// A log record is one ingest request: everything in it became durable in one fsync, so a
// request is atomic across a crash. Layout (varints):
//
//	version | dataset | ingestedAt µs | groups | per group: partition name, firstSeq, rows, body
//
// The version is the form of the group bodies: formRows, rows in the row form (rowform.go),
// which ingest writes as it validates (and trusted decoders write directly) so the flush
// parses nothing; formNDJSON, rows as NDJSON, one validated JSON object per line, as every
// record written before the row form is, and still replayed; formArrow, an Arrow IPC stream
// (arrowlog.go), as a central server logs a forwarded Arrow body. Row i of a group has seq
// firstSeq+i.
const (
	formNDJSON = 1
	formRows   = 2
	formArrow  = 3
)

// A segment marker is the first record of every log segment: the next seq to be issued when
// the segment was started, so every record in the segment has seqs at or above it. It bounds
// from below a damaged record at a segment's start, and from above one at the end of the
// segment before. Layout: markerVersion | varint next seq.
const markerVersion = 0

func appendMarker(dst []byte, nextSeq int64) []byte {
	return binary.AppendVarint(append(dst, markerVersion), nextSeq)
}

// decodeMarker returns the next seq of a segment marker, or false for any other payload.
func decodeMarker(p []byte) (int64, bool) {
	if len(p) < 2 || p[0] != markerVersion {
		return 0, false
	}
	v, n := binary.Varint(p[1:])
	return v, n == len(p)-1 && v > 0
}

type group struct {
	Partition string
	FirstSeq  int64
	Rows      int
	Body      []byte
	// Records are a formArrow group's rows, decoded from Body, and Lines the encoder of their
	// NDJSON lines (eachLine).
	Records []arrow.RecordBatch
	Lines   *rowjson.Encoder
}

type record struct {
	Form       byte // formNDJSON, formRows or formArrow
	Dataset    string
	IngestedAt int64
	Groups     []group
}

// eachRow calls fn with each row of g, a group of r, as the batch takes it (in rowForm).
func (r *record) eachRow(g group, fn func(row []byte)) {
	switch r.Form {
	case formRows:
		rowform.ForRows(g.Body, fn)
	case formArrow:
		for _, rec := range g.Records {
			eachLine(g.Lines, rec, 0, fn)
		}
	default:
		forLines(g.Body, fn)
	}
}

// rowForm is the form of the rows eachRow gives, for batch.add.
func (r *record) rowForm() byte {
	if r.Form == formArrow {
		return formNDJSON
	}
	return r.Form
}

// line is a row of r as the NDJSON line it came as, for a row set aside.
func (r *record) line(row []byte) []byte {
	if r.Form == formRows {
		return rowform.RowJSON(row)
	}
	return slices.Clone(row)
}

// release frees what decodeRecord decoded beyond the payload.
func (r *record) release() {
	for _, g := range r.Groups {
		releaseRecords(g.Records)
	}
}

func (r *record) lastSeq() int64 {
	g := r.Groups[len(r.Groups)-1]
	return g.FirstSeq + int64(g.Rows) - 1
}

func appendRecord(dst []byte, r *record) []byte {
	dst = append(dst, r.Form)
	dst = appendString(dst, r.Dataset)
	dst = binary.AppendVarint(dst, r.IngestedAt)
	dst = binary.AppendUvarint(dst, uint64(len(r.Groups)))
	for _, g := range r.Groups {
		dst = appendString(dst, g.Partition)
		dst = binary.AppendVarint(dst, g.FirstSeq)
		dst = binary.AppendUvarint(dst, uint64(g.Rows))
		dst = binary.AppendUvarint(dst, uint64(len(g.Body)))
		dst = append(dst, g.Body...)
	}
	return dst
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

var errBadRecord = errors.New("malformed log record")

type recordReader struct {
	b   []byte
	err error
}

func (r *recordReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errBadRecord
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recordReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errBadRecord
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recordReader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errBadRecord
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// decodeRecord parses a payload. Group bodies alias p.
func decodeRecord(p []byte) (*record, error) {
	if len(p) == 0 || (p[0] != formNDJSON && p[0] != formRows && p[0] != formArrow) {
		return nil, fmt.Errorf("%w: unknown version", errBadRecord)
	}
	r := &recordReader{b: p[1:]}
	rec := &record{Form: p[0], Dataset: string(r.bytes()), IngestedAt: r.varint()}
	n := r.uvarint()
	if n == 0 || n > uint64(len(p)) {
		return nil, fmt.Errorf("%w: %d groups", errBadRecord, n)
	}
	rec.Groups = make([]group, 0, n)
	for range n {
		g := group{Partition: string(r.bytes()), FirstSeq: r.varint(), Rows: int(r.uvarint())}
		g.Body = r.bytes()
		if r.err != nil {
			return nil, r.err
		}
		switch rec.Form {
		case formRows:
			if n, ok := rowform.CountRows(g.Body); !ok || n != g.Rows {
				return nil, fmt.Errorf("%w: group of %d rows holds %d", errBadRecord, g.Rows, n)
			}
		case formArrow:
			var err error
			if g.Rows < 1 { // never written: a flush divides the body by its rows
				err = fmt.Errorf("%w: an Arrow group of no rows", errBadRecord)
			} else {
				g.Records, g.Lines, err = decodeArrowGroup(g.Body, g.Rows)
			}
			if err != nil {
				rec.release()
				return nil, err
			}
		}
		rec.Groups = append(rec.Groups, g)
	}
	if r.err != nil || len(r.b) != 0 {
		rec.release()
		return nil, errBadRecord
	}
	return rec, nil
}
