package cluster

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
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
	// Records, when set instead of Rows, are the rows already as records cache.Encoder
	// would build from them (seqs and ingest times included), one after another; Store
	// takes references of its own.
	Records []arrow.RecordBatch
}

// Stored is what Store did with a chunk.
type Stored struct {
	Accepted, Duplicates int
	// Seen is the sender's incarnation after the chunk.
	Seen ledger.Sighting
}

// Store makes the chunk's rows that no earlier chunk stored durable in the warehouse and
// records them, with the chunk's span, in the shared ledger, together with the other chunks
// of its group (group.go). When it returns nil the rows are stored; on error nothing is
// unless the error is ctx's (the caller gave up while its group was being stored: the
// sender's retry finds what was stored a duplicate). Files a failed store may have written
// are its stage's, which the committer removes (removeAbandoned). Bad rows are
// *cache.InputError, and fail only their own chunk.
func (c *Cluster) Store(ctx context.Context, ch Chunk) (Stored, error) {
	rows := len(ch.Rows)
	if len(ch.Records) > 0 {
		rows = recordRows(ch.Records)
	}
	if len(ch.Seqs) == 0 || rows != len(ch.Seqs) || len(ch.IngestedAt) != len(ch.Seqs) {
		return Stored{}, fmt.Errorf("cluster: malformed chunk (%d rows, %d seqs, %d times)", rows, len(ch.Seqs), len(ch.IngestedAt))
	}
	recs, bytes, err := encode(ch)
	if err != nil {
		return Stored{}, err
	}
	// The records hold copies of the rows: ch.Rows may alias the caller's buffer.
	ch.Rows, ch.Records = nil, nil
	p := &pending{ch: ch, part: partition.GatewayName(ch.Gateway, ch.Source), recs: recs, bytes: bytes, done: make(chan outcome, 1)}
	select {
	case c.arrive <- p:
	case <-ctx.Done():
		releaseAll(recs)
		return Stored{}, ctx.Err()
	case <-c.gathered:
		releaseAll(recs)
		return Stored{}, errClosing
	}
	select {
	case o := <-p.done:
		return o.st, o.err
	case <-ctx.Done():
		return Stored{}, ctx.Err()
	}
}

// encode makes the chunk's rows records, and counts their bytes: its Records themselves
// when it has them.
func encode(ch Chunk) ([]arrow.RecordBatch, int64, error) {
	if len(ch.Records) > 0 {
		var bytes int64
		for _, r := range ch.Records {
			r.Retain()
			bytes += recordBytes(r)
		}
		return slices.Clone(ch.Records), bytes, nil
	}
	enc := cache.NewEncoder()
	defer enc.Release()
	var bytes int64
	for i, row := range ch.Rows {
		if err := enc.Add(row, ch.Seqs[i], ch.IngestedAt[i]); err != nil {
			return nil, 0, &cache.InputError{Kind: "bad_json", Line: i + 1, Msg: err.Error()}
		}
		bytes += int64(len(row))
	}
	rec, err := enc.Record()
	if err != nil {
		return nil, 0, fmt.Errorf("encode rows: %w", err)
	}
	return []arrow.RecordBatch{rec}, bytes, nil
}

func recordRows(recs []arrow.RecordBatch) int {
	n := 0
	for _, r := range recs {
		n += int(r.NumRows())
	}
	return n
}

// recordBytes is what a record's buffers hold, for the group's byte bound.
func recordBytes(r arrow.RecordBatch) int64 {
	var n int64
	for _, col := range r.Columns() {
		for _, b := range col.Data().Buffers() {
			if b != nil {
				n += int64(b.Len())
			}
		}
	}
	return n
}

