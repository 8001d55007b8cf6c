package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// env is a fixed environment, so no test depends on the process's.
func env(kv ...string) Env {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

func TestExpand(t *testing.T) {
	e := env("HOST", "central", "A", "x", "EMPTY", "", "REF", "${HOST}$$", "_U1", "u")
	tests := []struct {
		in, want string
		errs     []string // substrings, one per expected message
	}{
		{in: "plain", want: "plain"},
		{in: "${A}", want: "x"},
		{in: "${_U1}", want: "u"},
		{in: "${A:-d}", want: "x"},
		{in: "${UNSET:-d}", want: "d"},
		{in: "${UNSET:-}", want: ""},
		{in: "${EMPTY:-d}", want: "d"}, // as in sh, :- covers set-but-empty
		{in: "${EMPTY}", want: ""},
		{in: "${UNSET:-a:-b c}", want: "a:-b c"},
		{in: "http://${HOST}:${PORT:-80}/x", want: "http://central:80/x"},
		{in: "$$", want: "$"},
		{in: "$${A}", want: "${A}"},
		{in: "a$$$${A}", want: "a$${A}"},
		{in: "$$$", want: "$$"},
		{in: "pa$word $HOME $1 $", want: "pa$word $HOME $1 $"},
		{in: "${REF}", want: "${HOST}$$"}, // a value is never expanded again
		{in: "${UNSET}", want: "${UNSET}", errs: []string{`"${UNSET}": environment variable UNSET is not set`}},
		{in: "${A}${UNSET}${B}", want: "x${UNSET}${B}", errs: []string{"UNSET is not set", "B is not set"}},
		{in: "x ${A", want: "x ${A", errs: []string{`"${A": unclosed ${`}},
		{in: "${", want: "${", errs: []string{"unclosed"}},
		{in: "${}", want: "${}", errs: []string{`"${}": empty variable name`}},
		{in: "${:-d}", want: "${:-d}", errs: []string{"empty variable name"}},
		{in: "${1A}", want: "${1A}", errs: []string{`"${1A}": want ${NAME} or ${NAME:-default}`}},
		{in: "${A-b}", want: "${A-b}", errs: []string{"want ${NAME}"}},
		{in: "${A B}", want: "${A B}", errs: []string{"want ${NAME}"}},
		{in: "${A:?b}", want: "${A:?b}", errs: []string{"want ${NAME}"}},
		{in: "${UNSET:-${A}}", want: "${UNSET:-${A}}", errs: []string{"a ${ inside a default is not supported"}},
	}
	for _, tt := range tests {
		got, errs := expand(tt.in, e)
		if got != tt.want {
			t.Errorf("expand(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if len(errs) != len(tt.errs) {
			t.Errorf("expand(%q) errors %q, want %d containing %q", tt.in, errs, len(tt.errs), tt.errs)
			continue
		}
		for i, want := range tt.errs {
			if !strings.Contains(errs[i], want) {
				t.Errorf("expand(%q) error %q does not contain %q", tt.in, errs[i], want)
			}
		}
	}
}

// FuzzExpand checks that no value panics the expander, that a value without $ or with
// every $ doubled comes back as written, and that messages come only from a ${.
func FuzzExpand(f *testing.F) {
	for _, seed := range []string{"", "plain", "${A}", "${A:-d}", "$$", "${", "${}", "${A", "http://${H}:${P:-80}/x", "$${A}$", "${A:-${B}}", "${é}", "$\xff{"} {
		f.Add(seed)
	}
	e := env("A", "x$${A}", "EMPTY", "")
	f.Fuzz(func(t *testing.T, s string) {
		got, errs := expand(s, e)
		if !strings.Contains(s, "$") && (got != s || errs != nil) {
			t.Fatalf("expand(%q) = %q, %q: want it unchanged", s, got, errs)
		}
		if len(errs) > 0 && !strings.Contains(s, "${") {
			t.Fatalf("expand(%q) errors %q without a ${", s, errs)
		}
		escaped := strings.ReplaceAll(s, "$", "$$")
		if back, errs := expand(escaped, e); back != s || errs != nil {
			t.Fatalf("expand(%q) = %q, %q: want %q", escaped, back, errs, s)
		}
	})
}

func TestParseExpandsEveryStringValue(t *testing.T) {
	yaml := `gateway_id: ${GW}
ingest:
  listen: "${LISTEN_HOST:-127.0.0.1}:${PORT}"
  max_body_bytes: ${MAX_BODY:-1024}
cache:
  flush_interval: ${FI:-2s}
  retention:
    hold_for_sinks: ${HOLD:-false}
    datasets: {logs: "${LOGS_KEEP}"}
sinks:
  central:
    type: forward
    url: ["http://${CENTRAL}:1", "http://b:${BPORT:-2}"]
    token_file: ${SECRETS}/token
    withhold_sources: ["${NOISY}*"]
server:
  cluster:
    postgres: postgres://hyp:${PGPASS}@db/hyp
    lake:
      catalog: {type: sql, uri: "postgres://db/${PGDB:-cat}"}
      warehouse: s3://${BUCKET}/lake
`
	c, err := parse(home, "hyp.yaml", []byte(yaml), env("GW", "web-1", "PORT", "9000", "LOGS_KEEP", "7d",
		"CENTRAL", "a", "SECRETS", "/etc/hyp", "NOISY", "test", "PGPASS", "p$w", "BUCKET", "bk"), Checks{})
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"gateway_id", c.GatewayID, "web-1"},
		{"listen", c.Ingest.Listen, "127.0.0.1:9000"},
		{"max_body_bytes (a number after expansion)", c.Ingest.MaxBodyBytes, int64(1024)},
		{"flush_interval", c.Cache.FlushInterval, Duration(2 * time.Second)},
		{"hold_for_sinks (a bool after expansion)", c.Cache.Retention.HoldForSinks, false},
		{"retention in a map", c.Cache.Retention.Datasets["logs"], Duration(7 * 24 * time.Hour)},
		{"url list", c.Sinks["central"].URL, URLs{"http://a:1", "http://b:2"}},
		{"token_file", c.Sinks["central"].TokenFile, "/etc/hyp/token"},
		{"withhold_sources", c.Sinks["central"].WithholdSources, []string{"test*"}},
		{"cluster postgres", c.Server.Cluster.Postgres, "postgres://hyp:p$w@db/hyp"},
		{"cluster lake catalog", c.Server.Cluster.Lake.Catalog.URI, "postgres://db/cat"},
		{"cluster lake warehouse", c.Server.Cluster.Lake.Warehouse, "s3://bk/lake"},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s = %#v, want %#v", ch.what, ch.got, ch.want)
		}
	}
}

