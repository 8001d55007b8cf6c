package cache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
)

// crash drops the cache the way kill -9 would after the last acknowledged write: nothing
// is flushed, the lock goes with the process.
func crash(c *Cache) {
	c.wal.Close()
	c.lock.Unlock()
}

func ingestN(t *testing.T, c *Cache, src string, from, n int) Result {
	t.Helper()
	r, err := c.Ingest("logs", src, body(from, n, ""))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func assertIDs(t *testing.T, c *Cache, src string, want int) []int64 {
	t.Helper()
	seqs, ids, _ := collect(t, c, "logs", "source="+src, 0, 1<<62)
	if len(ids) != want {
		t.Fatalf("%s: %d rows, want %d", src, len(ids), want)
	}
	seen := map[int64]bool{}
	for i, id := range ids {
		if seen[id] {
			t.Fatalf("id %d twice", id)
		}
		seen[id] = true
		if i > 0 && seqs[i] <= seqs[i-1] {
			t.Fatalf("seqs not increasing at %d", i)
		}
	}
	return seqs
}

func TestReplayAfterCrashBetweenCommitAndRelease(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := openTest(t, dir)
	ingestN(t, c, "a", 0, 10)
	ingestN(t, c, "b", 1000, 10)
	last := ingestN(t, c, "a", 10, 10)
	// Commit the segment's rows to the tables but "crash" before the segment is released.
	seg, ok, err := c.wal.Rotate(func(n int64) []byte { return appendMarker(nil, n) })
	if err != nil || !ok {
		t.Fatal(err)
	}
	if err := c.flushSegment(ctx, seg, true); err != nil {
		t.Fatal(err)
	}
	crash(c)
	c = openTest(t, dir)
	defer c.Close(ctx)
	assertIDs(t, c, "a", 20)
	assertIDs(t, c, "b", 10)
	if r := ingestN(t, c, "a", 20, 1); r.FirstSeq <= last.LastSeq {
		t.Fatalf("seq %d reissued (last before crash %d)", r.FirstSeq, last.LastSeq)
	}
}

func TestCrashWithUnflushedLogAndLostSeqFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := openTest(t, dir)
	ingestN(t, c, "a", 0, 5)
	c.Flush(ctx)
	last := ingestN(t, c, "a", 5, 5)
	crash(c)
	if err := os.Remove(layout(dir).seqState()); err != nil {
		t.Fatal(err)
	}
	c = openTest(t, dir)
	defer c.Close(ctx)
	assertIDs(t, c, "a", 10)
	if r := ingestN(t, c, "a", 10, 1); r.FirstSeq <= last.LastSeq {
		t.Fatalf("seq %d reissued after losing seq.json (last %d)", r.FirstSeq, last.LastSeq)
	}
}

func TestCompactionKeepsRowsAndSeqs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := openTest(t, dir)
	defer c.Close(ctx)
	for i := 0; i < 12; i++ {
		ingestN(t, c, "a", i*10, 10)
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	before := assertIDs(t, c, "a", 120)
	res, err := c.Compact(ctx, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].FilesBefore != 12 || res[0].FilesAfter != 1 || res[0].To == res[0].From {
		t.Fatalf("compaction %+v", res)
	}
	after := assertIDs(t, c, "a", 120)
	for i := range before {
		if before[i] != after[i] {
			t.Fatalf("seq %d changed to %d", before[i], after[i])
		}
	}
	// Flush lands in the new generation; the old one is gone from disk.
	ingestN(t, c, "a", 120, 5)
	c.Flush(ctx)
	assertIDs(t, c, "a", 125)
	if genExists(string(c.tables.lookup("logs", "source=a").dir.generation(res[0].From))) {
		t.Fatal("old generation still on disk")
	}
	// Reopen sees the new generation.
	c.Close(ctx)
	c = openTest(t, dir)
	assertIDs(t, c, "a", 125)
}

