package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

const home = "/hyp-home"

func TestDefault(t *testing.T) {
	c := Default(home)
	if probs := validate(c); len(probs) > 0 {
		t.Fatalf("defaults do not validate: %v", probs)
	}
	want := Sink{
		Type:        "blob",
		Format:      "parquet",
		Destination: Destination{Type: "local-fs", Path: filepath.Join(home, "exports")},
		Schedule:    "@every 1m",
	}
	if len(c.Sinks) != 1 || !reflect.DeepEqual(c.Sinks["local-parquet"], want) {
		t.Errorf("default sinks = %+v, want only local-parquet = %+v", c.Sinks, want)
	}
	if c.Ingest.Listen != "127.0.0.1:18521" || c.Ingest.MaxBodyBytes != 16777216 {
		t.Errorf("ingest = %+v", c.Ingest)
	}
	if c.MemoryLimitBytes != 112<<20 {
		t.Errorf("memory_limit_bytes = %d, want 112 MiB", c.MemoryLimitBytes)
	}
	r := c.Cache.Retention
	if c.Cache.FlushInterval != Duration(2*time.Second) || c.Cache.Compaction.Interval != Duration(10*time.Minute) ||
		r.Default != Duration(90*24*time.Hour) || !r.HoldForSinks || r.MaxAge != 0 || len(r.Datasets) != 0 {
		t.Errorf("cache = %+v", c.Cache)
	}
	// Callers may modify what they get; that must not leak into later calls.
	c.Sinks["x"] = Sink{}
	if len(Default(home).Sinks) != 1 {
		t.Error("Default shares state between calls")
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()

	c, err := Load(dir, "", Checks{})
	if err != nil {
		t.Fatalf("Load without hyp.yaml: %v", err)
	}
	if !reflect.DeepEqual(c, Default(dir)) {
		t.Errorf("Load without hyp.yaml = %+v, want defaults", c)
	}

	if _, err := Load(dir, filepath.Join(dir, "other.yaml"), Checks{}); err == nil {
		t.Error("Load of a missing explicit path succeeded")
	}

	if err := os.WriteFile(filepath.Join(dir, "hyp.yaml"), []byte("ingest:\n  listen: 127.0.0.1:9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = Load(dir, "", Checks{})
	if err != nil || c.Ingest.Listen != "127.0.0.1:9" {
		t.Errorf("Load of <home>/hyp.yaml = %+v, %v", c, err)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("ingest:\n  lisen: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(dir, bad, Checks{})
	if err == nil || !strings.Contains(err.Error(), bad+` line 2: unknown key "ingest.lisen"`) {
		t.Errorf("Load of bad file: %v, want it to name the file, line and key", err)
	}
}

func TestParse(t *testing.T) {
	userHome := t.TempDir()
	t.Setenv("HOME", userHome)

	defaults := Default(home)
	day := 24 * time.Hour

	tests := []struct {
		name  string
		yaml  string
		check func(t *testing.T, c *Config)
		// wantErr lists substrings the error must contain; empty means no error.
		wantErr []string
	}{
		{
			name: "empty file is defaults",
			yaml: "",
			check: func(t *testing.T, c *Config) {
				if !reflect.DeepEqual(c, defaults) {
					t.Errorf("got %+v, want defaults", c)
				}
			},
		},
		{
			name: "comment-only file is defaults",
			yaml: "# nothing yet\n",
			check: func(t *testing.T, c *Config) {
				if !reflect.DeepEqual(c, defaults) {
					t.Errorf("got %+v, want defaults", c)
				}
			},
		},
		{
			name: "overriding one key keeps the others",
			yaml: "cache:\n  retention:\n    default: 30d\n",
			check: func(t *testing.T, c *Config) {
				want := Default(home)
				want.Cache.Retention.Default = Duration(30 * day)
				if !reflect.DeepEqual(c, want) {
					t.Errorf("got %+v, want %+v", c, want)
				}
			},
		},
		{
			name: "empty section keeps its defaults",
			yaml: "cache:\ningest:\n",
			check: func(t *testing.T, c *Config) {
				if !reflect.DeepEqual(c, defaults) {
					t.Errorf("got %+v, want defaults", c)
				}
			},
		},
		{
			name: "per-dataset retention",
			yaml: "cache:\n  retention:\n    datasets: {logs: 7d, traces: 0}\n",
			check: func(t *testing.T, c *Config) {
				for ds, want := range map[string]time.Duration{"logs": 7 * day, "traces": 0, "metrics": 90 * day} {
					if got := c.RetentionFor(ds); got != want {
						t.Errorf("RetentionFor(%q) = %v, want %v", ds, got, want)
					}
				}
			},
		},
		{
			name: "durations in every form",
			yaml: "cache:\n  flush_interval: 1d12h\n  compaction:\n    interval: 36h\n  retention:\n    default: 90d\n    max_age: 0\n",
			check: func(t *testing.T, c *Config) {
				if c.Cache.FlushInterval != Duration(36*time.Hour) || c.Cache.Compaction.Interval != Duration(36*time.Hour) ||
					c.Cache.Retention.Default != Duration(90*day) || c.Cache.Retention.MaxAge != 0 {
					t.Errorf("cache = %+v", c.Cache)
				}
			},
		},
		{
			name: "sinks replace the defaults whole",
			yaml: "sinks:\n  daily-jsonl:\n    type: blob\n    format: jsonl\n    destination: {type: local-fs, path: out}\n    schedule: \"0 3 * * *\"\n    datasets: [logs]\n    withhold_sources: [\"secret-*\"]\n",
			check: func(t *testing.T, c *Config) {
				want := map[string]Sink{"daily-jsonl": {
					Type:            "blob",
					Format:          "jsonl",
					Destination:     Destination{Type: "local-fs", Path: filepath.Join(home, "out")},
					Schedule:        "0 3 * * *",
					Datasets:        []string{"logs"},
					WithholdSources: []string{"secret-*"},
				}}
				if !reflect.DeepEqual(c.Sinks, want) {
					t.Errorf("sinks = %+v, want %+v", c.Sinks, want)
				}
			},
		},
		{
			name: "sinks: {} means no sinks",
			yaml: "sinks: {}\n",
			check: func(t *testing.T, c *Config) {
				if c.Sinks == nil || len(c.Sinks) != 0 {
					t.Errorf("sinks = %#v, want empty", c.Sinks)
				}
			},
		},
		{
			name: "bare sinks: means no sinks",
			yaml: "sinks:\n",
			check: func(t *testing.T, c *Config) {
				if c.Sinks == nil || len(c.Sinks) != 0 {
					t.Errorf("sinks = %#v, want empty", c.Sinks)
				}
			},
		},
		{
			name: "missing schedule gets the default",
			yaml: "sinks:\n  s:\n    type: blob\n    format: parquet\n    destination: {type: local-fs, path: /abs/dir/}\n",
			check: func(t *testing.T, c *Config) {
				s := c.Sinks["s"]
				if s.Schedule != "@every 1m" || s.Destination.Path != "/abs/dir" {
					t.Errorf("sink = %+v", s)
				}
			},
		},
		{
			name: "~/ is the user's home",
			yaml: "sinks:\n  s:\n    type: blob\n    format: parquet\n    destination: {type: local-fs, path: ~/exports}\n",
			check: func(t *testing.T, c *Config) {
				if got, want := c.Sinks["s"].Destination.Path, filepath.Join(userHome, "exports"); got != want {
					t.Errorf("path = %q, want %q", got, want)
				}
			},
		},
		{
			name: "forward sink",
			yaml: "sinks:\n  upstream:\n    type: forward\n    url: https://collector.example:8443\n    token_file: secrets/token\n    schedule: \"@every 30s\"\n",
			check: func(t *testing.T, c *Config) {
				want := Sink{Type: "forward", URL: URLs{"https://collector.example:8443"}, TokenFile: filepath.Join(home, "secrets/token"), Schedule: "@every 30s", Compression: "gzip", Format: "arrow"}
				if got := c.Sinks["upstream"]; !reflect.DeepEqual(got, want) {
					t.Errorf("sink = %+v, want %+v", got, want)
				}
			},
		},
		{
			name: "forward sink with zstd",
			yaml: "sinks:\n  upstream:\n    type: forward\n    url: http://c:1\n    token_file: t\n    compression: zstd\n",
			check: func(t *testing.T, c *Config) {
				if got := c.Sinks["upstream"].Compression; got != "zstd" {
					t.Errorf("compression = %q, want zstd", got)
				}
			},
		},
		{
			name: "forward sink with ndjson",
			yaml: "sinks:\n  upstream:\n    type: forward\n    url: http://c:1\n    token_file: t\n    format: ndjson\n",
			check: func(t *testing.T, c *Config) {
				if got := c.Sinks["upstream"].Format; got != "ndjson" {
					t.Errorf("format = %q, want ndjson", got)
				}
			},
		},
		{
			name: "forward sink with replicas",
			yaml: "sinks:\n  upstream:\n    type: forward\n    url:\n      - https://a.example:8443\n      - https://b.example:8443/hyp\n    token_file: t\n",
			check: func(t *testing.T, c *Config) {
				if got, want := c.Sinks["upstream"].URL, (URLs{"https://a.example:8443", "https://b.example:8443/hyp"}); !reflect.DeepEqual(got, want) {
					t.Errorf("url = %q, want %q", got, want)
				}
			},
		},
		{
			name: "forward sink with a one-element flow list",
			yaml: "sinks:\n  upstream:\n    type: forward\n    url: [\"http://c:1\"]\n    token_file: t\n",
			check: func(t *testing.T, c *Config) {
				if got, want := c.Sinks["upstream"].URL, (URLs{"http://c:1"}); !reflect.DeepEqual(got, want) {
					t.Errorf("url = %q, want %q", got, want)
				}
			},
		},
		{
			name: "s3 destination",
			yaml: "sinks:\n  archive:\n    type: blob\n    format: parquet\n    destination: {type: s3, bucket: b, prefix: hyp/, region: eu-west-1, endpoint: \"http://minio:9000\", force_path_style: true}\n",
			check: func(t *testing.T, c *Config) {
				want := Destination{Type: "s3", Bucket: "b", Prefix: "hyp/", Region: "eu-west-1", Endpoint: "http://minio:9000", ForcePathStyle: true}
				if got := c.Sinks["archive"].Destination; got != want {
					t.Errorf("destination = %+v, want %+v", got, want)
				}
			},
		},

		{name: "unknown top-level key", yaml: "ingest: {}\nsink: {}\n", wantErr: []string{`hyp.yaml line 2: unknown key "sink"`}},
		{name: "unknown nested key", yaml: "cache:\n  retention:\n    default: 1d\n\n  flush_intervall: 2s\n", wantErr: []string{`hyp.yaml line 5: unknown key "cache.flush_intervall"`}},
		{name: "unknown key in flow mapping", yaml: "ingest: {listen: \"a:1\", max_body: 1}\n", wantErr: []string{`hyp.yaml line 1: unknown key "ingest.max_body"`}},
		{name: "unknown sink key", yaml: "sinks:\n  s:\n    type: blob\n    fromat: jsonl\n", wantErr: []string{`unknown key "sinks.s.fromat"`}},
		{name: "unknown destination key", yaml: "sinks:\n  s:\n    destination:\n      bucket: b\n      regoin: x\n", wantErr: []string{`line 5: unknown key "sinks.s.destination.regoin"`}},
		{name: "bad duration", yaml: "cache:\n  flush_interval: 2x\n", wantErr: []string{`line 2: cache.flush_interval: invalid duration "2x"`}},
		{name: "duration without unit", yaml: "cache:\n  flush_interval: 2\n", wantErr: []string{`cache.flush_interval: invalid duration "2"`}},
		{name: "duration not a scalar", yaml: "cache:\n  flush_interval: [1s]\n", wantErr: []string{`cache.flush_interval: a duration must be a scalar`}},
		{name: "zero flush interval", yaml: "cache:\n  flush_interval: 0\n", wantErr: []string{`line 2: cache.flush_interval: must be greater than 0, got 0s`}},
		{name: "zero compaction interval", yaml: "cache:\n  compaction: {interval: 0s}\n", wantErr: []string{`cache.compaction.interval: must be greater than 0`}},
		{name: "negative retention", yaml: "cache:\n  retention:\n    default: -1d\n    max_age: -1h\n", wantErr: []string{
			`line 3: cache.retention.default: must not be negative, got -24h0m0s`,
			`line 4: cache.retention.max_age: must not be negative`,
		}},
		{name: "bad retention dataset name", yaml: "cache:\n  retention:\n    datasets: {Logs: 1d}\n", wantErr: []string{`cache.retention.datasets.Logs: bad dataset name "Logs"`}},
		{name: "wrong type names the key", yaml: "ingest:\n  max_body_bytes: lots\n", wantErr: []string{"line 2: ingest.max_body_bytes: cannot unmarshal"}},
		{name: "bad listen", yaml: "ingest:\n  listen: localhost\n", wantErr: []string{`line 2: ingest.listen: "localhost" is not host:port`}},
		{name: "bad listen port", yaml: "ingest:\n  listen: \"localhost:http\"\n", wantErr: []string{`ingest.listen: "localhost:http" is not host:port`}},
		{name: "zero max body", yaml: "ingest:\n  max_body_bytes: 0\n", wantErr: []string{`ingest.max_body_bytes: must be greater than 0, got 0`}},
		{name: "negative memory limit", yaml: "memory_limit_bytes: -5\n", wantErr: []string{`memory_limit_bytes: must be 0 (no limit) or more, got -5`}},
		{name: "syntax error", yaml: "ingest: [\n", wantErr: []string{"hyp.yaml line 1: yaml: did not find expected node content"}},
		{name: "two documents", yaml: "ingest: {}\n---\ncache: {}\n", wantErr: []string{"only one YAML document"}},

		{name: "bad sink name", yaml: "sinks:\n  Bad_Name:\n    type: forward\n    url: http://h\n    token_file: t\n", wantErr: []string{`line 2: sinks.Bad_Name: bad sink name "Bad_Name"`}},
		{name: "missing sink type", yaml: "sinks:\n  s: {}\n", wantErr: []string{`line 2: sinks.s.type: must be blob, forward or iceberg, got ""`}},
		{name: "unknown sink type", yaml: "sinks:\n  s:\n    type: kafka\n", wantErr: []string{`line 3: sinks.s.type: must be blob, forward or iceberg, got "kafka"`}},
		{name: "blob needs format and destination", yaml: "sinks:\n  s:\n    type: blob\n", wantErr: []string{
			`sinks.s.format: must be parquet or jsonl, got ""`,
			`sinks.s.destination.type: must be local-fs or s3, got ""`,
		}},
		{name: "local-fs needs path", yaml: "sinks:\n  s:\n    type: blob\n    format: jsonl\n    destination: {type: local-fs}\n", wantErr: []string{`line 5: sinks.s.destination.path: required`}},
		{name: "local-fs rejects s3 keys", yaml: "sinks:\n  s:\n    type: blob\n    format: jsonl\n    destination: {type: local-fs, path: x, bucket: b}\n", wantErr: []string{`sinks.s.destination.bucket: "b" is not used by local-fs destinations`}},
		{name: "~user is not expanded", yaml: "sinks:\n  s:\n    type: blob\n    format: jsonl\n    destination: {type: local-fs, path: ~bob/x}\n", wantErr: []string{`sinks.s.destination.path: "~bob/x": only ~/ is expanded`}},
		{name: "s3 needs bucket", yaml: "sinks:\n  s:\n    type: blob\n    format: parquet\n    destination:\n      type: s3\n      region: r\n", wantErr: []string{`line 5: sinks.s.destination.bucket: required for s3 destinations`}},
		{name: "s3 bad endpoint", yaml: "sinks:\n  s:\n    type: blob\n    format: parquet\n    destination: {type: s3, bucket: b, endpoint: \"minio:9000\"}\n", wantErr: []string{`sinks.s.destination.endpoint: "minio:9000"`}},
		{name: "s3 rejects path", yaml: "sinks:\n  s:\n    type: blob\n    format: parquet\n    destination: {type: s3, bucket: b, path: p}\n", wantErr: []string{`sinks.s.destination.path: "p" is not used by s3 destinations`}},
		{name: "unknown destination type", yaml: "sinks:\n  s:\n    type: blob\n    format: parquet\n    destination: {type: gcs}\n", wantErr: []string{`sinks.s.destination.type: must be local-fs or s3, got "gcs"`}},
		{name: "forward needs url and token", yaml: "sinks:\n  f:\n    type: forward\n", wantErr: []string{
			`sinks.f.url: "": required`,
			`sinks.f.token_file: required for forward sinks`,
		}},
		{name: "forward compression", yaml: "sinks:\n  f:\n    type: forward\n    url: http://h\n    token_file: t\n    compression: br\n", wantErr: []string{`line 6: sinks.f.compression: must be gzip, zstd or none, got "br"`}},
		{name: "blob rejects compression", yaml: "sinks:\n  b:\n    type: blob\n    format: jsonl\n    destination: {type: local-fs, path: x}\n    compression: zstd\n", wantErr: []string{`sinks.b.compression: "zstd" is not used by blob sinks`}},
		{name: "forward url must be http", yaml: "sinks:\n  f:\n    type: forward\n    url: ftp://h\n    token_file: t\n", wantErr: []string{`line 4: sinks.f.url: "ftp://h": scheme must be http or https`}},
		{name: "forward url needs host", yaml: "sinks:\n  f:\n    type: forward\n    url: \"http:///x\"\n    token_file: t\n", wantErr: []string{`sinks.f.url: "http:///x": missing host`}},
		{name: "forward url list: each element checked at its line", yaml: "sinks:\n  f:\n    type: forward\n    url:\n      - http://a\n      - ftp://b\n      - \"http:///x\"\n    token_file: t\n", wantErr: []string{
			`line 6: sinks.f.url[1]: "ftp://b": scheme must be http or https`,
			`line 7: sinks.f.url[2]: "http:///x": missing host`,
		}},
		{name: "forward url list: a replica listed twice", yaml: "sinks:\n  f:\n    type: forward\n    url: [\"http://a:1\", \"http://b:1\", \"HTTP://A:1/\"]\n    token_file: t\n", wantErr: []string{
			`line 4: sinks.f.url[2]: "HTTP://A:1/" is listed twice (also at [0])`,
		}},
		{name: "forward url list: empty", yaml: "sinks:\n  f:\n    type: forward\n    url: []\n    token_file: t\n", wantErr: []string{
			`line 4: sinks.f.url: empty list`,
		}},
		{name: "forward url list: nested", yaml: "sinks:\n  f:\n    type: forward\n    url:\n      - [http://a]\n    token_file: t\n", wantErr: []string{
			`line 5: a url list holds URLs`,
		}},
		{name: "forward url: a mapping", yaml: "sinks:\n  f:\n    type: forward\n    url: {a: http://a}\n    token_file: t\n", wantErr: []string{
			`line 4: url must be a URL or a list of URLs`,
		}},
		{name: "blob rejects a url list", yaml: "sinks:\n  s:\n    type: blob\n    format: jsonl\n    destination: {type: local-fs, path: x}\n    url: [http://a, http://b]\n", wantErr: []string{`sinks.s.url: "http://a, http://b" is not used by blob sinks`}},
		{name: "forward rejects blob keys", yaml: "sinks:\n  f:\n    type: forward\n    url: http://h\n    token_file: t\n    format: jsonl\n    destination: {type: local-fs, path: x}\n", wantErr: []string{
			`sinks.f.format: must be arrow or ndjson, got "jsonl"`,
			`sinks.f.destination: not used by forward sinks`,
		}},
		{name: "blob rejects forward keys", yaml: "sinks:\n  s:\n    type: blob\n    format: jsonl\n    destination: {type: local-fs, path: x}\n    url: http://h\n", wantErr: []string{`sinks.s.url: "http://h" is not used by blob sinks`}},
		{name: "bad schedule", yaml: "sinks:\n  f:\n    type: forward\n    url: http://h\n    token_file: t\n    schedule: every minute\n", wantErr: []string{`line 6: sinks.f.schedule: schedule "every minute"`}},
		{name: "zero @every", yaml: "sinks:\n  f:\n    type: forward\n    url: http://h\n    token_file: t\n    schedule: \"@every 0s\"\n", wantErr: []string{`sinks.f.schedule: schedule "@every 0s": interval must be greater than 0`}},
		{name: "bad sink dataset", yaml: "sinks:\n  f:\n    type: forward\n    url: http://h\n    token_file: t\n    datasets:\n      - logs\n      - 9lives\n      - logs\n", wantErr: []string{
			`line 8: sinks.f.datasets[1]: bad dataset name "9lives"`,
			`line 9: sinks.f.datasets[2]: dataset "logs" listed twice`,
		}},
		{name: "bad withhold pattern", yaml: "sinks:\n  f:\n    type: forward\n    url: http://h\n    token_file: t\n    withhold_sources: [\"a[\", \"\"]\n", wantErr: []string{
			`line 6: sinks.f.withhold_sources[0]: bad source pattern "a["`,
			`sinks.f.withhold_sources[1]: empty source pattern`,
		}},
		{
			name: "gateway_id",
			yaml: "gateway_id: web-1.eu.example\n",
			check: func(t *testing.T, c *Config) {
				if c.GatewayID != "web-1.eu.example" {
					t.Errorf("gateway_id %q", c.GatewayID)
				}
			},
		},
		{
			name: "gateway_id of 128 bytes",
			yaml: "gateway_id: a" + strings.Repeat("b", 127) + "\n",
			check: func(t *testing.T, c *Config) {
				if len(c.GatewayID) != 128 {
					t.Errorf("gateway_id of %d bytes", len(c.GatewayID))
				}
			},
		},
		{name: "gateway_id leading dot", yaml: "gateway_id: .web\n", wantErr: []string{`line 1: gateway_id: gateway id ".web" must start with a letter or digit`}},
		{name: "gateway_id with a slash", yaml: "gateway_id: web/1\n", wantErr: []string{`gateway_id: gateway id "web/1"`, GatewayIDSyntax}},
		{name: "gateway_id too long", yaml: "gateway_id: a" + strings.Repeat("b", 128) + "\n", wantErr: []string{"gateway_id: gateway id must be 1 to 128 bytes"}},
		{name: "gateway_id empty string", yaml: "gateway_id: \"\"\n", check: func(t *testing.T, c *Config) {
			if c.GatewayID != "" {
				t.Errorf("gateway_id %q", c.GatewayID)
			}
		}},
		{name: "errors from several keys are joined", yaml: "ingest:\n  max_body_bytes: -1\ncache:\n  flush_interval: 0s\n", wantErr: []string{
			"line 2: ingest.max_body_bytes",
			"line 4: cache.flush_interval",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if c := parseCase(t, tt.yaml, tt.wantErr); c != nil {
				tt.check(t, c)
			}
		})
	}
}

// parseCase parses yaml over the defaults. With no wantErr it must succeed and the config is
// returned; otherwise it must fail naming every one of wantErr, with no config, and nil is
// returned.
func parseCase(t *testing.T, yaml string, wantErr []string) *Config {
	t.Helper()
	c, err := Parse(home, []byte(yaml))
	if len(wantErr) == 0 {
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		return c
	}
	if err == nil {
		t.Fatalf("Parse succeeded, want error containing %q", wantErr)
	}
	for _, w := range wantErr {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q\ndoes not contain %q", err, w)
		}
	}
	if c != nil {
		t.Errorf("Parse returned a config along with an error")
	}
	return nil
}

// FuzzParse checks that no input panics and that whatever is accepted is a
// fully resolved, valid config, which `hyp config show` prints as a file that loads.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"",
		"ingest:\n  listen: 127.0.0.1:18521\n  max_body_bytes: 16777216\ncache:\n  flush_interval: 2s\n  retention:\n    default: 90d\n    datasets: {logs: 7d}\n    hold_for_sinks: true\n    max_age: 0\n  compaction:\n    interval: 10m\n",
		"sinks:\n  local-parquet:\n    type: blob\n    format: parquet\n    destination: {type: local-fs, path: ~/.hyp/exports}\n    schedule: \"@every 1m\"\n    datasets: [logs]\n",
		"sinks:\n  up:\n    type: forward\n    url: http://host:1\n    token_file: t\n    schedule: \"0 3 * * 1-5\"\n    withhold_sources: [\"a*\"]\n",
		"sinks:\n  up:\n    type: forward\n    url: [http://a:1, \"https://b:2/p\"]\n    token_file: t\n",
		"sinks:\n  a:\n    type: blob\n    format: jsonl\n    destination: {type: s3, bucket: b, prefix: p, region: r, endpoint: \"https://e\", force_path_style: true}\n",
		"base: &b {type: blob}\nsinks: {x: *b}\n",
		"sinks: {}\n",
		"cache: {flush_interval: 1d12h}\n",
		"sinks:\n  lake:\n    type: iceberg\n    catalog: {type: sql, uri: \"sqlite://c.db\"}\n    warehouse: s3://b/p\n    s3: {region: r}\n    maintain: {compact: true}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(home, data)
		if err != nil {
			return
		}
		if probs := validate(c); len(probs) > 0 {
			t.Fatalf("accepted config fails validation: %v", probs)
		}
		if s, err := Show(c); err != nil {
			t.Fatalf("show: %v", err)
		} else if out, err := s.YAML(); err != nil {
			t.Fatalf("show: %v", err)
		} else if _, err := parse(home, "shown.yaml", out, env(), Checks{}); err != nil {
			t.Fatalf("show output of an accepted config does not load: %v\n%s", err, out)
		}
		for name, s := range c.Sinks {
			if s.Type == "blob" && s.Destination.Type == "local-fs" && !filepath.IsAbs(s.Destination.Path) {
				t.Fatalf("sink %q path %q not absolute", name, s.Destination.Path)
			}
			if s.Type == "iceberg" && !IsS3Warehouse(s.Warehouse) && !filepath.IsAbs(s.Warehouse) {
				t.Fatalf("sink %q warehouse %q not absolute", name, s.Warehouse)
			}
			if s.TokenFile != "" && !filepath.IsAbs(s.TokenFile) {
				t.Fatalf("sink %q token_file %q not absolute", name, s.TokenFile)
			}
			if s.Type == "forward" {
				seen := map[string]bool{}
				for _, u := range s.URL {
					if seen[sameURL(u)] {
						t.Fatalf("sink %q accepted with replica %q twice: %q", name, u, s.URL)
					}
					seen[sameURL(u)] = true
				}
				if len(seen) == 0 {
					t.Fatalf("forward sink %q accepted without a url", name)
				}
			}
		}
	})
}
