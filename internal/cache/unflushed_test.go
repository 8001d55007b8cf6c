package cache

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/hyp-project/hyp/internal/columns"
)

// putIn is a Listing's put that stores the unflushed files in dir.
func putIn(dir string) func(string, []byte) (string, error) {
	return func(name string, data []byte) (string, error) {
		path := filepath.Join(dir, name)
		return path, os.WriteFile(path, data, 0o600)
	}
}

// listedRow is a row as a listing's files hold it: its partition and its non-null fields.
type listedRow struct {
	partition string
	fields    map[string]string
	unflushed bool // read from an unflushed file
}

// listedRows reads every row of dataset that tables name, in the tables' files and the
// unflushed files alike, by seq; a seq read twice has two entries.
func listedRows(t *testing.T, tables []TableView, dataset string) map[int64][]listedRow {
	t.Helper()
	out := map[int64][]listedRow{}
	for _, tv := range tables {
		if tv.Dataset != dataset {
			continue
		}
		for _, p := range tv.Partitions {
			for _, f := range p.Files {
				readListed(t, f, p.FieldIDs, 0, p.Partition, out)
			}
		}
		for _, u := range tv.Unflushed {
			readListed(t, u.Path, u.FieldIDs, u.PartitionFieldID, "", out)
		}
	}
	return out
}

// readListed adds the rows of the file at path to out: its columns are named by ids, and
// each row's partition is part, or the value of column partID.
func readListed(t *testing.T, path string, ids map[string]int, partID int, part string, out map[int64][]listedRow) {
	t.Helper()
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	names := map[int]string{}
	for name, id := range ids {
		names[id] = name
	}
	rows := make([]listedRow, tbl.NumRows())
	for i := range rows {
		rows[i] = listedRow{partition: part, fields: map[string]string{}, unflushed: partID != 0}
	}
	for c := range int(tbl.NumCols()) {
		id, _ := fieldID(tbl.Schema().Field(c))
		name, ok := names[id]
		if !ok && id != partID {
			t.Fatalf("%s: column %s has field id %d, which the listing does not name", path, tbl.Schema().Field(c).Name, id)
		}
		r := 0
		for _, chunk := range tbl.Column(c).Data().Chunks() {
			for i := range chunk.Len() {
				switch {
				case chunk.IsNull(i):
				case id == partID:
					rows[r].partition = chunk.ValueStr(i)
				default:
					rows[r].fields[name] = chunk.ValueStr(i)
				}
				r++
			}
		}
	}
	for _, row := range rows {
		var seq int64
		fmt.Sscan(row.fields[columns.SeqColumn], &seq)
		delete(row.fields, columns.IngestedAtColumn)
		out[seq] = append(out[seq], row)
	}
}

