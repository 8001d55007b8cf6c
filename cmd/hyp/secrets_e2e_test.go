package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Every test password holds "CRET", which nothing else hyp prints spells.
const secretMark = "CRET"

// requireNoSecret fails t for every output that shows a test password.
func requireNoSecret(t *testing.T, outputs map[string]string) {
	t.Helper()
	for what, text := range outputs {
		if strings.Contains(text, secretMark) {
			t.Errorf("%s shows a password:\n%s", what, text)
		}
	}
}

// TestSecretsStayOutOfEveryOutput (SPEC 9.8): passwords in a forward sink's replica URLs and
// an iceberg catalog's URI (userinfo, encoded, sslpassword=) stay out of config show and
// validate, sink list and status, /metrics and the daemon's log while forwarding retries and
// the catalog cannot be reached; URIs whose password cannot be located (a '/', '%ZZ' or '#'
// in it, a '#' in sslpassword) and key=value DSNs are problems that quote no password, for
// config validate, config show and `hyp server`; and `hyp server`'s start-up error for a
// cluster database it cannot reach names the database with its password masked.
func TestSecretsStayOutOfEveryOutput(t *testing.T) {
	t.Parallel()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("gateway-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("daemon", func(t *testing.T) {
		t.Parallel()
		home, addr := t.TempDir(), freePort(t)
		// Nobody listens on the replicas or the catalog: every attempt is refused.
		a, b, pg := freePort(t), freePort(t), freePort(t)
		writeDaemonYAML(t, home, addr, "",
			fmt.Sprintf("  central:\n    type: forward\n    url: [\"http://hyp:S3CRETa@%s\", \"http://hyp:S3%%2FCRETb@%s\"]\n    token_file: %q\n    schedule: \"@every 1s\"\n", a, b, tokenFile),
			fmt.Sprintf("  lake:\n    type: iceberg\n    catalog: {type: sql, uri: \"postgres://hyp:S3CRETc@%s/cat?connect_timeout=2&sslpassword=S3CRETd\"}\n    warehouse: %q\n    schedule: \"@every 1s\"\n", pg, filepath.Join(home, "lake")))
		outputs := map[string]string{}
		for _, args := range [][]string{{"config", "show"}, {"config", "show", "--json"}, {"config", "validate"}, {"config", "validate", "--json"}, {"sink", "list"}, {"sink", "list", "--json"}} {
			r := runHyp(t, home, time.Minute, args...)
			if r.code != 0 {
				t.Fatalf("%s", r)
			}
			outputs[strings.Join(args, " ")] = r.stdout + r.stderr
		}
		if !strings.Contains(outputs["config show"], "http://hyp:xxxxx@"+b) || !strings.Contains(outputs["config show"], "sslpassword=xxxxx") {
			t.Errorf("config show does not mask the passwords where they were:\n%s", outputs["config show"])
		}

		d := startHypDaemon(t, home, addr)
		if code, m, err := post(addr, "/v1/ingest/logs", rows(0, 3, "web")); err != nil || code != 200 {
			t.Fatalf("ingest: %d %v %v", code, m, err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(d.out.String(), "forward: retrying") || !strings.Contains(d.out.String(), "catalog postgres://") {
			if time.Now().After(deadline) {
				t.Fatalf("no forward retry and catalog error logged in 30s:\n%s", d.out)
			}
			time.Sleep(50 * time.Millisecond)
		}
		for _, args := range [][]string{{"sink", "status"}, {"sink", "status", "--json"}} {
			r := runHyp(t, home, time.Minute, args...)
			if r.code != 0 {
				t.Fatalf("%s", r)
			}
			outputs[strings.Join(args, " ")] = r.stdout + r.stderr
		}
		if !strings.Contains(outputs["sink status --json"], `"replica": "http://hyp:xxxxx@`) {
			t.Errorf("sink status does not name the replica:\n%s", outputs["sink status --json"])
		}
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		metrics, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		outputs["/metrics"] = string(metrics)
		if !strings.Contains(outputs["/metrics"], `hyp_forward_replica_up{sink="central",url="http://hyp:xxxxx@`) {
			t.Errorf("/metrics has no replica_up of the masked replica:\n%s", metrics)
		}
		d.stop(t)
		outputs["daemon log"] = d.out.String()
		requireNoSecret(t, outputs)
	})

	t.Run("refused URIs", func(t *testing.T) {
		t.Parallel()
		lake := func(uri string) string {
			return fmt.Sprintf("    lake: {catalog: {type: sql, uri: %q}, warehouse: /w}\n", uri)
		}
		cases := []struct{ name, yaml, key string }{
			{"cluster, / in the password", "server:\n  cluster:\n    postgres: \"postgres://hyp:S3/CRET@db/hyp\"\n" + lake("postgres://db/cat"), "server.cluster.postgres"},
			{"cluster, bad escape", "server:\n  cluster:\n    postgres: \"postgres://hyp:S3%ZZCRET@db/hyp\"\n" + lake("postgres://db/cat"), "server.cluster.postgres"},
			{"cluster, # in the password", "server:\n  cluster:\n    postgres: \"postgres://hyp:S3#CRET@db/hyp\"\n" + lake("postgres://db/cat"), "server.cluster.postgres"},
			{"cluster, # in sslpassword", "server:\n  cluster:\n    postgres: \"postgres://hyp@db/hyp?sslpassword=S3#CRET\"\n" + lake("postgres://db/cat"), "server.cluster.postgres"},
			{"cluster, key=value", "server:\n  cluster:\n    postgres: \"host=db password=S3CRET\"\n" + lake("postgres://db/cat"), "server.cluster.postgres"},
			{"lake catalog, / in the password", "server:\n  cluster:\n    postgres: \"postgres://db/hyp\"\n" + lake("postgres://hyp:S3/CRET@db/cat"), "server.cluster.lake.catalog.uri"},
			{"lake catalog, key=value", "server:\n  cluster:\n    postgres: \"postgres://db/hyp\"\n" + lake("host=db password='S3 CRET'"), "server.cluster.lake.catalog.uri"},
			{"forward, # in the password", "sinks:\n  central:\n    type: forward\n    url: \"http://hyp:S3#CRET@central:1\"\n    token_file: " + tokenFile + "\n", "sinks.central.url"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				home := t.TempDir()
				if err := os.WriteFile(filepath.Join(home, "hyp.yaml"), []byte("ingest:\n  listen: "+freePort(t)+"\n"+tc.yaml), 0o644); err != nil {
					t.Fatal(err)
				}
				outputs := map[string]string{}
				for _, args := range [][]string{{"config", "validate"}, {"config", "validate", "--json"}, {"config", "show"},
					{"server", "--listen", freePort(t), "--token-file", tokenFile}} {
					r := runHyp(t, home, time.Minute, args...)
					if r.code != 2 || !strings.Contains(r.stdout+r.stderr, tc.key) {
						t.Errorf("want exit 2 naming %s: %s", tc.key, r)
					}
					outputs[strings.Join(args, " ")] = r.stdout + r.stderr
				}
				requireNoSecret(t, outputs)
			})
		}
	})

	t.Run("server start-up", func(t *testing.T) {
		t.Parallel()
		home := t.TempDir()
		pg := freePort(t) // nobody listens
		cfg := fmt.Sprintf("ingest:\n  listen: %s\nserver:\n  cluster:\n    postgres: \"postgres://hyp:S3CRET@%s/hyp?connect_timeout=2\"\n    lake: {catalog: {type: sql, uri: \"postgres://db/cat\"}, warehouse: /w}\n", freePort(t), pg)
		if err := os.WriteFile(filepath.Join(home, "hyp.yaml"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		outputs := map[string]string{}
		for _, args := range [][]string{{"server", "--listen", freePort(t), "--token-file", tokenFile}, {"server", "status"}} {
			r := runHyp(t, home, time.Minute, args...)
			if r.code != 1 || !strings.Contains(r.stderr, "cluster: postgres postgres://hyp:xxxxx@"+pg+"/hyp") {
				t.Errorf("want exit 1 naming the database with its password masked: %s", r)
			}
			outputs[strings.Join(args, " ")] = r.stdout + r.stderr
		}
		requireNoSecret(t, outputs)
	})
}
