package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/control"
	"github.com/hyp-project/hyp/internal/home"
	"github.com/hyp-project/hyp/internal/node"
	"github.com/hyp-project/hyp/internal/sink"
)

func (g *globals) resolve() (string, error) { return home.Resolve(g.home) }

// load resolves the home and loads the config at path (the home's hyp.yaml when empty); a
// bad config is a usage error.
func (g *globals) load(path string) (dir string, cfg *config.Config, err error) {
	if dir, err = g.resolve(); err != nil {
		return "", nil, err
	}
	cfg, err = loadConfig(dir, path)
	return dir, cfg, err
}

// loadToRun is load for a process that runs the sinks (the daemon, `hyp server`): it also
// has their transforms judged (sink.Checks), which opens a DuckDB for each, so it refuses to
// start with one a unit could never run. Commands that only read or ask the running process
// skip that start-up cost; `hyp config validate` makes the same checks.
func (g *globals) loadToRun(path string) (dir string, cfg *config.Config, err error) {
	if dir, err = g.resolve(); err != nil {
		return "", nil, err
	}
	if cfg, err = config.Load(dir, path, sink.Checks()); err != nil {
		return "", nil, usageError{err}
	}
	return dir, cfg, nil
}

func loadConfig(dir, path string) (*config.Config, error) {
	cfg, err := config.Load(dir, path, config.Checks{})
	if err != nil {
		return nil, usageError{err}
	}
	return cfg, nil
}

// withAPI runs fn against the running daemon, or, with none, against a Node this process
// opens under the cache's writer lock. Either way there is exactly one writer.
func withAPI(ctx context.Context, dir string, fn func(control.API) error) error {
	c, err := control.Dial(ctx, home.Socket(dir))
	if err == nil {
		return fn(c)
	}
	cfg, err := loadConfig(dir, "")
	if err != nil {
		return err
	}
	n, err := node.Open(ctx, dir, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if errors.Is(err, cache.ErrLocked) {
		return fmt.Errorf("%w; its control socket %s does not answer", err, home.Socket(dir))
	}
	if err != nil {
		return err
	}
	ferr := fn(control.Local{N: n})
	if err := n.Close(ctx); ferr == nil {
		ferr = err
	}
	return ferr
}

// nodeCall resolves the home and returns what call asks of its single writer (withAPI):
// the preamble of every command that changes or reads the node's state.
func nodeCall[T any](cmd *cobra.Command, g *globals, call func(context.Context, control.API) (T, error)) (T, error) {
	var res T
	dir, err := g.resolve()
	if err != nil {
		return res, err
	}
	err = withAPI(cmd.Context(), dir, func(api control.API) error {
		res, err = call(cmd.Context(), api)
		return err
	})
	return res, err
}

// jsonFlag adds --json to cmd, into asJSON: the command prints its shape from output.go.
func jsonFlag(cmd *cobra.Command, asJSON *bool) {
	cmd.Flags().BoolVar(asJSON, "json", false, "machine output")
}

// configFlag adds --config to a command that can read a config file other than the home's.
func configFlag(cmd *cobra.Command, path *string, usage string) {
	cmd.Flags().StringVar(path, "config", "", usage)
}

// defaultConfigUsage is --config's help where a home without hyp.yaml runs on the defaults.
const defaultConfigUsage = "config file (default <home>/hyp.yaml, else embedded defaults)"

// openReader makes every acknowledged row visible in the tables (through the daemon, or by
// replaying the log under the lock), then opens the cache read-only.
func openReader(ctx context.Context, dir string) (*cache.Reader, error) {
	if _, err := os.Stat(home.Cache(dir)); errors.Is(err, os.ErrNotExist) {
		return cache.OpenReader(ctx, home.Cache(dir))
	}
	if err := withAPI(ctx, dir, func(api control.API) error { return api.Flush(ctx) }); err != nil {
		return nil, err
	}
	return cache.OpenReader(ctx, home.Cache(dir))
}

// view pins the cache's files and has their owner (the running daemon or server, or the
// node withAPI opens) list them, with every acknowledged row it has not flushed yet in files
// of the view's own: so this process loads no partition's table (with thousands of
// partitions that load was most of a query's time) and waits for no flush (which a burst of
// new partitions makes tens of seconds long). A daemon too old to list them is read
// through a read-only opening, after a flush.
func view(ctx context.Context, dir string) (*cache.View, error) {
	cdir := home.Cache(dir)
	if _, err := os.Stat(cdir); errors.Is(err, os.ErrNotExist) {
		return readerView(ctx, dir)
	}
	var v *cache.View
	err := withAPI(ctx, dir, func(api control.API) error {
		scratch, err := os.MkdirTemp("", "hyp-view-")
		if err != nil {
			return err
		}
		v, err = cache.PinView(cdir, scratch, func() ([]cache.TableView, error) { return api.Listing(ctx, scratch) })
		return err
	})
	if errors.Is(err, control.ErrUnsupported) {
		return readerView(ctx, dir)
	}
	return v, err
}

// readerView pins the files of a read-only opening, reopening if it raced a compaction.
func readerView(ctx context.Context, dir string) (*cache.View, error) {
	var lastErr error
	for range 5 {
		r, err := openReader(ctx, dir)
		if err != nil {
			return nil, err
		}
		v, err := r.View()
		if err == nil {
			return v, nil
		}
		if !errors.Is(err, cache.ErrGenerationGone) {
			return nil, err
		}
		lastErr = err
	}
	return nil, lastErr
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
