package parquetw

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
)

// createdBy names the writer in every footer: "hyp version <v> (build <commit>)", the
// grammar every reader parses (parquet-mr's VersionParser, arrow's AppVersion). Readers
// judge statistics by it only for their own past writers (parquet-mr before 1.8.0 wrote
// wrong string bounds, PARQUET-251); a created_by they cannot parse makes parquet-mr ignore
// every string column's statistics, so nothing but the build comment may hold parentheses.
var createdBy = writerName(debug.ReadBuildInfo())

// writerName is createdBy from the binary's build information: the module version, or
// "devel" for a build from a work tree, and the commit when the build recorded one.
func writerName(bi *debug.BuildInfo, ok bool) string {
	v, rev := "devel", ""
	if ok {
		if mv := bi.Main.Version; mv != "" && !strings.ContainsAny(mv, "() ") {
			v = mv
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				rev = s.Value[:min(12, len(s.Value))]
			}
		}
	}
	if rev == "" {
		return "hyp version " + v
	}
	return "hyp version " + v + " (build " + rev + ")"
}

// maxColumnWorkers bounds how many cores one file's encoding takes.
const maxColumnWorkers = 4

// fileWriter writes records as Parquet row groups of at most rgMax rows. The columns of a
// row group are encoded in parallel, each by its own chunk; only writing a closed row group
// to w is serial, in column order.
type fileWriter struct {
	w       io.Writer
	off     int64
	cols    []column
	chunks  []*chunk
	rgMax   int64
	rgRows  int64
	rgs     []rowGroupMeta
	rows    int64
	workers int
	foot    compact
}

type rowGroupMeta struct {
	rows, offset, rawSize, size int64
	chunks                      []chunkMeta
}

type chunkMeta struct {
	dictOffset, dataOffset int64 // dictOffset -1: no dictionary page
	rawSize, size          int64
	numValues, nullCount   int64
	encodings              uint16
	stat                   stat
}

// columnsOf maps an Arrow schema to the file's columns; plain lists those that never get a
// dictionary, dict those whose sample says one pays.
func columnsOf(schema *arrow.Schema, dict func(i int) bool) ([]column, error) {
	cols := make([]column, schema.NumFields())
	for i, f := range schema.Fields() {
		c := column{name: f.Name, fieldID: -1, nullable: f.Nullable, tsMul: 1, tsDiv: 1}
		if k := f.Metadata.FindKey("PARQUET:field_id"); k >= 0 {
			id, err := strconv.ParseInt(f.Metadata.Values()[k], 10, 32)
			if err != nil {
				return nil, fmt.Errorf("column %s: field id %q: %w", f.Name, f.Metadata.Values()[k], err)
			}
			c.fieldID = int32(id)
		}
		switch t := f.Type.(type) {
		case *arrow.StringType, *arrow.LargeStringType:
			c.phys, c.dict = physByteArray, dict(i)
		case *arrow.Int64Type:
			c.phys, c.dict = physInt64, dict(i)
		case *arrow.Float64Type:
			c.phys = physDouble
		case *arrow.BooleanType:
			c.phys = physBoolean
		case *arrow.TimestampType:
			// Every timestamp becomes microseconds: the cache's own unit, and the one every
			// Parquet reader (Spark included) maps to its native timestamp type.
			c.phys, c.timestamp, c.dict = physInt64, true, dict(i)
			switch t.Unit {
			case arrow.Second:
				c.tsMul = 1_000_000
			case arrow.Millisecond:
				c.tsMul = 1_000
			case arrow.Nanosecond:
				c.tsDiv = 1_000
			}
		default:
			return nil, fmt.Errorf("column %s is %s: only strings, int64, float64, booleans and timestamps are written", f.Name, f.Type)
		}
		cols[i] = c
	}
	return cols, nil
}

func newFileWriter(w io.Writer, cols []column, rgMax int64) (*fileWriter, error) {
	fw := &fileWriter{w: w, cols: cols, rgMax: rgMax, chunks: make([]*chunk, len(cols))}
	for i := range cols {
		fw.chunks[i] = newChunk(&fw.cols[i])
	}
	fw.workers = max(min(runtime.GOMAXPROCS(0), maxColumnWorkers, len(cols)), 1)
	return fw, fw.write([]byte("PAR1"))
}

func (fw *fileWriter) write(b []byte) error {
	n, err := fw.w.Write(b)
	fw.off += int64(n)
	return err
}

// add writes rec's rows, filling the open row group before starting the next, so a file
// written in many small records still gets full row groups.
func (fw *fileWriter) add(rec arrow.RecordBatch) error {
	for off := int64(0); off < rec.NumRows(); {
		n := min(rec.NumRows()-off, fw.rgMax-fw.rgRows)
		if err := fw.each(func(i int, c *chunk) error { return c.add(rec.Column(i), int(off), int(n)) }); err != nil {
			return err
		}
		fw.rgRows += n
		off += n
		if fw.rgRows == fw.rgMax {
			if err := fw.closeRowGroup(); err != nil {
				return err
			}
		}
	}
	return nil
}

// each runs f for every column, the workers taking columns in turn.
func (fw *fileWriter) each(f func(i int, c *chunk) error) error {
	errs := make([]error, len(fw.chunks))
	var next atomic.Int64
	work := func() {
		for i := int(next.Add(1) - 1); i < len(errs); i = int(next.Add(1) - 1) {
			errs[i] = f(i, fw.chunks[i])
		}
	}
	var wg sync.WaitGroup
	for range fw.workers - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
	return errors.Join(errs...)
}

