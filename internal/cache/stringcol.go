package cache

import (
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// builder is what a batch needs of a column's builder.
type builder interface {
	Len() int
	AppendNulls(n int)
	Reserve(n int)
	NewArray() arrow.Array
	Release()
}

// stringCol builds a string column in plain Go slices that the array then wraps: a flush
// appends every string of every row, and arrow's builder checks and grows three buffers
// through its allocator on each append. The slices are the array's once NewArray returns,
// so the next chunk starts others, sized like the last: its own from a chunk before, once
// written (adopt), or new ones.
type stringCol struct {
	offsets []int32
	data    []byte
	valid   []byte // validity bitmap, nil while the column has no null
	nulls   int
}

func (s *stringCol) Len() int { return max(len(s.offsets)-1, 0) }

func (s *stringCol) Append(v []byte) { appendText(s, v) }

// appendText is Append of a string's bytes or a []byte, neither copied on the way.
func appendText[T string | []byte](s *stringCol, v T) {
	if len(s.offsets) == 0 {
		s.offsets = append(s.offsets, 0)
	}
	row := len(s.offsets) - 1
	s.data = append(s.data, v...)
	s.offsets = append(s.offsets, int32(len(s.data)))
	if s.valid != nil {
		s.growValid(row + 1)
		s.valid[row/8] |= 1 << (row % 8)
	}
}

// appendStrings appends the len(offs)-1 values data[offs[i]:offs[i+1]], none of them null,
// at once: an Arrow string column's offsets and data.
func (s *stringCol) appendStrings(offs []int32, data []byte) {
	if len(s.offsets) == 0 {
		s.offsets = append(s.offsets, 0)
	}
	rows, n := len(s.offsets)-1, len(offs)-1
	shift := int32(len(s.data)) - offs[0]
	s.data = append(s.data, data[offs[0]:offs[n]]...)
	for _, o := range offs[1:] {
		s.offsets = append(s.offsets, o+shift)
	}
	if s.valid != nil {
		s.growValid(rows + n)
		for i := rows; i < rows+n; i++ {
			s.valid[i/8] |= 1 << (i % 8)
		}
	}
}

func (s *stringCol) AppendNulls(n int) {
	if len(s.offsets) == 0 {
		s.offsets = append(s.offsets, 0)
	}
	rows := len(s.offsets) - 1
	if s.valid == nil {
		s.valid = make([]byte, 0, (rows+n)/8+1)
		s.growValid(rows)
		for i := range rows {
			s.valid[i/8] |= 1 << (i % 8)
		}
	}
	for range n {
		s.offsets = append(s.offsets, int32(len(s.data)))
	}
	s.growValid(rows + n)
	s.nulls += n
}

// growValid makes the bitmap cover rows, the new bits zero (null).
func (s *stringCol) growValid(rows int) {
	for len(s.valid)*8 < rows {
		s.valid = append(s.valid, 0)
	}
}

// Reserve and ReserveData make room for n rows or bytes, allocating an eighth more when
// they must allocate: a chunk a little larger than the last would otherwise copy all of it
// to grow, and an adopted buffer of a chunk before, sized so, serves the next ones too.
func (s *stringCol) Reserve(n int) {
	if cap(s.offsets) < n+1 {
		s.offsets = append(make([]int32, 0, n+1+n/8), s.offsets...)
	}
}

func (s *stringCol) ReserveData(n int) {
	if cap(s.data) < n {
		s.data = append(make([]byte, 0, n+n/8), s.data...)
	}
}

func (s *stringCol) DataLen() int { return len(s.data) }

// stringBufs are a string column's offsets and data, emptied, for reuse.
type stringBufs struct {
	offsets []int32
	data    []byte
}

// bufs is the buffers NewArray is about to hand the array, for adopt once the array is
// done with.
func (s *stringCol) bufs() stringBufs {
	return stringBufs{s.offsets[:0], s.data[:0]}
}

// adopt makes an empty column fill b, which nothing else may use any more.
func (s *stringCol) adopt(b stringBufs) {
	s.offsets, s.data = b.offsets[:0], b.data[:0]
}

func (s *stringCol) NewArray() arrow.Array {
	if len(s.offsets) == 0 {
		s.offsets = append(s.offsets, 0)
	}
	var valid *memory.Buffer
	if s.valid != nil {
		valid = memory.NewBufferBytes(s.valid)
	}
	offs := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s.offsets))), len(s.offsets)*4)
	d := array.NewData(arrow.BinaryTypes.String, len(s.offsets)-1,
		[]*memory.Buffer{valid, memory.NewBufferBytes(offs), memory.NewBufferBytes(s.data)}, nil, s.nulls, 0)
	defer d.Release()
	*s = stringCol{}
	return array.MakeFromData(d)
}

func (s *stringCol) Release() { *s = stringCol{} }
