package lakeread

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// footerFile writes 100 rows (s "m00000".., n, f with both zeros, b, and nulls in every
// column) in row groups of 40 with arrow-go and returns the file's path.
func footerFile(t *testing.T, props ...parquet.WriterProperty) string {
	t.Helper()
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "f", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "b", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	}, nil)
	bld := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer bld.Release()
	for i := range 100 {
		if i%7 == 3 {
			for _, f := range bld.Fields() {
				f.AppendNull()
			}
			continue
		}
		bld.Field(0).(*array.StringBuilder).Append(fmt.Sprintf("m%05d", i))
		bld.Field(1).(*array.Int64Builder).Append(int64(i) - 50)
		f := float64(i)
		switch i % 10 {
		case 0:
			f = math.Copysign(0, -1)
		case 5:
			f = 0
		}
		bld.Field(2).(*array.Float64Builder).Append(f)
		bld.Field(3).(*array.BooleanBuilder).Append(i%2 == 0)
	}
	rec := bld.NewRecordBatch()
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "f.parquet")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(sc, out, parquet.NewWriterProperties(append([]parquet.WriterProperty{parquet.WithMaxRowGroupLength(40)}, props...)...), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// patchFooter replaces every old in the footer of the Parquet file at path (the
// statistics, not the page headers) by new, of the same length.
func patchFooter(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := int(binary.LittleEndian.Uint32(b[len(b)-8:]))
	footer := b[len(b)-8-n : len(b)-8]
	if !bytes.Contains(footer, []byte(old)) {
		t.Fatalf("the footer holds no %q", old)
	}
	copy(footer, bytes.ReplaceAll(footer, []byte(old), []byte(new)))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestFooterHolds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		props   []parquet.WriterProperty
		patch   [2]string // old, new in the footer
		lacking []string
		err     string
	}{
		{name: "arrow-go's statistics"},
		{name: "no statistics for s", props: []parquet.WriterProperty{parquet.WithStatsFor("s", false)}, lacking: []string{"s"}},
		{name: "a min above a value", patch: [2]string{"m00000", "m00001"}, err: "row group 0, column s: min"},
		{name: "a max below a value", patch: [2]string{"m00099", "m00098"}, err: "row group 2, column s: max"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := footerFile(t, tc.props...)
			if tc.patch[0] != "" {
				patchFooter(t, path, tc.patch[0], tc.patch[1])
			}
			lacking, err := FooterHolds(path)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("error %v, want one containing %q", err, tc.err)
			}
			if !slices.Equal(lacking, tc.lacking) {
				t.Errorf("columns lacking statistics %v, want %v", lacking, tc.lacking)
			}
		})
	}
}
