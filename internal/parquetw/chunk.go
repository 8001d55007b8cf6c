package parquetw

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/hyp-project/hyp/internal/truncate"
)

// Parquet enum values the writer uses (parquet.thrift).
const (
	encPlain         = 0
	encRLE           = 3
	encRLEDictionary = 8

	pageData       = 0
	pageDictionary = 2
)

// Page and dictionary bounds. A page ends at about a MiB of plain values, as in parquet-cpp
// and arrow-go, since readers hold a page whole; pages of dictionary indices, a few bits a
// value, end at pageRows. More rows a page compress better (zstd starts afresh on every
// page: 20,000-row pages made blob files 25% larger), and without page indexes, which this
// writer does not write, no reader prunes pages.
const (
	pageBytes     = 1 << 20
	pageRows      = 128 << 10
	dictPageLimit = 1 << 20
	// maxStatBytes is the longest string bound a footer holds: a longer value's bound is
	// truncated (a prefix below it, an incremented prefix above it, marked inexact), as
	// parquet-mr and arrow-rs write them, so every chunk keeps bounds that hold its values
	// and the footer stays small.
	maxStatBytes = 4096
)

// physical is a column's Parquet representation.
type physical uint8

const (
	physBoolean   physical = 0
	physInt64     physical = 2
	physDouble    physical = 5
	physByteArray physical = 6
)

// column is one leaf of the file's schema, fixed for the file.
type column struct {
	name      string
	fieldID   int32 // -1: none
	phys      physical
	nullable  bool
	dict      bool // values are dictionary encoded until the dictionary outgrows its limit
	timestamp bool
	// A timestamp column's microseconds are value*tsMul/tsDiv.
	tsMul, tsDiv int64
}

// chunk encodes one column of the open row group: values go into the current page, full
// pages are compressed into pages, and finish makes the column chunk with its dictionary
// page first. Its buffers are kept from one row group to the next.
type chunk struct {
	col *column

	// The dictionary of this row group's chunk: keys are views of dictData, which only
	// grows, so a key never sees its bytes change (an append that moves dictData leaves the
	// old bytes to the keys that point at them).
	dictOn   bool // the current page is dictionary encoded
	dictIdx  map[string]uint32
	dictVals []string
	dictData []byte
	// The last string looked up: log columns repeat a value for many rows (a level, a
	// service), and comparing with it is cheaper than hashing.
	lastKey string
	lastIdx uint32
	// An int64 column's dictionary.
	dictInts    map[int64]uint32
	dictIntVals []int64
	dictSize    int // plain-encoded size

	// The current page.
	rows    int      // values, nulls included
	defs    []uint32 // definition levels, only once the page has a null
	nulls   int      // nulls in the page
	idx     []uint32 // dictionary indices of its non-null values
	plain   []byte   // its plain-encoded values
	boolBit int      // plain booleans are bit-packed: bits used in plain's last byte

	// The chunk so far.
	pages     []byte // data pages, headers included
	rawSize   int64  // their size before compression, headers included
	numValues int64
	nullCount int64
	encodings uint16 // bit per encoding used by data pages
	stats     bounds
	dictPage  []byte // header included
	scratch   []byte
	zipped    []byte
	header    compact
}

func newChunk(col *column) *chunk {
	c := &chunk{col: col}
	c.reset()
	return c
}

func (c *chunk) reset() {
	c.dictOn = c.col.dict
	if c.dictOn {
		if c.dictIdx == nil {
			c.dictIdx, c.dictInts = make(map[string]uint32), make(map[int64]uint32)
		}
		clear(c.dictIdx)
		clear(c.dictInts)
	}
	c.dictVals, c.dictData, c.dictIntVals, c.dictSize = c.dictVals[:0], nil, c.dictIntVals[:0], 0
	c.lastKey, c.lastIdx = "", 0
	c.pages, c.rawSize, c.numValues, c.nullCount = c.pages[:0], 0, 0, 0
	c.encodings, c.stats = 0, bounds{}
	c.resetPage()
}

func (c *chunk) resetPage() {
	c.rows, c.nulls, c.boolBit = 0, 0, 0
	c.defs, c.idx, c.plain = c.defs[:0], c.idx[:0], append(c.plain[:0], make([]byte, levelRoom)...)
}

