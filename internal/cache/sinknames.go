package cache

import "github.com/hyp-project/hyp/internal/columns"

// The column vocabulary internal/sink still takes from here, under its old names. It is
// package columns' own: these stay only until sink, which was being edited elsewhere when
// the names moved, imports columns; then this file goes. Nothing else may use them.
const (
	// Deprecated: use columns.SeqColumn.
	SeqColumn = columns.SeqColumn
	// Deprecated: use columns.IngestedAtColumn.
	IngestedAtColumn = columns.IngestedAtColumn
	// Deprecated: use columns.OverflowColumn.
	OverflowColumn = columns.OverflowColumn
)

// Internal is columns.Internal.
//
// Deprecated: use columns.Internal.
func Internal(name string) bool { return columns.Internal(name) }
