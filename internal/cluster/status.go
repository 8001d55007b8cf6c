package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hyp-project/hyp/internal/ledger"
)

// Report is the cluster as `hyp server status` shows it; the JSON keys are stable.
type Report struct {
	// Committer is the replica holding the committer lock now, "" when none does.
	Committer string    `json:"committer"`
	Replicas  []Replica `json:"replicas"`
	Gateways  []Gateway `json:"gateways"`
}

// Replica is one replica that has sent a heartbeat.
type Replica struct {
	ID        string    `json:"id"`
	Addr      string    `json:"addr"`
	StartedAt time.Time `json:"started_at"`
	Heartbeat time.Time `json:"heartbeat"`
	Alive     bool      `json:"alive"` // heard from within the last few heartbeats
	Committer bool      `json:"committer"`
}

// Gateway is one sending machine's state in the cluster.
type Gateway struct {
	Gateway    string    `json:"gateway"`
	LastSeen   time.Time `json:"last_seen"`
	RowsStored int64     `json:"rows_stored"`
	// RowsStaged are stored but not yet in a lake snapshot; CommitLagSeconds is the age of
	// the oldest of them (0 when none).
	RowsStaged       int64   `json:"rows_staged"`
	CommitLagSeconds float64 `json:"commit_lag_seconds"`
	// Incarnations are the gateway's seq spaces (SPEC 5), oldest first: more than one after a
	// reinstall, and more than one sending at once when two machines share its gateway_id.
	Incarnations []ledger.Incarnation `json:"incarnations"`
}

// Status reads the cluster's state from its database. It needs no replica running.
func Status(ctx context.Context, postgres string) (Report, error) {
	pc, err := parsePostgres(postgres)
	if err != nil {
		return Report{}, err
	}
	conn, err := pgx.ConnectConfig(ctx, pc.ConnConfig)
	if err != nil {
		return Report{}, postgresError(postgres, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var r Report
	// The lock holder's session carries its replica id in application_name (Open sets it).
	var app string
	err = conn.QueryRow(ctx, `SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.classid = $1 AND l.objid = $2 AND l.objsubid = 2 AND l.granted`, lockSpace, lockCommitter).Scan(&app)
	switch {
	case err == pgx.ErrNoRows:
	case err != nil:
		return r, fmt.Errorf("cluster: committer: %w", err)
	default:
		r.Committer = strings.TrimPrefix(app, appPrefix)
	}
	rows, err := conn.Query(ctx, `SELECT id, addr, started_at, heartbeat, heartbeat > now() - $1::interval FROM hyp_replicas ORDER BY started_at`,
		staleAfter.String())
	if err != nil {
		return r, fmt.Errorf("cluster: replicas: %w (is this the cluster's database?)", err)
	}
	r.Replicas, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Replica, error) {
		var rp Replica
		err := row.Scan(&rp.ID, &rp.Addr, &rp.StartedAt, &rp.Heartbeat, &rp.Alive)
		rp.Committer = rp.ID == r.Committer
		return rp, err
	})
	if err != nil {
		return r, fmt.Errorf("cluster: replicas: %w", err)
	}
	rows, err = conn.Query(ctx, `SELECT g.gateway, g.last_seen, g.rows_stored, coalesce(s.rows, 0),
			coalesce(extract(epoch FROM now() - s.oldest), 0)::float8
		FROM hyp_gateways g LEFT JOIN (SELECT sp.gateway, sum(sp.rows) AS rows, min(f.staged_at) AS oldest
			FROM hyp_stage_spans sp JOIN (SELECT stage, min(staged_at) AS staged_at FROM hyp_staged
				WHERE committed_at IS NULL GROUP BY stage) f ON f.stage = sp.stage
			GROUP BY sp.gateway) s ON s.gateway = g.gateway
		ORDER BY g.gateway`)
	if err != nil {
		return r, fmt.Errorf("cluster: gateways: %w", err)
	}
	r.Gateways, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Gateway, error) {
		var g Gateway
		return g, row.Scan(&g.Gateway, &g.LastSeen, &g.RowsStored, &g.RowsStaged, &g.CommitLagSeconds)
	})
	if err != nil {
		return r, fmt.Errorf("cluster: gateways: %w", err)
	}
	rows, err = conn.Query(ctx, `SELECT gateway, incarnation, first_seen, last_seen, rows, concurrent_at FROM hyp_incarnations`)
	if err != nil {
		return r, fmt.Errorf("cluster: incarnations: %w", err)
	}
	incs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.Incarnation, error) {
		var inc ledger.Incarnation
		var concurrentAt *time.Time
		err := row.Scan(&inc.Gateway, &inc.ID, &inc.FirstSeen, &inc.LastSeen, &inc.Rows, &concurrentAt)
		if concurrentAt != nil {
			inc.ConcurrentAt = *concurrentAt
		}
		return inc, err
	})
	if err != nil {
		return r, fmt.Errorf("cluster: incarnations: %w", err)
	}
	ledger.SortIncarnations(incs)
	byGateway := map[string][]ledger.Incarnation{}
	for _, inc := range incs {
		byGateway[inc.Gateway] = append(byGateway[inc.Gateway], inc)
	}
	for i := range r.Gateways {
		g := &r.Gateways[i]
		if g.Incarnations = byGateway[g.Gateway]; g.Incarnations == nil {
			g.Incarnations = []ledger.Incarnation{}
		}
	}
	if r.Replicas == nil {
		r.Replicas = []Replica{}
	}
	if r.Gateways == nil {
		r.Gateways = []Gateway{}
	}
	return r, nil
}
