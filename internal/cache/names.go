package cache

import (
	"encoding/binary"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
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
// Internal columns (InternalPrefix) are stored as they are: their names are valid Avro
// names and no escaped user name can start with "_hyp_" ('h' is not a hex digit).
//
// Tables written before the escape (no propColumnNames) store raw names; they are read as
// they are.
const (
	propColumnNames = "hyp.column-names"
	columnNamesEsc  = "escaped-v1"
	hexDigits       = "0123456789abcdef"
)

// OverflowColumn holds, as one JSON object per row, the fields of a dataset that already has
// MaxColumns user columns (SPEC 4). Queries and exports show it like a user column.
const OverflowColumn = "_hyp_overflow"

// Internal reports whether a column is one of hyp's own (shown by `query --internal`), as
// opposed to user fields: OverflowColumn has the internal prefix but holds user fields.
func Internal(name string) bool {
	return strings.HasPrefix(name, InternalPrefix) && name != OverflowColumn
}

// CheckReserved says why a field name a client sent is hyp's, or "" when it is not: it
// begins with InternalPrefix in any letter case (SPEC 4), so no row can forge an internal
// column, nor one that differs from it only in case, which readers that ignore case would
// take for it. OverflowColumn is one of them.
func CheckReserved(key []byte) string {
	if len(key) < len(InternalPrefix) || !strings.EqualFold(string(key[:len(InternalPrefix)]), InternalPrefix) {
		return ""
	}
	return fmt.Sprintf("field %q uses the prefix %s (in any letter case), which is reserved for hyp's own columns", key, InternalPrefix)
}

// MaxColumns bounds a dataset's columns (user columns, conflict siblings and OverflowColumn;
// internal columns are outside it, see dataset.resolve), so one client sending a new field
// per row cannot make every batch and file ever wider.
const MaxColumns = 2000

// physicalName is the stored name of a logical column name.
func physicalName(name string) string {
	if strings.HasPrefix(name, InternalPrefix) {
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
	if strings.HasPrefix(phys, InternalPrefix) || strings.IndexByte(phys, '_') < 0 {
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

// CheckFieldName says what is wrong with a field name a client sent, or "" when it may be a
// column: not empty, valid UTF-8 (the scanner already guarantees it) and without control
// characters, which no reader could show and some (NUL) break query engines.
func CheckFieldName(name []byte) string {
	if printableASCII(name) {
		return "" // every field of every row comes here; nearly all are this
	}
	if len(name) == 0 {
		return "empty field name"
	}
	for i := 0; i < len(name); {
		r, n := utf8.DecodeRune(name[i:])
		if unicode.IsControl(r) {
			return fmt.Sprintf("field name has control character U+%04X at byte %d", r, i)
		}
		i += n
	}
	return ""
}

// printableASCII reports whether name is non-empty printable ASCII, which CheckFieldName
// always accepts: the common case, decided without decoding runes, a word at a time.
func printableASCII(name []byte) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	var bad uint64
	i := 0
	for ; i+8 <= len(name); i += 8 {
		// A byte below 0x20 borrows into its high bit, 0x7f carries into it, and one from
		// 0x80 up has it set. The lowest offending byte is always flagged: the bytes below
		// it are printable, so nothing borrows or carries into it.
		x := binary.LittleEndian.Uint64(name[i:])
		bad |= (x - ones*0x20) | (x + ones) | x
	}
	for _, c := range name[i:] {
		if c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return bad&highs == 0 && len(name) > 0
}
