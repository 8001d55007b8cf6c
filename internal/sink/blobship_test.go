package sink

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/hyp-project/hyp/internal/blob"
	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/config"
	"github.com/hyp-project/hyp/internal/partition"
	"github.com/hyp-project/hyp/internal/watermark"
)

// The blob shipper encodes a unit while the unit is read. Units that cut across the
// cache's files and record batches come out as files holding exactly their rows, in seq
// order, and no temp file is left behind.
func TestBlobUnitsEncodedWhileRead(t *testing.T) {
	for _, format := range []string{"parquet", "jsonl"} {
		t.Run(format, func(t *testing.T) {
			ctx := context.Background()
			home := t.TempDir()
			c := openCache(t, filepath.Join(home, "cache"), nil)
			defer c.Close(ctx)
			l := newLedger()
			// Three data files, the middle one interleaved with another source.
			for _, n := range []int{1500, 700, 2300} {
				l.ingest(t, c, "a", n)
				l.ingest(t, c, "b", 11)
				if err := c.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			cfg := blobSink(home, "files")
			cfg.Format = format
			d, err := New(ctx, Options{Home: home, Sinks: map[string]config.Sink{"files": cfg}, Cache: c, UnitRows: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := d.inst(t, "files").shipper().(encodingShipper); !ok {
				t.Fatal("the blob shipper does not encode while reading")
			}
			if res := runNow(t, d, "files"); res.Status != "ok" || res.Rows != int64(len(l.rows)) {
				t.Fatalf("run: %+v", res)
			}
			files := readExports(t, cfg.Destination.Path, format)
			for _, src := range []string{"a", "b"} {
				p := partition.Name(src)
				var got []int64
				names := sortedKeys(files)
				for _, name := range names {
					ids := files[name]
					if filepath.Dir(name) != filepath.Join(testDataset, "_hyp_"+p) {
						continue
					}
					if len(ids) > 1000 {
						t.Errorf("%s holds %d rows, more than a unit", name, len(ids))
					}
					var first, last int64
					if _, err := fmt.Sscanf(filepath.Base(name), "part-%020d-%020d.", &first, &last); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if seqs := l.seqs(ids); seqs[0] != first || seqs[len(seqs)-1] != last || !slices.IsSorted(seqs) {
						t.Errorf("%s holds seqs %d..%d (sorted %v)", name, seqs[0], seqs[len(seqs)-1], slices.IsSorted(seqs))
					}
					got = append(got, ids...)
				}
				if !slices.Equal(got, l.byPart[p]) {
					t.Errorf("%s: files hold %d rows, want the %d ingested in order", src, len(got), len(l.byPart[p]))
				}
			}
			noTempFiles(t, cfg.Destination.Path)
		})
	}
}

// Rows read without encoding (a partition withheld when it was read, then released) are
// encoded when shipped.
func TestBlobShipperEncodesRowsReadPlainly(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	c := openCache(t, filepath.Join(home, "cache"), nil)
	defer c.Close(ctx)
	l := newLedger()
	ids := l.ingest(t, c, "a", 300)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(home, "exports")
	b := &blobShipper{dest: blob.NewLocalFS(root), format: blob.Parquet}
	x := &instance{cache: c, exp: &unitExporter{b}}
	p := Part{Dataset: testDataset, Partition: partition.Name("a")}
	rows, err := x.read(ctx, p, 0, 1<<62, limits{rows: 1 << 62}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.release()
	if rows.enc != nil || len(rows.recs) == 0 {
		t.Fatalf("read encoded the rows: %+v", rows)
	}
	u := watermark.Unit{First: rows.first, Last: rows.last, Rows: rows.rows}
	if n, err := b.ship(ctx, p, u, rows); err != nil || n <= 0 {
		t.Fatalf("ship: %d bytes, %v", n, err)
	}
	files := readExports(t, root, "parquet")
	if len(files) != 1 {
		t.Fatalf("files %v", files)
	}
	for _, got := range files {
		if !slices.Equal(got, ids) {
			t.Fatalf("file holds %d rows, want %d", len(got), len(ids))
		}
	}
	noTempFiles(t, root)
}

// A unit whose read fails or is dropped before it ships leaves no temp file.
func TestBlobUnitDiscardedLeavesNoTempFile(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	c := openCache(t, filepath.Join(home, "cache"), nil)
	defer c.Close(ctx)
	l := newLedger()
	for range 3 {
		l.ingest(t, c, "a", 200)
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	root := filepath.Join(home, "exports")
	p := Part{Dataset: testDataset, Partition: partition.Name("a")}
	b := &blobShipper{dest: blob.NewLocalFS(root), format: blob.Parquet}

	// Released unshipped, as when the intent's compare-and-set loses to a rewind.
	x := &instance{cache: c, exp: &unitExporter{b}}
	rows, err := x.readToShip(ctx, p, 0, 1<<62, limits{rows: 1 << 62}, "")
	if err != nil {
		t.Fatal(err)
	}
	if rows.enc == nil || rows.rows != 600 {
		t.Fatalf("unit not encoded while read: %+v", rows)
	}
	rows.release()
	rows.release()
	noTempFiles(t, root)

	// The scan fails after the encoding began.
	boom := errors.New("disk gone")
	x = &instance{cache: &failingScan{Cache: c, after: 1, err: boom}, exp: &unitExporter{b}}
	if _, err := x.readToShip(ctx, p, 0, 1<<62, limits{rows: 1 << 62}, ""); !errors.Is(err, boom) {
		t.Fatalf("read: %v, want %v", err, boom)
	}
	noTempFiles(t, root)
}

// failingScan hands over after batches, then fails.
type failingScan struct {
	*cache.Cache
	after int
	err   error
}

func (f *failingScan) Scan(ctx context.Context, dataset, part string, since, until int64, fn func(arrow.RecordBatch) error) (cache.ScanStats, error) {
	n := 0
	return f.Cache.Scan(ctx, dataset, part, since, until, func(rec arrow.RecordBatch) error {
		if n++; n > f.after {
			return f.err
		}
		return fn(rec)
	})
}

func noTempFiles(t *testing.T, root string) {
	t.Helper()
	left, err := os.ReadDir(filepath.Join(root, ".hyp-tmp"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for _, de := range left {
		t.Errorf("temp file %s left behind", de.Name())
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// A destination that cannot take a temp file fails the unit at ship time, as before the
// encoding moved into the read: the error is recorded on the partition, the intent stays,
// and the unit ships once the destination works.
func TestBlobTempFileFailureIsAShipFailure(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	c := openCache(t, filepath.Join(home, "cache"), nil)
	defer c.Close(ctx)
	l := newLedger()
	ids := l.ingest(t, c, "a", 50)
	cfg := blobSink(home, "files")
	cfg.Format = "parquet"
	root := cfg.Destination.Path
	d, err := New(ctx, Options{Home: home, Sinks: map[string]config.Sink{"files": cfg}, Cache: c})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(root), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(root, nil, 0o600); err != nil { // a file where the root must be
		t.Fatal(err)
	}
	res, err := d.RunNow(ctx, "files")
	if err != nil {
		t.Fatal(err)
	}
	if len(res[0].Errors) == 0 {
		t.Fatalf("run with no usable destination: %+v", res[0])
	}
	st := getWM(t, d, key("files", "a"))
	if st.LastError == "" || st.Intent == nil || st.Seq != 0 {
		t.Fatalf("watermark after the failed unit: %+v", st)
	}
	if err := os.Remove(root); err != nil {
		t.Fatal(err)
	}
	if res := runNow(t, d, "files"); res.Status != "ok" || res.Rows != 50 {
		t.Fatalf("run after the fix: %+v", res)
	}
	for _, got := range readExports(t, root, "parquet") {
		if !slices.Equal(got, ids) {
			t.Fatalf("file holds %v, want %v", got, ids)
		}
	}
	noTempFiles(t, root)
}

// A unit decided before the reserved directory keys (its intent names no key layout) is
// written under the plain `source=` key its first attempt used, so the retry meets that
// attempt's object; every unit decided now goes under `_hyp_source=` (SPEC 6).
func TestBlobIntentKeepsItsKeyLayout(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	c := openCache(t, filepath.Join(home, "cache"), nil)
	defer c.Close(ctx)
	l := newLedger()
	old := l.ingest(t, c, "a", 5)
	cfg := blobSink(home, "files")
	cfg.Format = "parquet"
	d, err := New(ctx, Options{Home: home, Sinks: map[string]config.Sink{"files": cfg}, Cache: c})
	if err != nil {
		t.Fatal(err)
	}
	p := partition.Name("a")
	k := watermark.Key{Instance: "files", Dataset: testDataset, Partition: p}
	st, err := d.Store().Get(k)
	if err != nil {
		t.Fatal(err)
	}
	seqs := l.seqs(old)
	x := d.inst(t, "files")
	u := watermark.Unit{First: seqs[0], Last: seqs[len(seqs)-1], Rows: int64(len(seqs)), ID: x.unitID(Part{Dataset: testDataset, Partition: p}, seqs[0], seqs[len(seqs)-1])}
	if _, err := d.Store().Update(k, st.Generation, func(s *watermark.State) error { s.Intent = &u; return nil }); err != nil {
		t.Fatal(err)
	}
	newer := l.ingest(t, c, "a", 3)
	if res := runNow(t, d, "files"); res.Status != "ok" || res.Rows != 8 {
		t.Fatalf("run: %+v", res)
	}
	files := readExports(t, cfg.Destination.Path, "parquet")
	want := map[string][]int64{
		filepath.Join(testDataset, "source=a", fmt.Sprintf("part-%020d-%020d.parquet", u.First, u.Last)): old,
	}
	ns := l.seqs(newer)
	want[filepath.Join(testDataset, "_hyp_source=a", fmt.Sprintf("part-%020d-%020d.parquet", ns[0], ns[len(ns)-1]))] = newer
	if len(files) != len(want) {
		t.Fatalf("files %v, want %v", sortedKeys(files), sortedKeys(want))
	}
	for name, ids := range want {
		if !slices.Equal(files[name], ids) {
			t.Errorf("%s holds %v, want %v (all: %v)", name, files[name], ids, sortedKeys(files))
		}
	}
}
