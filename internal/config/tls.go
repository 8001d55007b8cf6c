package config

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
)

// ListenerTLS is `ingest.tls` (SPEC 3): the listener serves HTTPS with the pair, and with
// ClientCAFile demands a client certificate issued by one of its CAs (mutual TLS). Paths
// are absolute after loading; the files are read when the listener starts.
type ListenerTLS struct {
	CertFile     string `yaml:"cert_file"`
	KeyFile      string `yaml:"key_file"`
	ClientCAFile string `yaml:"client_ca_file"`
}

// SinkTLS is a forward sink's `tls` (SPEC 3), used for every replica URL. CAFile replaces
// the system's CAs for checking the central; CertFile and KeyFile are the client
// certificate a mutual TLS central asks for. Paths are absolute after loading; the files
// are read when the sink is built.
type SinkTLS struct {
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	ServerName         string `yaml:"server_name"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// tlsProblems resolves the paths of ingest.tls and of every sink's tls, and checks them.
func tlsProblems(home string, c *Config) []problem {
	var probs []problem
	resolve := func(key string, p *string) {
		if *p == "" {
			return
		}
		abs, err := resolvePath(home, *p)
		if err != nil {
			probs = append(probs, problemf(key, "%q: %v", *p, err))
			return
		}
		*p = abs
	}
	if t := c.Ingest.TLS; t != nil {
		const key = "ingest.tls"
		resolve(key+".cert_file", &t.CertFile)
		resolve(key+".key_file", &t.KeyFile)
		resolve(key+".client_ca_file", &t.ClientCAFile)
		for _, f := range []struct{ k, v string }{{"cert_file", t.CertFile}, {"key_file", t.KeyFile}} {
			if f.v == "" {
				probs = append(probs, problemf(key+"."+f.k, "required when ingest.tls is given (the listener's certificate and its key)"))
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Sinks)) {
		s := c.Sinks[name]
		if s.TLS == nil {
			continue
		}
		key := "sinks." + name + ".tls"
		if s.Type != "forward" {
			probs = append(probs, problemf(key, "only used by forward sinks"))
			continue
		}
		t := *s.TLS
		resolve(key+".ca_file", &t.CAFile)
		resolve(key+".cert_file", &t.CertFile)
		resolve(key+".key_file", &t.KeyFile)
		s.TLS = &t
		c.Sinks[name] = s
		switch {
		case t.CertFile != "" && t.KeyFile == "":
			probs = append(probs, problemf(key+".key_file", "required with cert_file (the client certificate's key)"))
		case t.KeyFile != "" && t.CertFile == "":
			probs = append(probs, problemf(key+".cert_file", "required with key_file (the client certificate)"))
		}
		if t.InsecureSkipVerify && t.CAFile != "" {
			probs = append(probs, problemf(key+".insecure_skip_verify", "contradicts ca_file: either check the central against ca_file or not at all"))
		}
		// A tls block with an http:// replica would send that replica the token in clear.
		for i, u := range s.URL {
			k := "sinks." + name + ".url"
			if len(s.URL) > 1 {
				k = fmt.Sprintf("%s[%d]", k, i)
			}
			if p, err := url.Parse(u); err == nil && strings.EqualFold(p.Scheme, "http") {
				probs = append(probs, problemf(k, "%q: a forward sink with tls needs https:// URLs", u))
			}
		}
	}
	if cl := c.Server.Cluster; cl != nil && cl.Lake.TLS != nil {
		probs = append(probs, problemf(clusterKey+".lake.tls", "only used by forward sinks"))
	}
	return probs
}
