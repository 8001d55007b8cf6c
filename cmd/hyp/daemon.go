package main

import (
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/hyp-project/hyp/internal/daemon"
)

func daemonCmd(g *globals) *cobra.Command {
	var cfgPath string
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Run the ingest listener, flush, retention, compaction and control socket",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, cfg, err := g.loadToRun(cfgPath)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			return daemon.Run(cmd.Context(), dir, cfg, log, nil)
		},
	}
	configFlag(cmd, &cfgPath, defaultConfigUsage)
	return cmd
}
