package lake

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/hyp-project/hyp/internal/columns"
)

// twinBatch is one row whose fields are names, each holding its own name as a string value,
// so a read shows which field reached which column.
func twinBatch(t *testing.T, seq int64, names ...string) Batch {
	t.Helper()
	ts := &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
	var fields []arrow.Field
	for _, n := range names {
		fields = append(fields, arrow.Field{Name: n, Type: arrow.BinaryTypes.String, Nullable: true})
	}
	fields = append(fields, arrow.Field{Name: columns.SeqColumn, Type: arrow.PrimitiveTypes.Int64}, arrow.Field{Name: columns.IngestedAtColumn, Type: ts})
	b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(fields, nil))
	defer b.Release()
	for i, n := range names {
		b.Field(i).(*array.StringBuilder).Append(n)
	}
	b.Field(len(names)).(*array.Int64Builder).Append(seq)
	b.Field(len(names) + 1).(*array.TimestampBuilder).Append(arrow.Timestamp(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixMicro()))
	rec := b.NewRecordBatch()
	t.Cleanup(rec.Release)
	return Batch{Unit: Unit{Dataset: "logs", Partition: "source=a", First: seq, Last: seq, Rows: 1}, Source: "a", Records: []arrow.RecordBatch{rec}}
}

// Names that differ only in case get columns no two of which fold to one name (Spark and
// Trino read the table), numbered in the order they reach the table and never renamed; every
// writer maps each name to its own column; the name mapping lists every column as the
// schema grows.
func TestCaseTwinsGetColumnsOfTheirOwn(t *testing.T) {
	ctx := context.Background()
	l, o := openLake(t, "sql", "none", "g")
	commits := [][]string{{"id"}, {"ID", "Id", "id"}, {"iD", "id__2"}}
	for i, names := range commits {
		if _, err := l.Commit(ctx, commitOf("g", twinBatch(t, int64(i+1), names...))); err != nil {
			t.Fatal(err)
		}
	}
	// Another machine, later: the same names land in the same columns.
	other := openAs(t, o, "h")
	if _, err := other.Commit(ctx, commitOf("h", twinBatch(t, 9, "Id", "ID"))); err != nil {
		t.Fatal(err)
	}
	tbl, err := l.load(ctx, "logs")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"id": "", "ID__2": "ID", "Id__3": "Id", "iD__4": "iD", "id__2__2": "id__2"}
	folded := map[string]string{}
	for _, f := range tbl.Schema().Fields() {
		if prev, ok := folded[strings.ToLower(f.Name)]; ok {
			t.Errorf("columns %q and %q fold to one name", prev, f.Name)
		}
		folded[strings.ToLower(f.Name)] = f.Name
		if strings.HasPrefix(f.Name, "_hyp_") {
			continue
		}
		from, ok := want[f.Name]
		if !ok {
			t.Errorf("unexpected column %q (doc %q)", f.Name, f.Doc)
			continue
		}
		if got := strings.TrimPrefix(f.Doc, twinDoc); (from == "" && f.Doc != "") || (from != "" && got != from) {
			t.Errorf("column %q has doc %q, want it to hold %q", f.Name, f.Doc, from)
		}
		delete(want, f.Name)
	}
	if len(want) != 0 {
		t.Errorf("missing columns %v in %s", want, tbl.Schema())
	}
	if nm := tbl.NameMapping(); nm == nil || !mapsEvery(nm, tbl.Schema()) {
		t.Errorf("the name mapping %v does not list every column of %s", nm, tbl.Schema())
	}
	if _, rows := liveFiles(t, l); rows != 4 {
		t.Errorf("rows = %d, want 4", rows)
	}
}
