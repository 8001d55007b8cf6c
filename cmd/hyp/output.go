package main

import (
	"time"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/query"
	"github.com/hyp-project/hyp/internal/status"
)

// The --json shapes the commands build, each a SPEC 7 contract that scripts parse, pinned
// byte for byte by testdata/golden. The ones that were maps once have their fields in the
// order of their keys, since encoding/json wrote a map's keys sorted and the bytes must not
// change; the ones that were structs keep their order. A list is never null: a script may
// range over it without a check. sink status/run/maintain/rewind, config validate/show and
// server status print their packages' own types (in the sinksOut envelope for the first
// three).

// ingestOut is `hyp ingest --json`.
type ingestOut struct {
	Accepted int   `json:"accepted"`
	FirstSeq int64 `json:"first_seq"`
	LastSeq  int64 `json:"last_seq"`
}

// statusOut is `hyp status --json`.
type statusOut struct {
	Daemon   daemonOut     `json:"daemon"`
	Datasets []datasetOut  `json:"datasets"`
	Home     string        `json:"home"`
	Losses   []cache.Lost  `json:"losses"`
	Sinks    []status.Sink `json:"sinks"` // each sink at a glance, a shape of its package
}

type daemonOut struct {
	CacheError string `json:"cache_error"` // why the running daemon takes no rows, if so
	Listen     string `json:"listen"`
	Running    bool   `json:"running"`
}

// cacheOut is `hyp cache status --json`.
type cacheOut struct {
	Datasets []datasetOut `json:"datasets"`
	Losses   []cache.Lost `json:"losses"`
}

type datasetOut struct {
	Dataset    string         `json:"dataset"`
	Partitions []partitionOut `json:"partitions"`
}

type partitionOut struct {
	Partition        string     `json:"partition"`
	Rows             int64      `json:"rows"`
	Files            int        `json:"files"`
	Bytes            int64      `json:"bytes"`
	MinSeq           int64      `json:"min_seq"`
	MaxSeq           int64      `json:"max_seq"`
	HeadSeq          int64      `json:"head_seq"`
	PrunedThrough    int64      `json:"pruned_through_seq"`
	OldestIngestedAt *time.Time `json:"oldest_ingested_at"` // null while the partition is empty
	NewestIngestedAt *time.Time `json:"newest_ingested_at"`
	Error            string     `json:"error,omitempty"` // its table cannot be read
}

// datasetsOut groups the cache's partitions (sorted by dataset) by dataset.
func datasetsOut(st []cache.PartitionStatus) []datasetOut {
	out := []datasetOut{}
	for _, p := range st {
		if len(out) == 0 || out[len(out)-1].Dataset != p.Dataset {
			out = append(out, datasetOut{Dataset: p.Dataset, Partitions: []partitionOut{}})
		}
		pj := partitionOut{Partition: p.Partition, Rows: p.Rows, Files: p.Files, Bytes: p.Bytes, MinSeq: p.MinSeq, MaxSeq: p.MaxSeq, HeadSeq: p.HeadSeq, PrunedThrough: p.PrunedThrough}
		if p.Err != nil {
			pj.Error = p.Err.Error()
		}
		if p.Rows > 0 {
			o, n := p.OldestIngestedAt, p.NewestIngestedAt
			pj.OldestIngestedAt, pj.NewestIngestedAt = &o, &n
		}
		out[len(out)-1].Partitions = append(out[len(out)-1].Partitions, pj)
	}
	return out
}

// compactOut is `hyp cache compact --json`.
type compactOut struct {
	Partitions []compactPartitionOut `json:"partitions"`
}

type compactPartitionOut struct {
	BoundsFixed    int    `json:"bounds_fixed"`
	Dataset        string `json:"dataset"`
	FilesAfter     int    `json:"files_after"`
	FilesBefore    int    `json:"files_before"`
	FromGeneration string `json:"from_generation"`
	Partition      string `json:"partition"`
	Rows           int64  `json:"rows"`
	Skipped        string `json:"skipped"` // why nothing was done, "" when it was
	ToGeneration   string `json:"to_generation"`
}

func newCompactOut(res []cache.CompactResult) compactOut {
	out := compactOut{Partitions: []compactPartitionOut{}}
	for _, r := range res {
		out.Partitions = append(out.Partitions, compactPartitionOut{BoundsFixed: r.BoundsFixed, Dataset: r.Dataset, FilesAfter: r.FilesAfter, FilesBefore: r.FilesBefore, FromGeneration: r.From, Partition: r.Partition, Rows: r.Rows, Skipped: r.Skipped, ToGeneration: r.To})
	}
	return out
}

