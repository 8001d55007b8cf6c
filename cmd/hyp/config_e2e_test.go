package main

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// configProblemsJSON is `hyp config validate --json` (SPEC 7).
type configProblemsJSON struct {
	File     string `json:"file"`
	Valid    bool   `json:"valid"`
	Problems []struct {
		Line    int    `json:"line"`
		Key     string `json:"key"`
		Message string `json:"message"`
	} `json:"problems"`
}

func validateJSON(t *testing.T, home string, args ...string) (configProblemsJSON, cliResult) {
	t.Helper()
	r := runHyp(t, home, 30*time.Second, append([]string{"config", "validate", "--json"}, args...)...)
	var v configProblemsJSON
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("validate --json output: %v\n%s", err, r)
	}
	return v, r
}

func TestConfigValidateNamesEveryProblem(t *testing.T) {
	home := t.TempDir()
	file := filepath.Join(home, "three.yaml")
	writeFile(t, file, `ingest:
  listen: 127.0.0.1:0
  lisen: typo
cache:
  flush_interval: 2x
sinks:
  central:
    type: forward
    url: ${HYP_E2E_UNSET_CENTRAL_URL}
    token_file: /etc/hyp/token
`)
	r := runHyp(t, home, 30*time.Second, "config", "validate", "--config", file)
	if r.code != 2 {
		t.Fatalf("validate of a file with three problems: want exit 2\n%s", r)
	}
	for _, want := range []string{
		file + ` line 3: unknown key "ingest.lisen"`,
		file + ` line 5: cache.flush_interval: invalid duration "2x"`,
		file + ` line 9: sinks.central.url: "${HYP_E2E_UNSET_CENTRAL_URL}": environment variable HYP_E2E_UNSET_CENTRAL_URL is not set`,
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("validate output lacks %q\n%s", want, r)
		}
	}
	if n := strings.Count(r.stderr, file+" line "); n != 3 {
		t.Errorf("validate names %d problems, want 3\n%s", n, r)
	}

	v, r := validateJSON(t, home, "--config", file)
	if r.code != 2 || v.Valid || v.File != file || len(v.Problems) != 3 {
		t.Fatalf("validate --json: want exit 2, valid false and three problems\n%s", r)
	}
	var got [][2]any
	for _, p := range v.Problems {
		got = append(got, [2]any{p.Line, p.Key})
	}
	want := [][2]any{{3, "ingest.lisen"}, {5, "cache.flush_interval"}, {9, "sinks.central.url"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("validate --json problems at %v, want %v\n%s", got, want, r)
	}
	if !strings.Contains(v.Problems[2].Message, "HYP_E2E_UNSET_CENTRAL_URL is not set") {
		t.Errorf("the unset variable's message %q does not name it", v.Problems[2].Message)
	}

	// The daemon refuses the same file with the same message, before it listens.
	d := runHyp(t, home, 30*time.Second, "daemon", "--config", file)
	if d.code != 2 || !strings.Contains(d.stderr, "environment variable HYP_E2E_UNSET_CENTRAL_URL is not set") || !strings.Contains(d.stderr, "line 9: sinks.central.url") {
		t.Errorf("daemon on a file with an unset variable: want exit 2 naming it\n%s", d)
	}
}

