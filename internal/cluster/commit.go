package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hyp-project/hyp/internal/lake"
)

// maxCommitStages bounds one snapshot, so a backlog after a long outage is committed in
// steps whose manifests and summaries stay small; a stage (one group's files of a table) is
// never split between two commits, so the units a commit records are its stages' spans.
const maxCommitStages = 2000

// Run keeps the replica's heartbeat and, while it holds the committer lock, commits staged
// files every commit interval, removes the files of abandoned stages after each commit
// round, and runs the tables' upkeep when it is due. It returns when ctx ends.
func (c *Cluster) Run(ctx context.Context) {
	beat := time.NewTicker(heartbeat)
	defer beat.Stop()
	var lock *pgxpool.Conn // held while this replica is the committer
	// drop ends the lock's session: a connection handed back to the pool would keep it.
	drop := func() {
		lock.Conn().Close(context.WithoutCancel(ctx))
		lock.Release()
		lock = nil
	}
	defer func() {
		if lock != nil {
			drop()
		}
	}()
	nextCommit, nextUpkeep := time.Now(), c.nextUpkeep(time.Now())
	for {
		if err := c.beat(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("cluster: heartbeat failed", "err", err)
		}
		if lock == nil {
			lock = c.elect(ctx)
		} else if err := lock.Ping(ctx); err != nil {
			// The session that held the lock is gone, and with it the lock: another
			// replica may be committing already.
			c.log.Warn("cluster: lost the committer lock", "err", err)
			drop()
		}
		c.committer.Store(lock != nil)
		c.metrics.committer.Set(boolGauge(lock != nil))
		if lock != nil && !time.Now().Before(nextCommit) {
			if err := c.CommitStaged(ctx); err != nil && ctx.Err() == nil {
				c.metrics.commits.WithLabelValues("failed").Inc()
				c.log.Warn("cluster: commit failed; staged rows stay staged until the next try", "err", err)
			}
			if _, err := c.removeAbandoned(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("cluster: removing abandoned stages failed; the next round tries again", "err", err)
			}
			nextCommit = time.Now().Add(c.interval)
			if !nextUpkeep.IsZero() && !time.Now().Before(nextUpkeep) {
				if _, err := c.Maintain(ctx); err != nil && ctx.Err() == nil {
					c.log.Warn("cluster: table upkeep failed; the next run tries again", "err", err)
				}
				nextUpkeep = c.nextUpkeep(time.Now())
			}
		}
		wait := heartbeat
		if lock != nil {
			wait = min(wait, max(time.Until(nextCommit), 0))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// nextUpkeep is when upkeep is due after now; zero means never.
func (c *Cluster) nextUpkeep(now time.Time) time.Time {
	if c.upkeep == nil {
		return time.Time{}
	}
	return c.upkeep.Next(now)
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// elect tries the committer lock on a connection of its own: a session lock lives as long
// as that session, so the connection is kept out of the pool while it holds the lock.
func (c *Cluster) elect(ctx context.Context) *pgxpool.Conn {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return nil
	}
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, $2)`, lockSpace, lockCommitter).Scan(&got); err != nil || !got {
		conn.Release()
		return nil
	}
	c.log.Info("cluster: this replica is the committer", "replica", c.id)
	return conn
}

func (c *Cluster) beat(ctx context.Context) error {
	_, err := c.pool.Exec(ctx, `INSERT INTO hyp_replicas (id, addr, started_at, heartbeat) VALUES ($1, $2, $3, now())
		ON CONFLICT (id) DO UPDATE SET heartbeat = now(), addr = $2`, c.id, c.addr, c.started)
	if err != nil {
		return err
	}
	var staged int64
	var oldest *time.Time
	if err := c.pool.QueryRow(ctx, `SELECT coalesce(sum(rows), 0), min(staged_at) FROM hyp_staged WHERE committed_at IS NULL`).Scan(&staged, &oldest); err != nil {
		return err
	}
	c.metrics.staged.Set(float64(staged))
	lag := 0.0
	if oldest != nil {
		lag = time.Since(*oldest).Seconds()
	}
	c.metrics.lag.Set(lag)
	return nil
}

// CommitStaged resolves every unfinished commit intent, then commits the staged files of
// each table that got no snapshot from such an intent: one snapshot per table per
// round, at most maxCommitStages stages in it. Only the committer calls it.
//
// The order matters: an intent is finished before new files are decided, because the lake
// tells a landed commit by its id only among snapshots after the intent's base.
func (c *Cluster) CommitStaged(ctx context.Context) error {
	finished, err := c.finishIntents(ctx)
	if err != nil {
		return err
	}
	rows, err := c.pool.Query(ctx, `SELECT DISTINCT dataset FROM hyp_staged WHERE commit_id IS NULL`)
	if err != nil {
		return fmt.Errorf("list staged datasets: %w", err)
	}
	datasets, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("list staged datasets: %w", err)
	}
	var errs []error
	for _, ds := range datasets {
		if finished[ds] {
			continue
		}
		n, err := c.decide(ctx, ds)
		if err == nil && n > 0 {
			_, err = c.finishIntents(ctx)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("dataset %s: %w", ds, err))
		}
	}
	return errors.Join(errs...)
}

// decide records a commit intent for the staged files of up to maxCommitStages stages of
// dataset: the files' ids name the commit, and the table's head now is its base.
func (c *Cluster) decide(ctx context.Context, dataset string) (int, error) {
	base, err := c.lake.Head(ctx, dataset)
	if err != nil {
		return 0, err
	}
	var n int
	err = c.inTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id FROM hyp_staged WHERE dataset = $1 AND commit_id IS NULL AND stage IN (
				SELECT stage FROM hyp_staged WHERE dataset = $1 AND commit_id IS NULL GROUP BY stage ORDER BY min(id) LIMIT $2)
			ORDER BY id FOR UPDATE`, dataset, maxCommitStages)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || len(ids) == 0 {
			return err
		}
		n = len(ids)
		h := sha256.New()
		h.Write([]byte(dataset))
		for _, id := range ids {
			h.Write(binary.BigEndian.AppendUint64(nil, uint64(id)))
		}
		commitID := hex.EncodeToString(h.Sum(nil)[:16])
		if _, err := tx.Exec(ctx, `INSERT INTO hyp_commits (id, dataset, base) VALUES ($1, $2, $3)`, commitID, dataset, base); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE hyp_staged SET commit_id = $1 WHERE id = ANY($2)`, commitID, ids)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("decide a commit: %w", err)
	}
	return n, nil
}

// finishIntents makes every decided commit that is not marked committed: committed in the
// lake unless a snapshot after its base already carries its id, then marked in PostgreSQL.
// It returns the datasets it made a snapshot of (an intent found landed made none).
func (c *Cluster) finishIntents(ctx context.Context) (map[string]bool, error) {
	rows, err := c.pool.Query(ctx, `SELECT id, dataset, base FROM hyp_commits WHERE committed_at IS NULL ORDER BY decided_at`)
	if err != nil {
		return nil, fmt.Errorf("list commit intents: %w", err)
	}
	type intent struct {
		id, dataset string
		base        int64
	}
	intents, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (intent, error) {
		var in intent
		return in, r.Scan(&in.id, &in.dataset, &in.base)
	})
	if err != nil {
		return nil, fmt.Errorf("list commit intents: %w", err)
	}
	finished := map[string]bool{}
	for _, in := range intents {
		sc := lake.StagedCommit{Dataset: in.dataset, ID: in.id, Base: in.base}
		if err := c.intentFiles(ctx, &sc); err != nil {
			return finished, err
		}
		start := time.Now()
		res, err := c.lake.CommitStaged(ctx, sc)
		if err != nil {
			return finished, fmt.Errorf("commit %s to %s: %w", in.id, in.dataset, err)
		}
		if c.afterLakeCommit != nil {
			c.afterLakeCommit()
		}
		if _, err := c.pool.Exec(ctx, `WITH done AS (UPDATE hyp_commits SET committed_at = now(), snapshot = $2 WHERE id = $1)
			UPDATE hyp_staged SET committed_at = now() WHERE commit_id = $1`, in.id, res.Snapshot); err != nil {
			return finished, fmt.Errorf("mark commit %s: %w", in.id, err)
		}
		if !res.Already {
			finished[in.dataset] = true
		}
		result := "committed"
		if res.Already {
			result = "already"
		}
		c.metrics.commits.WithLabelValues(result).Inc()
		c.metrics.commitSeconds.Observe(time.Since(start).Seconds())
		c.log.Info("cluster: committed staged files", "dataset", in.dataset, "commit", in.id, "staged_files", len(sc.Paths),
			"files", res.Files, "merged", res.Merged, "rows", res.Rows, "already", res.Already)
		if res.Leftover > 0 {
			c.log.Warn("cluster: merged staged files could not be removed; table upkeep removes them as orphans", "dataset", in.dataset, "files", res.Leftover)
		}
	}
	return finished, nil
}

// intentFiles fills in the files of a commit and one unit per partition spanning the spans
// of their stages.
func (c *Cluster) intentFiles(ctx context.Context, sc *lake.StagedCommit) error {
	rows, err := c.pool.Query(ctx, `SELECT path FROM hyp_staged WHERE commit_id = $1 ORDER BY id`, sc.ID)
	if err != nil {
		return fmt.Errorf("files of commit %s: %w", sc.ID, err)
	}
	if sc.Paths, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return fmt.Errorf("files of commit %s: %w", sc.ID, err)
	}
	rows, err = c.pool.Query(ctx, `SELECT part, min(first_seq), max(last_seq), sum(rows)::bigint FROM hyp_stage_spans
		WHERE stage IN (SELECT stage FROM hyp_staged WHERE commit_id = $1) GROUP BY part ORDER BY part`, sc.ID)
	if err != nil {
		return fmt.Errorf("units of commit %s: %w", sc.ID, err)
	}
	sc.Units, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (lake.Unit, error) {
		u := lake.Unit{Dataset: sc.Dataset}
		return u, r.Scan(&u.Partition, &u.First, &u.Last, &u.Rows)
	})
	if err != nil {
		return fmt.Errorf("units of commit %s: %w", sc.ID, err)
	}
	return nil
}
