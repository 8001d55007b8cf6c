package config

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strings"

	"gopkg.in/yaml.v3"
)

// Shown is a config as `hyp config show` prints it: every field under its yaml name, so a
// field added to the config structs shows up without anyone listing it, durations in
// hyp.yaml syntax, and any password in a URI replaced by xxxxx. What it prints loads back
// as the same config, but for those passwords.
type Shown struct{ node yaml.Node }

// Show makes c printable. Token contents never reach a Config (only token_file paths
// do), and the yaml:"-" File field is left out, so URIs are all it needs to redact.
func Show(c *Config) (*Shown, error) {
	var s Shown
	if err := s.node.Encode(c); err != nil {
		return nil, err
	}
	var redact func(n *yaml.Node)
	redact = func(n *yaml.Node) {
		if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
			n.Value = RedactURI(n.Value)
		}
		for i, c := range n.Content {
			if n.Kind != yaml.MappingNode || i%2 == 1 {
				redact(c)
			}
		}
	}
	redact(&s.node)
	return &s, nil
}

// YAML is the config as a hyp.yaml document.
func (s *Shown) YAML() ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&s.node); err != nil {
		return nil, err
	}
	return b.Bytes(), enc.Close()
}

// MarshalJSON is the same tree as JSON, for --json.
func (s *Shown) MarshalJSON() ([]byte, error) {
	var v any
	if err := s.node.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// RedactURI hides the password in a URI (postgres://user:xxxxx@host/db, and a password=
// query parameter as libpq reads it) before it reaches a message or output. Anything else,
// a URI without a password included, comes back unchanged.
func RedactURI(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		return s
	}
	changed := false
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), redacted)
		changed = true
	}
	q := u.Query()
	for k := range q {
		if strings.EqualFold(k, "password") {
			q.Set(k, redacted)
			u.RawQuery = q.Encode()
			changed = true
		}
	}
	if !changed {
		return s
	}
	return u.String()
}

// redacted stands for a password, as url.URL.Redacted writes it.
const redacted = "xxxxx"
