package sink

import (
	"fmt"
	"path/filepath"

	"github.com/hyp-project/hyp/internal/home"
)

// sinkDir is one sink instance's directory (home.Sink, `sinks/<instance>/`) as this package
// lays it out, beside the watermark store's `watermarks/` (docs/ON-DISK.md): every name the
// sink package gives a file there is joined here.
type sinkDir string

// dir is x's directory.
func (x *instance) dir() sinkDir { return sinkDir(home.Sink(x.home, x.name)) }

// quarantine is where the units of one partition (its path segment seg) a destination
// refused as poison are kept.
func (d sinkDir) quarantine(dataset, seg string) string {
	return filepath.Join(string(d), "quarantine", dataset, seg)
}

// quarantineFile is the file of the refused unit of seqs first..last in dir.
func quarantineFile(dir string, first, last int64) string {
	return filepath.Join(dir, fmt.Sprintf("part-%020d-%020d.ndjson", first, last))
}

// tmp is where an S3 destination stages a file before it uploads it.
func (d sinkDir) tmp() string { return filepath.Join(string(d), "tmp") }
