package lake

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/google/uuid"
)

// TestStagedFilesCommitOnce: files staged by two replicas for two gateways (each batch
// straddles midnight, so each stage writes a file per day) are committed in one snapshot
// that names the sending gateways in _hyp_gateway; committing the same id again adds
// nothing, and a staged file nobody commits stays out of the table.
func TestStagedFilesCommitOnce(t *testing.T) {
	ctx := context.Background()
	a, o := openLake(t, "sql", "day", "cluster")
	b := openAs(t, o, "cluster") // a second replica on the same catalog

	ba := batch(t, "gateway=gw-a/source=api", 1, 5, arrow.PrimitiveTypes.Int64)
	ba.Gateway = "gw-a"
	bb := batch(t, "gateway=gw-b/source=api", 1, 7, arrow.BinaryTypes.String) // n as text: a sibling column
	bb.Gateway = "gw-b"
	idA, idB, idOrphan := uuid.New(), uuid.New(), uuid.New()
	fa, err := a.Stage(ctx, "logs", []Batch{ba}, idA)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := b.Stage(ctx, "logs", []Batch{bb}, idB)
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := b.Stage(ctx, "logs", []Batch{bb}, idOrphan) // a replica that died before recording its files
	if err != nil {
		t.Fatal(err)
	}
	if len(fa) != 2 || len(fb) != 2 {
		t.Fatalf("staged %d and %d files, want 2 each (one per day)", len(fa), len(fb))
	}
	var paths []string
	for _, f := range append(fa, fb...) {
		paths = append(paths, f.Path)
	}
	for _, f := range orphan {
		for _, p := range paths {
			if p == f.Path {
				t.Fatalf("a second stage reused the name %s", p)
			}
		}
	}
	units := []Unit{ba.Unit, bb.Unit}
	c := StagedCommit{Dataset: "logs", ID: CommitID("cluster", "", units), Paths: paths, Units: units}
	res, err := a.CommitStaged(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	// Two replicas staged a file per day each: the commit merges the four small files
	// into one per day, and removes them once the snapshot holding the merge landed.
	if res.Already || res.Rows != 12 || res.Files != 2 || res.Merged != 4 || res.Leftover != 0 {
		t.Fatalf("commit = %+v, want 12 rows in 2 files merging 4", res)
	}
	for _, p := range paths {
		if _, err := os.Stat(strings.TrimPrefix(p, "file://")); !os.IsNotExist(err) {
			t.Errorf("merged staged file %s is still there (%v)", p, err)
		}
	}
	again, err := b.CommitStaged(ctx, c) // the committer's successor resolving the same intent
	if err != nil {
		t.Fatal(err)
	}
	if !again.Already {
		t.Fatalf("the same commit id was committed twice: %+v", again)
	}
	files, rows := liveFiles(t, a)
	if rows != 12 || len(files) != 2 {
		t.Fatalf("table holds %d rows in %d files, want 12 in 2", rows, len(files))
	}
	for p, n := range files {
		if n != 1 {
			t.Errorf("%s referenced %d times", p, n)
		}
	}
	tbl, err := a.load(ctx, "logs")
	if err != nil {
		t.Fatal(err)
	}
	gws := map[string]int64{}
	_, recs, err := tbl.Scan().ToArrowRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for rec, err := range recs {
		if err != nil {
			t.Fatal(err)
		}
		col := rec.Column(rec.Schema().FieldIndices(GatewayColumn)[0])
		for i := 0; i < col.Len(); i++ {
			gws[col.ValueStr(i)]++
		}
		rec.Release()
	}
	if gws["gw-a"] != 5 || gws["gw-b"] != 7 || len(gws) != 2 {
		t.Fatalf("_hyp_gateway counts %v, want gw-a 5, gw-b 7", gws)
	}

	// The abandoned stage's files go, however young; a committed stage named by mistake
	// loses nothing.
	n, err := b.RemoveStaged(ctx, "logs", []uuid.UUID{idOrphan, idA})
	if err != nil || n != len(orphan) {
		t.Fatalf("RemoveStaged = %d, %v; want the %d abandoned files", n, err, len(orphan))
	}
	for _, f := range orphan {
		if _, err := os.Stat(strings.TrimPrefix(f.Path, "file://")); !os.IsNotExist(err) {
			t.Errorf("abandoned file %s is still there (%v)", f.Path, err)
		}
	}
	if files, rows := liveFiles(t, a); rows != 12 || len(files) != 2 {
		t.Fatalf("after RemoveStaged the table holds %d rows in %d files, want 12 in 2", rows, len(files))
	}
}

// TestStageGroupsBatchesIntoOneFilePerPartition: batches of two gateways staged together
// (one of them bringing a sibling column the other lacks) make one file per day, not one per
// batch, and every row keeps its own gateway and values.
func TestStageGroupsBatchesIntoOneFilePerPartition(t *testing.T) {
	ctx := context.Background()
	l, _ := openLake(t, "sql", "day", "cluster")
	ba := batch(t, "gateway=gw-a/source=api", 1, 5, arrow.PrimitiveTypes.Int64)
	ba.Gateway = "gw-a"
	bb := batch(t, "gateway=gw-b/source=api", 1, 7, arrow.BinaryTypes.String)
	bb.Gateway = "gw-b"
	files, err := l.Stage(ctx, "logs", []Batch{ba, bb}, uuid.New())
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("staged %d files, want 2 (one per day)", len(files))
	}
	var paths []string
	for _, f := range files {
		paths = append(paths, f.Path)
	}
	units := []Unit{ba.Unit, bb.Unit}
	if _, err := l.CommitStaged(ctx, StagedCommit{Dataset: "logs", ID: CommitID("cluster", "", units), Paths: paths, Units: units}); err != nil {
		t.Fatal(err)
	}
	tbl, err := l.load(ctx, "logs")
	if err != nil {
		t.Fatal(err)
	}
	_, recs, err := tbl.Scan().ToArrowRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Per gateway: rows, and rows whose n is null (gw-a's n is a number, gw-b's is text
	// kept in the sibling column, so gw-b's rows have no number n).
	rows, nullN := map[string]int{}, map[string]int{}
	for rec, err := range recs {
		if err != nil {
			t.Fatal(err)
		}
		gw := rec.Column(rec.Schema().FieldIndices(GatewayColumn)[0])
		n := rec.Column(rec.Schema().FieldIndices("n")[0])
		for i := 0; i < gw.Len(); i++ {
			rows[gw.ValueStr(i)]++
			if n.IsNull(i) {
				nullN[gw.ValueStr(i)]++
			}
		}
		rec.Release()
	}
	if rows["gw-a"] != 5 || rows["gw-b"] != 7 || nullN["gw-a"] != 0 || nullN["gw-b"] != 7 {
		t.Fatalf("rows per gateway %v, rows without a number n %v; want gw-a 5 (all numbered), gw-b 7 (none)", rows, nullN)
	}
}
