package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/lake"
	"github.com/hyp-project/hyp/internal/ledger"
	"github.com/hyp-project/hyp/internal/partition"
)

// Chunk is one validated forwarded chunk: Rows[i] is row i as a JSON object without
// internal fields, Seqs[i] its sender seq (strictly ascending), IngestedAt[i] its sender
// ingest time in Unix microseconds.
type Chunk struct {
	Gateway, Dataset, Source string
	// Incarnation is the sender's seq space (X-Hyp-Incarnation), "" for older senders.
	Incarnation string
	Rows        [][]byte
	Seqs        []int64
	IngestedAt  []int64
}

// Stored is what Store did with a chunk.
type Stored struct {
	Accepted, Duplicates int
	// Seen is the sender's incarnation after the chunk.
	Seen ledger.Sighting
}

// Store makes the chunk's rows that no earlier chunk stored durable in the warehouse and
// records them, with the chunk's span, in the shared ledger. When it returns nil the rows
// are stored; on error nothing is (the transaction rolled back), and files it may have
// written are its stage's, which the committer removes (removeAbandoned). Bad rows are
// *cache.InputError.
func (c *Cluster) Store(ctx context.Context, ch Chunk) (Stored, error) {
	if len(ch.Seqs) == 0 || len(ch.Rows) != len(ch.Seqs) || len(ch.IngestedAt) != len(ch.Seqs) {
		return Stored{}, fmt.Errorf("cluster: malformed chunk (%d rows, %d seqs, %d times)", len(ch.Rows), len(ch.Seqs), len(ch.IngestedAt))
	}
	part := partition.GatewayName(ch.Gateway, ch.Source)
	first, last := ch.Seqs[0], ch.Seqs[len(ch.Seqs)-1]
	var out Stored
	// Upkeep takes a file older than orphanAge that hyp_staged does not name for an orphan,
	// so a transaction that wrote files commits within stageDeadline or not at all.
	ctx, cancel := context.WithTimeout(ctx, stageDeadline)
	defer cancel()
	// The stage is recorded before the transaction, so the record outlives a transaction
	// that never commits; while the transaction holds it, the committer leaves it alone.
	stageID := uuid.New()
	if _, err := c.pool.Exec(ctx, `INSERT INTO hyp_staging (id, dataset, replica) VALUES ($1, $2, $3)`, stageID, ch.Dataset, c.id); err != nil {
		return Stored{}, fmt.Errorf("record a stage: %w", err)
	}
	err := c.inTx(ctx, func(tx pgx.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM hyp_staging WHERE id = $1 FOR UPDATE`, stageID).Scan(&one); err != nil {
			// Taken for abandoned already (a stall before this transaction began).
			return fmt.Errorf("hold stage %s: %w", stageID, err)
		}
		// Two replicas given chunks of one key wait for each other here, so a seq is found
		// missing and stored by one transaction at a time.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1 || chr(1) || $2 || chr(1) || $3, 0))`,
			ch.Gateway, ch.Dataset, part); err != nil {
			return fmt.Errorf("lock %s %s: %w", ch.Dataset, part, err)
		}
		held, err := heldSeqs(ctx, tx, ch.Gateway, ch.Incarnation, ch.Dataset, part, ch.Seqs)
		if err != nil {
			return err
		}
		out = Stored{Accepted: len(ch.Seqs) - held.count, Duplicates: held.count}
		if out.Accepted > 0 {
			if err := c.stage(ctx, tx, ch, part, held.at, stageID); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `DELETE FROM hyp_staging WHERE id = $1`, stageID); err != nil {
			return fmt.Errorf("finish stage %s: %w", stageID, err)
		}
		if err := recordSpan(ctx, tx, ch.Gateway, ch.Incarnation, ch.Dataset, part, first, last); err != nil {
			return err
		}
		if out.Seen, err = seeIncarnation(ctx, tx, ch.Gateway, ch.Incarnation, time.Now(), out.Accepted); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO hyp_gateways (gateway, last_seen, rows_stored) VALUES ($1, now(), $2)
			ON CONFLICT (gateway) DO UPDATE SET last_seen = now(), rows_stored = hyp_gateways.rows_stored + $2`, ch.Gateway, out.Accepted)
		return err
	})
	if err != nil {
		return Stored{}, err
	}
	return out, nil
}

// held marks which of a chunk's seqs the ledger holds.
type held struct {
	at    []bool
	count int
}

func heldSeqs(ctx context.Context, tx pgx.Tx, gateway, incarnation, dataset, part string, seqs []int64) (held, error) {
	h := held{at: make([]bool, len(seqs))}
	rows, err := tx.Query(ctx, `SELECT lo, hi FROM hyp_ledger WHERE gateway = $1 AND incarnation = $6 AND dataset = $2 AND part = $3
		AND hi >= $4 AND lo <= $5 ORDER BY lo`, gateway, dataset, part, seqs[0], seqs[len(seqs)-1], incarnation)
	if err != nil {
		return h, fmt.Errorf("read ledger: %w", err)
	}
	defer rows.Close()
	i := 0
	for rows.Next() {
		var lo, hi int64
		if err := rows.Scan(&lo, &hi); err != nil {
			return h, fmt.Errorf("read ledger: %w", err)
		}
		for i < len(seqs) && seqs[i] < lo {
			i++
		}
		for ; i < len(seqs) && seqs[i] <= hi; i++ {
			h.at[i] = true
			h.count++
		}
	}
	if err := rows.Err(); err != nil {
		return h, fmt.Errorf("read ledger: %w", err)
	}
	return h, nil
}

// recordSpan adds [first, last] to the key's ledger, merged with the intervals it touches,
// so a stream of adjacent chunks stays one row.
func recordSpan(ctx context.Context, tx pgx.Tx, gateway, incarnation, dataset, part string, first, last int64) error {
	rows, err := tx.Query(ctx, `DELETE FROM hyp_ledger WHERE gateway = $1 AND incarnation = $6 AND dataset = $2 AND part = $3
		AND hi >= $4 - 1 AND lo <= $5 + 1 RETURNING lo, hi`, gateway, dataset, part, first, last, incarnation)
	if err != nil {
		return fmt.Errorf("record ledger: %w", err)
	}
	lo, hi := first, last
	for rows.Next() {
		var a, b int64
		if err := rows.Scan(&a, &b); err != nil {
			rows.Close()
			return fmt.Errorf("record ledger: %w", err)
		}
		lo, hi = min(lo, a), max(hi, b)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("record ledger: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO hyp_ledger (gateway, incarnation, dataset, part, lo, hi) VALUES ($1, $6, $2, $3, $4, $5)`,
		gateway, dataset, part, lo, hi, incarnation); err != nil {
		return fmt.Errorf("record ledger: %w", err)
	}
	return nil
}

