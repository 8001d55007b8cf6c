package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/control"
	"github.com/hyp-project/hyp/internal/node"
)

func cacheCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "cache", Short: "Inspect and maintain the cache"}
	cmd.AddCommand(cacheStatusCmd(g), cacheCompactCmd(g), cachePruneCmd(g), cacheRepairCmd(g))
	return cmd
}

func cacheStatusCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Per dataset and partition: rows, files, bytes, seq range, ingest times",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := g.resolve()
			if err != nil {
				return err
			}
			r, err := openReader(cmd.Context(), dir)
			if err != nil {
				return err
			}
			lost, err := r.Losses()
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(os.Stdout, cacheOut{Datasets: datasetsOut(r.Status()), Losses: nonNil(lost)})
			}
			printCacheStatus(os.Stdout, r.Status())
			printLosses(os.Stdout, lost)
			return nil
		},
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}

func cacheCompactCmd(g *globals) *cobra.Command {
	var req node.CompactRequest
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "compact",
		Short: "Compact partitions now",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if req.Dataset != "" && !cache.ValidDataset(req.Dataset) {
				return usagef("bad --dataset %q", req.Dataset)
			}
			req.Force = true
			res, err := nodeCall(cmd, g, func(ctx context.Context, api control.API) ([]cache.CompactResult, error) {
				return api.Compact(ctx, req)
			})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(os.Stdout, newCompactOut(res))
			}
			for _, r := range res {
				if r.Skipped != "" {
					fmt.Printf("%s %s: skipped (%s)\n", r.Dataset, r.Partition, r.Skipped)
					continue
				}
				fmt.Printf("%s %s: %d files -> %d (%d rows, %s -> %s)\n", r.Dataset, r.Partition, r.FilesBefore, r.FilesAfter, r.Rows, r.From, r.To)
			}
			if len(res) == 0 {
				fmt.Println("no matching partitions")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&req.Dataset, "dataset", "", "only this dataset")
	cmd.Flags().StringVar(&req.Partition, "partition", "", "only this partition (source=<value>)")
	jsonFlag(cmd, &asJSON)
	return cmd
}

func cachePruneCmd(g *globals) *cobra.Command {
	var dryRun, asJSON bool
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Apply retention now; says what it deletes and what it holds for sinks",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := nodeCall(cmd, g, func(ctx context.Context, api control.API) ([]cache.PruneResult, error) {
				return api.Prune(ctx, dryRun)
			})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(os.Stdout, newPruneOut(dryRun, res))
			}
			verb := "deleted"
			if dryRun {
				verb = "would delete"
			}
			for _, r := range res {
				fmt.Printf("%s %s: %s %d rows (seq <= %d)", r.Dataset, r.Partition, verb, r.DeletedRows, r.ThroughSeq)
				if r.HeldRows > 0 {
					fmt.Printf(", held %d expired rows for %s", r.HeldRows, strings.Join(r.HeldFor, ", "))
				}
				for _, l := range r.Losses {
					fmt.Printf(", max_age forces out seq %d..%d (%d rows) that %s has not exported", l.First, l.Last, l.Rows, l.Consumer)
				}
				fmt.Println()
			}
			if len(res) == 0 {
				fmt.Println("nothing to prune")
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "report only; change nothing")
	jsonFlag(cmd, &asJSON)
	return cmd
}

func cacheRepairCmd(g *globals) *cobra.Command {
	var dryRun, asJSON bool
	cmd := &cobra.Command{
		Use:   "repair",
		Short: "Set aside (keep) unreadable cache files and record their seq ranges as losses, so reads work again",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := nodeCall(cmd, g, func(ctx context.Context, api control.API) ([]cache.Repaired, error) {
				return api.Repair(ctx, dryRun)
			})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(os.Stdout, repairOut{DryRun: dryRun, Files: nonNil(res)})
			}
			verb := "set aside"
			if dryRun {
				verb = "would set aside"
			}
			for _, r := range res {
				fmt.Printf("%s %s: %s %s (seq %d..%d, %d rows lost): %s\n", r.Dataset, r.Partition, verb, r.File, r.FromSeq, r.ToSeq, r.Rows, r.Reason)
			}
			if len(res) == 0 {
				fmt.Println("every cache data file reads whole")
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "report only; change nothing")
	jsonFlag(cmd, &asJSON)
	return cmd
}

func printCacheStatus(w io.Writer, st []cache.PartitionStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DATASET\tPARTITION\tROWS\tFILES\tBYTES\tSEQ RANGE\tOLDEST\tNEWEST")
	var unreadable []cache.PartitionStatus
	for _, p := range st {
		if p.Err != nil {
			fmt.Fprintf(tw, "%s\t%s\tUNREADABLE\t-\t-\t-\t-\t-\n", p.Dataset, p.Partition)
			unreadable = append(unreadable, p)
			continue
		}
		oldest, newest := "-", "-"
		if p.Rows > 0 {
			oldest, newest = p.OldestIngestedAt.Format(time.RFC3339), p.NewestIngestedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d..%d\t%s\t%s\n", p.Dataset, p.Partition, p.Rows, p.Files, p.Bytes, p.MinSeq, p.MaxSeq, oldest, newest)
	}
	tw.Flush()
	for _, p := range unreadable {
		fmt.Fprintf(w, "\n%s/%s cannot be read: %v\n", p.Dataset, p.Partition, p.Err)
	}
}

func printLosses(w io.Writer, lost []cache.Lost) {
	if len(lost) == 0 {
		return
	}
	fmt.Fprintf(w, "\nLOST ROWS (%d ranges; the bytes are kept)\n", len(lost))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DATASET\tPARTITION\tSEQ RANGE\tROWS\tDETECTED\tREASON\tKEPT AT")
	for _, x := range lost {
		fmt.Fprintf(tw, "%s\t%s\t%d..%d\t%d\t%s\t%s\t%s\n", x.Dataset, x.Partition, x.FromSeq, x.ToSeq, x.Rows, x.DetectedAt.Format(time.RFC3339), x.Reason, x.KeptAt)
	}
	tw.Flush()
}