// storeTogether stores a group's chunks in one PostgreSQL transaction and one stage (a set of
// staged files) per dataset, returning what it did with each chunk; on error nothing is
// stored.
//
// The transaction takes every key's lock before it writes any row, the keys in one global
// order, and writes the gateways' and incarnations' rows in order too, so two replicas'
// groups wait for each other but never deadlock. Chunks of one key in one group are checked
// against the ledger in turn, each after the previous one's span is recorded.
func (c *Cluster) storeTogether(ctx context.Context, group []*pending) ([]Stored, error) {
	// Upkeep takes a file older than orphanAge that hyp_staged does not name for an orphan,
	// so a transaction that wrote files commits within stageDeadline or not at all.
	ctx, cancel := context.WithTimeout(ctx, stageDeadline)
	defer cancel()
	// A stage per dataset is recorded before the transaction, so the record outlives a
	// transaction that never commits; while the transaction holds it, the committer leaves
	// it alone.
	stages := map[string]uuid.UUID{}
	var ids []uuid.UUID
	var datasets []string
	for _, p := range group {
		if _, ok := stages[p.ch.Dataset]; !ok {
			id := uuid.New()
			stages[p.ch.Dataset] = id
			ids, datasets = append(ids, id), append(datasets, p.ch.Dataset)
		}
	}
	if _, err := c.pool.Exec(ctx, `INSERT INTO hyp_staging (id, dataset, replica) SELECT id, ds, $3 FROM unnest($1::uuid[], $2::text[]) AS s(id, ds)`,
		ids, datasets, c.id); err != nil {
		return nil, fmt.Errorf("record a stage: %w", err)
	}
	out := make([]Stored, len(group))
	err := c.inTx(ctx, func(tx pgx.Tx) error {
		var held int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM hyp_staging WHERE id = ANY($1) FOR UPDATE) s`, ids).Scan(&held); err != nil {
			return fmt.Errorf("hold stages: %w", err)
		}
		if held != len(ids) {
			// Taken for abandoned already (a stall before this transaction began).
			return fmt.Errorf("hold stages: %d of %d are gone", len(ids)-held, len(ids))
		}
		if err := lockKeys(ctx, tx, group); err != nil {
			return err
		}
		batches := map[string][]lake.Batch{}
		var spans []stageSpan
		for i, p := range group {
			h, err := heldSeqs(ctx, tx, p.ch.Gateway, p.ch.Incarnation, p.ch.Dataset, p.part, p.ch.Seqs)
			if err != nil {
				return err
			}
			out[i] = Stored{Accepted: len(p.ch.Seqs) - h.count, Duplicates: h.count}
			if out[i].Accepted > 0 {
				b := unheld(p, h.at)
				batches[p.ch.Dataset] = append(batches[p.ch.Dataset], b)
				spans = append(spans, stageSpan{stage: stages[p.ch.Dataset], gateway: p.ch.Gateway, part: p.part, first: b.Unit.First, last: b.Unit.Last, rows: b.Unit.Rows})
			}
			if err := recordSpan(ctx, tx, p.ch.Gateway, p.ch.Incarnation, p.ch.Dataset, p.part, p.ch.Seqs[0], p.ch.Seqs[len(p.ch.Seqs)-1]); err != nil {
				return err
			}
		}
		defer func() {
			for _, bs := range batches {
				for _, b := range bs {
					releaseAll(b.Records)
				}
			}
		}()
		for _, ds := range datasets {
			if bs := batches[ds]; len(bs) > 0 {
				if err := c.stage(ctx, tx, ds, bs, stages[ds]); err != nil {
					return err
				}
			}
		}
		if err := recordSpans(ctx, tx, spans); err != nil {
			return err
		}
		if err := c.seeGroup(ctx, tx, group, out); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM hyp_staging WHERE id = ANY($1)`, ids); err != nil {
			return fmt.Errorf("finish stages: %w", err)
		}
		if c.afterStage != nil {
			c.afterStage()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if c.afterGroupCommit != nil {
		c.afterGroupCommit()
	}
	return out, nil
}

// lockKeys takes the transaction's lock of each of the group's keys, in the order of the
// locks' own ids (the same hash a replica storing one chunk takes), in one round trip.
func lockKeys(ctx context.Context, tx pgx.Tx, group []*pending) error {
	gws, dss, parts := make([]string, len(group)), make([]string, len(group)), make([]string, len(group))
	for i, p := range group {
		gws[i], dss[i], parts[i] = p.ch.Gateway, p.ch.Dataset, p.part
	}
	rows, err := tx.Query(ctx, `SELECT DISTINCT hashtextextended(g || chr(1) || d || chr(1) || p, 0) AS h
		FROM unnest($1::text[], $2::text[], $3::text[]) AS k(g, d, p) ORDER BY h`, gws, dss, parts)
	if err != nil {
		return fmt.Errorf("lock keys: %w", err)
	}
	hashes, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("lock keys: %w", err)
	}
	var b pgx.Batch
	for _, h := range hashes {
		b.Queue(`SELECT pg_advisory_xact_lock($1)`, h)
	}
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("lock keys: %w", err)
	}
	return nil
}

// unheld is the chunk's rows the ledger does not hold, as slices of its record (a resent
// chunk's held rows are runs, so the slices are few).
func unheld(p *pending, held []bool) lake.Batch {
	b := lake.Batch{Unit: lake.Unit{Dataset: p.ch.Dataset, Partition: p.part}, Source: p.ch.Source, Gateway: p.ch.Gateway}
	for i := 0; i < len(held); {
		if held[i] {
			i++
			continue
		}
		j := i
		for j < len(held) && !held[j] {
			j++
		}
		b.Records = append(b.Records, sliceRows(p.recs, i, j)...)
		if b.Unit.Rows == 0 {
			b.Unit.First = p.ch.Seqs[i]
		}
		b.Unit.Last, b.Unit.Rows = p.ch.Seqs[j-1], b.Unit.Rows+int64(j-i)
		i = j
	}
	return b
}

