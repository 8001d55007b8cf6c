package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/lake"
)

// TestUpkeepKeepsStagedFilesAndRemovesOrphans: the committer's upkeep compacts the small
// files each chunk leaves, removes a file no transaction recorded (a replica died between
// writing and recording it), and keeps staged, uncommitted files however old they are, so
// the next commit still finds every row once.
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
	orphan := stageUnrecorded(t, c, chunk("gw-a", span(131, 140)...))
	staged := stagedPaths(t, c)
	if len(staged) != 3 {
		t.Fatalf("%d staged files, want 3", len(staged))
	}
	ageWarehouse(t, orphan, 2*orphanAge)

	reports, err := c.Maintain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != 1 || reports[0].FilesBefore != 10 || reports[0].FilesAfter >= reports[0].FilesBefore || reports[0].OrphansRemoved < 1 {
		t.Fatalf("upkeep: %+v, want the 10 committed files compacted and the orphan removed", reports)
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

// stageUnrecorded writes a chunk's rows to the warehouse as Store would and records nothing,
// as a replica killed between the two does; it returns the file's local path.
func stageUnrecorded(t *testing.T, c *Cluster, ch Chunk) string {
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
	files, err := c.lake.Stage(context.Background(), ch.Dataset, lake.Batch{Unit: u, Source: ch.Source, Gateway: ch.Gateway, Records: []arrow.RecordBatch{rec}})
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
