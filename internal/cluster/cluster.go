// Package cluster owns `hyp server`'s cluster mode (SPEC 5): the state every replica shares
// in one PostgreSQL database — the ledger of stored seqs, the staged data files, the commit
// intents, the replicas' heartbeats — the storing of a chunk durably outside the replica, and
// the one committer that turns staged files into Iceberg snapshots.
//
// The chunks that reach a replica within a short window are stored as one group (group.go):
// one PostgreSQL transaction that holds an advisory lock on each of their (gateway, dataset,
// partition) keys, in which the ledger is read, the rows it lacks are written to the
// warehouse as one stage per table (its staged data files, one per partition of the table
// however many chunks it holds), and the files and the chunks' spans are recorded. Only the
// transaction's commit makes a row stored, and only then is any chunk of the group answered.
// Before writing, the replica records the stages' ids (hyp_staging, committed on their own)
// and holds those rows locked in the transaction, which deletes them: a replica that dies
// before its commit leaves staging rows no transaction holds, and the committer removes the
// files they name (the senders' retries store the rows again).
//
// The committer is whichever replica holds a session advisory lock; PostgreSQL releases it
// when that replica's connection ends, and another replica takes it. A commit is decided in
// PostgreSQL first (an intent naming its files and the table's head) and made in the lake
// second, so a successor finds every undecided or unfinished commit and resolves it by the
// commit id in the table (internal/lake) instead of committing it again.
//
// The package never acknowledges anything (the caller answers the sender once Store returns),
// never deletes a file hyp_staged records as not yet committed, and never commits a file
// twice.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyp-project/hyp/internal/failpoint"
	"github.com/hyp-project/hyp/internal/lake"
	"github.com/hyp-project/hyp/internal/redact"
)

// Options configure Open.
type Options struct {
	Postgres       string // postgres:// URI of the shared database
	Lake           lake.Options
	CommitInterval time.Duration
	// Maintain is the committer's table upkeep (its Compact, ExpireOlderThan and
	// RetainLast), due by MaintainSchedule; a nil schedule means never.
	Maintain         lake.MaintainOptions
	MaintainSchedule Schedule
	// GroupWindow and GroupBytes bound a group of chunks (group.go): it is stored
	// GroupWindow after its first chunk arrived (0: as soon as no other group is being
	// stored), or once its rows' JSON reaches GroupBytes (positive).
	GroupWindow time.Duration
	GroupBytes  int64
	// Addr is where this replica listens, shown by `hyp server status`.
	Addr       string
	Registerer prometheus.Registerer // nil leaves the metrics unregistered
	Logger     *slog.Logger          // nil means slog.Default()
}

// appPrefix starts the application_name of a replica's sessions, followed by its id, so
// Status can name the session holding the committer lock.
const appPrefix = "hyp-server "

// heartbeat is how often a replica records that it is alive; a replica silent for
// staleAfter is shown as gone.
const (
	heartbeat  = 2 * time.Second
	staleAfter = 5 * heartbeat
)

// Cluster is one replica's view of the shared state.
type Cluster struct {
	pool     *pgxpool.Pool
	lake     *lake.Lake
	id       string
	addr     string
	interval time.Duration
	maintain lake.MaintainOptions
	upkeep   Schedule
	log      *slog.Logger
	metrics  *metrics
	started  time.Time

	committer atomic.Bool

	// Store hands chunks to gather on arrive; gathered closes once gather has returned.
	limits     limits
	arrive     chan *pending
	gathered   chan struct{}
	stopGather context.CancelFunc

	// Crash-test steps (internal/failpoint): a group's files staged and recorded but its
	// transaction not committed, a group committed but no chunk of it answered, and a commit
	// in the lake but not marked in PostgreSQL. Nil unless HYP_FAILPOINT names them.
	afterStage, afterGroupCommit, afterLakeCommit func()
}

