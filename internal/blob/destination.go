package blob

import (
	"context"
	"errors"
	"fmt"
	"os"
)

// ErrConflict means an object of a different export unit already sits at the key: two
// writers (two daemons sharing a bucket prefix, say) claim the same name, and overwriting
// either would lose rows.
var ErrConflict = errors.New("a different export unit already exists at this key")

// Object describes one export unit's file.
type Object struct {
	// Key is relative to the destination's root; build it with Key.
	Key string
	// UnitID identifies the unit (the caller derives it from the unit's bounds); a
	// destination records it where it can, to tell a retry of this unit from another unit.
	UnitID            string
	Rows              int64
	FirstSeq, LastSeq int64
}

// Destination makes complete export files durable under their keys.
//
// Put is idempotent per unit: if the key already holds this unit, Put returns nil; if it
// holds a different unit (as far as the destination can tell), Put returns an error
// wrapping ErrConflict. Any other error leaves the unit to be retried whole later.
//
// Put never removes localPath except by renaming it into place; the caller removes it if
// it still exists after Put returns, whatever Put returned.
type Destination interface {
	Put(ctx context.Context, obj Object, localPath string) error
	// TempDir is where the caller writes a file before Put (see CreateTemp); it may not
	// exist yet.
	TempDir() string
	// String names the destination for logs and status, e.g. "s3://bucket/prefix".
	String() string
}

// CreateTemp creates an empty file for an export unit in d's TempDir, creating the
// directory if needed. Its name ends in ".tmp" so no glob for finished files matches it.
func CreateTemp(d Destination) (*os.File, error) {
	dir := d.TempDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create temp dir for %s: %w", d, err)
	}
	f, err := os.CreateTemp(dir, "unit-*.tmp")
	if err != nil {
		return nil, fmt.Errorf("create temp file for %s: %w", d, err)
	}
	return f, nil
}
