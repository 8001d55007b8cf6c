package sink

import (
	"context"
	"fmt"
	"path/filepath"

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
	rows, err := x.read(ctx, p, u.From, u.Last, limits{rows: 1 << 62})
	if err != nil {
		return q, err
	}
	defer rows.release()
	body, err := encodeNDJSON(rows)
	if err != nil {
		return q, err
	}
	dir := filepath.Join(x.home, "sinks", x.name, "quarantine", p.Dataset, seg)
	if err := fsutil.MkdirAllSync(dir); err != nil {
		return q, err
	}
	q.File = filepath.Join(dir, fmt.Sprintf("part-%020d-%020d.ndjson", u.First, u.Last))
	if err := fsutil.WriteFileAtomic(q.File, body, 0o600); err != nil {
		return q, err
	}
	q.Rows = rows.rows
	return q, nil
}

// encodeNDJSON renders rows as the forward protocol's body: one object per row with every
// column, the internal ones included.
func encodeNDJSON(rows *unitRows) ([]byte, error) {
	if rows.rows == 0 {
		return nil, nil
	}
	enc, err := rowjson.NewEncoder(rows.schema)
	if err != nil {
		return nil, err
	}
	body := make([]byte, 0, ndjsonSize(rows))
	for _, rec := range rows.recs {
		for i := 0; i < int(rec.NumRows()); i++ {
			body = enc.AppendRow(body, rec, i)
			body = append(body, '\n')
		}
	}
	return body, nil
}

// ndjsonSize estimates the NDJSON text of rows from their Arrow buffers plus a key per field
// per row, so a unit's body is allocated about once instead of doubling its way up (a
// 10,000-row unit is a few MB, and each regrowth copies and zeroes all of it).
func ndjsonSize(rows *unitRows) int {
	keys := 0
	for _, f := range rows.schema.Fields() {
		keys += len(f.Name) + 6 // quotes, colon, comma, and a value's quotes
	}
	n := 0
	for _, rec := range rows.recs {
		n += int(rec.NumRows()) * (keys + 2)
		for _, col := range rec.Columns() {
			for _, b := range col.Data().Buffers() {
				if b != nil {
					n += b.Len()
				}
			}
		}
	}
	return n + n/8
}
