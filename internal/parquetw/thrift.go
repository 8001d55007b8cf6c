package parquetw

import "encoding/binary"

// compact writes the Thrift compact protocol, the encoding of Parquet's page headers and
// footer. Only what those structures use is here: i32, i64, binary, bool, lists and structs,
// field ids ascending within a struct.
type compact struct {
	b     []byte
	last  int16   // id of the previous field of the open struct
	outer []int16 // last of each enclosing struct
}

// Compact type codes.
const (
	ctTrue   = 1
	ctFalse  = 2
	ctByte   = 3
	ctI16    = 4
	ctI32    = 5
	ctI64    = 6
	ctBinary = 8
	ctList   = 9
	ctStruct = 12
)

func (c *compact) field(id int16, typ byte) {
	if d := id - c.last; d > 0 && d <= 15 {
		c.b = append(c.b, byte(d)<<4|typ)
	} else {
		c.b = append(c.b, typ)
		c.b = binary.AppendVarint(c.b, int64(id))
	}
	c.last = id
}

// Thrift's i32 and i64 are zigzag varints, which is what binary.AppendVarint writes.
func (c *compact) i32(id int16, v int32) {
	c.field(id, ctI32)
	c.b = binary.AppendVarint(c.b, int64(v))
}

func (c *compact) i64(id int16, v int64) {
	c.field(id, ctI64)
	c.b = binary.AppendVarint(c.b, v)
}

func (c *compact) binary(id int16, v []byte) {
	c.field(id, ctBinary)
	c.b = binary.AppendUvarint(c.b, uint64(len(v)))
	c.b = append(c.b, v...)
}

func (c *compact) string(id int16, v string) {
	c.field(id, ctBinary)
	c.b = binary.AppendUvarint(c.b, uint64(len(v)))
	c.b = append(c.b, v...)
}

func (c *compact) bool(id int16, v bool) {
	if v {
		c.field(id, ctTrue)
	} else {
		c.field(id, ctFalse)
	}
}

// begin opens a struct-valued field; end closes it.
func (c *compact) begin(id int16) {
	c.field(id, ctStruct)
	c.open()
}

// open starts a struct that has no field header: the message itself, or a list element.
func (c *compact) open() {
	c.outer = append(c.outer, c.last)
	c.last = 0
}

func (c *compact) end() {
	c.b = append(c.b, 0)
	c.last = c.outer[len(c.outer)-1]
	c.outer = c.outer[:len(c.outer)-1]
}

// list starts a list field of n elements of type elem; the caller writes them.
func (c *compact) list(id int16, elem byte, n int) {
	c.field(id, ctList)
	if n < 15 {
		c.b = append(c.b, byte(n)<<4|elem)
		return
	}
	c.b = append(c.b, 0xf0|elem)
	c.b = binary.AppendUvarint(c.b, uint64(n))
}

func (c *compact) listI32(id int16, vs []int32) {
	c.list(id, ctI32, len(vs))
	for _, v := range vs {
		c.b = binary.AppendVarint(c.b, int64(v))
	}
}

func (c *compact) listString(id int16, vs ...string) {
	c.list(id, ctBinary, len(vs))
	for _, v := range vs {
		c.b = binary.AppendUvarint(c.b, uint64(len(v)))
		c.b = append(c.b, v...)
	}
}
