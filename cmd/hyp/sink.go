package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/control"
	"github.com/hyp-project/hyp/internal/sink"
)

func sinkCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "sink", Short: "Configured sinks"}
	cmd.AddCommand(sinkListCmd(g), sinkStatusCmd(g), sinkRunCmd(g), sinkRewindCmd(g), sinkMaintainCmd(g), sinkPreviewCmd(g))
	return cmd
}

func sinkListCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List configured sinks",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, cfg, err := g.load("")
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(os.Stdout, newSinkListOut(cfg))
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "INSTANCE\tTYPE\tSCHEDULE\tTARGET")
			for _, name := range sinkNames(cfg) {
				s := cfg.Sinks[name]
				target := s.URL.Redacted().String()
				switch {
				case s.Type == "blob" && s.Destination.Type == "s3":
					target = s.Format + " -> " + strings.TrimSuffix("s3://"+s.Destination.Bucket+"/"+s.Destination.Prefix, "/")
				case s.Type == "blob":
					target = s.Format + " -> " + s.Destination.Path
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, s.Type, s.Schedule, target)
			}
			return tw.Flush()
		},
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}

func sinkNames(cfg *config.Config) []string {
	names := []string{}
	for n := range cfg.Sinks {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// sinksCall runs call against the daemon (or a local node) for the instance named in a, or
// every instance, mapping an unknown name to a usage error.
func sinksCall[T any](cmd *cobra.Command, g *globals, a []string, call func(context.Context, control.API, string) ([]T, error)) ([]T, error) {
	instance := ""
	if len(a) == 1 {
		instance = a[0]
	}
	res, err := nodeCall(cmd, g, func(ctx context.Context, api control.API) ([]T, error) {
		return call(ctx, api, instance)
	})
	if errors.Is(err, sink.ErrUnknownSink) || errors.Is(err, sink.ErrNotIceberg) {
		return nil, usageError{err}
	}
	return nonNil(res), err
}

func sinkStatusCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [INSTANCE]",
		Short: "Per partition: watermark, head seq, lag rows, oldest unexported age, last export, last error, gaps",
		Args:  args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			res, err := sinksCall(cmd, g, a, func(ctx context.Context, api control.API, instance string) ([]sink.InstanceStatus, error) {
				return api.SinkStatus(ctx, instance)
			})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(os.Stdout, sinksOut[sink.InstanceStatus]{res})
			}
			printSinkStatus(res)
			return nil
		},
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}

func sinkPreviewCmd(g *globals) *cobra.Command {
	var asJSON bool
	req := sink.PreviewRequest{Limit: sink.DefaultPreviewRows}
	cmd := &cobra.Command{
		Use:   "preview INSTANCE",
		Short: "The newest rows of each partition as the sink would export them (its transform), moving nothing",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if req.Limit <= 0 {
				return usagef("--limit must be greater than 0, got %d", req.Limit)
			}
			req.Instance = a[0]
			res, err := nodeCall(cmd, g, func(ctx context.Context, api control.API) (sink.PreviewResult, error) {
				return api.PreviewSink(ctx, req)
			})
			if errors.Is(err, sink.ErrUnknownSink) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(os.Stdout, res)
			}
			printPreview(res)
			return nil
		},
	}
	cmd.Flags().StringVar(&req.Dataset, "dataset", "", "only this dataset")
	cmd.Flags().IntVar(&req.Limit, "limit", sink.DefaultPreviewRows, "newest rows to read per partition")
	jsonFlag(cmd, &asJSON)
	return cmd
}

// printPreview prints each partition's shaped rows as the JSON lines a sink's NDJSON body
// would carry, under a line saying how many of the rows read its transform kept.
func printPreview(res sink.PreviewResult) {
	if res.Transform == "" {
		fmt.Printf("%s has no transform: rows are exported as cached\n", res.Instance)
	} else {
		fmt.Printf("%s transform: %s\n", res.Instance, res.Transform)
	}
	if len(res.Partitions) == 0 {
		fmt.Println("no rows cached for it yet")
	}
	for _, p := range res.Partitions {
		note := ""
		if p.Withheld {
			note = " (withheld: the sink exports none of them)"
		}
		fmt.Printf("\n# %s %s: %d of the newest %d rows kept%s\n", p.Dataset, p.Partition, p.RowsKept, p.RowsRead, note)
		for _, r := range p.Rows {
			fmt.Printf("%s\n", r)
		}
	}
}

