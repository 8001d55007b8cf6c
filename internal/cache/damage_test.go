package cache

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/hyp-project/hyp/internal/wal"
)

// TestFlippedLogByteCostsOneRequest is the measurement as a test: 50 acknowledged
// requests of 10 rows sit in the log when the process dies, one byte in the middle of the
// segment is flipped, and the restart keeps the other 49 requests, records the damaged
// one's seqs exactly as a loss, and keeps the damaged bytes.
func TestFlippedLogByteCostsOneRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   func(offs []int64, size int64) int64
		hit  int // request whose rows are lost (0-based)
	}{
		{"middle record payload", func(o []int64, _ int64) int64 { return o[25] + 40 }, 24},
		{"middle record length", func(o []int64, _ int64) int64 { return o[25] + 2 }, 24},
		{"first record", func(o []int64, _ int64) int64 { return o[1] + 30 }, 0},
		{"last record", func(o []int64, size int64) int64 { return size - 5 }, 49},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			c := openTest(t, dir)
			var res []Result
			for i := range 50 {
				res = append(res, ingestN(t, c, "web", i*10, 10))
			}
			seg := c.wal.Size()
			crash(c)
			segs, _ := wal.List(layout(dir).wal())
			path := segs[len(segs)-1].Path
			var offs []int64 // offs[0] is the marker
			wal.Read(path, func(off int64, _ []byte) error { offs = append(offs, off); return nil }, nil)
			if len(offs) != 51 || seg == 0 {
				t.Fatalf("segment has %d records", len(offs))
			}
			b, _ := os.ReadFile(path)
			at := tc.at(offs, int64(len(b)))
			b[at] ^= 0x21
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}

			c = openTest(t, dir)
			defer c.Close(ctx)
			assertIDs(t, c, "web", 490)
			lost, err := c.Losses()
			if err != nil {
				t.Fatal(err)
			}
			want := res[tc.hit]
			if len(lost) != 1 {
				t.Fatalf("losses %+v", lost)
			}
			x := lost[0]
			// The range is bounded by the intact neighbours: exactly the damaged request's
			// seqs, except at the end of the log, where the next seq to be issued bounds it.
			if x.FromSeq != want.FirstSeq || x.ToSeq < want.LastSeq || (tc.hit < 49 && x.ToSeq != want.LastSeq) {
				t.Errorf("loss %d..%d, want %d..%d", x.FromSeq, x.ToSeq, want.FirstSeq, want.LastSeq)
			}
			kept, err := os.ReadFile(x.KeptAt)
			if err != nil || len(kept) != len(b) || kept[at] != b[at] {
				t.Errorf("damaged bytes not kept at %s: %v", x.KeptAt, err)
			}
			if c.LostRows() != x.Rows || x.Rows < 10 || x.Rows > x.ToSeq-x.FromSeq+1 {
				t.Errorf("lost rows %d, loss %+v", c.LostRows(), x)
			}
		})
	}
}

// TestRepairSetsAsideAnUnreadableFile: a damaged data file fails the scans of its own
// partition (naming the file, never crashing); repair --dry-run names it and changes
// nothing; repair keeps its bytes under _lost, records its seq range as a loss, and the
// partition reads again with every other row.
func TestRepairSetsAsideAnUnreadableFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		harm func(path string) error
	}{
		{"truncated", func(p string) error { return os.Truncate(p, 100) }},
		{"bytes overwritten", func(p string) error {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for i := 4; i < len(b)-8; i += 3 {
				b[i] ^= 0xff
			}
			return os.WriteFile(p, b, 0o600)
		}},
		{"deleted", os.Remove},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			c := openTest(t, dir)
			defer c.Close(ctx)
			first := ingestN(t, c, "web", 0, 100)
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			ingestN(t, c, "web", 100, 50)
			ingestN(t, c, "db", 1000, 20)
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			p := c.tables.lookup("logs", "source=web")
			victim := p.gen.files[0]
			if victim.MinSeq != first.FirstSeq {
				t.Fatalf("first file starts at %d", victim.MinSeq)
			}
			if err := tc.harm(victim.Path); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Scan(ctx, "logs", "source=web", 0, 1<<62, func(arrow.RecordBatch) error { return nil }); err == nil || !strings.Contains(err.Error(), victim.Path) {
				t.Fatalf("scan of the damaged partition: %v, want an error naming %s", err, victim.Path)
			}
			assertIDs(t, c, "db", 20) // other partitions read on

			plan, err := c.Repair(ctx, true)
			if err != nil || len(plan) != 1 || plan[0].File != victim.Path || plan[0].KeptAt != "" {
				t.Fatalf("dry run %+v %v", plan, err)
			}
			if lost, _ := c.Losses(); len(lost) != 0 {
				t.Fatalf("a dry run recorded losses: %+v", lost)
			}
			res, err := c.Repair(ctx, false)
			if err != nil || len(res) != 1 {
				t.Fatalf("repair %+v %v", res, err)
			}
			assertIDs(t, c, "web", 50)
			lost, _ := c.Losses()
			if len(lost) != 1 || lost[0].FromSeq != first.FirstSeq || lost[0].ToSeq != first.LastSeq || lost[0].Rows != 100 {
				t.Fatalf("losses %+v, want seq %d..%d", lost, first.FirstSeq, first.LastSeq)
			}
			if tc.name != "deleted" {
				if _, err := os.Stat(res[0].KeptAt); err != nil || !strings.HasPrefix(res[0].KeptAt, layout(dir).lost()) {
					t.Errorf("damaged file not kept: %s %v", res[0].KeptAt, err)
				}
			}
			if again, err := c.Repair(ctx, false); err != nil || len(again) != 0 {
				t.Errorf("second repair %+v %v", again, err)
			}
		})
	}
}

