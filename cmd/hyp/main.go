// Command hyp is the CLI and daemon. This package is meant to be flags and output only, with
// behaviour in internal/: one file a verb (daemon, server, ingest, status, cache, query, sink,
// rewind, config), the --json shapes in output.go, the shared preamble in common.go.
// `hyp ingest`'s chunking is internal/feed's, `hyp status`'s sink summary internal/status's;
// query.go still opens an iceberg sink's tables for `query sql --sink` itself (issue 27).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/hyp-project/hyp/internal/home"
	"github.com/hyp-project/hyp/internal/lake"
)

// usageError makes the process exit 2 (SPEC 7).
type usageError struct{ error }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

type globals struct {
	home string
	json bool
}

func main() {
	home.Private()
	// Before anything can load an iceberg table (lake.InstallDurableIO).
	lake.InstallDurableIO()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	g := &globals{}
	root := &cobra.Command{
		Use:           "hyp",
		Short:         "Capture telemetry rows into a durable local cache and export them exactly once",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.home, "home", "", "hyp home directory (default $HYP_HOME or ~/.hyp)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(daemonCmd(g), serverCmd(g), ingestCmd(g), statusCmd(g), cacheCmd(g), queryCmd(g), sinkCmd(g), configCmd(g))
	err := root.ExecuteContext(ctx)
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "hyp:", err)
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		os.Exit(2)
	}
	os.Exit(1)
}

// isCobraUsage recognises cobra's own argument and command errors, which it returns as
// plain errors.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "accepts ", "requires at least", "requires at most", "unknown flag", "unknown shorthand flag", "invalid argument", "flag needs an argument", "required flag"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// args wraps a cobra positional-args check so its failure exits 2.
func args(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if err := check(cmd, a); err != nil {
			return usageError{err}
		}
		return nil
	}
}
