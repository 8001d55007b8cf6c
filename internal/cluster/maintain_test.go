package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/google/uuid"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/lake"
)

// TestUpkeepKeepsStagedFilesAndRemovesOrphans: the commit merges the small file each
// chunk leaves into one; the committer's upkeep removes a file no transaction recorded (a
// replica died between writing and recording it), and keeps staged, uncommitted files
// however old they are, so the next commit still finds every row once.
func TestUpkeepKeepsStagedFilesAndRemovesOrphans(t *testing.T) {
	ctx := context.Background()
	c := openReplicas(t, 1)[0]
	c.maintain = lake.MaintainOptions{Compact: true, RetainLast: 1}
	for first := int64(1); first <= 100; first += 10 {
		if _, err := c.Store(ctx, chunk("gw-a", span(first, first+9)...)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.CommitStaged(ctx); err != nil {
		t.Fatal(err)
	}
	for first := int64(101); first <= 130; first += 10 {
		if _, err := c.Store(ctx, chunk("gw-a", span(first, first+9)...)); err != nil {
			t.Fatal(err)
		}
	}
	// A file nothing records, not even a stage (its upload completed after the stage was
	// found abandoned): only its age tells.
	orphan := stageUnrecorded(t, c, chunk("gw-a", span(131, 140)...), uuid.New())
	staged := stagedPaths(t, c)
	if len(staged) != 3 {
		t.Fatalf("%d staged files, want 3", len(staged))
	}
	ageWarehouse(t, orphan, 2*orphanAge)

	reports, err := c.Maintain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != 1 || reports[0].FilesBefore != 1 || reports[0].OrphansRemoved < 1 {
		t.Fatalf("upkeep: %+v, want the one file the 10 chunks' commit merged them into, and the orphan removed", reports)
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatalf("the unrecorded file %s is still there (%v)", orphan, err)
	}
	for _, p := range staged {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("staged file lost to upkeep: %v", err)
		}
	}
	if err := c.CommitStaged(ctx); err != nil {
		t.Fatal(err)
	}
	checkTable(t, c, 130)
}

// TestAbandonedStagesAreRemovedAtOnce: a replica killed between writing a chunk's file and
// committing its transaction leaves a stage no transaction holds; the committer removes its
// file after the next commit round, however young, while the file of a stage whose
// transaction is still open stays.
func TestAbandonedStagesAreRemovedAtOnce(t *testing.T) {
	ctx := context.Background()
	c := openReplicas(t, 1)[0]
	if _, err := c.Store(ctx, chunk("gw-a", span(1, 10)...)); err != nil {
		t.Fatal(err)
	}
	dead, live := uuid.New(), uuid.New()
	for _, id := range []uuid.UUID{dead, live} {
		if _, err := c.pool.Exec(ctx, `INSERT INTO hyp_staging (id, dataset, replica, started_at) VALUES ($1, 'logs', 'r', now() - interval '5 minutes')`, id); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := c.pool.Begin(ctx) // the live stage's transaction, still open
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM hyp_staging WHERE id = $1 FOR UPDATE`, live); err != nil {
		t.Fatal(err)
	}
	deadFile := stageUnrecorded(t, c, chunk("gw-a", span(11, 20)...), dead)
	liveFile := stageUnrecorded(t, c, chunk("gw-a", span(21, 30)...), live)
	if err := c.CommitStaged(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := c.removeAbandoned(ctx); err != nil || n != 1 {
		t.Fatalf("removeAbandoned = %d, %v; want the dead stage's file", n, err)
	}
	if _, err := os.Stat(deadFile); !os.IsNotExist(err) {
		t.Errorf("the dead stage's file %s is still there (%v)", deadFile, err)
	}
	if _, err := os.Stat(liveFile); err != nil {
		t.Errorf("the open stage's file is gone: %v", err)
	}
	var left []uuid.UUID
	rows, _ := c.pool.Query(ctx, `SELECT id FROM hyp_staging`)
	for rows.Next() {
		var id uuid.UUID
		rows.Scan(&id)
		left = append(left, id)
	}
	if len(left) != 1 || left[0] != live {
		t.Fatalf("stages left %v, want only the open one %s", left, live)
	}
	checkTable(t, c, 10)
	// Once the open transaction ends without committing, its stage is abandoned too.
	tx.Rollback(ctx)
	if n, err := c.removeAbandoned(ctx); err != nil || n != 1 {
		t.Fatalf("removeAbandoned after the rollback = %d, %v", n, err)
	}
	if _, err := os.Stat(liveFile); !os.IsNotExist(err) {
		t.Errorf("the rolled-back stage's file %s is still there (%v)", liveFile, err)
	}
}

// TestUpkeepForgetsOldCommits: bookkeeping of files committed long ago goes, that of recent
// and pending commits stays, and committing goes on as before.
func TestUpkeepForgetsOldCommits(t *testing.T) {
	ctx := context.Background()
	c := openReplicas(t, 1)[0]
	if _, err := c.Store(ctx, chunk("gw-a", span(1, 10)...)); err != nil {
		t.Fatal(err)
	}
	if err := c.CommitStaged(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.pool.Exec(ctx, `UPDATE hyp_staged SET committed_at = committed_at - interval '2 days';
		UPDATE hyp_commits SET committed_at = committed_at - interval '2 days'`); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Store(ctx, chunk("gw-a", span(11, 20)...)); err != nil {
		t.Fatal(err)
	}
	if err := c.CommitStaged(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Store(ctx, chunk("gw-a", span(21, 30)...)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Maintain(ctx); err != nil {
		t.Fatal(err)
	}
	var files, commits int
	if err := c.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM hyp_staged), (SELECT count(*) FROM hyp_commits)`).Scan(&files, &commits); err != nil {
		t.Fatal(err)
	}
	if files != 2 || commits != 1 {
		t.Fatalf("after upkeep %d staged files and %d commits are recorded, want the recent 2 and 1", files, commits)
	}
	if err := c.CommitStaged(ctx); err != nil {
		t.Fatal(err)
	}
	checkTable(t, c, 30)
	// The forgotten rows are still held by the ledger: a resend is all duplicates.
	st, err := c.Store(ctx, chunk("gw-a", span(1, 10)...))
	if err != nil || st.Accepted != 0 || st.Duplicates != 10 {
		t.Fatalf("resend of committed rows: %+v, %v", st, err)
	}
}

// stageUnrecorded writes a chunk's rows to the warehouse as stage id, as Store would, and
// records no file; it returns the file's local path.
func stageUnrecorded(t *testing.T, c *Cluster, ch Chunk, id uuid.UUID) string {
	t.Helper()
	enc := cache.NewEncoder()
	defer enc.Release()
	for i, row := range ch.Rows {
		if err := enc.Add(row, ch.Seqs[i], ch.IngestedAt[i]); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := enc.Record()
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	u := lake.Unit{Dataset: ch.Dataset, Partition: "gateway=" + ch.Gateway + "/source=" + ch.Source, First: ch.Seqs[0], Last: ch.Seqs[len(ch.Seqs)-1], Rows: rec.NumRows()}
	files, err := c.lake.Stage(context.Background(), ch.Dataset, []lake.Batch{{Unit: u, Source: ch.Source, Gateway: ch.Gateway, Records: []arrow.RecordBatch{rec}}}, id)
	if err != nil || len(files) != 1 {
		t.Fatalf("stage: %v, %d files", err, len(files))
	}
	return localPath(files[0].Path)
}

func stagedPaths(t *testing.T, c *Cluster) []string {
	t.Helper()
	rows, err := c.pool.Query(context.Background(), `SELECT path FROM hyp_staged WHERE committed_at IS NULL`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		out = append(out, localPath(p))
	}
	return out
}

func localPath(location string) string {
	if p, ok := strings.CutPrefix(location, "file://"); ok {
		return p
	}
	return location
}

// ageWarehouse sets back the modification time of every file of the table next to file.
func ageWarehouse(t *testing.T, file string, by time.Duration) {
	t.Helper()
	root := filepath.Dir(filepath.Dir(file))
	old := time.Now().Add(-by)
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		return os.Chtimes(p, old, old)
	})
	if err != nil {
		t.Fatal(err)
	}
}