// TestUnreadableTableIsSetAsideAtOpen: a partition whose table cannot be read (every
// metadata file garbled, or its manifest lists gone: a lost newest metadata file alone
// costs nothing, see TestLostNewestMetadataLosesNothing) no longer keeps the cache from
// opening: that generation is kept aside, its seq range recorded as a loss, every other
// partition reads on, and the partition takes new rows.
func TestUnreadableTableIsSetAsideAtOpen(t *testing.T) {
	garble := func(p string) error { return os.WriteFile(p, []byte("{not json"), 0o600) }
	each := func(pattern string, harm func(string) error) func(string) error {
		return func(newest string) error {
			ms, _ := filepath.Glob(filepath.Join(filepath.Dir(newest), pattern))
			for _, m := range ms {
				if err := harm(m); err != nil {
					return err
				}
			}
			return nil
		}
	}
	for _, tc := range []struct {
		name string
		harm func(newest string) error
	}{
		{"every metadata file garbled", each("v*.metadata.json", garble)},
		{"manifest lists deleted", each("snap-*.avro", os.Remove)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			c := openTest(t, dir)
			ingestN(t, c, "web", 0, 10)
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			last := ingestN(t, c, "web", 10, 10)
			ingestN(t, c, "db", 1000, 5)
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			ms, _ := filepath.Glob(filepath.Join(dir, "logs", "source=web", "gen-*", "metadata", "v*.metadata.json"))
			newest := ""
			for _, m := range ms {
				if newest == "" || len(m) > len(newest) || m > newest {
					newest = m
				}
			}
			if err := tc.harm(newest); err != nil {
				t.Fatal(err)
			}
			c = openTest(t, dir)
			defer c.Close(ctx)
			assertIDs(t, c, "db", 5)
			lost, _ := c.Losses()
			if len(lost) != 1 || lost[0].Partition != "source=web" || lost[0].ToSeq != last.LastSeq || lost[0].Rows != 20 {
				t.Fatalf("losses %+v", lost)
			}
			if _, err := os.Stat(filepath.Join(lost[0].KeptAt, "data")); err != nil {
				t.Errorf("the generation set aside is not kept: %v", err)
			}
			ingestN(t, c, "web", 100, 7)
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			assertIDs(t, c, "web", 7)
		})
	}
}

// TestStaleCommitClaimIsCleared: a kill inside a metadata commit leaves a claim on the next
// version, which the catalog honours as a live writer for a minute; the writer's open
// clears it, so the first flush after the restart commits at once.
func TestStaleCommitClaimIsCleared(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := openTest(t, dir)
	ingestN(t, c, "web", 0, 10)
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ms, _ := filepath.Glob(filepath.Join(dir, "logs", "source=web", "gen-*", "metadata", "v*.metadata.json"))
	if len(ms) == 0 {
		t.Fatal("no metadata")
	}
	mdir := filepath.Dir(ms[0])
	for v := len(ms) + 1; v <= len(ms)+3; v++ {
		if err := os.WriteFile(filepath.Join(mdir, "v"+strconv.Itoa(v)+".metadata.json.claim"), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c = openTest(t, dir)
	defer c.Close(ctx)
	ingestN(t, c, "web", 10, 10)
	if err := c.Flush(ctx); err != nil {
		t.Fatalf("flush after a stale claim: %v", err)
	}
	assertIDs(t, c, "web", 20)
}
