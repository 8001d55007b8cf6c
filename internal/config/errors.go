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
	seen := map[Problem]bool{}
	earlier := map[int]*reportedKeys{}
	for _, stage := range stages {
		var kept []Problem
		for _, p := range stage {
			if r := earlier[p.Line]; p.Line > 0 && r.covers(p.Key) {
				continue
			}
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
			kept = append(kept, p)
		}
		for _, p := range kept {
			if earlier[p.Line] == nil {
				earlier[p.Line] = &reportedKeys{keys: map[string]bool{}, parents: map[string]bool{}}
			}
			earlier[p.Line].add(p.Key)
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

// reportedKeys are the keys problems were reported about on one line, kept so that
// asking whether a key is related to any of them costs the depth of the key, not the
// number of problems: a flow mapping can put thousands of keys on one line.
type reportedKeys struct {
	unnamed bool
	keys    map[string]bool // reported keys
	parents map[string]bool // every parent of a reported key
}

func (r *reportedKeys) add(k string) {
	if k == "" {
		r.unnamed = true
		return
	}
	r.keys[k] = true
	for p := parentKey(k); p != "" && !r.parents[p]; p = parentKey(p) {
		r.parents[p] = true
	}
}

// covers reports whether k may name a fault already reported: it is one of the keys, inside
// one, holds one, or either is unnamed.
func (r *reportedKeys) covers(k string) bool {
	if r == nil {
		return false
	}
	if r.unnamed || k == "" || r.parents[k] {
		return true
	}
	for ; k != ""; k = parentKey(k) {
		if r.keys[k] {
			return true
		}
	}
	return false
}

// keyIndex maps the keys of a parsed document to their dotted paths and
// lines, so messages can say "cache.flush_interval" and a line number
// instead of yaml.v3's Go type names.
type keyIndex struct {
	lines  map[string]int               // key path or list element -> its line
	onLine map[int]map[string]lineEntry // line -> name of a key starting on it -> its path
}

// lineEntry is the path of the first key of a name on a line, and how many keys start on
// that line in all (only a lone key identifies a value yaml.v3 complains of by line).
type lineEntry struct {
	path  string
	count *int
}

// given says whether the document sets the key at path.
func (idx *keyIndex) given(path string) bool {
	_, ok := idx.lines[path]
	return ok
}

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
	idx := &keyIndex{lines: map[string]int{}, onLine: map[int]map[string]lineEntry{}}
	counts := map[int]*int{}
	eachEntry(root, func(p string, k, v *yaml.Node) {
		line := v.Line
		if k != nil {
			line = k.Line
			names := idx.onLine[line]
			if names == nil {
				names, counts[line] = map[string]lineEntry{}, new(int)
				idx.onLine[line] = names
			}
			*counts[line]++
			if _, dup := names[k.Value]; !dup {
				names[k.Value] = lineEntry{path: p, count: counts[line]}
			}
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
		onLine := idx.onLine[line]
		if f := unknownField.FindStringSubmatch(m[2]); f != nil {
			key := f[1]
			if e, ok := onLine[f[1]]; ok {
				key = e.path
			}
			probs = append(probs, Problem{Line: line, Key: key, Message: unknownKey})
			continue
		}
		// Only a lone key on the line identifies the value unambiguously.
		p := Problem{Line: line, Message: m[2]}
		for _, e := range onLine {
			if *e.count == 1 {
				p.Key = e.path
			}
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
