package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/hyp-project/hyp/internal/cluster"
	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/control"
	"github.com/hyp-project/hyp/internal/home"
	"github.com/hyp-project/hyp/internal/ledger"
	"github.com/hyp-project/hyp/internal/server"
)

// ServerStatus is `hyp server status` for the server home dir: from the cluster's database
// in cluster mode; else from the running server over its control socket (it holds the
// ledger locked), or from the ledger file itself when no server runs.
func ServerStatus(ctx context.Context, dir string, cfg *config.Config) (cluster.Report, error) {
	if cfg.Server.Cluster != nil {
		return cluster.Status(ctx, cfg.Server.Cluster.Postgres)
	}
	c, err := control.Dial(ctx, home.Socket(dir))
	switch {
	case err == nil:
		return c.ServerStatus(ctx)
	case !errors.Is(err, control.ErrNoDaemon):
		return cluster.Report{}, err
	}
	path := home.Ledger(dir)
	if _, err := os.Stat(path); err != nil {
		return cluster.Report{}, fmt.Errorf("no server ledger at %s (has hyp server run on this home?): %w", path, err)
	}
	led, err := ledger.Open(path)
	if err != nil {
		return cluster.Report{}, err
	}
	defer led.Close()
	return server.LocalStatus(led)
}