// A view keeps a compaction from removing the generation it pinned, whether the cache
// pinned it itself or a reader in another process pinned it and had the owner list it.
func TestCompactionWaitsForReaders(t *testing.T) {
	for _, tc := range []struct {
		name string
		pin  func(c *Cache) (*View, error)
	}{
		{"view", (*Cache).View},
		{"pinned listing", func(c *Cache) (*View, error) {
			scratch := t.TempDir()
			return PinView(c.Dir(), scratch, func() ([]TableView, error) { return c.Listing(context.Background(), putIn(scratch)) })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := openTest(t, t.TempDir())
			defer c.Close(ctx)
			for i := range 2 {
				ingestN(t, c, "a", i*10, 10)
				c.Flush(ctx)
			}
			v, err := tc.pin(c)
			if err != nil {
				t.Fatal(err)
			}
			if len(v.Tables) != 1 || len(v.Tables[0].Partitions) != 1 || len(v.Tables[0].Partitions[0].Files) != 2 {
				t.Fatalf("pinned %+v, want the 2 files of logs source=a", v.Tables)
			}
			res, err := c.Compact(ctx, true, nil)
			if err != nil {
				t.Fatal(err)
			}
			p := c.tables.lookup("logs", "source=a")
			old := string(p.dir.generation(res[0].From))
			if !genExists(old) {
				t.Fatal("generation removed while a reader held it")
			}
			for _, f := range v.Tables[0].Partitions[0].Files {
				if _, err := os.Stat(f); err != nil {
					t.Fatalf("pinned file: %v", err)
				}
			}
			v.Release()
			p.mu.Lock()
			p.collect(c.tables.dir)
			p.mu.Unlock()
			if genExists(old) {
				t.Fatal("generation kept after the reader let go")
			}
		})
	}
}

func TestPruneHoldsForFloorAndReportsForcedGap(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC)
	clock := now.Add(-5 * 24 * time.Hour)
	c := openAt(t, &clock)
	defer c.Close(ctx)
	old := ingestN(t, c, "a", 0, 10) // 5 days old
	c.Flush(ctx)
	clock = now.Add(-2 * 24 * time.Hour)
	mid := ingestN(t, c, "a", 10, 10) // 2 days old
	c.Flush(ctx)
	clock = now
	ingestN(t, c, "a", 20, 10) // fresh
	c.Flush(ctx)

	floorSeq := old.FirstSeq + 4 // the sink exported only half of the oldest rows
	pol := PrunePolicy{
		Retention:    func(string) time.Duration { return 24 * time.Hour },
		HoldForSinks: true,
	}
	consumers := func(ds, p string) []Consumer {
		return []Consumer{{"central", floorSeq}, {"archive", old.FirstSeq + 7}, {"fresh", mid.LastSeq}}
	}
	res, err := pruneAll(ctx, c, pol, consumers, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].DeletedRows != 5 || res[0].HeldRows != 15 || res[0].ThroughSeq != floorSeq || !slices.Equal(res[0].HeldFor, []string{"archive", "central"}) {
		t.Fatalf("dry run %+v", res)
	}
	assertIDs(t, c, "a", 30) // dry run changed nothing

	pol.MaxAge = 3 * 24 * time.Hour // forces the 5-day-old rows out
	res, err = pruneAll(ctx, c, pol, consumers, false)
	if err != nil {
		t.Fatal(err)
	}
	r := res[0]
	wantLosses := []Loss{{"central", floorSeq + 1, old.LastSeq, 5}, {"archive", old.FirstSeq + 8, old.LastSeq, 2}}
	if r.DeletedRows != 10 || r.ForcedRows != 5 || !slices.Equal(r.Losses, wantLosses) {
		t.Fatalf("forced prune %+v, want losses %+v", r, wantLosses)
	}
	ps, err := c.Positions("logs", "source=a")
	if err != nil {
		t.Fatal(err)
	}
	if ps.PrunedThrough != old.LastSeq || !ps.PrunedAt.Equal(now.Add(-5*24*time.Hour)) {
		t.Fatalf("pruned mark %d at %v, want %d at %v", ps.PrunedThrough, ps.PrunedAt, old.LastSeq, now.Add(-5*24*time.Hour))
	}
	ps.Release()
	seqs := assertIDs(t, c, "a", 20)
	if seqs[0] != mid.FirstSeq {
		t.Fatalf("first surviving seq %d, want %d", seqs[0], mid.FirstSeq)
	}
	// Without holders, retention takes everything older than a day, trimming by row.
	pol.MaxAge = 0
	if res, err = pruneAll(ctx, c, pol, nil, false); err != nil || res[0].DeletedRows != 10 {
		t.Fatalf("prune %+v %v", res, err)
	}
	assertIDs(t, c, "a", 10)
	st := c.Status()[0]
	if st.Rows != 10 || st.HeadSeq <= mid.LastSeq {
		t.Fatalf("status %+v", st)
	}
	// The pruned files still take disk space in this generation, so the next scheduled
	// compaction is due, and it leaves only live files on disk.
	p := c.tables.lookup("logs", "source=a")
	dataDir := func() int {
		ents, _ := os.ReadDir(tableDir(p.gen.dir).data())
		return len(ents)
	}
	if dataDir() <= len(p.gen.files) {
		t.Fatalf("expected dead files on disk after the prune: %d entries, %d live", dataDir(), len(p.gen.files))
	}
	res2, err := c.Compact(ctx, false, nil)
	if err != nil || res2[0].Skipped != "" {
		t.Fatalf("compaction after prune %+v %v", res2, err)
	}
	if dataDir() != len(p.gen.files) {
		t.Fatalf("after compaction %d files on disk, %d live", dataDir(), len(p.gen.files))
	}
	assertIDs(t, c, "a", 10)
	if res2, _ := c.Compact(ctx, true, nil); res2[0].Skipped != "nothing to gain" {
		t.Fatalf("compaction due again: %+v", res2)
	}
}