// add appends rows [off, off+n) of a, an array of the column's type.
func (c *chunk) add(a arrow.Array, off, n int) error {
	if !c.col.nullable && a.NullN() > 0 {
		for i := off; i < off+n; i++ {
			if a.IsNull(i) {
				return fmt.Errorf("required column %s has a null at row %d", c.col.name, i)
			}
		}
	}
	for n > 0 {
		// A few hundred values at a time, so a page of long strings ends near pageBytes.
		k := min(n, pageRows-c.rows, 512)
		if err := c.addPage(a, off, k); err != nil {
			return err
		}
		off, n = off+k, n-k
		if c.dictOn && c.dictSize >= dictPageLimit {
			// The dictionary is full: the rest of the chunk is plain, as in every writer. A
			// page's values all have one encoding, so the switch waits for the page's end.
			c.cutPage()
			c.dictOn = false
		}
		if c.rows >= pageRows || len(c.plain)-levelRoom >= pageBytes {
			c.cutPage()
		}
	}
	return nil
}

// addPage appends rows that fit the current page.
func (c *chunk) addPage(a arrow.Array, off, n int) error {
	if c.col.nullable {
		c.addDefs(a, off, n)
	}
	c.rows += n
	switch v := a.(type) {
	case *array.String:
		addStrings(c, v, off, n)
	case *array.LargeString:
		addStrings(c, v, off, n)
	case *array.Int64:
		c.addInt64s(a, v.Int64Values()[off:off+n], off, 1, 1)
	case *array.Timestamp:
		vals := v.TimestampValues()[off : off+n]
		c.addInt64s(a, unsafe.Slice((*int64)(unsafe.SliceData(vals)), len(vals)), off, c.col.tsMul, c.col.tsDiv)
	case *array.Float64:
		for i, f := range v.Float64Values()[off : off+n] {
			if v.IsValid(off + i) {
				c.plain = binary.LittleEndian.AppendUint64(c.plain, math.Float64bits(f))
				c.stats.double(f)
			}
		}
	case *array.Boolean:
		for i := off; i < off+n; i++ {
			if v.IsValid(i) {
				c.addBool(v.Value(i))
			}
		}
	default:
		return fmt.Errorf("column %s: %s is not a supported type", c.col.name, a.DataType())
	}
	return nil
}

func addStrings[A interface {
	IsValid(int) bool
	Value(int) string
}](c *chunk, a A, off, n int) {
	for i := off; i < off+n; i++ {
		if a.IsValid(i) {
			c.addString(a.Value(i))
		}
	}
}

func (c *chunk) addDefs(a arrow.Array, off, n int) {
	if a.NullN() == 0 && c.nulls == 0 {
		return // levels are materialised only once the page has a null
	}
	for len(c.defs) < c.rows {
		c.defs = append(c.defs, 1) // the page's rows so far, all values
	}
	for i := off; i < off+n; i++ {
		if a.IsValid(i) {
			c.defs = append(c.defs, 1)
		} else {
			c.defs = append(c.defs, 0)
			c.nulls++
		}
	}
}

func (c *chunk) addString(s string) {
	if c.dictOn {
		if c.lastKey == s && len(c.dictVals) > 0 {
			c.idx = append(c.idx, c.lastIdx)
			return
		}
		j, ok := c.dictIdx[s]
		if !ok {
			start := len(c.dictData)
			c.dictData = append(c.dictData, s...)
			key := unsafe.String(unsafe.SliceData(c.dictData[start:]), len(s))
			j = uint32(len(c.dictVals))
			c.dictVals = append(c.dictVals, key)
			c.dictIdx[key] = j
			c.dictSize += 4 + len(s)
		}
		c.lastKey, c.lastIdx = c.dictVals[j], j
		c.idx = append(c.idx, j)
		return
	}
	c.plain = binary.LittleEndian.AppendUint32(c.plain, uint32(len(s)))
	c.plain = append(c.plain, s...)
	c.stats.bytes(s)
}

