package sink

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hyp-project/hyp/internal/cache"
)

// DefaultPreviewRows is how many of a partition's newest rows `hyp sink preview` shapes
// when no limit is given.
const DefaultPreviewRows = 10

// PreviewRequest selects what Preview shows: one sink, optionally one dataset, and how many
// of each partition's newest rows to run through its transform.
type PreviewRequest struct {
	Instance string `json:"instance"`
	Dataset  string `json:"dataset,omitempty"`
	Limit    int    `json:"limit,omitempty"`
}

// PreviewResult is `hyp sink preview --json`: per partition the sink covers, its newest
// rows as the sink would export them now.
type PreviewResult struct {
	Instance   string             `json:"instance"`
	Transform  string             `json:"transform"`
	Partitions []PreviewPartition `json:"partitions"`
}

// PreviewPartition is one partition's preview. Rows are the shaped rows in the JSON form
// the sink's NDJSON bodies use, in seq order; RowsRead counts the newest rows read,
// RowsKept those the transform returned.
type PreviewPartition struct {
	Dataset   string            `json:"dataset"`
	Partition string            `json:"partition"`
	RowsRead  int64             `json:"rows_read"`
	RowsKept  int64             `json:"rows_kept"`
	Columns   []string          `json:"columns"`
	Rows      []json.RawMessage `json:"rows"`
	// Withheld says the sink skips this partition (withhold_sources): it would export none
	// of these rows.
	Withheld bool `json:"withheld,omitempty"`
}

// Preview runs the sink's current transform over the newest rows of every partition it
// covers (of req.Dataset only, when given) and returns what it would export. It moves no
// watermark and writes nothing: it reads the cache as status does.
func (d *Driver) Preview(ctx context.Context, req PreviewRequest) (PreviewResult, error) {
	sel, err := d.selectInstances(req.Instance)
	if err != nil {
		return PreviewResult{}, err
	}
	if req.Instance == "" || len(sel) != 1 {
		return PreviewResult{}, errors.New("preview needs one sink instance")
	}
	x := sel[0]
	limit := int64(req.Limit)
	if limit <= 0 {
		limit = DefaultPreviewRows
	}
	tf := x.live.Load().transform
	out := PreviewResult{Instance: x.name, Transform: tf, Partitions: []PreviewPartition{}}
	for _, cp := range d.cache.Status() {
		if !x.covers(cp.Dataset) || (req.Dataset != "" && cp.Dataset != req.Dataset) || cp.MaxSeq == 0 {
			continue
		}
		pp, err := x.preview(ctx, cp, limit, tf)
		if errors.Is(err, cache.ErrNoPartition) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("preview %s %s: %w", cp.Dataset, cp.Partition, err)
		}
		out.Partitions = append(out.Partitions, pp)
	}
	return out, nil
}

// preview shapes the newest limit rows of cp with tf.
func (x *instance) preview(ctx context.Context, cp cache.PartitionStatus, limit int64, tf string) (PreviewPartition, error) {
	p := Part{Dataset: cp.Dataset, Partition: cp.Partition}
	pp := PreviewPartition{Dataset: p.Dataset, Partition: p.Partition, Withheld: x.withheld(p), Columns: []string{}, Rows: []json.RawMessage{}}
	since, err := x.newestSince(ctx, p, limit)
	if err != nil {
		return pp, err
	}
	rows, err := x.read(ctx, p, since, cp.HeadSeq, limits{rows: 1 << 62}, tf)
	if err != nil {
		return pp, err
	}
	defer rows.release()
	pp.RowsRead, pp.RowsKept = rows.rows, rows.kept
	if rows.kept == 0 {
		return pp, nil
	}
	for _, f := range rows.schema.Fields() {
		pp.Columns = append(pp.Columns, f.Name)
	}
	body, err := encodeNDJSON(rows)
	if err != nil {
		return pp, err
	}
	for line := range bytes.Lines(body) {
		pp.Rows = append(pp.Rows, json.RawMessage(bytes.TrimSuffix(line, []byte("\n"))))
	}
	return pp, nil
}

// newestSince is the seq above which p holds its newest limit rows (or all of them): seqs
// are spread over every partition of the cache, so it is found by bisection over the
// position index's row counts, which read only boundary row groups.
func (x *instance) newestSince(ctx context.Context, p Part, limit int64) (int64, error) {
	pos, err := x.cache.Positions(p.Dataset, p.Partition)
	if err != nil {
		return 0, err
	}
	defer pos.Release()
	lo, hi := pos.PrunedThrough, pos.Head // rows(lo) >= limit or lo is the floor; rows(hi) = 0
	if n, err := pos.Rows(ctx, lo, pos.Head); err != nil || n <= limit {
		return lo, err
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		n, err := pos.Rows(ctx, mid, pos.Head)
		if err != nil {
			return 0, err
		}
		if n >= limit {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}
