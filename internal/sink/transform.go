package sink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/transform"
)

// A sink's transform (SPEC 3) shapes each unit's rows on the way out: the unit is still
// the seq range read from the cache, decided, recorded and acknowledged as before, and
// only what the destination receives is the transform's result. Rows the transform drops
// count as exported (the watermark passes them) and as filtered. The intent records the
// transform the unit was shaped with, so a retry after a crash ships the same rows in the
// same shape even if the config changed meanwhile; a changed transform applies from the
// next unit on.
//
// The transform runs over the unit's rows as they are read, a few thousand at a time
// (unitBuilder.shapePending; it is row-wise, so that is the same as running it over the
// whole unit), and a shipper that encodes while reading gets the shaped records: a unit's
// rows are never all held at once for it.

// Checks are the config checks only the sinks can make: a transform is checked by the SQL
// engine that will run it, so a refused one stops `hyp config validate` and the daemon's
// start with its reason, and a reload that brings one is refused.
func Checks() config.Checks {
	return config.Checks{Transform: func(sql string) error {
		err := transform.Check(context.Background(), sql)
		var te *transform.Error
		if errors.As(err, &te) {
			// The problem is already named after the key: "sinks.x.transform: GROUP BY ...".
			return errors.New(strings.TrimPrefix(te.Msg, "transform: "))
		}
		return err
	}}
}

// runners opens the one transform engine (an in-memory DuckDB) of a driver on first use,
// so a daemon whose sinks have no transform never pays for one.
type runners struct {
	once sync.Once
	r    *transform.Runner
	err  error
}

func (rs *runners) get() (*transform.Runner, error) {
	rs.once.Do(func() {
		rs.r, rs.err = transform.NewRunner()
		if rs.err != nil {
			rs.err = fmt.Errorf("open the transform engine: %w", rs.err)
		}
	})
	return rs.r, rs.err
}

// close releases the engine if it was opened; a get after it fails.
func (rs *runners) close() error {
	rs.once.Do(func() { rs.err = errors.New("the transform engine is closed") })
	if rs.r != nil {
		return rs.r.Close()
	}
	return nil
}

// shape runs tf over recs (consecutive rows of a unit, one schema) and returns the records
// to export in their place, which the caller owns.
func (x *instance) shape(ctx context.Context, tf string, recs []arrow.RecordBatch) ([]arrow.RecordBatch, error) {
	r, err := x.transforms.get()
	if err != nil {
		return nil, err
	}
	res, err := r.Apply(ctx, tf, recs[0].Schema(), recs)
	if err != nil {
		return nil, fmt.Errorf("transform of seqs in this unit: %w", err)
	}
	return res.Recs, nil
}
