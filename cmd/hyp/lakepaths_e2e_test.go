package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestIcebergSinkPathsWithSpacesAndPercent: an iceberg sink whose sqlite catalog and local
// warehouse live under directories with a space and a '%' in their names exports every row
// once into tables kept where hyp.yaml names them, readable by an independent reader and
// by `hyp query sql --sink`.
func TestIcebergSinkPathsWithSpacesAndPercent(t *testing.T) {
	t.Parallel()
	home, addr := t.TempDir(), freePort(t)
	lakeDir := filepath.Join(t.TempDir(), "my dir", "100%")
	catalogDB, warehouse := filepath.Join(lakeDir, "cat %41", "catalog.db"), filepath.Join(lakeDir, "ware house")
	writeDaemonYAML(t, home, addr, "", icebergSinkYAML("lake", "sqlite://"+catalogDB, warehouse))
	f := newFeeder(0)
	d := startHypDaemon(t, home, addr)
	defer d.stop(t)
	for _, s := range []string{"web", "db"} {
		f.ingest(t, addr, "logs", s, 50)
	}
	requireRun(t, home, "lake", f.take())
	requireNoopRun(t, home, "lake")
	if _, err := os.Stat(catalogDB); err != nil {
		t.Fatalf("catalog not where hyp.yaml names it: %v", err)
	}
	checkLakeView(t, "awkward paths", readLakeTable(t, sqliteLake(catalogDB), "logs"), f.want)
	err := filepath.WalkDir(filepath.Dir(filepath.Dir(lakeDir)), func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() && !strings.HasPrefix(p, warehouse+"/") && !strings.HasPrefix(p, filepath.Dir(catalogDB)+"/") {
			t.Errorf("file outside the warehouse and the catalog's directory: %s", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	res := queryJSON(t, home, "SELECT count(*) AS n, count(DISTINCT id) AS d FROM logs", "--sink", "lake")
	if want := fmt.Sprint(len(f.want["logs"])); len(res) != 1 || fmt.Sprint(res[0]["n"]) != want || fmt.Sprint(res[0]["d"]) != want {
		t.Fatalf("query --sink lake: %v, want %s distinct rows", res, want)
	}
}

// TestHadoopWarehousePathRefused: the hadoop catalog cannot keep a warehouse whose path a
// URL escapes (icebergpath.CheckHadoopWarehouse): the config is refused, naming the key.
func TestHadoopWarehousePathRefused(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	warehouse := filepath.Join(t.TempDir(), "100%", "lake")
	yaml := fmt.Sprintf("sinks:\n  lake:\n    type: iceberg\n    catalog: {type: hadoop}\n    warehouse: %q\n", warehouse)
	if err := os.WriteFile(filepath.Join(home, "hyp.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runHyp(t, home, time.Minute, "config", "validate")
	want := fmt.Sprintf("sinks.lake.warehouse: %q: the hadoop catalog cannot use a path with \"%%\" in it", warehouse)
	if r.code != 2 || !strings.Contains(r.stdout+r.stderr, want) {
		t.Fatalf("config validate: %s\nwant exit 2 and %q", r, want)
	}
	if _, err := os.Stat(filepath.Dir(warehouse)); !os.IsNotExist(err) {
		t.Errorf("a refused warehouse was created: %v", err)
	}
}