// Open connects to PostgreSQL (creating hyp's tables when missing) and to the lake's catalog.
func Open(ctx context.Context, o Options) (*Cluster, error) {
	if o.CommitInterval <= 0 {
		return nil, fmt.Errorf("cluster: commit_interval must be positive, got %v", o.CommitInterval)
	}
	if o.GroupWindow < 0 || o.GroupBytes <= 0 {
		return nil, fmt.Errorf("cluster: group window %v must not be negative and group bytes %d must be positive", o.GroupWindow, o.GroupBytes)
	}
	pc, err := parsePostgres(o.Postgres)
	if err != nil {
		return nil, err
	}
	id := replicaID()
	pc.ConnConfig.RuntimeParams["application_name"] = appPrefix + id
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, postgresError(o.Postgres, err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, postgresError(o.Postgres, err)
	}
	l, err := lake.Open(ctx, o.Lake)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("cluster: lake: %w", err)
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		l.Close()
		pool.Close()
		return nil, err
	}
	c := &Cluster{pool: pool, lake: l, id: id, addr: o.Addr, interval: o.CommitInterval, maintain: o.Maintain, upkeep: o.MaintainSchedule, log: o.Logger, metrics: m, started: time.Now(),
		limits: limits{window: o.GroupWindow, bytes: o.GroupBytes}, arrive: make(chan *pending), gathered: make(chan struct{}),
		afterStage: failpoint.At("cluster-after-stage"), afterGroupCommit: failpoint.At("cluster-after-group-commit"),
		afterLakeCommit: failpoint.At("cluster-after-lake-commit")}
	if c.log == nil {
		c.log = slog.Default()
	}
	ctx, c.stopGather = context.WithCancel(context.WithoutCancel(ctx))
	go c.gather(ctx)
	return c, nil
}

// Close ends the grouping (chunks still gathering fail, a group being stored finishes) and
// releases the database and the catalog; Run must have returned.
func (c *Cluster) Close() error {
	c.stopGather()
	<-c.gathered
	c.pool.Close()
	return c.lake.Close()
}

// ID names this replica in PostgreSQL and in `hyp server status`.
func (c *Cluster) ID() string { return c.id }

