package cache

import (
	"github.com/apache/arrow-go/v18/arrow"

	"github.com/hyp-project/hyp/internal/columns"
)

// Encoder turns NDJSON rows of one dataset into an Arrow record by the cache's column rules
// (value types, sibling columns for type conflicts, the MaxColumns cap with
// columns.OverflowColumn), without a cache: a cluster replica of `hyp server` stages
// forwarded rows straight into a lake table, and those rows must get the columns a cache
// would have given them. The record has the internal columns.SeqColumn and
// columns.IngestedAtColumn, then the columns in the order the rows brought them, under
// their logical names, as a cache Scan returns them.
//
// An Encoder decides types from its own rows only; the lake table they go to reconciles
// them with its schema the way it does for a cache's records.
type Encoder struct {
	ds *dataset
	b  *batch
}

// NewEncoder returns an empty Encoder; Release it when done.
func NewEncoder() *Encoder {
	ds := &dataset{types: map[string]ColType{}}
	return &Encoder{ds: ds, b: newBatch(ds)}
}

// Add appends one NDJSON object, which the caller has validated (field names included) the
// way ingest does; it carries no internal fields, which come as seq and ingestedAtMicros. On
// error the Encoder is as it was before the call.
func (e *Encoder) Add(line []byte, seq, ingestedAtMicros int64) error {
	return e.b.add(formNDJSON, line, seq, ingestedAtMicros)
}

// Rows is how many rows were added since the last Record.
func (e *Encoder) Rows() int { return e.b.rows }

// Record returns the rows added so far and empties the Encoder; the caller releases it.
func (e *Encoder) Record() (arrow.RecordBatch, error) {
	fields := []arrow.Field{
		{Name: columns.SeqColumn, Type: TypeLong.arrow(), Nullable: false},
		{Name: columns.IngestedAtColumn, Type: TypeTimestamp.arrow(), Nullable: false},
	}
	e.ds.mu.Lock()
	for _, c := range e.ds.order {
		fields = append(fields, arrow.Field{Name: c.Name, Type: c.Type.arrow(), Nullable: true})
	}
	e.ds.mu.Unlock()
	rec, err := e.b.record(arrow.NewSchema(fields, nil), func(name string) string { return name })
	if err == nil {
		e.b.reset()
	}
	return rec, err
}

// Release frees the Encoder's buffers.
func (e *Encoder) Release() { e.b.release() }