func (fw *fileWriter) closeRowGroup() error {
	if fw.rgRows == 0 {
		return nil
	}
	dicts, datas := make([][]byte, len(fw.chunks)), make([][]byte, len(fw.chunks))
	_ = fw.each(func(i int, c *chunk) error {
		dicts[i], datas[i] = c.finish()
		return nil
	})
	rg := rowGroupMeta{rows: fw.rgRows, offset: fw.off, chunks: make([]chunkMeta, len(fw.chunks))}
	for i, c := range fw.chunks {
		m := chunkMeta{dictOffset: -1, rawSize: c.rawSize, numValues: c.numValues, nullCount: c.nullCount, encodings: c.encodings}
		start := fw.off
		if len(dicts[i]) > 0 {
			m.dictOffset = fw.off
			m.encodings |= 1 << encPlain
			if err := fw.write(dicts[i]); err != nil {
				return err
			}
		}
		m.dataOffset = fw.off
		if err := fw.write(datas[i]); err != nil {
			return err
		}
		m.size = fw.off - start
		// reset gives the chunk new bounds, so these stay the row group's.
		m.stat = c.stats.encoded(c.col.phys, nil)
		rg.rawSize += m.rawSize
		rg.size += m.size
		rg.chunks[i] = m
		c.reset()
	}
	fw.rgs = append(fw.rgs, rg)
	fw.rows += fw.rgRows
	fw.rgRows = 0
	return nil
}

// close writes the open row group and the footer.
func (fw *fileWriter) close() error {
	if err := fw.closeRowGroup(); err != nil {
		return err
	}
	f := &fw.foot
	f.b = f.b[:0]
	f.open()
	f.i32(1, 2)
	f.list(2, ctStruct, len(fw.cols)+1)
	f.open()
	f.i32(3, 0) // required
	f.string(4, "schema")
	f.i32(5, int32(len(fw.cols)))
	f.end()
	for i := range fw.cols {
		fw.schemaElement(&fw.cols[i])
	}
	f.i64(3, fw.rows)
	f.list(4, ctStruct, len(fw.rgs))
	for k, rg := range fw.rgs {
		f.open()
		f.list(1, ctStruct, len(rg.chunks))
		for i, m := range rg.chunks {
			fw.columnChunk(&fw.cols[i], m)
		}
		f.i64(2, rg.rawSize)
		f.i64(3, rg.rows)
		f.i64(5, rg.offset)
		f.i64(6, rg.size)
		f.field(7, ctI16)
		f.b = binary.AppendVarint(f.b, int64(k))
		f.end()
	}
	f.string(6, createdBy)
	f.list(7, ctStruct, len(fw.cols))
	for range fw.cols {
		f.open()
		f.begin(1) // TYPE_ORDER
		f.end()
		f.end()
	}
	f.end()
	f.b = binary.LittleEndian.AppendUint32(f.b, uint32(len(f.b)))
	f.b = append(f.b, "PAR1"...)
	return fw.write(f.b)
}

// Converted types (parquet.thrift) written beside the logical types for older readers.
const (
	convUTF8            = 0
	convTimestampMicros = 10
	convInt64           = 18
)

func (fw *fileWriter) schemaElement(c *column) {
	f := &fw.foot
	f.open()
	f.i32(1, int32(c.phys))
	if c.nullable {
		f.i32(3, 1)
	} else {
		f.i32(3, 0)
	}
	f.string(4, c.name)
	timestamp := c.timestamp
	switch {
	case c.phys == physByteArray:
		f.i32(6, convUTF8)
	case timestamp:
		f.i32(6, convTimestampMicros)
	case c.phys == physInt64:
		f.i32(6, convInt64)
	}
	if c.fieldID >= 0 {
		f.i32(9, c.fieldID)
	}
	switch {
	case c.phys == physByteArray:
		f.begin(10)
		f.begin(1) // STRING
		f.end()
		f.end()
	case timestamp:
		f.begin(10)
		f.begin(8) // TIMESTAMP
		f.bool(1, true)
		f.begin(2)
		f.begin(2) // MICROS
		f.end()
		f.end()
		f.end()
		f.end()
	case c.phys == physInt64:
		f.begin(10)
		f.begin(10) // INTEGER
		f.field(1, ctByte)
		f.b = append(f.b, 64)
		f.bool(2, true)
		f.end()
		f.end()
	}
	f.end()
}

func (fw *fileWriter) columnChunk(c *column, m chunkMeta) {
	f := &fw.foot
	f.open()
	f.i64(2, m.dataOffset)
	f.begin(3)
	f.i32(1, int32(c.phys))
	var encs []int32
	for e := range int32(16) {
		if m.encodings&(1<<e) != 0 {
			encs = append(encs, e)
		}
	}
	if c.nullable {
		encs = append(encs, encRLE)
	}
	f.listI32(2, encs)
	f.listString(3, c.name)
	f.i32(4, codecZstd)
	f.i64(5, m.numValues)
	f.i64(6, m.rawSize)
	f.i64(7, m.size)
	f.i64(9, m.dataOffset)
	if m.dictOffset >= 0 {
		f.i64(11, m.dictOffset)
	}
	f.begin(12)
	f.i64(3, m.nullCount)
	// Bounds, and whether each is a value of the chunk or a truncation of one
	// (parquet.thrift's Statistics).
	if m.stat.has {
		f.binary(5, m.stat.hi)
		f.binary(6, m.stat.lo)
		f.bool(7, m.stat.hiExact)
		f.bool(8, m.stat.loExact)
	}
	f.end()
	f.end()
	f.end()
}
