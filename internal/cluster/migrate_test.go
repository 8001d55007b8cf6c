package cluster

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hyp-project/hyp/internal/lake"
	"github.com/hyp-project/hyp/internal/testutil/pgtest"
)

// A database made before replicas grouped chunks is migrated in place: each staged file
// becomes a stage of its own whose span is the file's, so a commit decided before the upgrade
// records the same units, `server status` still counts the rows staged, and migrating again
// (the next replica's start) changes nothing.
func TestGroupMigrationKeepsStagedSpans(t *testing.T) {
	ctx := context.Background()
	pg := pgtest.Start(t)
	pool, err := pgxpool.New(ctx, pg.URI())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// hyp_staged as it was created before groups, one file committed and one not.
	if _, err := pool.Exec(ctx, `CREATE TABLE hyp_commits (
		id text PRIMARY KEY, dataset text NOT NULL, base bigint NOT NULL,
		decided_at timestamptz NOT NULL DEFAULT now(), committed_at timestamptz, snapshot bigint);
	CREATE TABLE hyp_staged (
		id bigserial PRIMARY KEY, dataset text NOT NULL, gateway text NOT NULL, part text NOT NULL,
		first_seq bigint NOT NULL, last_seq bigint NOT NULL, rows bigint NOT NULL, bytes bigint NOT NULL,
		path text NOT NULL UNIQUE, replica text NOT NULL, staged_at timestamptz NOT NULL DEFAULT now(),
		commit_id text REFERENCES hyp_commits(id), committed_at timestamptz);
	INSERT INTO hyp_commits (id, dataset, base) VALUES ('c1', 'logs', 0);
	INSERT INTO hyp_staged (dataset, gateway, part, first_seq, last_seq, rows, bytes, path, replica, commit_id) VALUES
		('logs', 'gw-a', 'gateway=gw-a/source=api', 1, 10, 10, 100, 'file:///w/a.parquet', 'r', 'c1'),
		('logs', 'gw-a', 'gateway=gw-a/source=api', 11, 15, 5, 50, 'file:///w/b.parquet', 'r', 'c1'),
		('logs', 'gw-b', 'gateway=gw-b/source=db', 7, 9, 3, 30, 'file:///w/c.parquet', 'r', NULL);
	CREATE TABLE hyp_gateways (gateway text PRIMARY KEY, last_seen timestamptz NOT NULL, rows_stored bigint NOT NULL DEFAULT 0);
	INSERT INTO hyp_gateways (gateway, last_seen) VALUES ('gw-a', now()), ('gw-b', now())`); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := migrate(ctx, pool); err != nil {
			t.Fatal(err)
		}
	}
	c := &Cluster{pool: pool}
	sc := lake.StagedCommit{Dataset: "logs", ID: "c1"}
	if err := c.intentFiles(ctx, &sc); err != nil {
		t.Fatal(err)
	}
	want := lake.Unit{Dataset: "logs", Partition: "gateway=gw-a/source=api", First: 1, Last: 15, Rows: 15}
	if len(sc.Paths) != 2 || len(sc.Units) != 1 || sc.Units[0] != want {
		t.Fatalf("commit c1 after the migration: %d files, units %+v; want 2 files and %+v", len(sc.Paths), sc.Units, want)
	}
	rep, err := Status(ctx, pg.URI())
	if err != nil {
		t.Fatal(err)
	}
	staged := map[string]int64{}
	for _, g := range rep.Gateways {
		staged[g.Gateway] = g.RowsStaged
	}
	if staged["gw-a"] != 15 || staged["gw-b"] != 3 {
		t.Fatalf("rows staged per gateway %v, want gw-a 15, gw-b 3", staged)
	}
}
