package main

import (
	"database/sql"
	"path/filepath"
	"testing"

	_ "github.com/duckdb/duckdb-go/v2"
)

// A Hive-aware reader (DuckDB's read_parquet detects `k=v` directories by default) of blob
// exports sees every row's own `source`, never the directory's: the partition's directory
// key is hyp's `_hyp_source` (SPEC 6).
func TestHiveReadersSeeTheRowsOwnSource(t *testing.T) {
	t.Parallel()
	home, addr := newHome(t)
	root := filepath.Join(t.TempDir(), "exports")
	writeDaemonYAML(t, home, addr, "", localSinkYAML("files", "parquet", root))
	startHypDaemon(t, home, addr)
	body := []byte(`{"id":1,"source":"zzz"}` + "\n" + `{"id":2}` + "\n")
	if code, m, err := post(addr, "/v1/ingest/logs?source=web", body); err != nil || code != 200 {
		t.Fatalf("ingest: %d %v %v", code, m, err)
	}
	requireRun(t, home, "files", 2)
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT id, source, _hyp_source FROM read_parquet(?) ORDER BY id`, filepath.Join(root, "logs", "*", "*.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var id int
		var src sql.NullString
		var dir string
		if err := rows.Scan(&id, &src, &dir); err != nil {
			t.Fatal(err)
		}
		got = append(got, src.String+"|"+dir)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "zzz|web" || got[1] != "|web" {
		t.Fatalf("DuckDB reads (source|_hyp_source) %q, want [zzz|web |web]", got)
	}
}
