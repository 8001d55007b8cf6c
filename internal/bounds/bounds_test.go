package bounds

import (
	"bytes"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/iceberg-go"

	"github.com/hyp-project/hyp/internal/parquetw"
)

// footerOf writes the columns' values with parquetw, two rows a row group, and returns the
// file's footer as arrow-go reads it.
func footerOf(t *testing.T, cols map[string][]string, names ...string) *file.Reader {
	t.Helper()
	var fields []arrow.Field
	for i, n := range names {
		fields = append(fields, arrow.Field{Name: n, Type: arrow.BinaryTypes.String, Nullable: true,
			Metadata: arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{string(rune('1' + i))})})
	}
	sc := arrow.NewSchema(fields, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i, n := range names {
		b.Field(i).(*array.StringBuilder).AppendValues(cols[n], nil)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	w := parquetw.NewWriter(&buf, sc, parquetw.Options{RowGroupRows: 2})
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := file.NewParquetReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Of takes every row group: a column with a chunk of values without statistics (its
// greatest value's 4 KiB prefix has no upper bound) gets no bounds, not those of the other
// row group; a dotted name and "" get theirs; the metrics mode truncates or drops them.
func TestOf(t *testing.T) {
	cols := map[string][]string{
		"s.x":  {"b", strings.Repeat("\U0010ffff", 1100), "m", "n"},
		"e":    {"q", "", "abcdefghijklmnopqrstuvwxyz", "z"},
		"plus": {"a", "b", "c", "dddd"},
	}
	r := footerOf(t, cols, "s.x", "e", "plus")
	sc := iceberg.NewSchema(0,
		iceberg.NestedField{ID: 1, Name: "s.x", Type: iceberg.PrimitiveTypes.String},
		iceberg.NestedField{ID: 2, Name: "e", Type: iceberg.PrimitiveTypes.String},
		iceberg.NestedField{ID: 3, Name: "plus", Type: iceberg.PrimitiveTypes.String})
	for _, tc := range []struct {
		name   string
		props  iceberg.Properties
		lo, hi map[int]string
	}{
		{"default", nil, map[int]string{2: "", 3: "a"}, map[int]string{2: "z", 3: "dddd"}},
		{"truncate(2)", iceberg.Properties{"write.metadata.metrics.default": "truncate(2)"}, map[int]string{2: "", 3: "a"}, map[int]string{2: "z", 3: "de"}},
		{"column none", iceberg.Properties{"write.metadata.metrics.column.plus": "none"}, map[int]string{2: ""}, map[int]string{2: "z"}},
		{"counts", iceberg.Properties{"write.metadata.metrics.default": "counts"}, map[int]string{}, map[int]string{}},
	} {
		lo, hi, err := Of(r.MetaData(), sc, tc.props)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for _, c := range []struct {
			got  map[int][]byte
			want map[int]string
		}{{lo, tc.lo}, {hi, tc.hi}} {
			if len(c.got) != len(c.want) {
				t.Errorf("%s: bounds %v, want %v", tc.name, c.got, c.want)
			}
			for id, w := range c.want {
				if g, ok := c.got[id]; !ok || string(g) != w {
					t.Errorf("%s: field %d bound %q (present %v), want %q", tc.name, id, g, ok, w)
				}
			}
		}
	}
	if _, _, err := Of(r.MetaData(), sc, iceberg.Properties{"write.metadata.metrics.default": "truncate(x)"}); err == nil {
		t.Error("a malformed metrics mode is accepted")
	}
}
