package cache

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hyp-project/hyp/internal/jsonrow"
	"github.com/hyp-project/hyp/internal/partition"
	"github.com/hyp-project/hyp/internal/rowjson"
)

// The row form is how ingest keeps a row it has validated: its top-level fields already
// split, so the flush reads them without scanning JSON again. A group body in the row form
// is its rows one after another, each u32 length (little-endian, so a row can be written in
// place and its length filled in after) | fields, a field being
//
//	uvarint(len key) | key, unescaped | kind | u32 len raw | raw
//
// where raw is the value's JSON text as the request had it (strings still quoted and
// escaped, nested objects and arrays verbatim) and kind its jsonrow.Kind. Null fields are
// kept, so a row set aside is the object it was.

var errBadRow = errors.New("malformed row in the log")

// appendField appends one field of a row being built.
func appendField(dst, key []byte, kind jsonrow.Kind, raw []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	dst = append(dst, byte(kind))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(raw)))
	return append(dst, raw...)
}

// BeginField starts, at the end of dst, a field of a row in the row form whose value a
// trusted encoder then appends as JSON text; EndField(dst, at) completes it. A row is its
// fields one after another (IngestRows), each key once.
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

// appendRow appends a row, built with appendField, to a group body.
func appendRow(dst, row []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(row)))
	return append(dst, row...)
}

// beginRow starts a row written in place at the end of dst: fields are appended to what it
// returns, and endRow(dst, at) then fills in the length.
func beginRow(dst []byte) (out []byte, at int) {
	return append(dst, 0, 0, 0, 0), len(dst)
}

func endRow(dst []byte, at int) {
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

// countRows is the number of rows in a row-form body, or false when it does not split into
// rows exactly.
func countRows(body []byte) (int, bool) {
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

// forRows calls fn with each row of a row-form body that countRows accepted.
func forRows(body []byte, fn func(row []byte)) {
	for len(body) > 0 {
		row, rest, _ := nextRow(body)
		fn(row)
		body = rest
	}
}

// rowFields calls fn with each field of a row, in order; the slices alias row.
func rowFields(row []byte, fn func(jsonrow.Field) error) error {
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
	err := rowFields(row, func(f jsonrow.Field) error {
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

// AppendField appends to dst, a row in the row form being built, a field a jsonrow.Scanner
// reported, so a caller that validated a line itself keeps it without the cache parsing it
// again (IngestPartitionRows).
func AppendField(dst []byte, f jsonrow.Field) []byte {
	return appendField(dst, f.Key, f.Kind, f.Raw)
}

// BeginRow starts, at the end of dst, a row of a RowGroup's body, whose fields a trusted
// encoder then appends (BeginField); EndRow(dst, at) completes it.
func BeginRow(dst []byte) (out []byte, at int) { return beginRow(dst) }

// EndRow fills in the length of the row BeginRow started at at, which is the rest of dst.
func EndRow(dst []byte, at int) { endRow(dst, at) }

// RowGroup is rows of one source from a trusted decoder, already framed as the log keeps a
// partition's rows: each row between BeginRow and EndRow, one after another in Body.
type RowGroup struct {
	Source string
	Rows   int
	Body   []byte
}

// IngestRowGroups is IngestRows for rows already framed into groups: it logs each body as
// it is, without first copying its rows into a group of its own, unless two groups name
// the same partition (then into a body from groupBodies for the first partition). A source that is empty or not valid is "unknown", as for IngestRows.
// It does not retain the bodies after it returns.
func (c *Cache) IngestRowGroups(dataset string, groups []RowGroup) (Result, error) {
	if err := CheckDataset(dataset); err != nil {
		return Result{}, err
	}
	g := grouper{form: formRows}
	defer g.release()
	for _, rg := range groups {
		g.size += len(rg.Body)
	}
	for _, rg := range groups {
		if n, ok := countRows(rg.Body); !ok || n != rg.Rows {
			return Result{}, fmt.Errorf("cache: a row group of %s holds %d framed rows, not %d", dataset, n, rg.Rows)
		}
		if rg.Rows == 0 {
			continue
		}
		src := rg.Source
		if src == "" || partition.ValidateSource(src) != nil {
			src = partition.Unknown
		}
		gb := g.index[src]
		if gb == nil {
			if g.index == nil {
				g.index = map[string]*groupBuilder{}
			}
			// Capped, so that a second group of the partition is appended to a copy, not
			// over the caller's bytes that follow.
			gb = &groupBuilder{name: partition.Name(src), body: rg.Body[:len(rg.Body):len(rg.Body)]}
			g.index[src] = gb
			g.groups = append(g.groups, gb)
		} else {
			if gb == g.groups[0] && g.pooled == nil {
				// The first partition's groups, most often a request's only source whose
				// rows took two of the decoder's buffers, are merged in a pooled body with
				// room for the whole request, as an NDJSON request's rows are: a new array
				// for every such request was most of what OTLP/JSON ingest allocated.
				gb.body = append(g.firstBody(g.size), gb.body...)
			}
			gb.body = append(gb.body, rg.Body...)
		}
		gb.rows += rg.Rows
	}
	return c.append(dataset, g.form, g.groups)
}
