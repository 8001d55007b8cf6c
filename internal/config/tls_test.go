package config

import (
	"path/filepath"
	"reflect"
	"testing"
)

func TestParseTLS(t *testing.T) {
	userHome := t.TempDir()
	t.Setenv("HOME", userHome)
	fwd := func(tls string) string {
		return "sinks:\n  central:\n    type: forward\n    url: https://central:18522\n    token_file: /t\n    tls: " + tls + "\n"
	}
	tests := []struct {
		name    string
		yaml    string
		check   func(t *testing.T, c *Config)
		wantErr []string
	}{
		{name: "no tls anywhere", yaml: "", check: func(t *testing.T, c *Config) {
			if c.Ingest.TLS != nil {
				t.Errorf("ingest.tls = %+v, want nil", c.Ingest.TLS)
			}
		}},
		{name: "ingest tls, paths resolved", yaml: "ingest:\n  tls: {cert_file: certs/srv.pem, key_file: ~/srv-key.pem, client_ca_file: /etc/ca.pem}\n",
			check: func(t *testing.T, c *Config) {
				want := &ListenerTLS{CertFile: filepath.Join(home, "certs/srv.pem"), KeyFile: filepath.Join(userHome, "srv-key.pem"), ClientCAFile: "/etc/ca.pem"}
				if !reflect.DeepEqual(c.Ingest.TLS, want) {
					t.Errorf("ingest.tls = %+v, want %+v", c.Ingest.TLS, want)
				}
			}},
		{name: "ingest tls without key", yaml: "ingest:\n  tls: {cert_file: /c.pem}\n", wantErr: []string{"line 2: ingest.tls.key_file: required"}},
		{name: "ingest tls client ca alone", yaml: "ingest:\n  tls:\n    client_ca_file: /ca.pem\n",
			wantErr: []string{"ingest.tls.cert_file: required", "ingest.tls.key_file: required"}},
		{name: "ingest tls unknown key", yaml: "ingest:\n  tls: {cert: /c.pem}\n", wantErr: []string{`unknown key "ingest.tls.cert"`}},
		{name: "ingest tls ~user", yaml: "ingest:\n  tls: {cert_file: ~bob/c.pem, key_file: /k}\n", wantErr: []string{"ingest.tls.cert_file", "only ~/ is expanded"}},
		{name: "forward tls, paths resolved", yaml: fwd("{ca_file: ca.pem, cert_file: ~/gw.pem, key_file: /k/gw-key.pem, server_name: central.example}"),
			check: func(t *testing.T, c *Config) {
				want := &SinkTLS{CAFile: filepath.Join(home, "ca.pem"), CertFile: filepath.Join(userHome, "gw.pem"), KeyFile: "/k/gw-key.pem", ServerName: "central.example"}
				if got := c.Sinks["central"].TLS; !reflect.DeepEqual(got, want) {
					t.Errorf("sinks.central.tls = %+v, want %+v", got, want)
				}
			}},
		{name: "forward tls insecure alone", yaml: fwd("{insecure_skip_verify: true}"), check: func(t *testing.T, c *Config) {
			if !c.Sinks["central"].TLS.InsecureSkipVerify {
				t.Error("insecure_skip_verify lost")
			}
		}},
		{name: "forward cert without key", yaml: fwd("{cert_file: /c.pem}"), wantErr: []string{"sinks.central.tls.key_file: required with cert_file"}},
		{name: "forward key without cert", yaml: fwd("{key_file: /k.pem}"), wantErr: []string{"sinks.central.tls.cert_file: required with key_file"}},
		{name: "forward insecure with ca", yaml: fwd("{ca_file: /ca.pem, insecure_skip_verify: true}"), wantErr: []string{"sinks.central.tls.insecure_skip_verify: contradicts ca_file"}},
		{name: "forward tls with an http replica", yaml: "sinks:\n  central:\n    type: forward\n    url: [https://a:1, http://b:1]\n    token_file: /t\n    tls: {ca_file: /ca.pem}\n",
			wantErr: []string{`sinks.central.url[1]: "http://b:1": a forward sink with tls needs https:// URLs`}},
		{name: "forward tls unknown key", yaml: fwd("{ca: /ca.pem}"), wantErr: []string{`unknown key "sinks.central.tls.ca"`}},
		{name: "tls on a blob sink", yaml: "sinks:\n  local:\n    type: blob\n    format: jsonl\n    destination: {type: local-fs, path: /x}\n    tls: {}\n",
			wantErr: []string{"sinks.local.tls: only used by forward sinks"}},
		{name: "tls on the cluster lake", yaml: "server:\n  cluster:\n    postgres: postgres://db/hyp\n    lake:\n      catalog: {type: hadoop}\n      warehouse: /w\n      tls: {ca_file: /ca.pem}\n",
			wantErr: []string{"server.cluster.lake.tls: only used by forward sinks"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if c := parseCase(t, tt.yaml, tt.wantErr); c != nil {
				tt.check(t, c)
			}
		})
	}
}
