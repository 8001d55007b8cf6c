package config

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Problem is one thing wrong in a config file.
type Problem struct {
	Line    int    `json:"line"`    // 0 when no line can be given
	Key     string `json:"key"`     // dotted key path such as sinks.central.url, "" when none can be named
	Message string `json:"message"` // what is wrong, without the file, line or key
}

// unknownKey is the Message of a key the config does not have.
const unknownKey = "unknown key"

// format writes p as `file line N: key: message`, leaving out what p does not have.
func (p Problem) format(file string) string {
	where := file
	if p.Line > 0 {
		where = fmt.Sprintf("%s line %d", file, p.Line)
	}
	switch {
	case p.Message == unknownKey:
		return fmt.Sprintf("%s: %s %q", where, unknownKey, p.Key)
	case p.Key != "":
		return fmt.Sprintf("%s: %s: %s", where, p.Key, p.Message)
	}
	return fmt.Sprintf("%s: %s", where, p.Message)
}

// Problems is every problem found in one config file, in line order. Load and Parse
// return it as their error, so a caller that wants the list can errors.As for it.
type Problems struct {
	File string
	List []Problem
}

// Error is one line per problem.
func (p *Problems) Error() string {
	lines := make([]string, len(p.List))
	for i, q := range p.List {
		lines[i] = q.format(p.File)
	}
	return strings.Join(lines, "\n")
}

// merge orders the problems of the stages of a check, earliest stage first, into one list
// by line. A problem on a line where an earlier stage already reported one about the same
// key (or one of its parents or children, or an unnamed key) is left out: it is the same
// fault seen again (a value that failed to expand or to decode is also a bad value to
// validation), and repeating it would bury the real message.
func merge(stages ...[]Problem) []Problem {
	var out []Problem
	earlier := map[int][]string{} // line -> keys reported there by earlier stages
	for _, stage := range stages {
		seen := map[int][]string{}
		for _, p := range stage {
			if p.Line > 0 && slices.ContainsFunc(earlier[p.Line], func(k string) bool { return related(k, p.Key) }) {
				continue
			}
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
			seen[p.Line] = append(seen[p.Line], p.Key)
		}
		for l, keys := range seen {
			earlier[l] = append(earlier[l], keys...)
		}
	}
	// Problems with no line go last: they are about the file as a whole.
	slices.SortStableFunc(out, func(a, b Problem) int {
		if (a.Line <= 0) != (b.Line <= 0) {
			return cmp.Compare(b.Line, a.Line)
		}
		return cmp.Compare(a.Line, b.Line)
	})
	return out
}

// related reports whether two key paths may name the same fault: equal, one inside the
// other, or either unknown.
func related(a, b string) bool {
	inside := func(child, parent string) bool {
		return strings.HasPrefix(child, parent) && len(child) > len(parent) && (child[len(parent)] == '.' || child[len(parent)] == '[')
	}
	return a == "" || b == "" || a == b || inside(a, b) || inside(b, a)
}

// keyIndex maps the keys of a parsed document to their dotted paths and
// lines, so messages can say "cache.flush_interval" and a line number
// instead of yaml.v3's Go type names.
type keyIndex struct {
	lines  map[string]int       // key path or list element -> its line
	byLine map[int][]indexedKey // line -> keys starting on it
}

type indexedKey struct{ name, path string }

// eachEntry calls fn for every mapping entry (with its key node) and sequence element (key
// nil) under n, with its dotted key path. It does not follow aliases, so its cost is linear
// in the input however much aliasing the document uses.
func eachEntry(n *yaml.Node, fn func(path string, key, value *yaml.Node)) {
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, prefix)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if prefix != "" {
					p = prefix + "." + k.Value
				}
				fn(p, k, v)
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := prefix + "[" + strconv.Itoa(i) + "]"
				fn(p, nil, c)
				walk(c, p)
			}
		}
	}
	walk(n, "")
}

func indexKeys(root *yaml.Node) *keyIndex {
	idx := &keyIndex{lines: map[string]int{}, byLine: map[int][]indexedKey{}}
	eachEntry(root, func(p string, k, v *yaml.Node) {
		line := v.Line
		if k != nil {
			line = k.Line
			idx.byLine[k.Line] = append(idx.byLine[k.Line], indexedKey{k.Value, p})
		}
		if _, dup := idx.lines[p]; !dup {
			idx.lines[p] = line
		}
	})
	return idx
}

var (
	lineMsg      = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
	unknownField = regexp.MustCompile(`^field (.+) not found in type \S+$`)
)

// typeErrors rewrites yaml.v3's per-field messages to name key paths. A
// message whose shape it does not recognise is passed on unchanged, so a
// yaml.v3 wording change only makes messages plainer, never lost.
func (idx *keyIndex) typeErrors(msgs []string) []Problem {
	probs := make([]Problem, 0, len(msgs))
	for _, msg := range msgs {
		m := lineMsg.FindStringSubmatch(msg)
		if m == nil {
			probs = append(probs, Problem{Message: msg})
			continue
		}
		line, _ := strconv.Atoi(m[1])
		onLine := idx.byLine[line]
		if f := unknownField.FindStringSubmatch(m[2]); f != nil {
			key := f[1]
			for _, k := range onLine {
				if k.name == f[1] {
					key = k.path
					break
				}
			}
			probs = append(probs, Problem{Line: line, Key: key, Message: unknownKey})
			continue
		}
		// Only a lone key on the line identifies the value unambiguously.
		p := Problem{Line: line, Message: m[2]}
		if len(onLine) == 1 {
			p.Key = onLine[0].path
		}
		probs = append(probs, p)
	}
	return probs
}

// problems places validation problems, citing the line of the key or, for
// a key the file left out, of its nearest ancestor that is present.
func (idx *keyIndex) problems(probs []problem) []Problem {
	out := make([]Problem, 0, len(probs))
	for _, p := range probs {
		q := Problem{Key: p.key, Message: p.msg}
		for k := p.key; k != ""; k = parentKey(k) {
			if line, ok := idx.lines[k]; ok {
				q.Line = line
				break
			}
		}
		out = append(out, q)
	}
	return out
}

// syntaxProblem places a yaml.v3 parse error ("yaml: line 3: did not find expected key")
// at its line.
func syntaxProblem(err error) Problem {
	if m := lineMsg.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		return Problem{Line: line, Message: "yaml: " + m[2]}
	}
	return Problem{Message: err.Error()}
}

// parentKey drops the last segment of a dotted key path, treating an index
// suffix like "[2]" as a segment.
func parentKey(k string) string {
	i := strings.LastIndexAny(k, ".[")
	if i < 0 {
		return ""
	}
	return k[:i]
}
