package config

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestShowDefaults(t *testing.T) {
	out := showYAML(t, Default(home))
	for _, want := range []string{
		"ingest:\n  listen: 127.0.0.1:18521\n  max_body_bytes: 16777216\n",
		"  flush_interval: 2s\n", "    default: 90d\n", "    hold_for_sinks: true\n", "    interval: 10m\n",
		"  local-parquet:\n    type: blob\n    format: parquet\n",
		"      path: " + home + "/exports\n", "    schedule: '@every 1m'\n",
		"memory_limit_bytes: 117440512\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("show of the defaults lacks %q:\n%s", want, out)
		}
	}
	requireFixpoint(t, out)
}

// TestShowLeavesOutOtherTypesKeys: a sink shows only its own type's keys and the common
// ones, as does the cluster's lake block.
func TestShowLeavesOutOtherTypesKeys(t *testing.T) {
	c := parseCase(t, "sinks:\n  central: {type: forward, url: http://c:1, token_file: /t}\n  arch: {type: blob, format: jsonl, destination: {type: local-fs, path: /x}}\n"+
		"server:\n  cluster:\n    postgres: postgres://db/hyp\n    lake: {catalog: {type: sql, uri: \"postgres://db/hyp\"}, warehouse: /w}\n", nil)
	out := showYAML(t, c)
	shown := requireFixpoint(t, out)
	var doc struct {
		Sinks map[string]map[string]any `yaml:"sinks"`
	}
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]string{"central": {"url", "token_file", "compression"}, "arch": {"format", "destination"}} {
		keys := doc.Sinks[name]
		for _, k := range want {
			if _, ok := keys[k]; !ok {
				t.Errorf("sink %s lacks its key %s:\n%s", name, k, out)
			}
		}
		for _, k := range []string{"catalog", "warehouse", "maintain"} {
			if _, ok := keys[k]; ok {
				t.Errorf("sink %s shows the iceberg key %s:\n%s", name, k, out)
			}
		}
	}
	if shown.Sinks["central"].URL[0] != "http://c:1" || shown.Sinks["arch"].Destination.Path != "/x" {
		t.Errorf("show of two sinks loads back as %+v:\n%s", shown.Sinks, out)
	}
	if lake := shown.Server.Cluster.Lake; lake.Warehouse != "/w" || strings.Contains(string(out), "token_file: \"\"") {
		t.Errorf("cluster lake block shown as %+v:\n%s", lake, out)
	}
}

// requireFixpoint checks that what show printed loads, and shows again as the same text:
// nothing it prints is lost or changed by loading it back.
func requireFixpoint(t *testing.T, out []byte) *Config {
	t.Helper()
	back, err := parse(home, "shown.yaml", out, env(), Checks{})
	if err != nil {
		t.Fatalf("show output does not load: %v\n%s", err, out)
	}
	again := showYAML(t, back)
	if string(again) != string(out) {
		t.Errorf("show output, loaded and shown again, changes:\n%s\nto\n%s", out, again)
	}
	return back
}

func TestShowRoundTripsAndRedacts(t *testing.T) {
	yaml := `gateway_id: web-1
cache:
  retention: {default: 1d12h, datasets: {logs: 7d}, max_age: 90m}
sinks:
  central:
    type: forward
    url: [http://a:1, http://b:1]
    token_file: /etc/hyp/token
    compression: zstd
    withhold_sources: [test-*]
  one:
    type: forward
    url: http://c:1
    token_file: t
  lake:
    type: iceberg
    catalog: {type: sql, uri: "postgres://hyp:${PGPASS}@db:5432/cat?sslmode=disable"}
    warehouse: s3://bucket/lake
    maintain: {schedule: "@every 1h", compact: true}
server:
  cluster:
    postgres: postgres://hyp:s3cret@db/hyp?password=other
    lake: {catalog: {type: sql, uri: "postgres://db/cat"}, warehouse: s3://b/l}
`
	c, err := parse(home, "hyp.yaml", []byte(yaml), env("PGPASS", "hunter2"), Checks{})
	if err != nil {
		t.Fatal(err)
	}
	c.File = "/secret/place/hyp.yaml"
	out := showYAML(t, c)
	s, err := Show(c)
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for what, text := range map[string]string{"yaml": string(out), "json": string(js)} {
		for _, secret := range []string{"hunter2", "s3cret", "other", "/secret/place"} {
			if strings.Contains(text, secret) {
				t.Errorf("%s output shows %q:\n%s", what, secret, text)
			}
		}
		for _, want := range []string{"postgres://hyp:xxxxx@db:5432/cat?sslmode=disable", "postgres://hyp:xxxxx@db/hyp?password=xxxxx", "1d12h", "1h30m", "http://c:1"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s output lacks %q:\n%s", what, want, text)
			}
		}
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatal(err)
	}
	if m["gateway_id"] != "web-1" || m["sinks"].(map[string]any)["central"].(map[string]any)["compression"] != "zstd" {
		t.Errorf("json output %s", js)
	}

	back := requireFixpoint(t, out)
	checks := []struct {
		what      string
		got, want any
	}{
		{"gateway_id", back.GatewayID, "web-1"},
		{"retention", back.Cache.Retention, Retention{Default: Duration(36 * time.Hour), Datasets: map[string]Duration{"logs": Duration(7 * 24 * time.Hour)}, HoldForSinks: true, MaxAge: Duration(90 * time.Minute)}},
		{"url list", back.Sinks["central"].URL, URLs{"http://a:1", "http://b:1"}},
		{"one url", back.Sinks["one"].URL, URLs{"http://c:1"}},
		{"default compression", back.Sinks["one"].Compression, "gzip"},
		{"default format", back.Sinks["one"].Format, "arrow"},
		{"withhold_sources", back.Sinks["central"].WithholdSources, []string{"test-*"}},
		{"maintain", back.Sinks["lake"].Maintain, c.Sinks["lake"].Maintain},
		{"catalog uri", back.Sinks["lake"].Catalog.URI, "postgres://hyp:xxxxx@db:5432/cat?sslmode=disable"},
		{"cluster postgres", back.Server.Cluster.Postgres, "postgres://hyp:xxxxx@db/hyp?password=xxxxx"},
		{"cluster lake", back.Server.Cluster.Lake.Warehouse, "s3://b/l"},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s loads back as %#v, want %#v", ch.what, ch.got, ch.want)
		}
	}
}

func TestDurationText(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 500 * time.Millisecond: "500ms", 2 * time.Second: "2s", 90 * time.Second: "1m30s",
		10 * time.Minute: "10m", time.Hour: "1h", 90 * time.Minute: "1h30m", time.Hour + 30*time.Second: "1h0m30s",
		24 * time.Hour: "1d", 36 * time.Hour: "1d12h", 90 * 24 * time.Hour: "90d", -24 * time.Hour: "-24h",
	} {
		got := Duration(d).text()
		if got != want {
			t.Errorf("Duration(%v).text() = %q, want %q", d, got, want)
		}
		if back, err := ParseDuration(got); err != nil || back != d {
			t.Errorf("ParseDuration(%q) = %v, %v, want %v", got, back, err, d)
		}
	}
}

// showYAML is c as `hyp config show` prints it.
func showYAML(t *testing.T, c *Config) []byte {
	t.Helper()
	s, err := Show(c)
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.YAML()
	if err != nil {
		t.Fatal(err)
	}
	return out
}