func printSinkStatus(res []sink.InstanceStatus) {
	for i, is := range res {
		if i > 0 {
			fmt.Println()
		}
		fmt.Printf("%s (%s)\n", is.Instance, is.Type)
		if is.Error != "" {
			fmt.Printf("  cannot run: %s\n", is.Error)
		}
		if len(is.Partitions) == 0 {
			fmt.Println("  no partitions yet")
			continue
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  DATASET\tPARTITION\tWATERMARK\tHEAD\tLAG\tOLDEST UNEXPORTED\tEXPORTED\tLAST EXPORT\tNOTES")
		for _, p := range is.Partitions {
			age, last := "-", "-"
			if p.LagRows > 0 {
				age = (time.Duration(p.OldestUnexportedAgeSeconds) * time.Second).String()
			}
			if p.LastExportAt != nil {
				last = p.LastExportAt.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%d\t%s\t%d\t%s\t%s\n", p.Dataset, p.Partition, p.WatermarkSeq, p.HeadSeq, p.LagRows, age, p.ExportedRows, last, partitionNotes(p))
		}
		tw.Flush()
		for _, p := range is.Partitions {
			for _, gap := range p.Gaps {
				fmt.Printf("  gap %s %s: seq %d..%d, %d rows, %s (%s)\n", p.Dataset, p.Partition, gap.From, gap.To, gap.Rows, gap.Reason, gap.At.Format(time.RFC3339))
			}
			for _, q := range p.Quarantined {
				fmt.Printf("  quarantined %s %s: seq %d..%d, %d rows in %s: %s\n", p.Dataset, p.Partition, q.First, q.Last, q.Rows, q.File, q.Error)
			}
			if p.LastError != "" {
				fmt.Printf("  last error %s %s: %s\n", p.Dataset, p.Partition, p.LastError)
			}
		}
	}
}

func partitionNotes(p sink.PartitionStatus) string {
	var notes []string
	if p.Withheld {
		notes = append(notes, "withheld")
	}
	if p.WithheldRows > 0 {
		notes = append(notes, fmt.Sprintf("%d rows skipped by withhold", p.WithheldRows))
	}
	if p.FilteredRows > 0 {
		notes = append(notes, fmt.Sprintf("%d rows dropped by its transform", p.FilteredRows))
	}
	if len(p.Gaps) > 0 {
		notes = append(notes, fmt.Sprintf("%d gaps", len(p.Gaps)))
	}
	if len(p.Quarantined) > 0 {
		notes = append(notes, fmt.Sprintf("%d quarantined", len(p.Quarantined)))
	}
	if p.LastError != "" {
		notes = append(notes, "error")
	}
	if len(notes) == 0 {
		return "-"
	}
	return strings.Join(notes, ", ")
}

func sinkRunCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "run [INSTANCE]",
		Short: "Export now and wait; exit 1 if any partition failed",
		Args:  args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			res, err := sinksCall(cmd, g, a, func(ctx context.Context, api control.API, instance string) ([]sink.RunResult, error) {
				return api.RunSinks(ctx, instance)
			})
			if err != nil {
				return err
			}
			if asJSON {
				if err := printJSON(os.Stdout, sinksOut[sink.RunResult]{res}); err != nil {
					return err
				}
			} else {
				for _, r := range res {
					fmt.Printf("%s: %s, %d rows, %d bytes, %d units\n", r.Instance, r.Status, r.Rows, r.Bytes, r.Units)
					for _, e := range r.Errors {
						fmt.Printf("  error: %s\n", e)
					}
				}
			}
			for _, r := range res {
				if r.Status != "ok" {
					return fmt.Errorf("sink %s: %s", r.Instance, r.Status)
				}
			}
			return nil
		},
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}

func sinkMaintainCmd(g *globals) *cobra.Command {
	var req sink.MaintainRequest
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "maintain [INSTANCE]",
		Short: "Iceberg sinks: expire snapshots, compact data files, remove orphans",
		Long: `Maintain the tables of an iceberg sink (every iceberg sink without INSTANCE): expire
snapshots older than maintain.expire_older_than beyond the newest maintain.retain_last,
compact small data files (--compact, or maintain.compact in the sink's config), merge
manifests, and remove orphan files older than three days. Files an unfinished export still
needs are never removed. The running daemon does it between the sink's exports.`,
		Args: args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			res, err := sinksCall(cmd, g, a, func(ctx context.Context, api control.API, instance string) ([]sink.MaintainResult, error) {
				r := req
				r.Instance = instance
				return api.MaintainSinks(ctx, r)
			})
			if err != nil {
				return err
			}
			if asJSON {
				if err := printJSON(os.Stdout, sinksOut[sink.MaintainResult]{res}); err != nil {
					return err
				}
			} else {
				printMaintain(res)
			}
			for _, r := range res {
				if r.Error != "" {
					return fmt.Errorf("sink %s: maintain failed", r.Instance)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&req.Compact, "compact", false, "compact small data files (also when the sink's maintain.compact is off)")
	f.BoolVar(&req.DryRun, "dry-run", false, "report what would be done; change nothing")
	jsonFlag(cmd, &asJSON)
	return cmd
}

func printMaintain(res []sink.MaintainResult) {
	if len(res) == 0 {
		fmt.Println("no iceberg sinks")
	}
	for i, r := range res {
		if i > 0 {
			fmt.Println()
		}
		note := ""
		if r.DryRun {
			note = " (dry run: nothing changed)"
		}
		fmt.Printf("%s%s\n", r.Instance, note)
		if len(r.Tables) == 0 && r.Error == "" {
			fmt.Println("  no tables yet")
		}
		if len(r.Tables) > 0 {
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "  TABLE\tSNAPSHOTS BEFORE\tEXPIRED\tAFTER\tFILES BEFORE\tAFTER\tORPHANS REMOVED")
			for _, t := range r.Tables {
				fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%d\t%d\n", t.Table, t.SnapshotsBefore, t.SnapshotsExpired, t.SnapshotsAfter, t.FilesBefore, t.FilesAfter, t.OrphansRemoved)
			}
			tw.Flush()
		}
		if r.Error != "" {
			fmt.Printf("  error: %s\n", r.Error)
		}
	}
}
