package query

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

// TestRunManyPartitions: a query over more partitions than the process may open files
// still runs, with the descriptor limit lowered below the partition count.
func TestRunManyPartitions(t *testing.T) {
	const parts, limit = 600, 256
	dir := t.TempDir()
	tbl := Table{Name: "logs", Columns: []Column{{ingestSeqColumn, "long"}, {ingestedAtColumn, "timestamptz"}, {"msg", "string"}}}
	for i := range parts {
		f := filepath.Join(dir, fmt.Sprintf("source=s%d", i), "a.parquet")
		writeParquet(t, f, []arrow.Field{seqField, atField, msgField}, fmt.Sprintf(`[{"_hyp_ingest_seq": %d, "_hyp_ingested_at": "2024-01-02T03:04:05Z", "msg": "m"}]`, i+1))
		tbl.Partitions = append(tbl.Partitions, Partition{Name: fmt.Sprintf("source=s%d", i), Files: []string{f},
			FieldIDs: map[string]int{ingestSeqColumn: 1, ingestedAtColumn: 2, "msg": 3}})
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	lowered := old
	lowered.Cur = limit
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lowered); err != nil {
		t.Fatal(err) // lowering the soft limit needs no privilege
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	out, err := run(t, []Table{tbl}, "SELECT count(*) AS n, count(DISTINCT msg) AS m FROM logs", Options{Format: FormatJSONL})
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != fmt.Sprintf(`{"n":%d,"m":1}`, parts) {
		t.Fatalf("got %s", out)
	}
	// With the partition column too: every row names its own partition.
	out, err = run(t, []Table{tbl}, "SELECT count(DISTINCT _hyp_partition) AS n, count(*) FILTER (WHERE _hyp_partition = 'source=s' || (_hyp_ingest_seq - 1)) AS m FROM logs", Options{Format: FormatJSONL, Internal: true})
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != fmt.Sprintf(`{"n":%d,"m":%d}`, parts, parts) {
		t.Fatalf("internal: got %s", out)
	}
}