// pruneOut is `hyp cache prune --json`.
type pruneOut struct {
	DryRun     bool                `json:"dry_run"`
	Partitions []prunePartitionOut `json:"partitions"`
}

type prunePartitionOut struct {
	Dataset      string          `json:"dataset"`
	DeletedRows  int64           `json:"deleted_rows"`
	ForcedLosses []forcedLossOut `json:"forced_losses"`
	HeldFor      []string        `json:"held_for"`
	HeldRows     int64           `json:"held_rows"`
	Partition    string          `json:"partition"`
	ThroughSeq   int64           `json:"through_seq"`
	// UnexportedDeletedRows are deleted rows some sink had not exported (max_age).
	UnexportedDeletedRows int64 `json:"unexported_deleted_rows"`
}

// forcedLossOut is the seq range of one sink's rows that max_age deleted unexported.
type forcedLossOut struct {
	FromSeq int64  `json:"from_seq"`
	Rows    int64  `json:"rows"`
	Sink    string `json:"sink"`
	ToSeq   int64  `json:"to_seq"`
}

func newPruneOut(dryRun bool, res []cache.PruneResult) pruneOut {
	out := pruneOut{DryRun: dryRun, Partitions: []prunePartitionOut{}}
	for _, r := range res {
		losses := []forcedLossOut{}
		for _, l := range r.Losses {
			losses = append(losses, forcedLossOut{FromSeq: l.First, Rows: l.Rows, Sink: l.Consumer, ToSeq: l.Last})
		}
		out.Partitions = append(out.Partitions, prunePartitionOut{Dataset: r.Dataset, DeletedRows: r.DeletedRows, ForcedLosses: losses, HeldFor: nonNil(r.HeldFor), HeldRows: r.HeldRows, Partition: r.Partition, ThroughSeq: r.ThroughSeq, UnexportedDeletedRows: r.ForcedRows})
	}
	return out
}

// repairOut is `hyp cache repair --json`.
type repairOut struct {
	DryRun bool             `json:"dry_run"`
	Files  []cache.Repaired `json:"files"`
}

// schemaOut is `hyp query schema --json`.
type schemaOut struct {
	Columns []columnOut `json:"columns"`
	Dataset string      `json:"dataset"`
}

type columnOut struct {
	Internal  bool   `json:"internal"` // one of hyp's _hyp_ columns, seen with --internal
	Name      string `json:"name"`
	QueryName string `json:"query_name"` // what SQL calls it, when the name needs quoting away
	Type      string `json:"type"`
}

func newSchemaOut(dataset string, cols []query.Column, qnames []string) schemaOut {
	out := schemaOut{Columns: []columnOut{}, Dataset: dataset}
	for i, c := range cols {
		out.Columns = append(out.Columns, columnOut{Internal: columns.Internal(c.Name), Name: c.Name, QueryName: qnames[i], Type: c.Type})
	}
	return out
}

// sinksOut is `hyp sink list|status|run|maintain --json`: one entry a sink instance, for
// status, run and maintain in the shape the sink package gives it.
type sinksOut[T any] struct {
	Sinks []T `json:"sinks"`
}

// sinkListOut is one configured sink. Format and Destination are a blob sink's, URL every
// other type's (null for an iceberg sink): a nil pointer leaves the key out.
type sinkListOut struct {
	Datasets        []string            `json:"datasets"`
	Destination     *config.Destination `json:"destination,omitempty"`
	Format          *string             `json:"format,omitempty"`
	Instance        string              `json:"instance"`
	Schedule        string              `json:"schedule"`
	Transform       string              `json:"transform,omitempty"`
	Type            string              `json:"type"`
	URL             *config.URLs        `json:"url,omitempty"`
	WithholdSources []string            `json:"withhold_sources"`
}

func newSinkListOut(cfg *config.Config) sinksOut[sinkListOut] {
	out := sinksOut[sinkListOut]{Sinks: []sinkListOut{}}
	for _, name := range sinkNames(cfg) {
		s := cfg.Sinks[name]
		e := sinkListOut{Datasets: nonNil(s.Datasets), Instance: name, Schedule: s.Schedule, Transform: s.Transform, Type: s.Type, WithholdSources: nonNil(s.WithholdSources)}
		if s.Type == "blob" {
			e.Format, e.Destination = &s.Format, &s.Destination
		} else {
			u := s.URL.Redacted()
			e.URL = &u
		}
		out.Sinks = append(out.Sinks, e)
	}
	return out
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
