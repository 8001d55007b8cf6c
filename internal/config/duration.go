package config

import (
	"fmt"
	"math"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Duration is a time.Duration written in hyp.yaml as Go duration syntax
// extended with a "d" (24h day) unit, e.g. "90d", "1d12h", "36h" or "0".
type Duration time.Duration

// goUnits are the units time.ParseDuration accepts; "d" is added on top.
var goUnits = map[string]bool{"ns": true, "us": true, "µs": true, "μs": true, "ms": true, "s": true, "m": true, "h": true}

// ParseDuration parses Go duration syntax (time.ParseDuration) extended with
// a "d" unit meaning 24 hours. Units may be combined ("1d12h") and a leading
// sign applies to the whole value, as in Go.
func ParseDuration(s string) (time.Duration, error) {
	fail := func(format string, args ...any) (time.Duration, error) {
		return 0, fmt.Errorf("invalid duration %q: %s", s, fmt.Sprintf(format, args...))
	}
	rest := s
	neg := false
	if rest != "" && (rest[0] == '-' || rest[0] == '+') {
		neg = rest[0] == '-'
		rest = rest[1:]
	}
	if rest == "0" {
		return 0, nil
	}
	if rest == "" {
		return fail("empty")
	}
	isNum := func(r rune) bool { return r == '.' || (r >= '0' && r <= '9') }
	// Each number+unit term goes through time.ParseDuration on its own so
	// Go's rules for numbers and fractions apply unchanged; a "d" term is
	// parsed as hours and scaled by 24.
	var total time.Duration
	for rest != "" {
		i := strings.IndexFunc(rest, func(r rune) bool { return !isNum(r) })
		if i == 0 {
			return fail("expected a number before %q", rest)
		}
		if i < 0 {
			return fail("missing unit after %q (ns, us, ms, s, m, h or d)", rest)
		}
		j := strings.IndexFunc(rest[i:], isNum)
		if j < 0 {
			j = len(rest) - i
		}
		num, unit := rest[:i], rest[i:i+j]
		rest = rest[i+j:]
		if unit != "d" && !goUnits[unit] {
			return fail("unknown unit %q (ns, us, ms, s, m, h or d)", unit)
		}
		if strings.Trim(num, ".") == "" || strings.Count(num, ".") > 1 {
			return fail("bad number %q", num)
		}
		goUnit, scale := unit, time.Duration(1)
		if unit == "d" {
			goUnit, scale = "h", 24
		}
		// With number and unit checked, time.ParseDuration can only fail
		// by overflowing.
		term, err := time.ParseDuration(num + goUnit)
		if err != nil || term > math.MaxInt64/scale {
			return fail("out of range")
		}
		term *= scale
		if total > math.MaxInt64-term {
			return fail("out of range")
		}
		total += term
	}
	if neg {
		total = -total
	}
	return total, nil
}

// UnmarshalYAML reports problems as *yaml.TypeError so the decoder keeps
// going and every bad value in the file is reported in one pass.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: a duration must be a scalar such as 90d or 36h", n.Line)}}
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes d as hyp.yaml would: whole days as "90d", the rest in Go syntax.
func (d Duration) MarshalYAML() (any, error) { return d.text(), nil }

// text is d in the syntax ParseDuration reads, without Go's zero units: "90d", "1d12h",
// "10m", "1m30s", "500ms", "0s".
func (d Duration) text() string {
	const day = 24 * time.Hour
	t := time.Duration(d)
	s := ""
	if t >= day {
		s, t = fmt.Sprintf("%dd", t/day), t%day
		if t == 0 {
			return s
		}
	}
	g := t.String()
	g = strings.TrimSuffix(g, "m0s")
	if g != t.String() {
		g += "m"
	}
	if h := strings.TrimSuffix(g, "h0m"); h != g {
		g = h + "h"
	}
	return s + g
}