func TestExpansionProblems(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []Problem
	}{
		{
			name: "unset variable without a default names it, the key and the line",
			yaml: "sinks:\n  central:\n    type: forward\n    token_file: t\n\n\n    url: ${CENTRAL_URL}\n",
			// The url is not also reported as a bad URL: that would be the same fault again.
			want: []Problem{{Line: 7, Key: "sinks.central.url", Message: `"${CENTRAL_URL}": environment variable CENTRAL_URL is not set`}},
		},
		{
			name: "in a list element",
			yaml: "sinks:\n  f:\n    type: forward\n    token_file: t\n    url:\n      - http://a\n      - ${B_URL}\n",
			want: []Problem{{Line: 7, Key: "sinks.f.url[1]", Message: `"${B_URL}": environment variable B_URL is not set`}},
		},
		{
			name: "malformed reference names the key",
			yaml: "ingest:\n  listen: \"${HOST:127.0.0.1}:1\"\n",
			want: []Problem{{Line: 2, Key: "ingest.listen", Message: `"${HOST:127.0.0.1}": want ${NAME} or ${NAME:-default}, NAME of letters, digits and _ not starting with a digit`}},
		},
		{
			name: "unclosed",
			yaml: "gateway_id: ${GW\n",
			want: []Problem{{Line: 1, Key: "gateway_id", Message: `"${GW": unclosed ${ (want ${NAME} or ${NAME:-default})`}},
		},
		{
			name: "keys are never expanded",
			yaml: "${KEY}: 1\n",
			want: []Problem{{Line: 1, Key: "${KEY}", Message: unknownKey}},
		},
		{
			name: "a quoted expansion stays a string",
			yaml: "ingest:\n  max_body_bytes: \"${MAX:-5}\"\n",
			want: []Problem{{Line: 2, Key: "ingest.max_body_bytes", Message: "cannot unmarshal !!str `5` into int64"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse(home, "hyp.yaml", []byte(tt.yaml), env(), Checks{})
			var probs *Problems
			if !errors.As(err, &probs) {
				t.Fatalf("parse: %v, want *Problems", err)
			}
			if !reflect.DeepEqual(probs.List, tt.want) {
				t.Errorf("problems\n%#v\nwant\n%#v", probs.List, tt.want)
			}
		})
	}
}
