package cache

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hyp-project/hyp/internal/fsutil"
)

// avroFiles counts the manifest lists and manifests in a generation's metadata directory.
func avroFiles(t *testing.T, g *generation) int {
	t.Helper()
	ents, err := os.ReadDir(tableDir(g.dir).metadata())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".avro") {
			n++
		}
	}
	return n
}

// TestMetadataStaysBounded: however many commits a generation takes (appends, retention
// rewrites), it keeps one snapshot and only the manifests that snapshot needs, and its
// marks survive; a reader loading the table holds back the sweep until it lets go.
func TestMetadataStaysBounded(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		commits int
		prune   bool // prune the first half afterwards
		reader  bool // a reader holds the generation's lock during the commits
	}{
		{name: "appends", commits: 40},
		{name: "appends then prune", commits: 40, prune: true},
		{name: "reader holds the sweep back", commits: 10, reader: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Now()
			c, err := Open(ctx, t.TempDir(), Options{Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)
			ingestN(t, c, "a", 0, 1)
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			p := c.tables.lookup("logs", "source=a")
			var lk *fsutil.Lock
			if tc.reader {
				if lk, err = fsutil.SharedLock(tableDir(p.gen.dir).readersLock()); err != nil {
					t.Fatal(err)
				}
			}
			var mid Result
			for i := 1; i < tc.commits; i++ {
				r := ingestN(t, c, "a", i*3, 3)
				if i == tc.commits/2 {
					mid = r
				}
				if err := c.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				if n := len(p.gen.tbl.Metadata().Snapshots()); n != 1 {
					t.Fatalf("commit %d: %d snapshots kept", i, n)
				}
			}
			if tc.reader {
				if n := avroFiles(t, p.gen); n < tc.commits {
					t.Fatalf("%d manifest files after %d commits under a reader: swept while it could load", n, tc.commits)
				}
				lk.Unlock()
				ingestN(t, c, "a", 10_000, 1)
				if err := c.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if tc.prune {
				now = now.Add(2 * time.Hour)
				pol := PrunePolicy{Retention: func(string) time.Duration { return time.Hour }, HoldForSinks: true}
				consumers := func(string, string) []Consumer { return []Consumer{{Name: "s", Seq: mid.LastSeq}} }
				if _, err := pruneAll(ctx, c, pol, consumers, false); err != nil {
					t.Fatal(err)
				}
				if n := len(p.gen.tbl.Metadata().Snapshots()); n != 1 {
					t.Fatalf("after prune: %d snapshots kept", n)
				}
				props := p.gen.tbl.Properties()
				if props[propPrunedThrough] != strconv.FormatInt(mid.LastSeq, 10) || props[propMaxSeq] != strconv.FormatInt(p.gen.maxSeq, 10) {
					t.Fatalf("marks lost: %v", props)
				}
			}
			// One manifest list and the manifests it names (merged from 16 on).
			if n := avroFiles(t, p.gen); n > 17 {
				t.Fatalf("%d manifest files kept after %d commits", n, tc.commits)
			}
			st := c.Status()[0]
			c2, err := OpenReader(ctx, c.Dir())
			if err != nil {
				t.Fatal(err)
			}
			if got := c2.Status()[0]; got.Rows != st.Rows || got.MaxSeq != st.MaxSeq || got.PrunedThrough != st.PrunedThrough {
				t.Fatalf("reader sees %+v, writer %+v", got, st)
			}
		})
	}
}

// TestViewHoldsOneLock: a view over many partitions holds one file descriptor, and a
// generation it pinned survives compaction until it is released.
func TestViewHoldsOneLock(t *testing.T) {
	ctx := context.Background()
	c := openTest(t, t.TempDir())
	defer c.Close(ctx)
	const parts = 40
	for round := range 2 {
		for i := range parts {
			ingestN(t, c, "p"+strconv.Itoa(i), round*10, 10)
		}
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	r, err := OpenReader(ctx, c.Dir())
	if err != nil {
		t.Fatal(err)
	}
	before := openFDs(t)
	v, err := r.View()
	if err != nil {
		t.Fatal(err)
	}
	if got := openFDs(t) - before; got != 1 {
		t.Fatalf("view over %d partitions holds %d file descriptors", parts, got)
	}
	if n := len(v.Tables[0].Partitions); n != parts {
		t.Fatalf("view has %d partitions", n)
	}
	old := v.Tables[0].Partitions[0].Files[0]
	if _, err := c.Compact(ctx, true, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); err != nil {
		t.Fatalf("file of a pinned generation removed: %v", err)
	}
	v.Release()
	if _, err := c.Compact(ctx, true, nil); err != nil {
		t.Fatal(err)
	}
	p := c.tables.lookup("logs", "source=p0")
	p.mu.Lock()
	p.collect(c.tables.dir)
	p.mu.Unlock()
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("retired generation kept after the view let go: %v", err)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("counting open descriptors: %v", err)
	}
	return len(ents)
}

// TestCompactionSkipsWhatItCannotImprove: a partition with one live file and nothing dead
// on disk is left alone, forced or not.
func TestCompactionSkipsWhatItCannotImprove(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		flushes int
		prune   bool
		force   bool
		skipped string
	}{
		{name: "one file", flushes: 1, skipped: "nothing to gain"},
		{name: "one file forced", flushes: 1, force: true, skipped: "nothing to gain"},
		{name: "two files forced", flushes: 2, force: true},
		{name: "two files not due", flushes: 2, skipped: "not due"},
		{name: "one live file, dead files on disk", flushes: 3, prune: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Now()
			c, err := Open(ctx, t.TempDir(), Options{Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)
			var last Result
			for i := range tc.flushes {
				if i == tc.flushes-1 && tc.prune {
					now = now.Add(2 * time.Hour)
				}
				last = ingestN(t, c, "a", i*10, 10)
				if err := c.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if tc.prune {
				pol := PrunePolicy{Retention: func(string) time.Duration { return time.Hour }}
				if _, err := pruneAll(ctx, c, pol, nil, false); err != nil {
					t.Fatal(err)
				}
			}
			res, err := c.Compact(ctx, tc.force, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res[0].Skipped != tc.skipped {
				t.Fatalf("compaction %+v, want skipped %q", res[0], tc.skipped)
			}
			if tc.skipped == "" && res[0].From == res[0].To {
				t.Fatalf("compaction made no new generation: %+v", res[0])
			}
			if st := c.Status()[0]; st.MaxSeq != last.LastSeq {
				t.Fatalf("status %+v after compaction", st)
			}
		})
	}
}
