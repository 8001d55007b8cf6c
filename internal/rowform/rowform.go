// Package rowform owns the row form: how hyp keeps a row it has validated, its top-level
// fields already split, so the cache's flush reads them without scanning JSON again. The
// trusted decoders (otlp, and `hyp server`'s forwarded bodies) write rows in it, the cache
// logs and flushes them, and RowJSON turns one back into the object it stands for.
//
// A group body in the row form is its rows one after another, each u32 length
// (little-endian, so a row can be written in place and its length filled in after) |
// fields, a field being
//
//	uvarint(len key) | key, unescaped | kind | u32 len raw | raw
//
// where raw is the value's JSON text as the request had it (strings still quoted and
// escaped, nested objects and arrays verbatim) and kind its jsonrow.Kind. Null fields are
// kept, so a row set aside is the object it was.
//
// It is a leaf: it imports nothing of hyp's beyond the leaves jsonrow and rowjson. It never
// judges a row (which field names, values and sources are allowed is for the caller, with
// package columns and jsonrow), never stores one and never allocates beyond the caller's
// buffer, except RowJSON's result.
package rowform

import (
	"encoding/binary"
	"errors"

	"github.com/hyp-project/hyp/internal/jsonrow"
	"github.com/hyp-project/hyp/internal/rowjson"
)

var errBadRow = errors.New("malformed row in the log")

// Row is one row for a partition from a trusted decoder (OTLP), already in the row form
// the cache's log keeps (BeginField, EndField): its top-level fields, so neither ingest nor
// the flush parses it (cache.IngestRows).
type Row struct {
	Source string
	Line   []byte
}

// RowGroup is rows of one source from a trusted decoder, already framed as the log keeps a
// partition's rows: each row between BeginRow and EndRow, one after another in Body
// (cache.IngestRowGroups).
type RowGroup struct {
	Source string
	Rows   int
	Body   []byte
}

// appendField appends one field of a row being built.
func appendField(dst, key []byte, kind jsonrow.Kind, raw []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	dst = append(dst, byte(kind))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(raw)))
	return append(dst, raw...)
}

// AppendField appends to dst, a row in the row form being built, a field a jsonrow.Scanner
// reported, so a caller that validated a line itself keeps it without the cache parsing it
// again (cache.IngestPartitionRows).
func AppendField(dst []byte, f jsonrow.Field) []byte {
	return appendField(dst, f.Key, f.Kind, f.Raw)
}

// BeginField starts, at the end of dst, a field of a row in the row form whose value a
// trusted encoder then appends as JSON text; EndField(dst, at) completes it. A row is its
// fields one after another (cache.IngestRows), each key once.
func BeginField(dst []byte, key string) (out []byte, at int) {
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	return append(dst, 0, 0, 0, 0, 0), len(dst)
}

// EndField fills in the kind and length of the field BeginField started at at, whose value
// is the rest of dst.
func EndField(dst []byte, at int) {
	dst[at] = byte(jsonrow.KindOf(dst[at+5]))
	binary.LittleEndian.PutUint32(dst[at+1:], uint32(len(dst)-at-5))
}

// AppendRow appends a row, built with AppendField, to a group body.
func AppendRow(dst, row []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(row)))
	return append(dst, row...)
}

// BeginRow starts, at the end of dst, a row of a group body (a RowGroup's), written in
// place: a trusted encoder then appends its fields (BeginField, AppendField) to what it
// returns, and EndRow(dst, at) fills in the length.
func BeginRow(dst []byte) (out []byte, at int) {
	return append(dst, 0, 0, 0, 0), len(dst)
}

// EndRow fills in the length of the row BeginRow started at at, which is the rest of dst.
func EndRow(dst []byte, at int) {
	binary.LittleEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
}

// nextRow splits the first row off a row-form body.
func nextRow(body []byte) (row, rest []byte, ok bool) {
	if len(body) < 4 {
		return nil, nil, false
	}
	n := binary.LittleEndian.Uint32(body)
	if uint64(n) > uint64(len(body)-4) {
		return nil, nil, false
	}
	return body[4 : 4+n], body[4+n:], true
}

// CountRows is the number of rows in a row-form body, or false when it does not split into
// rows exactly.
func CountRows(body []byte) (int, bool) {
	n := 0
	for len(body) > 0 {
		_, rest, ok := nextRow(body)
		if !ok {
			return n, false
		}
		body, n = rest, n+1
	}
	return n, true
}

// ForRows calls fn with each row of a row-form body that CountRows accepted.
func ForRows(body []byte, fn func(row []byte)) {
	for len(body) > 0 {
		row, rest, _ := nextRow(body)
		fn(row)
		body = rest
	}
}

// Fields calls fn with each field of a row, in order; the slices alias row. A row whose
// bytes do not parse gives an error.
func Fields(row []byte, fn func(jsonrow.Field) error) error {
	for len(row) > 0 {
		key, rest, ok := cut(row)
		if !ok || len(rest) == 0 {
			return errBadRow
		}
		kind := jsonrow.Kind(rest[0])
		raw, rest, ok := nextRow(rest[1:]) // a value is framed like a row: u32 length
		if !ok || len(raw) == 0 {
			return errBadRow
		}
		if err := fn(jsonrow.Field{Key: key, Kind: kind, Raw: raw}); err != nil {
			return err
		}
		row = rest
	}
	return nil
}

// cut splits a uvarint-length-prefixed slice off b.
func cut(b []byte) (v, rest []byte, ok bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, nil, false
	}
	return b[k : k+int(n)], b[k+int(n):], true
}

// RowJSON is a row in the row form as the JSON object it stands for (keys escaped), for the
// rows the flush sets aside and for tests; a row whose bytes do not parse comes back as
// they are.
func RowJSON(row []byte) []byte {
	dst := []byte{'{'}
	first := true
	err := Fields(row, func(f jsonrow.Field) error {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(rowjson.AppendString(dst, string(f.Key)), ':')
		dst = append(dst, f.Raw...)
		return nil
	})
	if err != nil {
		// Bytes the log's checksum vouched for but that do not parse: keep them as they are.
		return append([]byte(nil), row...)
	}
	return append(dst, '}')
}
