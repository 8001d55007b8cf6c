package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/spf13/cobra"

	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/control"
	"github.com/hyp-project/hyp/internal/sink"
)

func sinkRewindCmd(g *globals) *cobra.Command {
	var (
		req                sink.RewindRequest
		toSeq              int64
		toTime, byDuration string
		asJSON             bool
	)
	cmd := &cobra.Command{
		Use:   "rewind INSTANCE (--to-seq N | --to-time T | --by-duration D | --to-earliest | --to-latest)",
		Short: "Move a sink's watermarks so rows above the new position are exported (again)",
		Long: `Move, for every matching partition, the sink's watermark so that rows with seq above the
new value are exported (again). The running daemon applies it between export units; an
export in flight never overwrites it. --dry-run reports each change without making it.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			req.Instance = a[0]
			f := cmd.Flags()
			if f.Changed("to-seq") {
				req.Target.Seq = &toSeq
			}
			if f.Changed("to-time") {
				t, err := time.Parse(time.RFC3339Nano, toTime)
				if err != nil {
					return usagef("--to-time %q is not an RFC 3339 time (e.g. 2026-08-12T00:50:47Z)", toTime)
				}
				req.Target.Time = &t
			}
			if f.Changed("by-duration") {
				if req.Target.Time != nil {
					return usagef("give only one of --to-seq, --to-time, --by-duration, --to-earliest, --to-latest")
				}
				d, err := config.ParseDuration(byDuration)
				if err != nil || d <= 0 {
					return usagef("--by-duration %q must be a positive duration such as 90m, 6h or 2d", byDuration)
				}
				t := time.Now().Add(-d).UTC()
				req.Target.Time = &t
			}
			req.By = requester()
			res, err := nodeCall(cmd, g, func(ctx context.Context, api control.API) (sink.RewindResult, error) {
				return api.Rewind(ctx, req)
			})
			if errors.Is(err, sink.ErrUnknownSink) || errors.Is(err, sink.ErrBadRewind) {
				return usageError{err}
			}
			if err != nil && !errors.Is(err, sink.ErrRewindGap) {
				return err
			}
			if asJSON {
				if perr := printJSON(os.Stdout, res); perr != nil {
					return perr
				}
			} else {
				printRewind(res, err != nil)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Dataset, "dataset", "", "only this dataset")
	f.StringVar(&req.Partition, "partition", "", "only this partition (source=<value>, or just the value)")
	f.Int64Var(&toSeq, "to-seq", 0, "export rows with seq above N")
	f.StringVar(&toTime, "to-time", "", "export rows ingested at or after T (RFC 3339): the watermark becomes the largest seq ingested before T")
	f.StringVar(&byDuration, "by-duration", "", "same as --to-time now-D (e.g. 6h, 2d)")
	f.BoolVar(&req.Target.Earliest, "to-earliest", false, "re-export everything still cached")
	f.BoolVar(&req.Target.Latest, "to-latest", false, "skip to the head: nothing cached now is exported")
	f.BoolVar(&req.DryRun, "dry-run", false, "report the changes and rows to export; change nothing")
	f.BoolVar(&req.AllowGap, "allow-gap", false, "move even when rows it would re-export were removed by retention")
	jsonFlag(cmd, &asJSON)
	return cmd
}

func printRewind(res sink.RewindResult, refused bool) {
	verb := "moved"
	switch {
	case refused:
		verb = "refused"
	case res.DryRun:
		verb = "would move"
	}
	if len(res.Changes) == 0 {
		fmt.Printf("%s: no partitions to move\n", res.Instance)
	}
	for _, c := range res.Changes {
		fmt.Printf("%s %s %s: %s %d -> %d", res.Instance, c.Dataset, c.Partition, verb, c.FromSeq, c.ToSeq)
		switch {
		case c.RowsToExport > 0 || c.ToSeq < c.FromSeq:
			fmt.Printf(", %d rows to export", c.RowsToExport)
			if c.RowsKept != nil {
				fmt.Printf(" (%d kept by its transform)", *c.RowsKept)
			}
		case c.RowsToSkip > 0:
			fmt.Printf(", %d rows skipped", c.RowsToSkip)
		}
		if c.Missing != nil {
			fmt.Printf(", seq %d..%d no longer cached", c.Missing.First, c.Missing.Last)
		}
		if c.Withheld {
			fmt.Print(" (withhold_sources still matches: those rows will be skipped again)")
		}
		fmt.Println()
	}
}

// requester names who asked for a change, for the daemon's log and the watermark file.
func requester() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s@%s (pid %d, hyp sink rewind)", name, host, os.Getpid())
}
