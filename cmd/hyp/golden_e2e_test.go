package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/golden/*.json from this binary's output")

// TestJSONGolden pins the bytes of every --json shape the CLI prints (acceptance tests
// outside this repository parse them): one home is driven through ingest, sink runs of each
// sink type, a forward to a server, compaction, a damaged file and its repair, and each
// command's output is compared with testdata/golden/NAME.json after the values that differ
// from run to run (paths, addresses, times, ages, random ids) are replaced by placeholders.
// Every nested list is made non-empty where a home can make it so, so each struct is seen.
// The read-only commands' tables for humans are pinned too (NAME.txt), with runs of spaces
// folded, since a placeholder's width is not the value's.
func TestJSONGolden(t *testing.T) {
	t.Parallel()
	srvHome, srvListen, tokenFile := newServerHome(t)
	srv := startHypServer(t, srvHome, srvListen, tokenFile)

	home, lakeDir := t.TempDir(), t.TempDir()
	catalog, warehouse := filepath.Join(lakeDir, "catalog.db"), filepath.Join(lakeDir, "warehouse")
	const listen = "127.0.0.1:1" // no daemon runs: every command opens the home itself
	cfg := fmt.Sprintf("gateway_id: gw-golden\ningest:\n  listen: %s\ncache:\n  flush_interval: 1h\n  retention:\n    default: 1s\n    max_age: 1s\nsinks:\n", listen) +
		localSinkYAML("files", "jsonl", filepath.Join(home, "exports")) +
		icebergSinkYAML("lake", "sqlite://"+catalog, warehouse) +
		forwardSinkYAML("fwd", "http://"+srvListen, tokenFile)
	if err := os.WriteFile(filepath.Join(home, "hyp.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	input := func(name string, b []byte) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	g := goldenRun{t: t, home: home, subst: []string{home, "<home>", srvHome, "<server-home>", lakeDir, "<lake>", tokenFile, "<token-file>", srvListen, "<server-listen>"}}

	g.check("config-validate", "config", "validate", "--json")
	g.check("config-show", "config", "show", "--json")
	g.check("ingest", "ingest", "logs", input("logs.ndjson", append(rows(0, 40, "web"), rows(100, 20, "db")...)), "--json")
	g.check("ingest-source", "ingest", "metrics", "--source", "edge", input("metrics.ndjson", rows(200, 10, "")), "--json")
	g.check("sink-list", "sink", "list", "--json")
	g.text("sink-list", "sink", "list")
	g.check("sink-run", "sink", "run", "--json")
	srv.stop(t)
	g.check("ingest-more", "ingest", "logs", input("more.ndjson", rows(40, 10, "web")), "--json")
	g.check("sink-status", "sink", "status", "--json")
	g.text("sink-status", "sink", "status")
	g.check("sink-maintain", "sink", "maintain", "--dry-run", "--json")
	g.text("sink-maintain", "sink", "maintain", "--dry-run")
	g.check("sink-rewind", "sink", "rewind", "files", "--to-earliest", "--dry-run", "--json")
	g.text("sink-rewind", "sink", "rewind", "files", "--to-earliest", "--dry-run")
	g.check("cache-compact", "cache", "compact", "--json")
	g.check("query-schema", "query", "schema", "logs", "--json")
	g.text("query-schema", "query", "schema", "logs")
	time.Sleep(1100 * time.Millisecond) // every row is past max_age, so prune forces losses
	g.check("cache-prune", "cache", "prune", "--dry-run", "--json")
	g.text("cache-prune", "cache", "prune", "--dry-run")

	parts, _ := filepath.Glob(filepath.Join(home, "cache", "metrics", "source=edge", "gen-*", "data", "*.parquet"))
	if len(parts) != 1 {
		t.Fatalf("metrics data files %v, want 1", parts)
	}
	b, err := os.ReadFile(parts[0])
	if err != nil {
		t.Fatal(err)
	}
	for i := 4; i < len(b)-8; i += 2 {
		b[i] ^= 0x5a
	}
	if err := os.WriteFile(parts[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	g.check("cache-repair", "cache", "repair", "--json")
	g.check("cache-status", "cache", "status", "--json")
	g.text("cache-status", "cache", "status")
	g.check("status", "status", "--json")
	g.text("status", "status")
	srvG := g
	srvG.home = srvHome
	srvG.check("server-status", "server", "status", "--json")
	srvG.text("server-status", "server", "status")
}

type goldenRun struct {
	t     *testing.T
	home  string
	subst []string // pairs of a literal and its placeholder
}

// goldenVolatile are the values that differ between two runs over the same input.
var goldenVolatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`), `<time>`},
	{regexp.MustCompile(`("[a-z_]+_seconds"): [0-9.e+-]+`), `$1: 0`},
	// Sizes of files that hold ingest times, whose encodings vary in length.
	{regexp.MustCompile(`("bytes"): \d+`), `$1: 0`},
	{regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`), `<uuid>`},
	{regexp.MustCompile(`\b[0-9a-f]{32}\b`), `<id>`}, // incarnations, commit ids
}

// check runs hyp with a against g.home and compares its normalised stdout with
// testdata/golden/name.json, or writes it there with -update.
func (g goldenRun) check(name string, a ...string) {
	g.t.Helper()
	g.compare(name+".json", g.normalise(g.run(name, a)))
}

// text is check for output for humans, in testdata/golden/name.txt.
func (g goldenRun) text(name string, a ...string) {
	g.t.Helper()
	out := g.normalise(g.run(name, a))
	out = goldenAge.ReplaceAllString(out, "<age>")
	out = goldenSpaces.ReplaceAllString(out, " ")
	g.compare(name+".txt", goldenBytes.ReplaceAllString(out, "$1<bytes>$2"))
}

var (
	goldenAge    = regexp.MustCompile(`\b(\d+h)?(\d+m)?\d+s\b`) // an age column: "-" when there is none
	goldenSpaces = regexp.MustCompile(` {2,}`)
	// The BYTES column of the cache's table: DATASET PARTITION ROWS FILES BYTES SEQ RANGE.
	goldenBytes = regexp.MustCompile(`(?m)^(\S+ \S+ \d+ \d+ )\d+( \d+\.\.\d+ )`)
)

func (g goldenRun) run(name string, a []string) string {
	g.t.Helper()
	r := runHyp(g.t, g.home, 2*time.Minute, a...)
	if r.code != 0 {
		g.t.Fatalf("%s: %s", name, r)
	}
	return r.stdout
}

func (g goldenRun) compare(file, got string) {
	t := g.t
	t.Helper()
	path := filepath.Join("testdata", "golden", file)
	if *updateGolden {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (-update rewrites it) at %s\ngot:\n%s", path, firstDiff(got, string(want)), got)
	}
}

// firstDiff names the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			return fmt.Sprintf("line %d: got %q, want %q", i+1, g[i], w[i])
		}
	}
	return fmt.Sprintf("the end: got %d lines, want %d", len(g), len(w))
}

func (g goldenRun) normalise(s string) string {
	pairs := make([][2]string, 0, len(g.subst)/2)
	for i := 0; i+1 < len(g.subst); i += 2 {
		pairs = append(pairs, [2]string{g.subst[i], g.subst[i+1]})
	}
	// A longer literal first, so a path inside another is not cut in two.
	sort.Slice(pairs, func(i, j int) bool { return len(pairs[i][0]) > len(pairs[j][0]) })
	for _, p := range pairs {
		s = strings.ReplaceAll(s, p[0], p[1])
	}
	for _, v := range goldenVolatile {
		s = v.re.ReplaceAllString(s, v.with)
	}
	return s
}
