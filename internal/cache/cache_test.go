package cache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/jsonrow"
	"github.com/hyp-project/hyp/internal/rowform"
)

func openTest(t *testing.T, dir string) *Cache {
	t.Helper()
	c, err := Open(context.Background(), dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// openAt opens a cache in a new directory whose clock reads *clock, so a test moves time
// by assigning to it.
func openAt(t *testing.T, clock *time.Time) *Cache {
	t.Helper()
	c, err := Open(context.Background(), t.TempDir(), Options{Now: func() time.Time { return *clock }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func body(from, n int, extra string) []byte {
	var b strings.Builder
	for i := from; i < from+n; i++ {
		fmt.Fprintf(&b, `{"id":%d,"msg":"row %d","level":"info"%s}`+"\n", i, i, extra)
	}
	return []byte(b.String())
}

// collect scans a partition and returns the seqs and ids it yields, in order.
func collect(t *testing.T, c *Cache, ds, src string, since, until int64) ([]int64, []int64, ScanStats) {
	t.Helper()
	var seqs, ids []int64
	st, err := c.Scan(context.Background(), ds, src, since, until, func(rec arrow.RecordBatch) error {
		si := rec.Schema().FieldIndices(columns.SeqColumn)[0]
		ii := rec.Schema().FieldIndices("id")[0]
		s := rec.Column(si).(*array.Int64)
		id := rec.Column(ii).(*array.Int64)
		for r := 0; r < int(rec.NumRows()); r++ {
			seqs = append(seqs, s.Value(r))
			ids = append(ids, id.Value(r))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return seqs, ids, st
}

func TestIngestFlushScan(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := openTest(t, dir)
	r1, err := c.Ingest("logs", "web", body(0, 100, ""))
	if err != nil {
		t.Fatal(err)
	}
	if r1.Accepted != 100 || r1.LastSeq-r1.FirstSeq != 99 {
		t.Fatalf("result %+v", r1)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	r2, err := c.Ingest("logs", "web", body(100, 50, `,"extra":true`))
	if err != nil {
		t.Fatal(err)
	}
	if r2.FirstSeq <= r1.LastSeq {
		t.Fatalf("seq went backwards: %+v after %+v", r2, r1)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	seqs, ids, st := collect(t, c, "logs", "source=web", 0, 1<<62)
	if len(ids) != 150 || st.FilesOpened != 2 {
		t.Fatalf("full scan: %d rows, stats %+v", len(ids), st)
	}
	for i := range ids {
		if ids[i] != int64(i) || (i > 0 && seqs[i] <= seqs[i-1]) {
			t.Fatalf("row %d: id %d seq %d", i, ids[i], seqs[i])
		}
	}
	// Incremental: only the second file is opened.
	_, ids, st = collect(t, c, "logs", "source=web", r1.LastSeq, 1<<62)
	if len(ids) != 50 || st.FilesOpened != 1 {
		t.Fatalf("incremental: %d rows, stats %+v", len(ids), st)
	}
	// At the head: nothing is opened.
	_, ids, st = collect(t, c, "logs", "source=web", r2.LastSeq, 1<<62)
	if len(ids) != 0 || st.FilesOpened != 0 {
		t.Fatalf("at head: %d rows, stats %+v", len(ids), st)
	}
	// A range in the middle of a file is cut exactly.
	_, ids, _ = collect(t, c, "logs", "source=web", r1.FirstSeq+9, r1.FirstSeq+19)
	if len(ids) != 10 || ids[0] != 10 || ids[9] != 19 {
		t.Fatalf("mid range ids %v", ids)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c = openTest(t, dir)
	defer c.Close(ctx)
	_, ids, _ = collect(t, c, "logs", "source=web", 0, 1<<62)
	if len(ids) != 150 {
		t.Fatalf("after reopen: %d rows", len(ids))
	}
	r3, _ := c.Ingest("logs", "web", body(150, 1, ""))
	if r3.FirstSeq <= r2.LastSeq {
		t.Fatalf("seq reused after reopen: %d <= %d", r3.FirstSeq, r2.LastSeq)
	}
}

// framedOf is lines in the row form, each framed as IngestPartitionRows takes them.
func framedOf(t *testing.T, lines ...string) ([]byte, int) {
	t.Helper()
	var body []byte
	for _, l := range lines {
		var at int
		body, at = rowform.BeginRow(body)
		body = append(body, rowOf(t, l)...)
		rowform.EndRow(body, at)
	}
	return body, len(lines)
}

// rowOf is a JSON object in the row form, as a server that parsed it hands it over.
func rowOf(t *testing.T, line string) []byte {
	t.Helper()
	var sc jsonrow.Scanner
	var row []byte
	if err := sc.Object([]byte(line), func(f jsonrow.Field) error {
		row = rowform.AppendField(row, f)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return row
}

func TestIngestPartitionGatewayNames(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := openTest(t, dir)
	const name = "gateway=g1/source=a/b"
	body, n := framedOf(t, `{"id":1,"_hyp_origin_seq":7}`, `{"id":2,"_hyp_origin_seq":9}`)
	r, err := c.IngestPartitionRows("logs", name, body, n)
	if err != nil || r.Accepted != 2 {
		t.Fatalf("IngestPartitionRows = %+v, %v", r, err)
	}
	one, _ := framedOf(t, `{"a":1}`)
	for _, tc := range []struct {
		part string
		body []byte
		rows int
		kind string // of the InputError; "" for an error of the caller's framing
	}{
		{"gateway=bad id/source=x", one, 1, "bad_source"},
		{"web", one, 1, "bad_source"},
		{name, one, 2, ""},
		{name, one[:len(one)-1], 1, ""},
		{name, append(slices.Clip(one), 0x7f), 1, ""},
	} {
		_, err := c.IngestPartitionRows("logs", tc.part, tc.body, tc.rows)
		ie, isInput := err.(*InputError)
		switch {
		case err == nil:
			t.Errorf("IngestPartitionRows(%q, %q, %d) stored it", tc.part, tc.body, tc.rows)
		case tc.kind != "" && (!isInput || ie.Kind != tc.kind):
			t.Errorf("IngestPartitionRows(%q, %q, %d) = %v, want %s", tc.part, tc.body, tc.rows, err, tc.kind)
		case tc.kind == "" && (isInput || !strings.Contains(err.Error(), "framed rows")):
			t.Errorf("IngestPartitionRows(%q, %q, %d) = %v, want a framing error", tc.part, tc.body, tc.rows, err)
		}
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c = openTest(t, dir) // replays the log into the gateway partition's table
	defer c.Close(ctx)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	_, ids, _ := collect(t, c, "logs", name, 0, 1<<62)
	if fmt.Sprint(ids) != "[1 2]" {
		t.Fatalf("ids %v", ids)
	}
	if cols := fmt.Sprint(c.Columns("logs")); !strings.Contains(cols, "_hyp_origin_seq") {
		t.Fatalf("columns %s lack _hyp_origin_seq", cols)
	}
	st := c.Status()
	if len(st) != 1 || st[0].Partition != name {
		t.Fatalf("status %+v", st)
	}
}

func TestCacheUnderPathsURIsWouldMangle(t *testing.T) {
	ctx := context.Background()
	// A '%' that starts no valid escape is refused before anything is written.
	bad := filepath.Join(t.TempDir(), "pct%zz")
	if _, err := Open(ctx, filepath.Join(bad, "cache"), Options{}); err == nil || !strings.Contains(err.Error(), "choose a HYP_HOME") {
		t.Errorf("Open under %s = %v", bad, err)
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Errorf("refused Open created %s: %v", bad, err)
	}
	for _, name := range []string{"pct%41", "q?x", "hash#1", "with space", "café", "a:b,c"} {
		base := t.TempDir()
		home := filepath.Join(base, name)
		c := openTest(t, filepath.Join(home, "cache"))
		for i := 0; i < 10; i++ {
			if _, err := c.Ingest("logs", "a", body(i*3, 3, "")); err != nil {
				t.Fatal(err)
			}
			if err := c.Flush(ctx); err != nil {
				t.Fatalf("%q: %v", name, err)
			}
		}
		if _, err := c.Compact(ctx, true, nil); err != nil {
			t.Fatalf("%q: compact: %v", name, err)
		}
		_, ids, _ := collect(t, c, "logs", "source=a", 0, 1<<62)
		if len(ids) != 30 {
			t.Errorf("%q: %d rows", name, len(ids))
		}
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
		// Every file the cache wrote is inside its directory.
		ents, _ := os.ReadDir(base)
		if len(ents) != 1 || ents[0].Name() != name {
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Errorf("%q: the cache wrote outside its home: %v", name, names)
		}
		r, err := OpenReader(ctx, filepath.Join(home, "cache"))
		if err != nil {
			t.Fatalf("%q: reader: %v", name, err)
		}
		v, err := r.View()
		if err != nil {
			t.Fatal(err)
		}
		for _, tv := range v.Tables {
			for _, p := range tv.Partitions {
				for _, f := range p.Files {
					if !strings.HasPrefix(f, home+string(filepath.Separator)) {
						t.Errorf("%q: view names a file outside the home: %s", name, f)
					}
					if _, err := os.Stat(f); err != nil {
						t.Errorf("%q: %v", name, err)
					}
				}
			}
		}
		v.Release()
	}
}

// A new partition's first table is created, then made current (CURRENT). When making it
// current fails (a full disk: TestFullDiskAnswersErrorsAndRecovers hit it), the flush fails
// and the table it created goes, so the next flush creates it again and keeps every row,
// instead of failing on "table already exists" for good.
func TestFirstGenerationSurvivesAFailedSwitch(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := openTest(t, dir)
	if _, err := c.Ingest("logs", "web", body(0, 10, "")); err != nil {
		t.Fatal(err)
	}
	// A directory where CURRENT goes makes its atomic replacement fail, even for root.
	cur := filepath.Join(dir, "logs", "source=web", "CURRENT")
	if err := os.MkdirAll(filepath.Join(cur, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err == nil {
		t.Fatal("flush succeeded with CURRENT unwritable")
	}
	if err := os.RemoveAll(cur); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatalf("flush once CURRENT can be written: %v", err)
	}
	if _, ids, _ := collect(t, c, "logs", "source=web", 0, 1<<62); len(ids) != 10 {
		t.Fatalf("%d rows after the retry, want 10", len(ids))
	}
}
