package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/hyp-project/hyp/internal/lake"
)

// The committer keeps the lake's tables small between its commits (issue 13 item 3): every
// replica stages a file per group of chunks and table partition, so a fleet still leaves
// many files smaller than a table wants. Upkeep
// runs in the committer's loop, never beside a commit of its own, and is the lake's
// (internal/lake Maintain: expiry, compaction, manifest merge, orphans) with what only the
// cluster knows:
//   - which unreferenced files are staged, recorded in hyp_staged and not yet committed:
//     they are kept however old (a lake outage can hold a backlog for days);
//   - which stages were abandoned: a hyp_staging row that no transaction holds names files
//     no transaction will ever record, removed at once after every commit round
//     (removeAbandoned);
//   - that no file younger than orphanAge can still become recorded: Store gives up on a
//     chunk whose transaction has not committed stageDeadline after it began, so a file
//     older than orphanAge that hyp_staged does not name is one no transaction will ever
//     name. This catches what removeAbandoned cannot see: a file whose upload completed
//     only after its stage was found abandoned.
const (
	stageDeadline = 10 * time.Minute
	// orphanAge leaves stageDeadline plus generous clock skew between the replicas and
	// the object store.
	orphanAge = time.Hour
	// forgetAfter is how long committed files and commits stay in hyp_staged and
	// hyp_commits: a successor resolves only unmarked intents, so marked ones are history.
	forgetAfter = 24 * time.Hour
	// abandonedAfter is how old a stage no transaction holds must be to be abandoned: a
	// Store takes its lock right after recording it, so only a stalled or dead one is later
	// (and a stalled one then finds its stage gone and fails, for the sender to retry).
	abandonedAfter = 10 * time.Second
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

// forget deletes files committed more than forgetAfter ago from hyp_staged, the spans of
// stages no staged file is left of, and the commits no staged file names any more. A stage's
// spans are recorded in the transaction that records its files, so no stage is seen
// between the two.
func (c *Cluster) forget(ctx context.Context) error {
	age := forgetAfter.String()
	err := c.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM hyp_staged WHERE committed_at < now() - $1::interval`, age); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM hyp_stage_spans sp WHERE NOT EXISTS (SELECT 1 FROM hyp_staged s WHERE s.stage = sp.stage)`); err != nil {
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

// removeAbandoned removes the files of stages whose transaction ended without committing
// (the replica died, or its transaction failed), and forgets those stages. A stage is
// locked by its transaction while it lives; one this can lock is over, and its files are
// not recorded. The files go before the rows, so a failure here leaves the stages for the
// next round.
func (c *Cluster) removeAbandoned(ctx context.Context) (int, error) {
	removed := 0
	err := c.inTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, dataset FROM hyp_staging WHERE started_at < now() - $1::interval FOR UPDATE SKIP LOCKED`,
			abandonedAfter.String())
		if err != nil {
			return err
		}
		byDataset := map[string][]uuid.UUID{}
		var ids []uuid.UUID
		for rows.Next() {
			var id uuid.UUID
			var ds string
			if err := rows.Scan(&id, &ds); err != nil {
				rows.Close()
				return err
			}
			byDataset[ds] = append(byDataset[ds], id)
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(ids) == 0 {
			return err
		}
		for ds, dsIDs := range byDataset {
			n, err := c.lake.RemoveStaged(ctx, ds, dsIDs)
			removed += n
			if err != nil {
				return fmt.Errorf("remove abandoned files of %s: %w", ds, err)
			}
		}
		_, err = tx.Exec(ctx, `DELETE FROM hyp_staging WHERE id = ANY($1)`, ids)
		return err
	})
	c.metrics.orphans.Add(float64(removed))
	if err != nil {
		return removed, fmt.Errorf("abandoned stages: %w", err)
	}
	if removed > 0 {
		c.log.Info("cluster: removed the files of abandoned stages", "files", removed)
	}
	return removed, nil
}
