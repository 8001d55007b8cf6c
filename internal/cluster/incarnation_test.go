package cluster

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hyp-project/hyp/internal/lake"
	"github.com/hyp-project/hyp/internal/partition"
	"github.com/hyp-project/hyp/internal/testutil/pgtest"
)

// A database made before incarnations is migrated in place: its intervals become the
// incarnation "" ones, a new incarnation's same seqs are new rows, and migrating again (the
// next replica's start) changes nothing.
func TestIncarnationMigrationAndSeqSpaces(t *testing.T) {
	ctx := context.Background()
	pg := pgtest.Start(t)
	conn, err := pgx.Connect(ctx, pg.URI())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// hyp_ledger as it was created before incarnations.
	if _, err := conn.Exec(ctx, `CREATE TABLE hyp_ledger (
		gateway text NOT NULL, dataset text NOT NULL, part text NOT NULL,
		lo bigint NOT NULL, hi bigint NOT NULL,
		PRIMARY KEY (gateway, dataset, part, lo))`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO hyp_ledger VALUES ('gw', 'logs', $1, 1, 3)`, partition.GatewayName("gw", "api")); err != nil {
		t.Fatal(err)
	}
	o := Options{Postgres: pg.URI(), CommitInterval: time.Hour, GroupBytes: 8 << 20,
		Lake: lake.Options{Catalog: "sql", URI: pg.URI(), Warehouse: filepath.Join(t.TempDir(), "warehouse"), Namespace: "hyp", PartitionBy: "day", Gateway: "cluster"}}
	var cs []*Cluster
	for range 2 {
		c, err := Open(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs = append(cs, c)
	}
	st, err := cs[0].Store(ctx, chunk("gw", 1, 2, 3, 4))
	if err != nil || st.Accepted != 1 || st.Duplicates != 3 {
		t.Fatalf("an older sender after the migration: %+v %v, want 1 accepted and 3 duplicates", st, err)
	}
	ch := chunk("gw", 1, 2, 3, 4)
	ch.Incarnation = "cafe01"
	for i, want := range []Stored{{Accepted: 4}, {Duplicates: 4}} {
		st, err := cs[i].Store(ctx, ch)
		if err != nil || st.Accepted != want.Accepted || st.Duplicates != want.Duplicates {
			t.Fatalf("new incarnation, send %d: %+v %v, want %+v", i, st, err, want)
		}
		if st.Seen.Gateway != "gw" || st.Seen.ID != "cafe01" || st.Seen.Rows != 4 || st.Seen.Concurrent {
			t.Fatalf("sighting %+v", st.Seen)
		}
	}
	// The old incarnation sending again after the new one began: concurrent.
	st, err = cs[1].Store(ctx, chunk("gw", 5))
	if err != nil || !st.Seen.Concurrent {
		t.Fatalf("the old incarnation interleaving: %+v %v, want concurrent", st, err)
	}
	r, err := Status(ctx, pg.URI())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Gateways) != 1 || len(r.Gateways[0].Incarnations) != 2 {
		t.Fatalf("status %+v", r)
	}
	for _, inc := range r.Gateways[0].Incarnations {
		want := map[string]int64{"": 2, "cafe01": 4}[inc.ID]
		if inc.Rows != want {
			t.Errorf("incarnation %q rows %d, want %d", inc.ID, inc.Rows, want)
		}
	}
}
