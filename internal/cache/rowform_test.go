package cache

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/hyp-project/hyp/internal/rowform"
)

// TestIngestRowsInTheRowForm stores rows a trusted decoder framed with rowform.BeginField
// and rowform.EndField: they reach the table with their values and types, under their
// source.
func TestIngestRowsInTheRowForm(t *testing.T) {
	ctx := context.Background()
	c := openTest(t, t.TempDir())
	defer c.Close(ctx)
	field := func(row []byte, key, value string) []byte {
		row, at := rowform.BeginField(row, key)
		row = append(row, value...)
		rowform.EndField(row, at)
		return row
	}
	var rows []rowform.Row
	for i := range 3 {
		var row []byte
		row = field(row, "msg", fmt.Sprintf(`"hello \"%d\""`, i))
		row = field(row, "n", strconv.Itoa(i))
		row = field(row, "attrs", `{"k":[1,2]}`)
		row = field(row, "gone", `null`)
		rows = append(rows, rowform.Row{Source: "svc", Line: row})
	}
	if _, err := c.IngestRows("logs", rows); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := scanJSON(t, c, "logs", "source=svc")
	if len(got) != 3 {
		t.Fatalf("%d rows", len(got))
	}
	for i, r := range got {
		if r["msg"] != fmt.Sprintf(`hello "%d"`, i) || fmt.Sprint(r["n"]) != strconv.Itoa(i) || r["attrs"] != `{"k":[1,2]}` || r["gone"] != nil {
			t.Errorf("row %d: %v", i, r)
		}
	}
}

// TestIngestAllocatesPerRequestNotPerRow: validating, partitioning and logging a request
// allocates per request, not per row, whether the partition comes from ?source= or from
// each row's source field: 990 more rows may only grow buffers (a few doublings per
// group), where an allocation per row would add 990.
func TestIngestAllocatesPerRequestNotPerRow(t *testing.T) {
	ctx := context.Background()
	c := openTest(t, t.TempDir())
	defer c.Close(ctx)
	bodyOf := func(n int) []byte {
		var b []byte
		for i := range n {
			b = fmt.Appendf(b, `{"id":%d,"source":"s%d","msg":"hello","ok":true,"v":1.5}`+"\n", i, i%3)
		}
		return b
	}
	for _, source := range []string{"fixed", ""} {
		allocs := func(body []byte) float64 {
			return testing.AllocsPerRun(20, func() {
				if _, err := c.Ingest("logs", source, body); err != nil {
					t.Fatal(err)
				}
			})
		}
		small, large := allocs(bodyOf(10)), allocs(bodyOf(1000))
		if large > small+100 {
			t.Errorf("source %q: %.0f allocations for 10 rows, %.0f for 1,000", source, small, large)
		}
	}
}

// TestIngestRowGroups stores groups framed with rowform.BeginRow and rowform.EndRow in one
// buffer: each partition gets its rows in order, two groups of one source are merged
// without writing over the caller's buffer (in the next request too, whose merge reuses the
// pooled body), a source that is not valid files its rows under "unknown", and a group
// whose count does not match its framing is refused.
func TestIngestRowGroups(t *testing.T) {
	ctx := context.Background()
	c := openTest(t, t.TempDir())
	defer c.Close(ctx)
	var buf []byte
	var groups []rowform.RowGroup
	seq := 0
	add := func(source string, n int) {
		start := len(buf)
		for range n {
			var at, f int
			buf, at = rowform.BeginRow(buf)
			buf, f = rowform.BeginField(buf, "i")
			buf = strconv.AppendInt(buf, int64(seq), 10)
			rowform.EndField(buf, f)
			rowform.EndRow(buf, at)
			seq++
		}
		groups = append(groups, rowform.RowGroup{Source: source, Rows: n, Body: buf[start:]})
	}
	add("a", 2)
	add("b", 1)
	add("a", 3)
	add("bad\x01source", 1)
	add("", 0)
	before := append([]byte(nil), buf...)
	res, err := c.IngestRowGroups("logs", groups)
	if err != nil || res.Accepted != 7 || res.LastSeq-res.FirstSeq != 6 {
		t.Fatalf("IngestRowGroups = %+v, %v", res, err)
	}
	if string(before) != string(buf) {
		t.Fatal("IngestRowGroups wrote over the caller's buffer")
	}
	// A second request merging its first partition's groups gets the body the first
	// request's merge handed back to the pool, with none of that request's rows in it.
	buf, groups = nil, nil
	add("b", 1)
	add("b", 2)
	if res, err := c.IngestRowGroups("logs", groups); err != nil || res.Accepted != 3 {
		t.Fatalf("second IngestRowGroups = %+v, %v", res, err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for part, want := range map[string]string{"source=a": "[0 1 3 4 5]", "source=b": "[2 7 8 9]", "source=unknown": "[6]"} {
		var got []string
		for _, r := range scanJSON(t, c, "logs", part) {
			got = append(got, fmt.Sprint(r["i"]))
		}
		if fmt.Sprint(got) != want {
			t.Errorf("%s: i = %v, want %s", part, got, want)
		}
	}
	if _, err := c.IngestRowGroups("logs", []rowform.RowGroup{{Source: "a", Rows: 2, Body: groups[1].Body[:len(groups[1].Body)-1]}}); err == nil {
		t.Error("a group with fewer framed rows than it claims was logged")
	}
}
