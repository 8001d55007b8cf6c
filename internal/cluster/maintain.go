package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hyp-project/hyp/internal/lake"
)

// The committer keeps the lake's tables small between its commits (issue 13 item 3): every
// replica stages a file per chunk, so a fleet leaves thousands of small files an hour. Upkeep
// runs in the committer's loop, never beside a commit of its own, and is the lake's
// (internal/lake Maintain: expiry, compaction, manifest merge, orphans) with two things only
// the cluster knows:
//   - which unreferenced files are staged, recorded in hyp_staged and not yet committed:
//     they are kept however old (a lake outage can hold a backlog for days);
//   - that no file younger than orphanAge can still become recorded: Store gives up on a
//     chunk whose files were written more than stageDeadline ago, so a file older than
//     orphanAge that hyp_staged does not name is one no transaction will ever name.
const (
	stageDeadline = 10 * time.Minute
	// orphanAge leaves stageDeadline plus generous clock skew between the replicas and
	// the object store.
	orphanAge = time.Hour
	// forgetAfter is how long committed files and commits stay in hyp_staged and
	// hyp_commits: a successor resolves only unmarked intents, so marked ones are history.
	forgetAfter = 24 * time.Hour
)

// Schedule says when upkeep is next due (robfig/cron's Schedule satisfies it).
type Schedule interface {
	Next(time.Time) time.Time
}

// Maintain runs the lake's upkeep on every table, keeping the staged files, then forgets
// long-committed bookkeeping. Only the committer calls it.
func (c *Cluster) Maintain(ctx context.Context) ([]lake.TableReport, error) {
	rows, err := c.pool.Query(ctx, `SELECT path FROM hyp_staged WHERE committed_at IS NULL`)
	if err != nil {
		return nil, fmt.Errorf("list staged files: %w", err)
	}
	staged, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list staged files: %w", err)
	}
	o := c.maintain
	o.OrphanOlderThan, o.Keep = orphanAge, staged
	reports, err := c.lake.Maintain(ctx, o)
	for _, r := range reports {
		c.metrics.orphans.Add(float64(r.OrphansRemoved))
		if r.Error == "" {
			c.metrics.dataFiles.WithLabelValues(r.Table).Set(float64(r.FilesAfter))
		}
		c.log.Info("cluster: table upkeep", "table", r.Table, "snapshots_expired", r.SnapshotsExpired, "files_before", r.FilesBefore,
			"files_after", r.FilesAfter, "orphans_removed", r.OrphansRemoved, "error", r.Error)
	}
	if ferr := c.forget(ctx); ferr != nil {
		err = errors.Join(err, ferr)
	}
	result := "ok"
	if err != nil {
		result = "failed"
	}
	c.metrics.maintains.WithLabelValues(result).Inc()
	return reports, err
}

// forget deletes files committed more than forgetAfter ago from hyp_staged, and the commits
// no staged file names any more.
func (c *Cluster) forget(ctx context.Context) error {
	age := forgetAfter.String()
	err := c.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM hyp_staged WHERE committed_at < now() - $1::interval`, age); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM hyp_commits WHERE committed_at < now() - $1::interval
			AND NOT EXISTS (SELECT 1 FROM hyp_staged s WHERE s.commit_id = hyp_commits.id)`, age)
		return err
	})
	if err != nil {
		return fmt.Errorf("forget committed files: %w", err)
	}
	return nil
}