func (c *chunk) addInt64s(a arrow.Array, vals []int64, off int, mul, div int64) {
	if !c.dictOn && mul == div && a.NullN() == 0 && nativeLittleEndian && len(vals) > 0 {
		// Plain int64s are the values' own bytes on a little-endian machine: the internal
		// seq and time columns of every row take this path.
		c.plain = append(c.plain, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(vals))), len(vals)*8)...)
		lo, hi := vals[0], vals[0]
		for _, v := range vals[1:] {
			lo, hi = min(lo, v), max(hi, v)
		}
		c.stats.int64(lo)
		c.stats.int64(hi)
		return
	}
	for i, v := range vals {
		if a.IsNull(off + i) {
			continue
		}
		if mul != div {
			v = v * mul / div
		}
		if !c.dictOn {
			c.plain = binary.LittleEndian.AppendUint64(c.plain, uint64(v))
			c.stats.int64(v)
			continue
		}
		j, ok := c.dictInts[v]
		if !ok {
			j = uint32(len(c.dictIntVals))
			c.dictIntVals = append(c.dictIntVals, v)
			c.dictInts[v] = j
			c.dictSize += 8
		}
		c.idx = append(c.idx, j)
	}
}

var nativeLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// dictLen is the number of values in the chunk's dictionary.
func (c *chunk) dictLen() int { return len(c.dictVals) + len(c.dictIntVals) }

func (c *chunk) addBool(v bool) {
	if c.boolBit == 0 {
		c.plain = append(c.plain, 0)
	}
	if v {
		c.plain[len(c.plain)-1] |= 1 << c.boolBit
	}
	c.boolBit = (c.boolBit + 1) % 8
	c.stats.bool(v)
}

// levelRoom is the room plain values leave before them for the page's definition levels,
// enough for those of a page without nulls (a length and one run).
const levelRoom = 16

// cutPage compresses the current page into pages.
func (c *chunk) cutPage() {
	if c.rows == 0 {
		return
	}
	levels := c.scratch[:0]
	if c.col.nullable {
		levels = append(levels, 0, 0, 0, 0)
		if c.nulls == 0 {
			levels = appendRun(levels, 1, c.rows, 1)
		} else {
			levels = appendHybrid(levels, c.defs, 1)
		}
		binary.LittleEndian.PutUint32(levels, uint32(len(levels)-4))
	}
	enc := int32(encPlain)
	var body []byte
	switch {
	case c.dictOn && c.dictLen() > 0:
		enc = encRLEDictionary
		width := max(bits.Len32(uint32(c.dictLen()-1)), 1)
		body = append(levels, byte(width))
		body = appendHybrid(body, c.idx, width)
		c.scratch = body
	case len(levels) <= levelRoom:
		// The levels go into the room left before the values, which saves copying a page
		// of values behind them.
		body = c.plain[levelRoom-len(levels):]
		copy(body, levels)
	default:
		body = append(levels, c.plain[levelRoom:]...)
		c.scratch = body
	}
	c.encodings |= 1 << enc
	c.pages = c.writePage(c.pages, pageData, body, c.rows, enc)
	c.numValues += int64(c.rows)
	c.nullCount += int64(c.nulls)
	c.resetPage()
}

// writePage appends a page's header and compressed body to dst and counts its raw size.
func (c *chunk) writePage(dst []byte, typ int32, body []byte, values int, enc int32) []byte {
	c.zipped = compress(body, c.zipped[:0])
	zipped := c.zipped
	h := &c.header
	h.b = h.b[:0]
	h.open()
	h.i32(1, typ)
	h.i32(2, int32(len(body)))
	h.i32(3, int32(len(zipped)))
	if typ == pageData {
		h.begin(5)
		h.i32(1, int32(values))
		h.i32(2, enc)
		h.i32(3, encRLE)
		h.i32(4, encRLE)
		h.end()
	} else {
		h.begin(7)
		h.i32(1, int32(values))
		h.i32(2, encPlain)
		h.end()
	}
	h.end()
	c.rawSize += int64(len(h.b) + len(body))
	dst = append(dst, h.b...)
	return append(dst, zipped...)
}

// finish cuts the last page and returns the chunk's bytes: the dictionary page (if any)
// and the data pages, which are valid until the next reset.
func (c *chunk) finish() (dictPage, dataPages []byte) {
	c.cutPage()
	if c.dictLen() > 0 {
		body := c.scratch[:0]
		for _, s := range c.dictVals {
			body = binary.LittleEndian.AppendUint32(body, uint32(len(s)))
			body = append(body, s...)
			c.stats.bytes(s)
		}
		for _, v := range c.dictIntVals {
			body = binary.LittleEndian.AppendUint64(body, uint64(v))
			c.stats.int64(v)
		}
		c.scratch = body
		c.dictPage = c.writePage(c.dictPage[:0], pageDictionary, body, c.dictLen(), 0)
	} else {
		c.dictPage = c.dictPage[:0]
	}
	return c.dictPage, c.pages
}