// replicaID is unique per process: a restarted replica is a new one, and the old one's
// heartbeat ages out.
func replicaID() string {
	host, _ := os.Hostname()
	// PostgreSQL keeps 63 bytes of an application_name, which carries the id.
	host = host[:min(len(host), 32)]
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// schema is hyp's tables in the shared database. Ledger intervals are inclusive seq spans per
// (gateway, incarnation, dataset, partition); a database made before incarnations gets the
// column, its intervals becoming the incarnation "" ones (what chunks without the header
// are), and the primary key is widened once; a staged file belongs to at most one commit, and is
// committed once that commit's committed_at is set. A stage is one group's files of one table
// (hyp_staged.stage) and the spans of rows its chunks added (hyp_stage_spans); a hyp_staging
// row is a stage begun and not finished: its files, if any, are named by its id.
const schema = `
CREATE TABLE IF NOT EXISTS hyp_ledger (
	gateway text NOT NULL, dataset text NOT NULL, part text NOT NULL,
	lo bigint NOT NULL, hi bigint NOT NULL,
	PRIMARY KEY (gateway, dataset, part, lo));
CREATE TABLE IF NOT EXISTS hyp_commits (
	id text PRIMARY KEY, dataset text NOT NULL, base bigint NOT NULL,
	decided_at timestamptz NOT NULL DEFAULT now(), committed_at timestamptz, snapshot bigint);
CREATE TABLE IF NOT EXISTS hyp_staged (
	id bigserial PRIMARY KEY, dataset text NOT NULL, stage uuid NOT NULL, rows bigint NOT NULL, bytes bigint NOT NULL,
	path text NOT NULL UNIQUE, replica text NOT NULL, staged_at timestamptz NOT NULL DEFAULT now(),
	commit_id text REFERENCES hyp_commits(id), committed_at timestamptz);
CREATE INDEX IF NOT EXISTS hyp_staged_open ON hyp_staged (dataset, id) WHERE committed_at IS NULL;
CREATE TABLE IF NOT EXISTS hyp_stage_spans (
	stage uuid NOT NULL, gateway text NOT NULL, part text NOT NULL,
	first_seq bigint NOT NULL, last_seq bigint NOT NULL, rows bigint NOT NULL);
CREATE INDEX IF NOT EXISTS hyp_stage_spans_stage ON hyp_stage_spans (stage);
DO $$ BEGIN
	-- A database made before replicas grouped chunks names a file's one span in the file's
	-- row: each such file becomes a stage of its own. Replicas of that version fail to
	-- store from then on (their chunks are retried elsewhere), never store wrongly.
	IF EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'hyp_staged' AND column_name = 'gateway') THEN
		ALTER TABLE hyp_staged ADD COLUMN stage uuid;
		UPDATE hyp_staged SET stage = md5(path)::uuid;
		INSERT INTO hyp_stage_spans (stage, gateway, part, first_seq, last_seq, rows)
			SELECT stage, gateway, part, first_seq, last_seq, rows FROM hyp_staged;
		ALTER TABLE hyp_staged ALTER COLUMN stage SET NOT NULL,
			DROP COLUMN gateway, DROP COLUMN part, DROP COLUMN first_seq, DROP COLUMN last_seq;
	END IF;
END $$;
CREATE INDEX IF NOT EXISTS hyp_staged_stage ON hyp_staged (stage);
CREATE TABLE IF NOT EXISTS hyp_staging (
	id uuid PRIMARY KEY, dataset text NOT NULL, replica text NOT NULL, started_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS hyp_gateways (
	gateway text PRIMARY KEY, last_seen timestamptz NOT NULL, rows_stored bigint NOT NULL DEFAULT 0);
DO $$ BEGIN
	-- Checked first: ALTER TABLE takes hyp_ledger's exclusive lock even when it changes
	-- nothing, and live replicas' transactions hold it (a deadlock at a replica's start).
	IF NOT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'hyp_ledger' AND column_name = 'incarnation') THEN
		ALTER TABLE hyp_ledger ADD COLUMN incarnation text NOT NULL DEFAULT '';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
		WHERE i.indrelid = 'hyp_ledger'::regclass AND i.indisprimary AND a.attname = 'incarnation') THEN
		ALTER TABLE hyp_ledger DROP CONSTRAINT hyp_ledger_pkey, ADD PRIMARY KEY (gateway, incarnation, dataset, part, lo);
	END IF;
END $$;
CREATE TABLE IF NOT EXISTS hyp_incarnations (
	gateway text NOT NULL, incarnation text NOT NULL,
	first_seen timestamptz NOT NULL, last_seen timestamptz NOT NULL, rows bigint NOT NULL DEFAULT 0,
	concurrent_at timestamptz,
	PRIMARY KEY (gateway, incarnation));
CREATE TABLE IF NOT EXISTS hyp_replicas (
	id text PRIMARY KEY, addr text NOT NULL, started_at timestamptz NOT NULL, heartbeat timestamptz NOT NULL);
`

// Advisory lock keys: the first of the two int4 halves says which of hyp's locks it is.
const (
	lockSpace     = 0x6879 // "hy"
	lockMigrate   = 1
	lockCommitter = 2
)

// migrate creates the tables once, under a lock: concurrent CREATE ... IF NOT EXISTS of one
// table can still collide in PostgreSQL's catalogs when replicas start together.
// parsePostgres parses the cluster's connection URI. pgx only sees one whose password can
// be located: its redaction of one that cannot is a guess, and its errors quote the URI.
func parsePostgres(uri string) (*pgxpool.Config, error) {
	if _, err := redact.ParseURI(uri); err != nil {
		return nil, fmt.Errorf("cluster: postgres %s: %w", redact.String(uri), err)
	}
	pc, err := pgxpool.ParseConfig(uri)
	if err != nil {
		return nil, postgresError(uri, err)
	}
	return pc, nil
}

// postgresError names the database an error of pgx's is about, and keeps any password out
// of both.
func postgresError(uri string, err error) error {
	return fmt.Errorf("cluster: postgres %s: %w", redact.String(uri), redact.Error(err))
}

func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1, $2)`, lockSpace, lockMigrate); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1, $2)`, lockSpace, lockMigrate)
	if _, err := conn.Exec(ctx, schema); err != nil {
		return fmt.Errorf("create tables: %w", err)
	}
	return nil
}

// inTx runs fn in a transaction, committed when fn returns nil.
func (c *Cluster) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, tx.Rollback(context.WithoutCancel(ctx)))
	}
	return tx.Commit(ctx)
}

// Writer is the name the cluster's commits carry in hyp.gateway, whichever replica makes
// them: commits to a table come from one committer at a time, as from one writer.
const Writer = "hyp-cluster"