// sliceRows returns rows [i, j) of the records taken one after another, as slices of them.
func sliceRows(recs []arrow.RecordBatch, i, j int) []arrow.RecordBatch {
	var out []arrow.RecordBatch
	at := 0 // the first row of r
	for _, r := range recs {
		n := int(r.NumRows())
		if lo, hi := max(i, at), min(j, at+n); lo < hi {
			out = append(out, r.NewSlice(int64(lo-at), int64(hi-at)))
		}
		at += n
	}
	return out
}

func releaseAll(recs []arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}

// stageSpan is what one chunk added to a stage: the rows of a key, first to last seq.
type stageSpan struct {
	stage             uuid.UUID
	gateway, part     string
	first, last, rows int64
}

func recordSpans(ctx context.Context, tx pgx.Tx, spans []stageSpan) error {
	if len(spans) == 0 {
		return nil
	}
	var stages []uuid.UUID
	var gws, parts []string
	var firsts, lasts, rows []int64
	for _, s := range spans {
		stages, gws, parts = append(stages, s.stage), append(gws, s.gateway), append(parts, s.part)
		firsts, lasts, rows = append(firsts, s.first), append(lasts, s.last), append(rows, s.rows)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO hyp_stage_spans (stage, gateway, part, first_seq, last_seq, rows)
		SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[])`,
		stages, gws, parts, firsts, lasts, rows); err != nil {
		return fmt.Errorf("record staged spans: %w", err)
	}
	return nil
}

// seeGroup records, per gateway and incarnation in order, that it sent and what it stored,
// and gives each chunk its incarnation's sighting.
func (c *Cluster) seeGroup(ctx context.Context, tx pgx.Tx, group []*pending, out []Stored) error {
	type who struct{ gateway, incarnation string }
	accepted := map[who]int{}
	for i, p := range group {
		accepted[who{p.ch.Gateway, p.ch.Incarnation}] += out[i].Accepted
	}
	keys := slices.SortedFunc(maps.Keys(accepted), func(a, b who) int {
		return cmp.Or(cmp.Compare(a.gateway, b.gateway), cmp.Compare(a.incarnation, b.incarnation))
	})
	seen := map[who]ledger.Sighting{}
	now := time.Now()
	var gws []string
	var rows []int64
	for _, k := range keys {
		s, err := seeIncarnation(ctx, tx, k.gateway, k.incarnation, now, accepted[k])
		if err != nil {
			return err
		}
		seen[k] = s
		if n := len(gws); n > 0 && gws[n-1] == k.gateway {
			rows[n-1] += int64(accepted[k])
		} else {
			gws, rows = append(gws, k.gateway), append(rows, int64(accepted[k]))
		}
	}
	for i, p := range group {
		out[i].Seen = seen[who{p.ch.Gateway, p.ch.Incarnation}]
	}
	if _, err := tx.Exec(ctx, `INSERT INTO hyp_gateways (gateway, last_seen, rows_stored)
		SELECT g, now(), n FROM unnest($1::text[], $2::bigint[]) AS s(g, n) ORDER BY g
		ON CONFLICT (gateway) DO UPDATE SET last_seen = now(), rows_stored = hyp_gateways.rows_stored + EXCLUDED.rows_stored`, gws, rows); err != nil {
		return fmt.Errorf("record gateways: %w", err)
	}
	return nil
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

// stage writes a dataset's batches of a group to the warehouse as the stage id's files and
// records the files in tx.
func (c *Cluster) stage(ctx context.Context, tx pgx.Tx, dataset string, batches []lake.Batch, id uuid.UUID) error {
	start := time.Now()
	files, err := c.lake.Stage(ctx, dataset, batches, id)
	if err != nil {
		return fmt.Errorf("stage rows: %w", err)
	}
	c.metrics.stageSeconds.Observe(time.Since(start).Seconds())
	var paths []string
	var rows, bytes []int64
	for _, f := range files {
		paths, rows, bytes = append(paths, f.Path), append(rows, f.Rows), append(bytes, f.Bytes)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO hyp_staged (dataset, stage, rows, bytes, path, replica)
		SELECT $1, $2, r, b, p, $3 FROM unnest($4::text[], $5::bigint[], $6::bigint[]) AS f(p, r, b)`,
		dataset, id, c.id, paths, rows, bytes); err != nil {
		return fmt.Errorf("record staged files: %w", err)
	}
	return nil
}
