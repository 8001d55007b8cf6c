package config

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// Env looks a variable up as os.LookupEnv does. Load and Parse read the process
// environment; tests pass their own so that none depends on it.
type Env func(name string) (string, bool)

// expand replaces ${NAME} and ${NAME:-default} in s with the variable's value and $$ with
// a literal $ (SPEC 3). It returns one message per reference it cannot expand, each quoting
// the reference, and copies such a reference into the result as written.
//
// Choices the SPEC leaves open, made to match the shell:
//   - the default applies when NAME is unset or set to the empty string, as ${NAME:-x} does
//     in sh; ${NAME} of a variable set to "" is "", not an error;
//   - a $ followed by anything but { or $ is itself (so "pa$word" and "$HOME" stay as
//     written: only the braced form expands, and only $$ needs escaping);
//   - a variable's value is inserted as it is, never expanded again;
//   - a default is literal text up to the first }: a ${ inside one is refused rather than
//     silently ending the default early.
func expand(s string, env Env) (string, []string) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var b strings.Builder
	var errs []string
	for {
		i := strings.IndexByte(s, '$')
		if i < 0 || i == len(s)-1 {
			b.WriteString(s)
			return b.String(), errs
		}
		b.WriteString(s[:i])
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			s = s[i+2:]
			continue
		case '{':
		default:
			b.WriteByte('$')
			s = s[i+1:]
			continue
		}
		end := strings.IndexByte(s[i+2:], '}')
		if end < 0 {
			errs = append(errs, fmt.Sprintf("%q: unclosed ${ (want ${NAME} or ${NAME:-default})", s[i:]))
			b.WriteString(s[i:])
			return b.String(), errs
		}
		ref, body := s[i:i+2+end+1], s[i+2:i+2+end]
		s = s[i+2+end+1:]
		v, err := lookupRef(body, env)
		if err != "" {
			errs = append(errs, fmt.Sprintf("%q: %s", ref, err))
			b.WriteString(ref)
			continue
		}
		b.WriteString(v)
	}
}

// lookupRef resolves the text between ${ and }: NAME or NAME:-default.
func lookupRef(body string, env Env) (string, string) {
	name, def, hasDef := strings.Cut(body, ":-")
	switch {
	case name == "":
		return "", "empty variable name (want ${NAME} or ${NAME:-default})"
	case !validVarName(name):
		return "", "want ${NAME} or ${NAME:-default}, NAME of letters, digits and _ not starting with a digit"
	case strings.Contains(def, "${"):
		return "", "a ${ inside a default is not supported"
	}
	v, ok := env(name)
	switch {
	case ok && (v != "" || !hasDef):
		return v, ""
	case hasDef:
		return def, ""
	}
	return "", "environment variable " + name + " is not set"
}

func validVarName(s string) bool {
	for i, r := range s {
		letter := r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
		if !letter && (i == 0 || r < '0' || r > '9') {
			return false
		}
	}
	return s != ""
}

// expandTree expands every scalar value of the document in place, never a key, so the
// decoder and the messages still see the file's own lines. A plain (unquoted) scalar that
// changed loses the tag the parser gave its text, so `max_body_bytes: ${MAX:-1024}` decodes
// as a number and `hold_for_sinks: ${HOLD:-true}` as a bool; a quoted one stays a string.
func expandTree(root *yaml.Node, env Env) []Problem {
	var probs []Problem
	eachEntry(root, func(path string, _, v *yaml.Node) {
		if v.Kind != yaml.ScalarNode {
			return
		}
		out, errs := expand(v.Value, env)
		for _, e := range errs {
			probs = append(probs, Problem{Line: v.Line, Key: path, Message: e})
		}
		if out != v.Value {
			v.Value = out
			if v.Style == 0 {
				v.Tag = ""
			}
		}
	})
	return probs
}
