package main

import (
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/control"
	"github.com/hyp-project/hyp/internal/home"
	"github.com/hyp-project/hyp/internal/sink"
	"github.com/hyp-project/hyp/internal/status"
)

func statusCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Daemon, datasets and sinks at a glance",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, cfg, err := g.load("")
			if err != nil {
				return err
			}
			cl, derr := control.Dial(cmd.Context(), home.Socket(dir))
			running := derr == nil
			cacheErr := ""
			if running {
				cacheErr = cl.CacheError()
			}
			// A home with no cache yet is reported as it is, without creating it.
			var sinks []sink.InstanceStatus
			if _, err := os.Stat(home.Cache(dir)); err != nil {
				for _, name := range sinkNames(cfg) {
					sinks = append(sinks, sink.InstanceStatus{Instance: name, Type: cfg.Sinks[name].Type})
				}
			} else if err := withAPI(cmd.Context(), dir, func(api control.API) error {
				sinks, err = api.SinkStatus(cmd.Context(), "")
				return err
			}); err != nil {
				return err
			}
			r, err := cache.OpenReader(cmd.Context(), home.Cache(dir))
			if err != nil {
				return err
			}
			st := r.Status()
			lost, err := r.Losses()
			if err != nil {
				return err
			}
			summary := status.Sinks(sinks)
			if asJSON {
				return printJSON(os.Stdout, statusOut{
					Daemon:   daemonOut{CacheError: cacheErr, Listen: cfg.Ingest.Listen, Running: running},
					Datasets: datasetsOut(st),
					Home:     dir,
					Losses:   nonNil(lost),
					Sinks:    summary,
				})
			}
			state := "not running"
			if running {
				state = "running (ingest on " + cfg.Ingest.Listen + ")"
			}
			if cacheErr != "" {
				state += "; NOT TAKING ROWS: " + cacheErr
			}
			fmt.Printf("home:    %s\ndaemon:  %s\n\n", dir, state)
			printCacheStatus(os.Stdout, st)
			printLosses(os.Stdout, lost)
			fmt.Println()
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SINK\tTYPE\tPARTITIONS\tLAG ROWS\tOLDEST UNEXPORTED\tLAST EXPORT\tGAPS\tERRORS")
			for _, s := range summary {
				age, last := "-", "-"
				if s.LagRows > 0 {
					age = (time.Duration(s.OldestUnexportedAgeSeconds) * time.Second).String()
				}
				if s.LastExportAt != nil {
					last = s.LastExportAt.Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%d\t%d\n", s.Instance, s.Type, s.Partitions, s.LagRows, age, last, s.Gaps, len(s.Errors))
			}
			return tw.Flush()
		},
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}
