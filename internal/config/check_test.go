package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// A file with independent problems of every stage gets them all in one run, in line order.
func TestEveryProblemAtOnce(t *testing.T) {
	yaml := `ingest:
  lisen: 127.0.0.1:1
cache:
  flush_interval: 2x
sinks:
  central:
    type: forward
    url: ${CENTRAL_URL}
    token_file: t
    compression: br
  archive: {type: blob, format: csv, destination: {type: local-fs, path: x}}
memory_limit_bytes: lots
`
	_, err := parse(home, "hyp.yaml", []byte(yaml), env(), Checks{})
	var probs *Problems
	if !errors.As(err, &probs) {
		t.Fatalf("parse: %v, want *Problems", err)
	}
	want := []Problem{
		{Line: 2, Key: "ingest.lisen", Message: unknownKey},
		{Line: 4, Key: "cache.flush_interval", Message: `invalid duration "2x": unknown unit "x" (ns, us, ms, s, m, h or d)`},
		{Line: 8, Key: "sinks.central.url", Message: `"${CENTRAL_URL}": environment variable CENTRAL_URL is not set`},
		{Line: 10, Key: "sinks.central.compression", Message: `must be gzip, zstd or none, got "br"`},
		{Line: 11, Key: "sinks.archive.format", Message: `must be parquet or jsonl, got "csv"`},
		{Line: 12, Key: "memory_limit_bytes", Message: "cannot unmarshal !!str `lots` into int64"},
	}
	if !reflect.DeepEqual(probs.List, want) {
		t.Fatalf("problems\n%#v\nwant\n%#v", probs.List, want)
	}
	lines := strings.Split(err.Error(), "\n")
	wantLines := []string{
		`hyp.yaml line 2: unknown key "ingest.lisen"`,
		`hyp.yaml line 4: cache.flush_interval: invalid duration "2x": unknown unit "x" (ns, us, ms, s, m, h or d)`,
		`hyp.yaml line 8: sinks.central.url: "${CENTRAL_URL}": environment variable CENTRAL_URL is not set`,
		`hyp.yaml line 10: sinks.central.compression: must be gzip, zstd or none, got "br"`,
		`hyp.yaml line 11: sinks.archive.format: must be parquet or jsonl, got "csv"`,
		"hyp.yaml line 12: memory_limit_bytes: cannot unmarshal !!str `lots` into int64",
	}
	if !reflect.DeepEqual(lines, wantLines) {
		t.Errorf("error text\n%s\nwant\n%s", err, strings.Join(wantLines, "\n"))
	}
}

func TestMerge(t *testing.T) {
	expand := []Problem{{Line: 3, Key: "a.b", Message: "unset"}}
	decode := []Problem{{Line: 3, Key: "a.b", Message: "bad type"}, {Line: 5, Message: "ambiguous"}, {Line: 7, Key: "c", Message: "bad"}}
	value := []Problem{
		{Line: 3, Key: "a.b.c", Message: "inside a failed key"},
		{Line: 3, Key: "a.x", Message: "a sibling on the same line"},
		{Line: 5, Key: "d", Message: "on a line with an unnamed fault"},
		{Line: 7, Key: "c", Message: "bad"},
		{Key: "file", Message: "no line"},
		{Line: 1, Key: "e", Message: "first"},
	}
	got := merge(expand, decode, value)
	want := []Problem{
		{Line: 1, Key: "e", Message: "first"},
		{Line: 3, Key: "a.b", Message: "unset"},
		{Line: 3, Key: "a.x", Message: "a sibling on the same line"},
		{Line: 5, Message: "ambiguous"},
		{Line: 7, Key: "c", Message: "bad"},
		{Key: "file", Message: "no line"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("merge =\n%#v\nwant\n%#v", got, want)
	}
}

func TestCheckFile(t *testing.T) {
	dir := t.TempDir()
	r := checkFile(dir, "", env(), Checks{})
	if !r.Valid || r.Found || r.File != filepath.Join(dir, "hyp.yaml") || r.Problems == nil || r.Err() != nil {
		t.Errorf("missing default file: %+v, want valid, not found", r)
	}

	missing := filepath.Join(dir, "other.yaml")
	r = checkFile(dir, missing, env(), Checks{})
	if r.Valid || r.Found || len(r.Problems) != 1 || r.Err() == nil || !strings.Contains(r.Err().Error(), missing+": cannot read it: no such file") {
		t.Errorf("missing explicit file: %+v, %v", r, r.Err())
	}

	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("ingest:\n  listen: ${H}:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r = checkFile(dir, good, env("H", "127.0.0.1"), Checks{}); !r.Valid || !r.Found || len(r.Problems) != 0 {
		t.Errorf("good file: %+v", r)
	}
	if r = checkFile(dir, good, env(), Checks{}); r.Valid || len(r.Problems) != 1 || r.Problems[0].Key != "ingest.listen" {
		t.Errorf("good file without its variable: %+v", r)
	}

	empty := filepath.Join(dir, "empty.yaml")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r = checkFile(dir, empty, env(), Checks{}); !r.Valid || !r.Found {
		t.Errorf("empty file: %+v, want valid and found", r)
	}
}
