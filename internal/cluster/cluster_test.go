package cluster

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/duckdb/duckdb-go/v2"

	"github.com/hyp-project/hyp/internal/lake"
	"github.com/hyp-project/hyp/internal/testutil/pgtest"
)

// openReplicas opens n replicas of one new cluster; a window, when given, is their
// GroupWindow (else a group is what arrives while another is stored).
func openReplicas(t *testing.T, n int, window ...time.Duration) []*Cluster {
	t.Helper()
	pg := pgtest.Start(t)
	o := Options{Postgres: pg.URI(), CommitInterval: time.Hour, GroupWindow: append(window, 0)[0], GroupBytes: 8 << 20,
		Lake: lake.Options{Catalog: "sql", URI: pg.URI(), Warehouse: filepath.Join(t.TempDir(), "warehouse"), Namespace: "hyp", PartitionBy: "day", Gateway: "cluster"}}
	var out []*Cluster
	for range n {
		c, err := Open(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		out = append(out, c)
	}
	return out
}

func chunk(gw string, seqs ...int64) Chunk {
	ch := Chunk{Gateway: gw, Dataset: "logs", Source: "api"}
	for _, s := range seqs {
		ch.Rows = append(ch.Rows, fmt.Appendf(nil, `{"id":"%s-%d","n":%d}`, gw, s, s))
		ch.Seqs = append(ch.Seqs, s)
		ch.IngestedAt = append(ch.IngestedAt, time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC).UnixMicro()+s)
	}
	return ch
}

func span(first, last int64) []int64 {
	var s []int64
	for i := first; i <= last; i++ {
		s = append(s, i)
	}
	return s
}

// tableRows counts the table's rows by id, and how many times each data file is referenced.
func tableRows(t *testing.T, c *Cluster) (map[string]int, map[string]int) {
	t.Helper()
	ctx := context.Background()
	tables, err := c.lake.Tables(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ids, files := map[string]int{}, map[string]int{}
	for _, tf := range tables {
		for _, f := range tf.Files {
			files[f]++
		}
	}
	var paths []string
	for f := range files {
		paths = append(paths, "'"+f+"'")
	}
	if len(paths) == 0 {
		return ids, files
	}
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT id FROM read_parquet([` + strings.Join(paths, ",") + `])`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[id]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids, files
}

// checkTable expects want distinct ids in the table, each once, in files each referenced once.
func checkTable(t *testing.T, c *Cluster, want int) {
	t.Helper()
	ids, files := tableRows(t, c)
	if len(ids) != want {
		t.Fatalf("table holds %d distinct ids, want %d", len(ids), want)
	}
	for id, n := range ids {
		if n != 1 {
			t.Errorf("id %s stored %d times", id, n)
		}
	}
	for f, n := range files {
		if n != 1 {
			t.Errorf("file %s referenced %d times", f, n)
		}
	}
}

// TestReplicasStoreEachRowOnce: two replicas given overlapping, differently chunked resends
// of one gateway's rows at once store every seq once, and the committer's snapshot holds
// each row once, from both gateways.
//
// As records: the same chunks as a server makes of Arrow bodies, each in several records, so
// a resend's rows the ledger does not hold are slices across them.
func TestReplicasStoreEachRowOnce(t *testing.T) {
	for _, form := range []string{"rows", "records"} {
		t.Run(form, func(t *testing.T) {
			chunks := []Chunk{chunk("gw-a", span(1, 100)...), chunk("gw-a", span(50, 150)...), chunk("gw-a", span(1, 150)...),
				chunk("gw-b", span(1, 40)...), chunk("gw-b", span(41, 80)...)}
			if form == "records" {
				for i := range chunks {
					chunks[i] = asRecords(t, chunks[i], 3)
				}
			}
			storeEachRowOnce(t, chunks)
		})
	}
}

// asRecords is ch with its rows as the records cache.Encoder makes of them, cut into parts.
func asRecords(t *testing.T, ch Chunk, parts int) Chunk {
	t.Helper()
	recs, _, err := encode(ch)
	if err != nil {
		t.Fatal(err)
	}
	rec := recs[0]
	defer rec.Release()
	n := rec.NumRows()
	for i := range int64(parts) {
		r := rec.NewSlice(i*n/int64(parts), (i+1)*n/int64(parts))
		t.Cleanup(r.Release)
		ch.Records = append(ch.Records, r)
	}
	ch.Rows = nil
	return ch
}

func storeEachRowOnce(t *testing.T, chunks []Chunk) {
	ctx := context.Background()
	rs := openReplicas(t, 2)
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted := 0
	for i, ch := range chunks {
		for _, r := range rs { // every chunk reaches both replicas
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := r.Store(ctx, ch)
				if err != nil {
					t.Errorf("chunk %d: %v", i, err)
					return
				}
				mu.Lock()
				accepted += st.Accepted
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	if accepted != 150+80 {
		t.Fatalf("accepted %d rows, want 230", accepted)
	}
	var open int
	if err := rs[0].pool.QueryRow(ctx, `SELECT count(*) FROM hyp_staging`).Scan(&open); err != nil || open != 0 {
		t.Fatalf("%d stages left unfinished by committed stores (%v)", open, err)
	}
	if err := rs[1].CommitStaged(ctx); err != nil {
		t.Fatal(err)
	}
	checkTable(t, rs[0], 230)
	// A second round with nothing staged commits nothing.
	head, _ := rs[0].lake.Head(ctx, "logs")
	if err := rs[0].CommitStaged(ctx); err != nil {
		t.Fatal(err)
	}
	if again, _ := rs[0].lake.Head(ctx, "logs"); again != head {
		t.Fatalf("an empty round made snapshot %d", again)
	}
}

// TestSuccessorFinishesALandedIntent: a committer that died after its lake commit but before
// marking it leaves an intent its successor finds in the table instead of committing again.
func TestSuccessorFinishesALandedIntent(t *testing.T) {
	ctx := context.Background()
	rs := openReplicas(t, 2)
	if _, err := rs[0].Store(ctx, chunk("gw-a", span(1, 20)...)); err != nil {
		t.Fatal(err)
	}
	if _, err := rs[0].decide(ctx, "logs"); err != nil {
		t.Fatal(err)
	}
	var id string
	var base int64
	if err := rs[0].pool.QueryRow(ctx, `SELECT id, base FROM hyp_commits`).Scan(&id, &base); err != nil {
		t.Fatal(err)
	}
	sc := lake.StagedCommit{Dataset: "logs", ID: id, Base: base}
	if err := rs[0].intentFiles(ctx, &sc); err != nil {
		t.Fatal(err)
	}
	if _, err := rs[0].lake.CommitStaged(ctx, sc); err != nil { // ...and the committer dies here
		t.Fatal(err)
	}
	if _, err := rs[1].Store(ctx, chunk("gw-a", span(21, 30)...)); err != nil {
		t.Fatal(err)
	}
	if err := rs[1].CommitStaged(ctx); err != nil {
		t.Fatal(err)
	}
	checkTable(t, rs[1], 30)
	var open int
	if err := rs[1].pool.QueryRow(ctx, `SELECT count(*) FROM hyp_staged WHERE committed_at IS NULL`).Scan(&open); err != nil || open != 0 {
		t.Fatalf("%d staged files left uncommitted (%v)", open, err)
	}
}
