package sink

import (
	"context"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/hyp-project/hyp/internal/fsutil"
	"github.com/hyp-project/hyp/internal/partition"
	"github.com/hyp-project/hyp/internal/rowjson"
	"github.com/hyp-project/hyp/internal/watermark"
)

// quarantine keeps a refused unit's rows as NDJSON under
// `sinks/<instance>/quarantine/<dataset>/<partition>/part-<first>-<last>.ndjson`, so moving
// the watermark past it loses nothing an operator cannot inspect and replay.
func (x *instance) quarantine(ctx context.Context, p Part, u watermark.Unit, cause error) (watermark.Quarantined, error) {
	q := watermark.Quarantined{First: u.First, Last: u.Last, Rows: u.Rows, Error: cause.Error(), At: x.now().UTC()}
	seg, err := partition.PathSegment(p.Partition)
	if err != nil {
		return q, err
	}
	rows, err := x.read(ctx, p, u.From, u.Last, limits{rows: 1 << 62}, "") // as cached, unshaped: what a replay needs
	if err != nil {
		return q, err
	}
	defer rows.release()
	body, err := encodeNDJSON(rows)
	if err != nil {
		return q, err
	}
	dir := x.dir().quarantine(p.Dataset, seg)
	if err := fsutil.MkdirAllSync(dir); err != nil {
		return q, err
	}
	q.File = quarantineFile(dir, u.First, u.Last)
	if err := fsutil.WriteFileAtomic(q.File, body, 0o600); err != nil {
		return q, err
	}
	q.Rows = rows.rows
	return q, nil
}

// encodeNDJSON renders rows as the forward protocol's body: one object per row with every
// column, the internal ones included.
func encodeNDJSON(rows *unitRows) ([]byte, error) {
	if rows.kept == 0 {
		return nil, nil
	}
	b, err := newNDJSONBody(rows.schema)
	if err != nil {
		return nil, err
	}
	for _, rec := range rows.recs {
		b.append(rec)
	}
	return b.body, nil
}

// ndjsonBody is a unit's NDJSON text, appended record by record.
type ndjsonBody struct {
	enc  *rowjson.Encoder
	keys int // the text every row spends on its keys and separators
	body []byte
}

func newNDJSONBody(schema *arrow.Schema) (*ndjsonBody, error) {
	enc, err := rowjson.NewEncoder(schema)
	if err != nil {
		return nil, err
	}
	b := &ndjsonBody{enc: enc}
	for _, f := range schema.Fields() {
		b.keys += len(f.Name) + 6 // quotes, colon, comma, and a value's quotes
	}
	return b, nil
}

// append encodes rec's rows. The body grows ahead by an estimate of rec's text (its Arrow
// buffers plus the keys), so a unit's body is allocated a few times instead of doubling its
// way up from nothing.
func (b *ndjsonBody) append(rec arrow.RecordBatch) {
	n := int(rec.NumRows()) * (b.keys + 2)
	for _, col := range rec.Columns() {
		for _, buf := range col.Data().Buffers() {
			if buf != nil {
				n += buf.Len()
			}
		}
	}
	b.body = slices.Grow(b.body, n+n/8)
	for i := 0; i < int(rec.NumRows()); i++ {
		b.body = b.enc.AppendRow(b.body, rec, i)
		b.body = append(b.body, '\n')
	}
}
