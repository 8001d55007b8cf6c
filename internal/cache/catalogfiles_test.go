package cache

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestCatalogFilesLayout pins what the cache reads of iceberg-go's hadoop catalog files
// (catalogfiles.go) to what the catalog writes: after two commits a generation holds its
// data files under data/, versioned metadata files under metadata/ with a version hint
// naming the newest, and its current snapshot's manifest list among the snap-*.avro files;
// no claim outlives a commit. An iceberg-go upgrade that renames or moves any of these
// fails here, not in a repair at some operator's open.
func TestCatalogFilesLayout(t *testing.T) {
	ctx := context.Background()
	c := openTest(t, t.TempDir())
	defer c.Close(ctx)
	for i := range 2 {
		if _, err := c.Ingest("logs", "web", body(i*10, 10, "")); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	p := c.tables.lookup("logs", "source=web")
	td := tableDir(p.gen.dir)

	var live []string
	for _, f := range p.gen.files {
		live = append(live, filepath.Clean(f.Path))
	}
	data := td.dataFiles()
	if len(live) == 0 {
		t.Fatal("no live data files after two flushes")
	}
	for _, f := range live {
		if !slices.Contains(data, f) {
			t.Errorf("live data file %s is not among dataFiles() %v", f, data)
		}
	}

	vs, err := td.metadataVersions()
	if err != nil || len(vs) < 3 { // the create, then a commit per flush
		t.Fatalf("metadata versions %v, %v: want at least 3", vs, err)
	}
	if got := filepath.Clean(localPath(p.gen.tbl.MetadataLocation())); got != td.metadataFile(vs[0]) {
		t.Errorf("the table loaded %s, the newest metadata file is %s", got, td.metadataFile(vs[0]))
	}
	hint, err := os.ReadFile(td.versionHint())
	if err != nil || strings.TrimSpace(string(hint)) != strconv.Itoa(vs[0]) {
		t.Errorf("version hint %q (%v), want %d", hint, err, vs[0])
	}

	snap := p.gen.tbl.CurrentSnapshot()
	if snap == nil {
		t.Fatal("no current snapshot")
	}
	if lists := td.manifestLists(); !slices.Contains(lists, filepath.Clean(localPath(snap.ManifestList))) {
		t.Errorf("current manifest list %s is not among manifestLists() %v", snap.ManifestList, lists)
	}
	if claims := td.claims(); len(claims) != 0 {
		t.Errorf("claims left after commits: %v", claims)
	}
}