// A listing made before any flush has every row the log holds, each once, with its
// partition and its fields under the columns the flush then gives them; it changes nothing
// of the dataset, and after the flush the same listing comes from the tables alone.
func TestListingHasUnflushedRows(t *testing.T) {
	ctx := context.Background()
	c := openTest(t, t.TempDir())
	defer c.Close(ctx)
	ingestN(t, c, "a", 0, 10)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ingestN(t, c, "a", 10, 5)
	for _, b := range []string{`{"id":"x","new":true}`, `{"id":3,"new":"y"}`} {
		if _, err := c.Ingest("logs", "b", []byte(b+"\n")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Ingest("traces", "b", []byte(`{"span":1}`+"\n")); err != nil {
		t.Fatal(err)
	}
	before, _ := c.Columns("logs")

	list := func() ([]TableView, map[int64][]listedRow) {
		t.Helper()
		tables, err := c.Listing(ctx, putIn(t.TempDir()))
		if err != nil {
			t.Fatal(err)
		}
		return tables, listedRows(t, tables, "logs")
	}
	tables, rows := list()
	if len(tables) != 2 || tables[0].Dataset != "logs" || len(tables[0].Unflushed) != 1 || tables[1].Dataset != "traces" || len(tables[1].Unflushed) != 1 {
		t.Fatalf("listing %+v, want logs and traces with one unflushed file each", tables)
	}
	if len(rows) != 17 {
		t.Fatalf("%d rows listed, want 17", len(rows))
	}
	for seq, rs := range rows {
		want := "source=a"
		if seq > 15 {
			want = "source=b"
		}
		if len(rs) != 1 || rs[0].partition != want {
			t.Fatalf("seq %d listed as %+v, want once in %s", seq, rs, want)
		}
	}
	if now, _ := c.Columns("logs"); len(now) != len(before) {
		t.Fatalf("the listing changed the dataset's columns: %v, then %v", before, now)
	}
	if _, ok := c.Columns("traces"); ok {
		t.Fatal("the listing made dataset traces")
	}

	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	flushed, again := list()
	if len(flushed[0].Unflushed) != 0 || len(flushed[1].Unflushed) != 0 {
		t.Fatalf("unflushed files after a flush: %+v", flushed)
	}
	if !maps.EqualFunc(rows, again, func(a, b []listedRow) bool {
		return len(a) == 1 && len(b) == 1 && a[0].partition == b[0].partition && maps.Equal(a[0].fields, b[0].fields)
	}) {
		t.Fatalf("rows unflushed %v, flushed %v", rows, again)
	}
	if fmt.Sprint(tables[0].Columns) != fmt.Sprint(flushed[0].Columns) {
		t.Fatalf("columns unflushed %v, flushed %v", tables[0].Columns, flushed[0].Columns)
	}
}

// A listing sees every row acknowledged before it was asked for exactly once, in its own
// partition, while ingest, flushes (creating the tables of new partitions) and compactions
// run at the same time. Rows acknowledged meanwhile are seen once or not at all.
func TestListingRacesFlushAndCompaction(t *testing.T) {
	ctx := context.Background()
	c := openTest(t, t.TempDir())
	defer c.Close(ctx)
	c.settledRows = 1 << 30 // every file is small: compaction always has work

	var mu sync.Mutex
	acked := map[int64]string{} // seq -> partition
	ingest := func(src string, n int) {
		res, err := c.Ingest("logs", src, body(0, n, ""))
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		for s := res.FirstSeq; s <= res.LastSeq; s++ {
			acked[s] = "source=" + src
		}
		mu.Unlock()
	}
	for i := range 40 {
		ingest(fmt.Sprintf("p%02d", i), 3)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	loop := func(f func(i int)) {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				f(i)
			}
		})
	}
	// A new partition every other request, so flushes keep making first tables.
	ingested := make(chan struct{})
	wg.Go(func() {
		defer close(ingested)
		for i := range 200 {
			select {
			case <-stop:
				return
			default:
			}
			ingest(fmt.Sprintf("p%03d", i/2), 1+i%4)
		}
	})
	loop(func(int) {
		if err := c.Flush(ctx); err != nil {
			t.Error(err)
		}
	})
	loop(func(int) {
		if _, err := c.Compact(ctx, true, nil); err != nil {
			t.Error(err)
		}
	})
	// Listings run while the rows come in, then a few more while the flushes catch up.
	after := 0
	for round := 0; after < 3; round++ {
		select {
		case <-ingested:
			after++
		default:
		}
		mu.Lock()
		want := maps.Clone(acked)
		mu.Unlock()
		scratch := t.TempDir()
		start := time.Now()
		v, err := PinView(c.Dir(), scratch, func() ([]TableView, error) { return c.Listing(ctx, putIn(scratch)) })
		if err != nil {
			t.Fatal(err)
		}
		rows := listedRows(t, v.Tables, "logs")
		unflushed := 0
		for _, rs := range rows {
			if rs[0].unflushed {
				unflushed++
			}
		}
		t.Logf("round %d: %d rows, %d of them unflushed, in %v", round, len(rows), unflushed, time.Since(start))
		v.Release()
		for seq, rs := range rows {
			if len(rs) > 1 {
				t.Fatalf("round %d: seq %d listed %d times: %+v", round, seq, len(rs), rs)
			}
		}
		for seq, part := range want {
			if rs := rows[seq]; len(rs) != 1 || rs[0].partition != part {
				t.Fatalf("round %d: seq %d (acknowledged in %s before the listing) listed as %+v", round, seq, part, rs)
			}
		}
		if _, err := os.Stat(scratch); !os.IsNotExist(err) {
			t.Fatalf("round %d: the view's own files outlive Release: %v", round, err)
		}
	}
	close(stop)
	wg.Wait()
}

// A partition whose lock is held when a listing reaches it is listed once the lock is free,
// in its place among the others.
func TestListingWaitsForABusyPartition(t *testing.T) {
	ctx := context.Background()
	c := openTest(t, t.TempDir())
	defer c.Close(ctx)
	for _, src := range []string{"a", "b", "c"} {
		ingestN(t, c, src, 0, 2)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ingestN(t, c, "b", 2, 1)
	p := c.tables.lookup("logs", "source=b")
	p.mu.Lock()
	type result struct {
		tables []TableView
		err    error
	}
	done := make(chan result)
	go func() {
		tables, err := c.Listing(ctx, putIn(t.TempDir()))
		done <- result{tables, err}
	}()
	// Time for the listing to reach b and pass it by; the result must be the same if not.
	time.Sleep(50 * time.Millisecond)
	p.mu.Unlock()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	var names []string
	for _, pf := range r.tables[0].Partitions {
		names = append(names, pf.Partition)
	}
	if fmt.Sprint(names) != "[source=a source=b source=c]" || len(r.tables[0].Partitions[1].Files) != 1 {
		t.Fatalf("partitions %v (%+v), want a, b and c, b with its file", names, r.tables[0].Partitions)
	}
	if rows := listedRows(t, r.tables, "logs"); len(rows) != 7 {
		t.Fatalf("%d rows listed, want 7", len(rows))
	}
}
