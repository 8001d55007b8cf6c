package cache

import (
	"fmt"

	"github.com/hyp-project/hyp/internal/partition"
	"github.com/hyp-project/hyp/internal/rowform"
)

// IngestRowGroups is IngestRows for rows already framed into groups: it logs each body as
// it is, without first copying its rows into a group of its own, unless two groups name
// the same partition (then into a body from groupBodies for the first partition). A source that is empty or not valid is "unknown", as for IngestRows.
// It does not retain the bodies after it returns.
func (c *Cache) IngestRowGroups(dataset string, groups []rowform.RowGroup) (Result, error) {
	if err := CheckDataset(dataset); err != nil {
		return Result{}, err
	}
	g := grouper{form: formRows}
	defer g.release()
	for _, rg := range groups {
		g.size += len(rg.Body)
	}
	for _, rg := range groups {
		if n, ok := rowform.CountRows(rg.Body); !ok || n != rg.Rows {
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
