package lake

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	icebergio "github.com/apache/iceberg-go/io"

	"github.com/hyp-project/hyp/internal/testutil/miniotest"
	"github.com/hyp-project/hyp/internal/testutil/pgtest"
)

// TestMaintainOnS3WithPostgres maintains a table in MinIO registered in PostgreSQL, with
// every unreferenced object old enough to go: compaction (with a concurrent commit),
// expiry and orphan removal keep every row, every live object and a pending commit's
// objects, and remove the stray one.
func TestMaintainOnS3WithPostgres(t *testing.T) {
	ctx := context.Background()
	m := miniotest.Start(t)
	m.SetEnv(t)
	m.CreateBucket(t, "lake")
	o := Options{Catalog: "sql", URI: pgtest.Start(t).URI(), Warehouse: "s3://lake/tables", Namespace: "hyp", PartitionBy: "day",
		Region: m.Region(), Endpoint: m.Endpoint(), PathStyle: true, Gateway: "gw-a"}
	a, b := openAs(t, o, "gw-a"), openAs(t, o, "gw-b")
	commitMany(t, a, "source=web", 1, 5, 4)
	commitMany(t, b, "source=db", 1, 3, 4)
	tbl, _ := a.load(ctx, "logs")
	pending := commitOf("gw-a", batch(t, "source=web", 100, 4, arrow.PrimitiveTypes.Int64))
	pending.Base = headOf(tbl)
	written, err := a.write(ctx, tbl, pending)
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := tbl.FS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stray := tbl.Location() + "/data/stray.parquet"
	if err := fsys.(icebergio.WriteFileIO).WriteFile(stray, []byte("x")); err != nil {
		t.Fatal(err)
	}
	rows := rowsOf(t, a)
	filesBefore, _ := liveFiles(t, a)

	opts := MaintainOptions{Compact: true, RetainLast: 1, Protect: []Pending{{Dataset: "logs", ID: pending.ID, Base: pending.Base, Units: []Unit{pending.Batches[0].Unit}}}}
	// During the compaction another machine commits: it is re-staged on the new head.
	opts.beforeCompactCommit = func() { commitMany(t, b, "source=db", 100, 1, 4) }
	rep, err := a.Maintain(ctx, opts)
	if err != nil || len(rep) != 1 {
		t.Fatalf("maintain = %+v, %v", rep, err)
	}
	r := rep[0]
	// The orphans are the stray object and the manifests of the compaction's attempt that
	// lost to the concurrent commit.
	if r.OrphansRemoved < 1 || r.SnapshotsExpired != 7 || r.FilesAfter >= r.FilesBefore || r.FilesBefore != len(filesBefore) {
		t.Errorf("report %+v; want orphans removed, 7 of 8 snapshots expired, fewer files than %d", r, len(filesBefore))
	}
	got := rowsOf(t, a)
	checkNoDuplicates(t, got)
	for k := range rows {
		if got[k] != 1 {
			t.Errorf("row %s: %d times after maintain", k, got[k])
		}
	}
	if len(got) != len(rows)+4 { // and the rows b committed during the compaction
		t.Errorf("%d rows after maintain, want %d", len(got), len(rows)+4)
	}
	keys := m.List(t, "lake", "tables/")
	has := func(loc string) bool {
		return slices.Contains(keys, strings.TrimPrefix(loc, "s3://lake/"))
	}
	if has(stray) {
		t.Errorf("the stray object is still there")
	}
	for _, f := range written {
		if !has(f.FilePath()) {
			t.Errorf("the pending commit's file %s was removed", f.FilePath())
		}
	}
	live, _ := liveFiles(t, a)
	for f := range live {
		if !has(f) {
			t.Errorf("live data file %s is gone", f)
		}
	}
	if res, err := a.Commit(ctx, pending); err != nil || res.Already {
		t.Fatalf("recovering the pending commit = %+v, %v", res, err)
	}
	after := rowsOf(t, a)
	checkNoDuplicates(t, after)
	if len(after) != len(got)+4 {
		t.Errorf("rows after the recovering commit: %d, want %d", len(after), len(got)+4)
	}
}
