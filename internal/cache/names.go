package cache

import (
	"strings"

	"github.com/hyp-project/hyp/internal/columns"
)

// A user field keeps its own name (its logical name) everywhere a reader sees it, but the
// name a partition table stores (its physical name, which its Parquet files store too) is
// an escaped form of it. iceberg-go rewrites any name that is not a valid
// Avro name when it writes Parquet (`service.name` becomes `service_x2Ename`) and fails the
// whole write when two names rewrite to the same one (`a.b` beside a literal `a_x2Eb`), so
// storing raw field names would let one row wedge every flush. The escape is injective,
// yields only [a-z0-9_] (so it is also unique where readers ignore case, as DuckDB does),
// and is already a valid Avro name, so iceberg-go leaves it alone:
//
//   - a-z and 0-9 stay, except a leading digit;
//   - '_' becomes "__";
//   - every other byte b becomes '_' and two lowercase hex digits.
//
// Internal columns (columns.InternalPrefix) are stored as they are: their names are valid
// Avro names and no escaped user name can start with "_hyp_" ('h' is not a hex digit).
//
// Tables written before the escape (no propColumnNames) store raw names; they are read as
// they are.
const (
	propColumnNames = "hyp.column-names"
	columnNamesEsc  = "escaped-v1"
	hexDigits       = "0123456789abcdef"
)

// MaxColumns bounds a dataset's columns (user columns, conflict siblings and
// columns.OverflowColumn; internal columns are outside it, see dataset.resolve), so one
// client sending a new field per row cannot make every batch and file ever wider.
const MaxColumns = 2000

// physicalName is the stored name of a logical column name.
func physicalName(name string) string {
	if strings.HasPrefix(name, columns.InternalPrefix) {
		return name
	}
	var b strings.Builder
	b.Grow(len(name) + 8)
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9' && i > 0:
			b.WriteByte(c)
		case c == '_':
			b.WriteString("__")
		default:
			b.WriteByte('_')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		}
	}
	return b.String()
}

// logicalName inverts physicalName. A name that is not a valid escape (a table written by
// another tool) is returned as it is.
func logicalName(phys string) string {
	if strings.HasPrefix(phys, columns.InternalPrefix) || strings.IndexByte(phys, '_') < 0 {
		return phys
	}
	out := make([]byte, 0, len(phys))
	for i := 0; i < len(phys); i++ {
		c := phys[i]
		if c != '_' {
			out = append(out, c)
			continue
		}
		switch {
		case i+1 < len(phys) && phys[i+1] == '_':
			out = append(out, '_')
			i++
		case i+2 < len(phys) && isLowerHex(phys[i+1]) && isLowerHex(phys[i+2]):
			out = append(out, unhexByte(phys[i+1])<<4|unhexByte(phys[i+2]))
			i += 2
		default:
			return phys
		}
	}
	return string(out)
}

func isLowerHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

func unhexByte(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}
