package cache

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// The seam between the cache and iceberg-go's hadoop catalog on local disk: the files the
// catalog lays out in a table generation's directory, which the cache reads and repairs
// directly (recover.go at open, tables.go's claims, compaction's data directory, the sweep
// of old manifests). They are iceberg-go v0.7.0's, not an API: `data/` and `metadata/` are
// the write paths the cache sets (table.go createGeneration), and the cache names the data
// files it writes itself in the catalog's form; `vN.metadata.json`, `version-hint.text`,
// `snap-*.avro` and `vN.metadata.json.claim` are the catalog's own names. Nothing else in
// the package joins these names; TestCatalogFilesLayout fails on an iceberg-go upgrade that
// changes them. The names the cache gives everything else under its root, the generation
// directories and the lock in each among them, are joined in layout.go.

// tableDir is a table generation's directory (`<partition>/gen-N`, layout.go).
type tableDir string

// data is where the table's data files are written.
func (d tableDir) data() string { return filepath.Join(string(d), "data") }

// metadata is where the catalog writes metadata files, manifest lists and manifests.
func (d tableDir) metadata() string { return filepath.Join(string(d), "metadata") }

// versionHint is the file the hadoop catalog writes after every commit; other Iceberg
// readers trust it to name the current version.
func (d tableDir) versionHint() string { return filepath.Join(d.metadata(), "version-hint.text") }

// metadataFile is version v's metadata file.
func (d tableDir) metadataFile(v int) string {
	return filepath.Join(d.metadata(), "v"+strconv.Itoa(v)+".metadata.json")
}

var metadataVersion = regexp.MustCompile(`^v([0-9]+)\.metadata\.json$`)

// metadataVersionOf is the version a metadata file's name gives, if it is one.
func metadataVersionOf(name string) (string, bool) {
	m := metadataVersion.FindStringSubmatch(name)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// metadataVersions lists the versions of the metadata files present, newest first.
func (d tableDir) metadataVersions() ([]int, error) {
	ents, err := os.ReadDir(d.metadata())
	if err != nil {
		return nil, err
	}
	var vs []int
	for _, e := range ents {
		if s, ok := metadataVersionOf(e.Name()); ok && !e.IsDir() {
			if v, err := strconv.Atoi(s); err == nil {
				vs = append(vs, v)
			}
		}
	}
	slices.Sort(vs)
	slices.Reverse(vs)
	return vs, nil
}

// metadataAvro are the Avro files in the metadata directory: every one is a manifest list or
// a manifest, referred to by a snapshot or not (sweep).
func (d tableDir) metadataAvro() ([]string, error) {
	ents, err := os.ReadDir(d.metadata())
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".avro") {
			out = append(out, filepath.Join(d.metadata(), e.Name()))
		}
	}
	return out, nil
}

// manifestLists are the snapshots' manifest lists present (those of lost commits too).
func (d tableDir) manifestLists() []string {
	lists, _ := filepath.Glob(filepath.Join(d.metadata(), "snap-*.avro"))
	return lists
}

// newDataFile is a fresh name for a data file the cache writes itself (fileWriter.create),
// in iceberg-go's form ({partition}-{task}-{uuid}-{count}), like the files iceberg-go writes
// there itself.
func (d tableDir) newDataFile() string {
	return filepath.Join(d.data(), fmt.Sprintf("00000-0-%s-00000.parquet", uuid.New()))
}

// dataFileFrom is where the data file at path, of another generation, is linked (or
// copied) into this one by compaction: under the name it has there.
func (d tableDir) dataFileFrom(path string) string {
	return filepath.Join(d.data(), filepath.Base(path))
}

// dataFiles are the Parquet files in the data directory, live or not.
func (d tableDir) dataFiles() []string {
	files, _ := filepath.Glob(filepath.Join(d.data(), "*.parquet"))
	return files
}

// claims are the metadata-version claims of commits in progress (or of a writer killed
// inside one).
func (d tableDir) claims() []string {
	claims, _ := filepath.Glob(filepath.Join(d.metadata(), "*.metadata.json.claim"))
	return claims
}
