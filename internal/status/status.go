// Package status owns `hyp status`'s sinks at a glance: each sink instance's partitions
// folded into one row (rows behind and exported added up, the oldest unexported age, the
// latest export, gaps, withheld and quarantined rows, every error). It reads only the
// statuses it is given: it never opens a cache, dials a daemon or changes state.
package status

import (
	"time"

	"github.com/hyp-project/hyp/internal/sink"
)

// Sink is one sink instance at a glance, as `hyp status --json` prints it (SPEC 7): the
// field order is the key order scripts have always seen.
type Sink struct {
	Instance                   string     `json:"instance"`
	Type                       string     `json:"type"`
	Partitions                 int        `json:"partitions"`
	LagRows                    int64      `json:"lag_rows"`
	ExportedRows               int64      `json:"exported_rows"`
	OldestUnexportedAgeSeconds float64    `json:"oldest_unexported_age_seconds"` // of the partition furthest behind
	LastExportAt               *time.Time `json:"last_export_at"`                // the latest of any partition; null before the first
	Gaps                       int        `json:"gaps"`
	GapRows                    int64      `json:"gap_rows"`
	WithheldRows               int64      `json:"withheld_rows"`
	Quarantined                int        `json:"quarantined"`
	// Errors are why the sink cannot run, then each partition's last error prefixed with
	// its dataset and partition; never null.
	Errors []string `json:"errors"`
}

// Sinks folds each instance's partitions into its Sink, in the order given.
func Sinks(st []sink.InstanceStatus) []Sink {
	out := []Sink{}
	for _, is := range st {
		s := Sink{Instance: is.Instance, Type: is.Type, Partitions: len(is.Partitions), Errors: []string{}}
		if is.Error != "" {
			s.Errors = append(s.Errors, is.Error)
		}
		for _, p := range is.Partitions {
			s.LagRows += p.LagRows
			s.ExportedRows += p.ExportedRows
			s.OldestUnexportedAgeSeconds = max(s.OldestUnexportedAgeSeconds, p.OldestUnexportedAgeSeconds)
			if p.LastExportAt != nil && (s.LastExportAt == nil || p.LastExportAt.After(*s.LastExportAt)) {
				s.LastExportAt = p.LastExportAt
			}
			s.Gaps += len(p.Gaps)
			for _, g := range p.Gaps {
				s.GapRows += g.Rows
			}
			s.WithheldRows += p.WithheldRows
			s.Quarantined += len(p.Quarantined)
			if p.LastError != "" {
				s.Errors = append(s.Errors, p.Dataset+" "+p.Partition+": "+p.LastError)
			}
		}
		out = append(out, s)
	}
	return out
}
