package config

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// keyIndex maps the keys of a parsed document to their dotted paths and
// lines, so messages can say "cache.flush_interval" and a line number
// instead of yaml.v3's Go type names.
type keyIndex struct {
	lines  map[string]int       // key path or list element -> its line
	byLine map[int][]indexedKey // line -> keys starting on it
}

type indexedKey struct{ name, path string }

// given says whether the document sets the key at path.
func (idx *keyIndex) given(path string) bool {
	_, ok := idx.lines[path]
	return ok
}

// indexKeys walks the document without following aliases, so its cost is
// linear in the input however much aliasing the document uses.
func indexKeys(root *yaml.Node) *keyIndex {
	idx := &keyIndex{lines: map[string]int{}, byLine: map[int][]indexedKey{}}
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
				if _, dup := idx.lines[p]; !dup {
					idx.lines[p] = k.Line
				}
				idx.byLine[k.Line] = append(idx.byLine[k.Line], indexedKey{k.Value, p})
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := prefix + "[" + strconv.Itoa(i) + "]"
				if _, dup := idx.lines[p]; !dup {
					idx.lines[p] = c.Line
				}
				walk(c, p)
			}
		}
	}
	walk(root, "")
	return idx
}

var (
	lineMsg      = regexp.MustCompile(`^line (\d+): (.*)$`)
	unknownField = regexp.MustCompile(`^field (.+) not found in type \S+$`)
)

// typeErrors rewrites yaml.v3's per-field messages to name key paths. A
// message whose shape it does not recognise is passed on unchanged, so a
// yaml.v3 wording change only makes messages plainer, never lost.
func (idx *keyIndex) typeErrors(name string, te *yaml.TypeError) error {
	errs := make([]error, 0, len(te.Errors))
	for _, msg := range te.Errors {
		m := lineMsg.FindStringSubmatch(msg)
		if m == nil {
			errs = append(errs, fmt.Errorf("%s: %s", name, msg))
			continue
		}
		line, _ := strconv.Atoi(m[1])
		where := fmt.Sprintf("%s line %d", name, line)
		onLine := idx.byLine[line]
		if f := unknownField.FindStringSubmatch(m[2]); f != nil {
			key := f[1]
			for _, k := range onLine {
				if k.name == f[1] {
					key = k.path
					break
				}
			}
			errs = append(errs, fmt.Errorf("%s: unknown key %q", where, key))
			continue
		}
		// Only a lone key on the line identifies the value unambiguously.
		if len(onLine) == 1 {
			errs = append(errs, fmt.Errorf("%s: %s: %s", where, onLine[0].path, m[2]))
		} else {
			errs = append(errs, fmt.Errorf("%s: %s", where, m[2]))
		}
	}
	return errors.Join(errs...)
}

// problems formats validation problems, citing the line of the key or, for
// a key the file left out, of its nearest ancestor that is present.
func (idx *keyIndex) problems(name string, probs []problem) error {
	errs := make([]error, 0, len(probs))
	for _, p := range probs {
		where := name
		for k := p.key; k != ""; k = parentKey(k) {
			if line, ok := idx.lines[k]; ok {
				where = fmt.Sprintf("%s line %d", name, line)
				break
			}
		}
		errs = append(errs, fmt.Errorf("%s: %s: %s", where, p.key, p.msg))
	}
	return errors.Join(errs...)
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
