// Package columns owns the names of hyp's own columns (SPEC 4) and the rules for the field
// names a client may send: InternalPrefix and the internal columns every partition table and
// export carries (SeqColumn, IngestedAtColumn, OverflowColumn), which names are hyp's
// (Internal, CheckReserved), and which may be a column at all (CheckFieldName). Every
// package that writes, reads or judges a column name takes it from here, so a name has one
// spelling and one rule.
//
// It is a leaf: it imports nothing of hyp's, never stores or reads a row, and never decides
// a column's type, its stored (escaped) name or how many columns a dataset may have: those
// are the cache's.
package columns

import (
	"encoding/binary"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// InternalPrefix marks hyp's internal columns; user fields may not use it, so a row can
// never forge its own seq or ingest time.
const InternalPrefix = "_hyp_"

// Internal column names (SPEC 4), in every partition table (field ids 1 and 2 there).
const (
	SeqColumn        = "_hyp_ingest_seq"
	IngestedAtColumn = "_hyp_ingested_at"
)

// OverflowColumn holds, as one JSON object per row, the fields of a dataset beyond the
// cache's column cap (cache.MaxColumns, SPEC 4). Queries and exports show it like a user
// column.
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