// seeIncarnation notes in hyp_incarnations that the gateway's incarnation sent at at and
// stored rows rows, deciding by ledger.Concurrent (the single-node ledger's rule) whether it
// sent alongside another incarnation of the gateway.
func seeIncarnation(ctx context.Context, tx pgx.Tx, gateway, incarnation string, at time.Time, rows int) (ledger.Sighting, error) {
	r, err := tx.Query(ctx, `SELECT incarnation, first_seen, last_seen, rows, concurrent_at FROM hyp_incarnations WHERE gateway = $1`, gateway)
	if err != nil {
		return ledger.Sighting{}, fmt.Errorf("read incarnations: %w", err)
	}
	known, err := pgx.CollectRows(r, func(row pgx.CollectableRow) (ledger.Incarnation, error) {
		inc := ledger.Incarnation{Gateway: gateway}
		var concurrentAt *time.Time
		err := row.Scan(&inc.ID, &inc.FirstSeen, &inc.LastSeen, &inc.Rows, &concurrentAt)
		if concurrentAt != nil {
			inc.ConcurrentAt = *concurrentAt
		}
		return inc, err
	})
	if err != nil {
		return ledger.Sighting{}, fmt.Errorf("read incarnations: %w", err)
	}
	var mine ledger.Incarnation
	var others []ledger.Incarnation
	for _, inc := range known {
		if inc.ID == incarnation {
			mine = inc
		} else {
			others = append(others, inc)
		}
	}
	s := ledger.Sighting{Concurrent: ledger.Concurrent(mine, others, at)}
	var concurrentAt *time.Time
	if s.Concurrent {
		concurrentAt = &at
	}
	s.Gateway, s.ID = gateway, incarnation
	var cat *time.Time
	err = tx.QueryRow(ctx, `INSERT INTO hyp_incarnations AS i (gateway, incarnation, first_seen, last_seen, rows, concurrent_at)
		VALUES ($1, $2, $3, $3, $4, $5)
		ON CONFLICT (gateway, incarnation) DO UPDATE SET last_seen = greatest(i.last_seen, EXCLUDED.last_seen),
			rows = i.rows + EXCLUDED.rows, concurrent_at = coalesce(EXCLUDED.concurrent_at, i.concurrent_at)
		RETURNING first_seen, last_seen, rows, concurrent_at`, gateway, incarnation, at, rows, concurrentAt).
		Scan(&s.FirstSeen, &s.LastSeen, &s.Rows, &cat)
	if err != nil {
		return ledger.Sighting{}, fmt.Errorf("record incarnation: %w", err)
	}
	if cat != nil {
		s.ConcurrentAt = *cat
	}
	return s, nil
}

// stage writes the rows not held to the warehouse and records the files in tx.
func (c *Cluster) stage(ctx context.Context, tx pgx.Tx, ch Chunk, part string, held []bool, id uuid.UUID) error {
	enc := cache.NewEncoder()
	defer enc.Release()
	var lo, hi int64
	for i, row := range ch.Rows {
		if held[i] {
			continue
		}
		if err := enc.Add(row, ch.Seqs[i], ch.IngestedAt[i]); err != nil {
			return &cache.InputError{Kind: "bad_json", Line: i + 1, Msg: err.Error()}
		}
		if lo == 0 {
			lo = ch.Seqs[i]
		}
		hi = ch.Seqs[i]
	}
	rec, err := enc.Record()
	if err != nil {
		return fmt.Errorf("encode rows: %w", err)
	}
	defer rec.Release()
	unit := lake.Unit{Dataset: ch.Dataset, Partition: part, First: lo, Last: hi, Rows: rec.NumRows()}
	start := time.Now()
	files, err := c.lake.Stage(ctx, ch.Dataset, []lake.Batch{{Unit: unit, Source: ch.Source, Gateway: ch.Gateway, Records: []arrow.RecordBatch{rec}}}, id)
	if err != nil {
		return fmt.Errorf("stage rows: %w", err)
	}
	c.metrics.stageSeconds.Observe(time.Since(start).Seconds())
	for _, f := range files {
		if _, err := tx.Exec(ctx, `INSERT INTO hyp_staged (dataset, gateway, part, first_seq, last_seq, rows, bytes, path, replica)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, ch.Dataset, ch.Gateway, part, lo, hi, f.Rows, f.Bytes, f.Path, c.id); err != nil {
			return fmt.Errorf("record staged file: %w", err)
		}
	}
	if c.afterStage != nil {
		c.afterStage()
	}
	return nil
}
