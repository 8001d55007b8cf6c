package config

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// The test passwords: each holds "S3CRET" or "PW", which no other part of these configs or
// their messages spells.
const (
	pwSlash   = "S3/CRET"
	pwEscape  = "S3%ZZCRET"
	pwHash    = "S3#CRET"
	pwAt      = "S3@CRET"
	pwSpace   = "S3 CRET"
	pwPlain   = "S3CRET"
	pwEncoded = "S3%2FCRET"
)

func cluster(postgres string) string {
	return "server:\n  cluster:\n    postgres: \"" + postgres + "\"\n    lake: {catalog: {type: sql, uri: \"postgres://db/cat\"}, warehouse: /w}\n"
}

func catalog(uri string) string {
	return "sinks:\n  lake:\n    type: iceberg\n    catalog: {type: sql, uri: \"" + uri + "\"}\n    warehouse: /w\n"
}

func forward(url string) string {
	return "sinks:\n  central:\n    type: forward\n    url: \"" + url + "\"\n    token_file: /t\n"
}

// TestURIsWhosePasswordCannotBeLocatedAreProblems: a URI whose password readers would cut
// differently (or not parse at all) is refused under its key, and no problem message quotes
// the password.
func TestURIsWhosePasswordCannotBeLocatedAreProblems(t *testing.T) {
	tests := []struct {
		name, yaml, key, want string
	}{
		{"cluster postgres, / in the password", cluster("postgres://hyp:" + pwSlash + "@db/hyp"), "server.cluster.postgres", "cannot tell where its password ends"},
		{"cluster postgres, bad escape", cluster("postgres://hyp:" + pwEscape + "@db/hyp"), "server.cluster.postgres", "cannot tell where its password ends"},
		{"cluster postgres, # in the password", cluster("postgres://hyp:" + pwHash + "@db/hyp"), "server.cluster.postgres", "cannot tell where its password ends"},
		{"cluster postgres, @ in the password", cluster("postgres://hyp:" + pwAt + "@db/hyp"), "server.cluster.postgres", "cannot tell where its password ends"},
		{"cluster postgres, space in the password", cluster("postgres://hyp:" + pwSpace + "@db/hyp"), "server.cluster.postgres", "cannot tell where its password ends"},
		{"cluster postgres, # in sslpassword", cluster("postgres://hyp@db/hyp?sslpassword=" + pwHash), "server.cluster.postgres", "cannot tell where a password in its query ends"},
		{"cluster postgres, key=value", cluster("host=db password=" + pwPlain), "server.cluster.postgres", "required: a postgres:// URI"},
		{"catalog, / in the password", catalog("postgres://hyp:" + pwSlash + "@db/cat"), "sinks.lake.catalog.uri", "cannot tell where its password ends"},
		{"catalog, bad escape", catalog("postgres://hyp:" + pwEscape + "@db/cat"), "sinks.lake.catalog.uri", "cannot tell where its password ends"},
		{"catalog, key=value", catalog("host=db password='" + pwSpace + "'"), "sinks.lake.catalog.uri", "scheme must be postgres or sqlite"},
		{"forward, / in the password", forward("http://u:" + pwSlash + "@central:8080"), "sinks.central.url", "cannot tell where its password ends"},
		{"forward, # in the password", forward("https://u:" + pwHash + "@central"), "sinks.central.url", "cannot tell where its password ends"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(home, []byte(tt.yaml))
			var probs *Problems
			if !errors.As(err, &probs) {
				t.Fatalf("Parse: %v, want problems", err)
			}
			found := false
			for _, p := range probs.List {
				if p.Key == tt.key && strings.Contains(p.Message, tt.want) {
					found = true
				}
				for _, secret := range []string{"S3", "CRET"} {
					if strings.Contains(p.Message, secret) || strings.Contains(p.Key, secret) {
						t.Errorf("problem %+v shows the password", p)
					}
				}
			}
			if !found {
				t.Errorf("no problem %s: %s in\n%v", tt.key, tt.want, err)
			}
		})
	}
}

// TestShowMasksEverySyntax: a password in a URI's userinfo, encoded, or in a query's
// password= or sslpassword= is shown as xxxxx, the rest of the value as written.
func TestShowMasksEverySyntax(t *testing.T) {
	yaml := cluster("postgres://hyp:"+pwEncoded+"@db/hyp?sslmode=verify-full&sslpassword="+pwPlain) +
		"sinks:\n  lake:\n    type: iceberg\n    catalog: {type: sql, uri: \"postgres://db/cat?password=" + pwPlain + "\"}\n    warehouse: /w\n" +
		"  central:\n    type: forward\n    url: [\"http://u:" + pwPlain + "@a:1\", \"http://u:" + pwEncoded + "@b:1\"]\n    token_file: /t\n"
	c, err := Parse(home, []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Show(c)
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	out := showYAML(t, c)
	// JSON writes & as \u0026.
	for what, text := range map[string]string{"yaml": string(out), "json": strings.ReplaceAll(string(js), `\u0026`, "&")} {
		if strings.Contains(text, "S3") {
			t.Errorf("%s output shows a password:\n%s", what, text)
		}
		for _, want := range []string{"postgres://hyp:xxxxx@db/hyp?sslmode=verify-full&sslpassword=xxxxx", "postgres://db/cat?password=xxxxx", "http://u:xxxxx@a:1", "http://u:xxxxx@b:1"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s output lacks %q:\n%s", what, want, text)
			}
		}
	}
}
