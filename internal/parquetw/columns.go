package parquetw

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// maxColumnWorkers bounds how many cores one file's encoding takes.
const maxColumnWorkers = 4

// columnsWriter writes records of scalar columns (all a cache holds) as Parquet row groups
// of rowGroupRows, encoding the columns of each batch on parallel goroutines. pqarrow's
// own writer encodes them one after another, and the encoding, not the cache scan, is what
// bounds an export. The columns of a buffered row group have separate writers, pagers and
// buffers, so they can be filled at once; only closing a row group writes to the file, and
// that stays in column order.
type columnsWriter struct {
	fw       *file.Writer
	rgw      file.BufferedRowGroupWriter
	rgRows   int64
	rgMax    int64
	nullable []bool
	workers  []columnWorker
}

// columnWorker is what one goroutine reuses across columns: pqarrow's write context (its
// scratch buffers are not safe to share) and a definition-level buffer.
type columnWorker struct {
	ctx  context.Context
	defs []int16
}

func newColumnsWriter(w io.Writer, out *arrow.Schema, props *parquet.WriterProperties, arrowProps pqarrow.ArrowWriterProperties) (*columnsWriter, error) {
	for _, f := range out.Fields() {
		if _, ok := f.Type.(arrow.NestedType); ok {
			return nil, fmt.Errorf("column %s is %s: only scalar columns are written", f.Name, f.Type)
		}
	}
	sc, err := pqarrow.ToParquet(out, props, arrowProps)
	if err != nil {
		return nil, fmt.Errorf("parquet schema: %w", err)
	}
	fw, err := file.NewParquetWriterWithError(w, sc.Root(), file.WithWriterProps(props))
	if err != nil {
		return nil, err
	}
	p := &columnsWriter{fw: fw, rgMax: props.MaxRowGroupLength(), nullable: make([]bool, out.NumFields())}
	for i, f := range out.Fields() {
		p.nullable[i] = f.Nullable
	}
	p.workers = make([]columnWorker, max(min(runtime.GOMAXPROCS(0), maxColumnWorkers, out.NumFields()), 1))
	for i := range p.workers {
		p.workers[i].ctx = pqarrow.NewArrowWriteContext(context.Background(), &arrowProps)
	}
	return p, nil
}

// write adds rec's rows, filling the open row group before starting the next, so a unit
// read in many small batches still gets full row groups.
func (p *columnsWriter) write(rec arrow.RecordBatch) error {
	for off := int64(0); off < rec.NumRows(); {
		if p.rgw == nil {
			rgw, err := p.fw.AppendBufferedRowGroupChecked()
			if err != nil {
				return err
			}
			p.rgw, p.rgRows = rgw, 0
		}
		n := min(rec.NumRows()-off, p.rgMax-p.rgRows)
		if err := p.writeColumns(rec, off, n); err != nil {
			return err
		}
		p.rgRows += n
		off += n
		if p.rgRows == p.rgMax {
			if err := p.closeRowGroup(); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeColumns writes rows [off, off+n) of every column; the workers take columns in turn.
func (p *columnsWriter) writeColumns(rec arrow.RecordBatch, off, n int64) error {
	errs := make([]error, rec.NumCols())
	var next atomic.Int64
	work := func(w *columnWorker) {
		for i := int(next.Add(1) - 1); i < len(errs); i = int(next.Add(1) - 1) {
			errs[i] = p.writeColumn(w, i, rec.Column(i), off, n)
		}
	}
	var wg sync.WaitGroup
	for w := range p.workers[1:] {
		wg.Go(func() { work(&p.workers[1+w]) })
	}
	work(&p.workers[0])
	wg.Wait()
	return errors.Join(errs...)
}

func (p *columnsWriter) writeColumn(w *columnWorker, i int, col arrow.Array, off, n int64) error {
	cw, err := p.rgw.Column(i)
	if err != nil {
		return err
	}
	a := array.NewSlice(col, off, off+n)
	defer a.Release()
	// A scalar column's definition level is 1 for a value and 0 for a null; a required
	// column has none.
	var defs []int16
	if p.nullable[i] {
		defs = w.defs[:0]
		for j := range a.Len() {
			if a.IsValid(j) {
				defs = append(defs, 1)
			} else {
				defs = append(defs, 0)
			}
		}
		w.defs = defs
	} else if a.NullN() > 0 {
		return fmt.Errorf("required column %d has %d nulls", i, a.NullN())
	}
	if err := pqarrow.WriteArrowToColumn(w.ctx, cw, a, defs, nil, p.nullable[i]); err != nil {
		return fmt.Errorf("column %d: %w", i, err)
	}
	return nil
}

func (p *columnsWriter) closeRowGroup() error {
	err := p.rgw.Close()
	p.rgw = nil
	return err
}

// close finishes the open row group and writes the footer.
func (p *columnsWriter) close() error {
	if p.rgw != nil {
		if err := p.closeRowGroup(); err != nil {
			return err
		}
	}
	return p.fw.Close()
}
