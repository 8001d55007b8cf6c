package blob

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	_ "github.com/duckdb/duckdb-go/v2"
)

// TestDuckDBReadsExports checks the files with a reader that is not ours: DuckDB must read
// every row, and decode the Hive-style partition directories back into the source values,
// as the column `_hyp_source`, which no user column can be (so none is shadowed).
func TestDuckDBReadsExports(t *testing.T) {
	root := t.TempDir()
	d := NewLocalFS(root)
	ctx := context.Background()
	sources := []string{"web", "a/b", "..", "café au lait", "100%"}
	for i, src := range sources {
		recs := cacheRecords(t, 10+i, 4)
		f, err := CreateTemp(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := Encode(f, Parquet, cacheSchema(), recs); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		obj := Object{Key: Key("logs", "source="+src, 1, int64(10+i), Parquet, LayoutReserved), UnitID: "u"}
		if err := d.Put(ctx, obj, f.Name()); err != nil {
			t.Fatal(err)
		}
	}
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT _hyp_source, count(*), max(_hyp_ingest_seq), max(_hyp_ingested_at)::VARCHAR
		FROM read_parquet(?, hive_partitioning = true) GROUP BY _hyp_source ORDER BY _hyp_source`,
		filepath.Join(root, "*", "*", "*.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var src, maxAt string
		var n, maxSeq int
		if err := rows.Scan(&src, &n, &maxSeq, &maxAt); err != nil {
			t.Fatal(err)
		}
		t.Logf("%q: %d rows, max seq %d, max ingested_at %s", src, n, maxSeq, maxAt)
		got[src] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for i, src := range sources {
		if got[src] != 10+i {
			t.Errorf("DuckDB sees %d rows for source %q, want %d (all: %v)", got[src], src, 10+i, got)
		}
	}
}
