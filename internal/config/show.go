package config

import (
	"bytes"
	"encoding/json"
	"gopkg.in/yaml.v3"

	"github.com/hyp-project/hyp/internal/redact"
)

// Shown is a config as `hyp config show` prints it: every field under its yaml name, so a
// field added to the config structs shows up without anyone listing it (but a sink's keys
// of other sink types, always empty), durations in hyp.yaml syntax, and every secret redact
// recognises in a value (a URI's password, also one url.Parse cannot parse; password= and
// sslpassword= in a query or a key=value connection string) replaced by xxxxx. What it
// prints loads back as the same config, but for those secrets.
type Shown struct{ node yaml.Node }

// Show makes c printable. Token contents never reach a Config (only token_file paths
// do), and the yaml:"-" File field is left out, so the values' own text is all it needs to
// redact.
func Show(c *Config) (*Shown, error) {
	var s Shown
	if err := s.node.Encode(c); err != nil {
		return nil, err
	}
	var mask func(n *yaml.Node)
	mask = func(n *yaml.Node) {
		if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
			n.Value = redact.String(n.Value)
		}
		for i, c := range n.Content {
			if n.Kind != yaml.MappingNode || i%2 == 1 {
				mask(c)
			}
		}
	}
	mask(&s.node)
	root := &s.node // Encode of a struct gives its mapping
	if sinks := mapValue(root, "sinks"); sinks != nil {
		for i := 1; i < len(sinks.Content); i += 2 {
			pruneSink(sinks.Content[i])
		}
	}
	if lake := mapValue(mapValue(mapValue(root, "server"), "cluster"), "lake"); lake != nil {
		pruneSink(lake)
	}
	return &s, nil
}

// typeKeys are the sink keys only one type of sink uses; validation refuses them set on
// another type, so on a sink of another type they are empty and only clutter the output.
// A key in no list is every type's.
var typeKeys = map[string][]string{
	"blob":    {"format", "destination"},
	"forward": {"url", "token_file", "compression", "tls"},
	"iceberg": {"catalog", "warehouse", "namespace", "partition_by", "s3", "maintain"},
}

// pruneSink drops from a sink's mapping the keys of the other sink types.
func pruneSink(sink *yaml.Node) {
	t := mapValue(sink, "type")
	if t == nil {
		return
	}
	drop := map[string]bool{}
	for typ, keys := range typeKeys {
		for _, k := range keys {
			if typ != t.Value {
				drop[k] = true
			}
		}
	}
	kept := sink.Content[:0]
	for i := 0; i+1 < len(sink.Content); i += 2 {
		if !drop[sink.Content[i].Value] {
			kept = append(kept, sink.Content[i], sink.Content[i+1])
		}
	}
	sink.Content = kept
}

// mapValue is the value under key in mapping n, nil when n is nil, not a mapping, or lacks it.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
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
