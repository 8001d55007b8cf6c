package config

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/hyp-project/hyp/internal/redact"
)

// URLs is a forward sink's `url`: one URL, or a list of replicas of one central (SPEC 3).
// A nil URLs means the key was left out; an empty non-nil one is an explicit `url: []`,
// which validation refuses with its own message.
type URLs []string

// UnmarshalYAML takes a scalar or a sequence of scalars, and reports anything else as a
// *yaml.TypeError so the decoder keeps going and every bad value is reported in one pass.
func (u *URLs) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*u = URLs{n.Value}
		return nil
	case yaml.SequenceNode:
		out := make(URLs, 0, len(n.Content))
		var errs []string
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				errs = append(errs, fmt.Sprintf("line %d: a url list holds URLs, not a nested list or mapping", c.Line))
				continue
			}
			out = append(out, c.Value)
		}
		if len(errs) > 0 {
			return &yaml.TypeError{Errors: errs}
		}
		*u = out
		return nil
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: url must be a URL or a list of URLs", n.Line)}}
}

// MarshalJSON writes a single URL as a string, as `sink list --json` always has, and
// replicas as a list.
func (u URLs) MarshalJSON() ([]byte, error) {
	if len(u) == 1 {
		return json.Marshal(u[0])
	}
	return json.Marshal([]string(u))
}

// String is the URLs for people: the one URL, or the replicas comma separated.
func (u URLs) String() string { return strings.Join(u, ", ") }

// Redacted is the URLs as listings show them: a password in one masked.
func (u URLs) Redacted() URLs {
	if u == nil {
		return nil
	}
	out := make(URLs, len(u))
	for i, s := range u {
		out[i] = redact.String(s)
	}
	return out
}

// validateURLs checks a forward sink's url under key: each an http(s) URL with a host, no
// replica listed twice (failover would then skip nothing and count one central's
// replica twice), and an explicit list not empty. A single URL is reported under key
// itself, as before lists existed; a list's URLs under key[i], so the message cites the
// element's line.
func validateURLs(key string, u URLs) []problem {
	if u == nil {
		return []problem{problemf(key, "%q: %v", "", checkHTTPURL(""))}
	}
	if len(u) == 0 {
		return []problem{problemf(key, "empty list: give one URL or a list of replicas")}
	}
	var probs []problem
	seen := map[string]int{}
	for i, s := range u {
		k := key
		if len(u) > 1 {
			k = fmt.Sprintf("%s[%d]", key, i)
		}
		if err := checkHTTPURL(s); err != nil {
			probs = append(probs, problemf(k, "%q: %v", s, err))
			continue
		}
		if j, dup := seen[sameURL(s)]; dup {
			probs = append(probs, problemf(k, "%q is listed twice (also at [%d])", s, j))
			continue
		}
		seen[sameURL(s)] = i
	}
	return probs
}

// sameURL is what two spellings of one replica share: scheme and host are case-blind, and
// the sender drops a trailing slash. s has passed checkHTTPURL.
func sameURL(s string) string {
	u, _ := url.Parse(s)
	u.Scheme, u.Host = strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	return strings.TrimRight(u.String(), "/")
}

// MarshalYAML writes a single URL as a scalar, as it is usually given, replicas as a list,
// and no url as null, which loads back as no url.
func (u URLs) MarshalYAML() (any, error) {
	switch {
	case u == nil:
		return nil, nil
	case len(u) == 1:
		return u[0], nil
	}
	return []string(u), nil
}