// TestCompactionRewritesOnlySmallRuns: settled files are hard-linked into the new
// generation untouched; only runs of adjacent small files are merged, so the cost follows
// the small files, and seqs, values and later-added columns survive.
func TestCompactionRewritesOnlySmallRuns(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := openTest(t, dir)
	c.settledRows = 100
	flush := func() {
		t.Helper()
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	next := 0
	add := func(n int, extra string) {
		t.Helper()
		if _, err := c.Ingest("logs", "a", body(next, n, extra)); err != nil {
			t.Fatal(err)
		}
		next += n
		flush()
	}
	for i := 0; i < 3; i++ {
		add(150, "") // settled
	}
	for i := 0; i < 5; i++ {
		add(10, `,"late":"x"`) // small, with a column the settled files lack
	}
	add(200, `,"late":"y"`) // settled, between two small runs
	for i := 0; i < 6; i++ {
		add(7, "")
	}
	p := c.tables.lookup("logs", "source=a")
	oldFiles := p.gen.files
	inodes := map[string]os.FileInfo{}
	oldInfo := map[string]FileInfo{}
	for _, f := range oldFiles {
		oldInfo[filepath.Base(f.Path)] = f
		if f.Rows >= 100 {
			st, err := os.Stat(f.Path)
			if err != nil {
				t.Fatal(err)
			}
			inodes[filepath.Base(f.Path)] = st
		}
	}
	before := assertIDs(t, c, "a", next)
	res, err := c.Compact(ctx, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	// 3 settled + 1 merged run of 5 + 1 settled + 1 merged run of 6.
	if len(res) != 1 || res[0].Skipped != "" || res[0].FilesBefore != 15 || res[0].FilesAfter != 6 {
		t.Fatalf("compaction %+v", res)
	}
	after := assertIDs(t, c, "a", next)
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatal("seqs changed")
	}
	linked := 0
	for _, f := range p.gen.files {
		if old, ok := inodes[filepath.Base(f.Path)]; ok {
			st, err := os.Stat(f.Path)
			if err != nil || !os.SameFile(st, old) {
				t.Fatalf("settled file %s was rewritten, not linked (%v)", f.Path, err)
			}
			// Its index entry (from the footer Iceberg read) matches the one before.
			o := oldInfo[filepath.Base(f.Path)]
			if f.Rows != o.Rows || f.MinSeq != o.MinSeq || f.MaxSeq != o.MaxSeq || f.MinIngestedAt != o.MinIngestedAt || f.MaxIngestedAt != o.MaxIngestedAt {
				t.Fatalf("linked file index %+v, before %+v", f, o)
			}
			linked++
		}
		if !strings.HasPrefix(f.Path, string(p.dir.generation(res[0].To))) {
			t.Fatalf("file %s is outside the new generation %s", f.Path, res[0].To)
		}
	}
	if linked != 4 {
		t.Fatalf("%d settled files linked, want 4", linked)
	}
	// Files stay disjoint and in seq order, and the late column reads back.
	for i := 1; i < len(p.gen.files); i++ {
		if p.gen.files[i].MinSeq <= p.gen.files[i-1].MaxSeq {
			t.Fatalf("files overlap: %+v %+v", p.gen.files[i-1], p.gen.files[i])
		}
	}
	lates := 0
	if _, err := c.Scan(ctx, "logs", "source=a", 0, 1<<62, func(rec arrow.RecordBatch) error {
		idx := rec.Schema().FieldIndices("late")
		if len(idx) == 1 {
			col := rec.Column(idx[0])
			lates += col.Len() - col.NullN()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if lates != 5*10+200 {
		t.Fatalf("%d late values, want %d", lates, 5*10+200)
	}
	// The old generation is gone; the linked files live on in the new one, also after a
	// reopen.
	if genExists(string(p.dir.generation(res[0].From))) {
		t.Fatal("old generation still on disk")
	}
	c.Close(ctx)
	c = openTest(t, dir)
	defer c.Close(ctx)
	assertIDs(t, c, "a", next)
	// Not due again: only one small file is left.
	if res, _ := c.Compact(ctx, false, nil); res[0].Skipped != "not due" {
		t.Fatalf("second compaction %+v", res)
	}
	// The schema keeps evolving after a compaction that linked files, and the next one
	// links them again.
	c.settledRows = 100
	for i := 0; i < 9; i++ {
		add(5, `,"later":true`)
	}
	if res, err := c.Compact(ctx, false, nil); err != nil || res[0].Skipped != "" {
		t.Fatalf("third compaction %+v %v", res, err)
	}
	laters := 0
	if _, err := c.Scan(ctx, "logs", "source=a", 0, 1<<62, func(rec arrow.RecordBatch) error {
		if idx := rec.Schema().FieldIndices("later"); len(idx) == 1 {
			laters += rec.Column(idx[0]).Len() - rec.Column(idx[0]).NullN()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if laters != 45 {
		t.Fatalf("%d later values, want 45", laters)
	}
	assertIDs(t, c, "a", next)
}

// TestCompactionWithoutHardLinks: on a filesystem without hard links, settled files are
// copied row for row instead, and nothing is lost.
func TestCompactionWithoutHardLinks(t *testing.T) {
	ctx := context.Background()
	c := openTest(t, t.TempDir())
	defer c.Close(ctx)
	c.settledRows = 10
	c.link = func(string, string) error { return &os.LinkError{Op: "link", Err: syscall.EPERM} }
	for i := 0; i < 4; i++ {
		ingestN(t, c, "a", i*20, 20)
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	before := assertIDs(t, c, "a", 80)
	res, err := c.Compact(ctx, true, nil)
	if err != nil || res[0].FilesAfter != 4 {
		t.Fatalf("compaction %+v %v", res, err)
	}
	if after := assertIDs(t, c, "a", 80); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatal("seqs changed")
	}
	c.link = func(string, string) error { return &os.LinkError{Op: "link", Err: syscall.EIO} }
	if _, err := c.Compact(ctx, true, nil); err == nil {
		t.Fatal("an I/O error while linking was not reported")
	}
	assertIDs(t, c, "a", 80)
}

// TestFlushesGoOnWhileCompactionBuilds holds a compaction after it built the new
// generation: a flush into the same partition (with a new column) and one into another
// partition both complete meanwhile, and the swap carries what they committed, so every
// row is there once afterwards.
func TestFlushesGoOnWhileCompactionBuilds(t *testing.T) {
	ctx := context.Background()
	c := openTest(t, t.TempDir())
	defer c.Close(ctx)
	for i := range 4 {
		ingestN(t, c, "a", i*10, 10)
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ingestN(t, c, "b", 1000, 10)
	reached, release := make(chan struct{}), make(chan struct{})
	c.built = func() { close(reached); <-release }
	done := make(chan error, 1)
	go func() {
		_, err := c.Compact(ctx, true, func(_, part string) bool { return part == "source=a" })
		done <- err
	}()
	<-reached
	flushed := make(chan error, 1)
	go func() {
		if _, err := c.Ingest("logs", "a", body(40, 10, `,"late":true`)); err != nil {
			flushed <- err
			return
		}
		ingestN(t, c, "b", 1010, 10)
		flushed <- c.Flush(ctx)
	}()
	flushedWithin(t, flushed, "a flush waited for the compaction of a partition")
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c.built = nil
	assertIDs(t, c, "a", 50)
	assertIDs(t, c, "b", 20)
	p := c.tables.lookup("logs", "source=a")
	if p.gen.name == "gen-00000001" {
		t.Fatal("compaction did not swap")
	}
	rows := scanJSON(t, c, "logs", "source=a")
	late := 0
	for _, r := range rows {
		if r["late"] == true {
			late++
		}
	}
	if late != 10 {
		t.Errorf("%d rows carry the column added during compaction, want 10", late)
	}
}

// TestFlushesGoOnWhilePruneWrites holds a prune after it wrote its delete (the boundary
// file rewritten) and before it commits: a flush into the same partition and one into
// another complete meanwhile, and the prune, finding its table moved on, deletes exactly the
// old rows from the new table, keeping what the flush appended and the max seq it set.
func TestFlushesGoOnWhilePruneWrites(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC)
	clock := now.Add(-5 * 24 * time.Hour)
	c := openAt(t, &clock)
	defer c.Close(ctx)
	ingestN(t, c, "a", 0, 10) // 5 days old, pruned
	old := ingestN(t, c, "a", 10, 10)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	clock = now
	ingestN(t, c, "a", 20, 10) // fresh; in the same file as nothing old, kept
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	reached, release := make(chan struct{}), make(chan struct{})
	c.planned = func() { close(reached); <-release }
	done := make(chan error, 1)
	go func() {
		_, err := pruneAll(ctx, c, PrunePolicy{Retention: func(string) time.Duration { return 24 * time.Hour }}, nil, false)
		done <- err
	}()
	<-reached
	flushed := make(chan error, 1)
	go func() {
		ingestN(t, c, "a", 30, 10)
		ingestN(t, c, "b", 0, 10)
		flushed <- c.Flush(ctx)
	}()
	flushedWithin(t, flushed, "a flush waited for a prune writing its delete")
	c.planned = nil
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	assertIDs(t, c, "a", 20)
	if _, ids, _ := collect(t, c, "logs", "source=a", 0, 1<<62); ids[0] != 20 || ids[19] != 39 {
		t.Errorf("ids %v, want 20..39", ids)
	}
	assertIDs(t, c, "b", 10)
	ps, err := c.Positions("logs", "source=a")
	if err != nil {
		t.Fatal(err)
	}
	if ps.PrunedThrough != old.LastSeq {
		t.Errorf("pruned through %d, want %d", ps.PrunedThrough, old.LastSeq)
	}
	if head := c.tables.lookup("logs", "source=a").HeadSeq(); head <= old.LastSeq+10 {
		t.Errorf("head %d: the append's max seq was lost", head)
	}
}

// flushedWithin fails with why unless the flush reporting on flushed succeeds within 30 s.
func flushedWithin(t *testing.T, flushed <-chan error, why string) {
	t.Helper()
	select {
	case err := <-flushed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal(why)
	}
}