// bounds are a column chunk's statistics. A string bound is kept to maxStatBytes+1 bytes:
// the prefix of the least (greatest) value is the least (greatest) of the values' prefixes,
// and that many bytes are all truncation needs to know.
type bounds struct {
	has     bool
	minI    int64
	maxI    int64
	minF    float64
	maxF    float64
	minB    []byte
	maxB    []byte
	minBool bool
	maxBool bool
}

func (s *bounds) int64(v int64) {
	if !s.has {
		s.has, s.minI, s.maxI = true, v, v
		return
	}
	s.minI, s.maxI = min(s.minI, v), max(s.maxI, v)
}

// double leaves NaN out, as the format asks: it has no place in an order.
func (s *bounds) double(v float64) {
	if math.IsNaN(v) {
		return
	}
	if !s.has {
		s.has, s.minF, s.maxF = true, v, v
		return
	}
	s.minF, s.maxF = math.Min(s.minF, v), math.Max(s.maxF, v)
}

func (s *bounds) bool(v bool) {
	if !s.has {
		s.has, s.minBool, s.maxBool = true, v, v
		return
	}
	s.minBool, s.maxBool = s.minBool && v, s.maxBool || v
}

// bytes keeps copies: values are views of a record the writer does not keep.
func (s *bounds) bytes(v string) {
	v = v[:min(len(v), maxStatBytes+1)]
	b := unsafe.Slice(unsafe.StringData(v), len(v))
	if !s.has {
		s.has = true
		s.minB, s.maxB = append(s.minB[:0], v...), append(s.maxB[:0], v...)
		return
	}
	if bytes.Compare(b, s.minB) < 0 {
		s.minB = append(s.minB[:0], v...)
	} else if bytes.Compare(b, s.maxB) > 0 {
		s.maxB = append(s.maxB[:0], v...)
	}
}

// stat is one chunk's bounds as the footer holds them.
type stat struct {
	has              bool
	lo, hi           []byte
	loExact, hiExact bool // the bound is a value of the chunk, not a truncation of one
}

// encoded returns the plain encodings of the bounds (in dst's room). A string's are
// truncated to maxStatBytes; when the greatest value's prefix cannot be incremented there
// are none (a lower bound alone is a case some readers get wrong, for a case that a
// prefix of 4 KiB of U+10FFFF needs).
func (s *bounds) encoded(p physical, dst []byte) stat {
	if !s.has {
		return stat{}
	}
	exact := stat{has: true, loExact: true, hiExact: true}
	switch p {
	case physInt64:
		dst = binary.LittleEndian.AppendUint64(dst, uint64(s.minI))
		dst = binary.LittleEndian.AppendUint64(dst, uint64(s.maxI))
		exact.lo, exact.hi = dst[:8], dst[8:16]
		return exact
	case physDouble:
		// -0 and +0 compare equal, so the format asks for -0 as a minimum and +0 as a maximum.
		lo, hi := s.minF, s.maxF
		if lo == 0 {
			lo = math.Copysign(0, -1)
		}
		if hi == 0 {
			hi = 0
		}
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(lo))
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(hi))
		exact.lo, exact.hi = dst[:8], dst[8:16]
		return exact
	case physBoolean:
		b2 := func(v bool) byte {
			if v {
				return 1
			}
			return 0
		}
		dst = append(dst, b2(s.minBool), b2(s.maxBool))
		exact.lo, exact.hi = dst[:1], dst[1:2]
		return exact
	}
	lo, loExact := truncate.Lower(unsafe.String(unsafe.SliceData(s.minB), len(s.minB)), maxStatBytes, truncate.Bytes)
	hi, hiExact, ok := truncate.Upper(unsafe.String(unsafe.SliceData(s.maxB), len(s.maxB)), maxStatBytes, truncate.Bytes)
	if !ok {
		return stat{}
	}
	// Copies: the chunk's bounds are reset for its next row group.
	dst = append(append(dst, lo...), hi...)
	return stat{has: true, lo: dst[:len(lo)], hi: dst[len(lo):], loExact: loExact, hiExact: hiExact}
}
