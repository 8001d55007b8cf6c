package lake

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// awkwardDirs are directory names a file:// URI or a sqlite file: URI must escape.
var awkwardDirs = []struct{ name, dir string }{
	{"space", "my dir"},
	{"percent", "100%"},
	{"percent-hex", "ware house %41"},
	{"escaped-slash", "a%2Fb"},
	{"hash", "a#b"},
	{"question", "q?x"},
	{"non-ascii", "données"},
}

// TestSQLCatalogInAwkwardPaths: a sqlite catalog file and a local warehouse whose paths
// need escaping in a URI are used where they are named: the catalog file is created at its
// path, every table file lands under the warehouse, rows are committed once and read back,
// a second writer opening the same paths sees them, and upkeep finds its orphans there.
func TestSQLCatalogInAwkwardPaths(t *testing.T) {
	for _, tc := range awkwardDirs {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := filepath.Join(t.TempDir(), tc.dir)
			o := Options{Catalog: "sql", URI: "sqlite://" + filepath.Join(dir, "cat "+tc.dir, "catalog.db"),
				Warehouse: filepath.Join(dir, "lake"), Namespace: "hyp", PartitionBy: "day", Gateway: "gw-a"}
			l, err := Open(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			commitMany(t, l, "source=web", 1, 3, 4)
			if _, err := os.Stat(filepath.Join(dir, "cat "+tc.dir, "catalog.db")); err != nil {
				t.Fatalf("catalog file not where its uri names it: %v", err)
			}
			for _, f := range filesOnDisk(t, filepath.Dir(dir)) {
				if !strings.HasPrefix(f, o.Warehouse+"/") && !strings.HasPrefix(f, filepath.Join(dir, "cat "+tc.dir)+"/") {
					t.Errorf("file outside the warehouse and the catalog: %s", f)
				}
			}
			checkPathsRoundTrip(t, l, o, 12)

			// A second writer (another process, the same yaml) finds the same table.
			b := openAs(t, o, "gw-b")
			commitMany(t, b, "source=db", 1, 1, 4)
			checkPathsRoundTrip(t, l, o, 16)

			stray := filepath.Join(o.Warehouse, "hyp.db", "logs", "data", "stray.parquet")
			if err := os.WriteFile(stray, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			ageAll(t, o.Warehouse)
			rep, err := l.Maintain(ctx, MaintainOptions{Compact: true, RetainLast: 1, OrphanOlderThan: time.Hour})
			if err != nil || len(rep) != 1 || rep[0].Error != "" || rep[0].OrphansRemoved == 0 {
				t.Fatalf("maintain = %+v, %v", rep, err)
			}
			if _, err := os.Stat(stray); !os.IsNotExist(err) {
				t.Errorf("orphan kept: %v", err)
			}
			checkPathsRoundTrip(t, l, o, 16)
		})
	}
}

// checkPathsRoundTrip: the table holds rows rows, each once, and the files a query reads
// are the live files, under the warehouse.
func checkPathsRoundTrip(t *testing.T, l *Lake, o Options, rows int) {
	t.Helper()
	got := rowsOf(t, l)
	if len(got) != rows {
		t.Errorf("%d rows, want %d", len(got), rows)
	}
	checkNoDuplicates(t, got)
	tfs, err := l.Tables(context.Background(), t.TempDir())
	if err != nil || len(tfs) != 1 {
		t.Fatalf("tables = %+v, %v", tfs, err)
	}
	live, _ := liveFiles(t, l)
	if len(tfs[0].Files) != len(live) {
		t.Errorf("query reads %d files, the table has %d", len(tfs[0].Files), len(live))
	}
	for _, f := range tfs[0].Files {
		if !strings.HasPrefix(f, o.Warehouse+"/") {
			t.Errorf("query file %s is not under the warehouse %s", f, o.Warehouse)
		}
		if _, err := os.Stat(f); err != nil {
			t.Errorf("query file: %v", err)
		}
	}
}

// TestHadoopCatalogRefusesPathsAURIEscapes: iceberg-go's hadoop catalog keeps table
// locations as bare paths and its writers parse them as URLs, so a warehouse whose path a
// URI must escape would have its files written elsewhere (or not opened at all): Open
// refuses it up front, and a plain path works.
func TestHadoopCatalogRefusesPathsAURIEscapes(t *testing.T) {
	for _, tc := range awkwardDirs {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), tc.dir)
			o := Options{Catalog: "hadoop", Warehouse: filepath.Join(dir, "lake"), Namespace: "hyp", PartitionBy: "day", Gateway: "gw-a"}
			l, err := Open(context.Background(), o)
			if err == nil {
				l.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), "hadoop catalog") || !strings.Contains(err.Error(), o.Warehouse) {
				t.Errorf("error %q does not say why", err)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("a refused warehouse was created: %v", err)
			}
		})
	}
	l, o := openLake(t, "hadoop", "day", "gw-a")
	commitMany(t, l, "source=web", 1, 2, 4)
	checkPathsRoundTrip(t, l, o, 8)
}

func TestLocalFile(t *testing.T) {
	tests := []struct {
		location, want string
		ok             bool
	}{
		{"file:///tmp/my%20dir/100%25/a.parquet", "/tmp/my dir/100%/a.parquet", true},
		{"file:/tmp/a%23b/x", "/tmp/a#b/x", true},
		// A bare path is not URI text: iceberg-go's local IO opens it as written.
		{"/tmp/100%/a#b?c/x", "/tmp/100%/a#b?c/x", true},
		{"s3://bucket/key", "", false},
	}
	for _, tt := range tests {
		got, ok := localFile(tt.location)
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("localFile(%q) = %q, %v; want %q, %v", tt.location, got, ok, tt.want, tt.ok)
		}
	}
	for _, d := range awkwardDirs {
		p := filepath.Join("/tmp", d.dir, "x.parquet")
		if got, ok := localFile(FileURI(p)); !ok || got != p {
			t.Errorf("localFile(FileURI(%q)) = %q, %v", p, got, ok)
		}
	}
}