func TestConfigVariablesExpandInValidateAndShow(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HYP_E2E_CENTRAL", "central.example:18522")
	t.Setenv("HYP_E2E_PGPASS", "hunter2")
	writeFile(t, filepath.Join(home, "hyp.yaml"), `ingest:
  listen: 127.0.0.1:${HYP_E2E_UNSET_PORT:-18999}
cache:
  flush_interval: ${HYP_E2E_UNSET_FI:-3s}
sinks:
  central:
    type: forward
    url: http://${HYP_E2E_CENTRAL}
    token_file: tokens/central
  lake:
    type: iceberg
    catalog: {type: sql, uri: "postgres://hyp:${HYP_E2E_PGPASS}@db/cat"}
    warehouse: s3://bucket/lake
`)
	r := runHyp(t, home, 30*time.Second, "config", "validate")
	if r.code != 0 || strings.TrimSpace(r.stdout) != filepath.Join(home, "hyp.yaml")+": ok" {
		t.Fatalf("validate of a good file: want exit 0 and an ok line\n%s", r)
	}
	if v, r := validateJSON(t, home); r.code != 0 || !v.Valid || v.Problems == nil || len(v.Problems) != 0 {
		t.Errorf("validate --json of a good file: want valid, problems []\n%s", r)
	}

	s := runHyp(t, home, 30*time.Second, "config", "show")
	if s.code != 0 {
		t.Fatalf("show: %s", s)
	}
	for _, want := range []string{
		"listen: 127.0.0.1:18999\n", "flush_interval: 3s\n", "url: http://central.example:18522\n",
		"token_file: " + filepath.Join(home, "tokens/central") + "\n", "uri: postgres://hyp:xxxxx@db/cat\n",
		"max_body_bytes: 16777216\n", "default: 90d\n", // defaults the file left out
	} {
		if !strings.Contains(s.stdout, want) {
			t.Errorf("show lacks %q\n%s", want, s)
		}
	}
	if strings.Contains(s.stdout, "hunter2") || strings.Contains(s.stdout, "local-parquet") {
		t.Errorf("show prints a password or the default sinks a sinks: block replaced\n%s", s)
	}

	j := runHyp(t, home, 30*time.Second, "config", "show", "--json")
	var m struct {
		Sinks map[string]struct {
			URL     string `json:"url"`
			Catalog struct {
				URI string `json:"uri"`
			} `json:"catalog"`
		} `json:"sinks"`
		Cache struct {
			FlushInterval string `json:"flush_interval"`
		} `json:"cache"`
	}
	if err := json.Unmarshal([]byte(j.stdout), &m); err != nil || j.code != 0 {
		t.Fatalf("show --json: %v\n%s", err, j)
	}
	if m.Sinks["central"].URL != "http://central.example:18522" || m.Sinks["lake"].Catalog.URI != "postgres://hyp:xxxxx@db/cat" || m.Cache.FlushInterval != "3s" {
		t.Errorf("show --json = %+v", m)
	}

	// A variable the url needs is unset: both commands refuse, naming it.
	writeFile(t, filepath.Join(home, "hyp.yaml"), "sinks:\n  central:\n    type: forward\n    url: http://${HYP_E2E_UNSET_HOST}\n    token_file: t\n")
	for _, cmd := range [][]string{{"config", "validate"}, {"config", "show"}} {
		r := runHyp(t, home, 30*time.Second, cmd...)
		if r.code != 2 || !strings.Contains(r.stderr, "line 4: sinks.central.url: \"${HYP_E2E_UNSET_HOST}\": environment variable HYP_E2E_UNSET_HOST is not set") {
			t.Errorf("%s with an unset variable: want exit 2 naming it\n%s", cmd, r)
		}
	}
}

func TestConfigValidateFiles(t *testing.T) {
	home := t.TempDir()
	// No hyp.yaml: the defaults, which are valid.
	if r := runHyp(t, home, 30*time.Second, "config", "validate"); r.code != 0 || !strings.Contains(r.stdout, "ok") {
		t.Errorf("validate without a hyp.yaml: want exit 0\n%s", r)
	}
	if r := runHyp(t, home, 30*time.Second, "config", "show"); r.code != 0 || !strings.Contains(r.stdout, "local-parquet:") {
		t.Errorf("show without a hyp.yaml: want the default sink\n%s", r)
	}
	missing := filepath.Join(home, "nope.yaml")
	r := runHyp(t, home, 30*time.Second, "config", "validate", "--config", missing)
	if r.code != 2 || !strings.Contains(r.stderr, missing+": cannot read it") {
		t.Errorf("validate of a missing --config: want exit 2 naming it\n%s", r)
	}
	if v, r := validateJSON(t, home, "--config", missing); r.code != 2 || v.Valid || v.File != missing || len(v.Problems) != 1 {
		t.Errorf("validate --json of a missing --config\n%s", r)
	}
}
