package cache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/hyp-project/hyp/internal/columns"
	"github.com/hyp-project/hyp/internal/parquetw"
)

// Writers of writeSeqFile: arrow-go's, with small pages so a seek lands past a group's first
// page, with and without dictionaries; and the cache's own (parquetw), whose files the
// cache's scans read in production.
const (
	arrowPlain = iota
	arrowDict
	ownWriter
)

// writeSeqFile writes a data file whose rows carry seqs and a body "row-<seq>", in row groups
// of groupRows, and returns its path and the schema a scan lays it out in.
func writeSeqFile(t *testing.T, seqs []int64, groupRows int64, writer int) (string, *arrow.Schema, []int) {
	t.Helper()
	id := func(n int) arrow.Metadata {
		return arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{strconv.Itoa(n)})
	}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: columns.SeqColumn, Type: arrow.PrimitiveTypes.Int64, Metadata: id(1)},
		{Name: "body", Type: arrow.BinaryTypes.String, Nullable: true, Metadata: id(2)},
	}, nil)
	sb := array.NewInt64Builder(memory.DefaultAllocator)
	bb := array.NewStringBuilder(memory.DefaultAllocator)
	for _, s := range seqs {
		sb.Append(s)
		bb.Append(fmt.Sprintf("row-%d", s))
	}
	rec := array.NewRecordBatch(sc, []arrow.Array{sb.NewArray(), bb.NewArray()}, int64(len(seqs)))
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "f.parquet")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if writer == ownWriter {
		w := parquetw.NewWriter(f, sc, parquetw.Options{RowGroupRows: groupRows, Plain: []string{columns.SeqColumn}})
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil { // parquetw leaves its writer open; pqarrow closes it
			t.Fatal(err)
		}
	} else {
		props := parquet.NewWriterProperties(parquet.WithMaxRowGroupLength(groupRows), parquet.WithDataPageSize(128), parquet.WithBatchSize(8), parquet.WithDictionaryDefault(writer == arrowDict))
		w, err := pqarrow.NewFileWriter(sc, f, props, pqarrow.DefaultWriterProps())
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	out := arrow.NewSchema([]arrow.Field{{Name: columns.SeqColumn, Type: arrow.PrimitiveTypes.Int64}, {Name: "body", Type: arrow.BinaryTypes.String, Nullable: true}}, nil)
	return path, out, []int{1, 2}
}

// A scan that starts inside a row group skips the rows before it without decoding them, and
// must still hand over exactly the rows in (since, until], with their own values, whether the
// group's seqs are dense (counted from statistics) or have gaps (counted from the column).
func TestReadFileResumesInsideRowGroup(t *testing.T) {
	dense := make([]int64, 300)
	for i := range dense {
		dense[i] = int64(i + 1)
	}
	gapped := make([]int64, 300)
	for i := range gapped {
		gapped[i] = int64(3*i + 2) // 2, 5, 8, ...
	}
	for _, tc := range []struct {
		name         string
		seqs         []int64
		since, until int64
	}{
		{"dense from start", dense, 0, 300},
		{"dense inside first group", dense, 37, 300},
		{"dense inside later group", dense, 150, 260},
		{"dense last row of a group", dense, 99, 300},
		{"dense up to the end", dense, 299, 300},
		{"gapped inside first group", gapped, 40, 1000},
		{"gapped between two seqs", gapped, 151, 700},
		{"gapped inside later group", gapped, 500, 880},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, writer := range []int{arrowPlain, arrowDict, ownWriter} {
				path, out, ids := writeSeqFile(t, tc.seqs, 100, writer)
				var want []int64
				for _, s := range tc.seqs {
					if s > tc.since && s <= tc.until {
						want = append(want, s)
					}
				}
				for _, batch := range []int64{7, 64, fileBatchRows} {
					var got []int64
					var st ScanStats
					err := readFile(context.Background(), path, out, ids, tc.since, tc.until, batch, &st, func(rec arrow.RecordBatch) error {
						seqs := rec.Column(0).(*array.Int64)
						bodies := rec.Column(1).(*array.String)
						for i := range seqs.Len() {
							if b, w := bodies.Value(i), fmt.Sprintf("row-%d", seqs.Value(i)); b != w {
								return fmt.Errorf("seq %d has body %q, want %q", seqs.Value(i), b, w)
							}
							got = append(got, seqs.Value(i))
						}
						return nil
					})
					if err != nil {
						t.Fatalf("writer %d, batch %d: %v", writer, batch, err)
					}
					if !slices.Equal(got, want) {
						t.Fatalf("writer %d, batch %d: got seqs %v, want %v", writer, batch, got, want)
					}
					if st.RowsReturned != int64(len(want)) {
						t.Fatalf("writer %d, batch %d: stats %+v for %d rows", writer, batch, st, len(want))
					}
				}
			}
		})
	}
}
