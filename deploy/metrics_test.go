package deploy

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// family is one metric family as internal/ registers it.
type family struct {
	labels    []string
	histogram bool
	// dir is the registering package; its string literals bound the values a closed label
	// (reason, result) can take.
	dir string
}

// scrapeLabels are the labels Prometheus adds to every scraped series.
var scrapeLabels = []string{"job", "instance"}

// promFamilies are series Prometheus itself makes for each target.
var promFamilies = map[string]family{"up": {}}

var (
	registryOnce sync.Once
	registryFams map[string]family
	registryLits map[string]map[string]bool // dir -> string literals of its non-test files
	registryErr  error
)

// registered reads every metric family internal/ registers from the source: the name and
// label arguments of the prometheus constructors. A name or label list that is not a literal
// fails the scan rather than leaving a family the check would not know.
func registered(t *testing.T) (map[string]family, map[string]map[string]bool) {
	t.Helper()
	registryOnce.Do(func() { registryFams, registryLits, registryErr = scanRegistrations("../internal") })
	if registryErr != nil {
		t.Fatal(registryErr)
	}
	return registryFams, registryLits
}

func scanRegistrations(root string) (map[string]family, map[string]map[string]bool, error) {
	fams := map[string]family{}
	lits := map[string]map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testutil" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		if lits[dir] == nil {
			lits[dir] = map[string]bool{}
		}
		var scanErr error
		ast.Inspect(f, func(n ast.Node) bool {
			if s, ok := stringLit(n); ok {
				lits[dir][s] = true
			}
			call, ok := n.(*ast.CallExpr)
			if !ok || scanErr != nil {
				return scanErr == nil
			}
			for _, name := range runtimeCollector(call) {
				fams[name] = family{dir: dir}
			}
			name, fam, ok, err := constructor(call)
			if err != nil {
				scanErr = fmt.Errorf("%s: %w", fset.Position(call.Pos()), err)
				return false
			}
			if !ok {
				return true
			}
			fam.dir = dir
			if prev, dup := fams[name]; dup && !slices.Equal(prev.labels, fam.labels) {
				scanErr = fmt.Errorf("%s: %s registered twice with labels %v and %v", fset.Position(call.Pos()), name, prev.labels, fam.labels)
				return false
			}
			fams[name] = fam
			return true
		})
		return scanErr
	})
	if err != nil {
		return nil, nil, fmt.Errorf("scan metric registrations under %s: %w", root, err)
	}
	return fams, lits, nil
}

// runtimeFamilies are the families of client_golang's own collectors that the rules and
// the dashboard use, by constructor; every one was seen on a daemon's /metrics.
var runtimeFamilies = map[string][]string{
	"NewProcessCollector": {"process_open_fds", "process_max_fds", "process_resident_memory_bytes", "process_cpu_seconds_total", "process_start_time_seconds"},
	"NewGoCollector":      {"go_memstats_heap_inuse_bytes", "go_gc_gomemlimit_bytes", "go_goroutines"},
}

// runtimeCollector is the families a prometheus.NewProcessCollector or NewGoCollector call
// registers, and nil for any other call.
func runtimeCollector(call *ast.CallExpr) []string {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return nil
	}
	if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "prometheus" && pkg.Name != "collectors" {
		return nil
	}
	return runtimeFamilies[sel.Sel.Name]
}

// constructor reads one prometheus.New* call; ok is false for any other call.
func constructor(call *ast.CallExpr) (name string, fam family, ok bool, err error) {
	sel, isSel := call.Fun.(*ast.SelectorExpr)
	if !isSel {
		return "", family{}, false, nil
	}
	if pkg, isIdent := sel.X.(*ast.Ident); !isIdent || pkg.Name != "prometheus" {
		return "", family{}, false, nil
	}
	fn := sel.Sel.Name
	var nameArg, labelsArg ast.Expr
	switch fn {
	case "NewDesc":
		if len(call.Args) != 4 {
			return "", family{}, false, fmt.Errorf("prometheus.NewDesc with %d arguments", len(call.Args))
		}
		nameArg, labelsArg = call.Args[0], call.Args[2]
	case "NewCounterVec", "NewGaugeVec", "NewHistogramVec", "NewSummaryVec":
		nameArg, labelsArg = optsName(call.Args[0]), call.Args[1]
	case "NewCounter", "NewGauge", "NewHistogram", "NewSummary", "NewCounterFunc", "NewGaugeFunc":
		nameArg = optsName(call.Args[0])
	default:
		return "", family{}, false, nil
	}
	name, isLit := stringLit(nameArg)
	if !isLit {
		return "", family{}, false, fmt.Errorf("prometheus.%s: the metric name is not a string literal (with no Namespace/Subsystem); the deploy check cannot read it", fn)
	}
	fam.histogram = strings.Contains(fn, "Histogram")
	if labelsArg != nil {
		if id, isIdent := labelsArg.(*ast.Ident); !isIdent || id.Name != "nil" {
			lst, isList := labelsArg.(*ast.CompositeLit)
			if !isList {
				return "", family{}, false, fmt.Errorf("%s: the label names are not a []string literal; the deploy check cannot read them", name)
			}
			for _, e := range lst.Elts {
				l, isLit := stringLit(e)
				if !isLit {
					return "", family{}, false, fmt.Errorf("%s: a label name is not a string literal", name)
				}
				fam.labels = append(fam.labels, l)
			}
		}
	}
	return name, fam, true, nil
}

// optsName is the Name field of a prometheus.*Opts literal, or nil when the literal sets a
// Namespace or Subsystem (which prefix the name) or is not a literal at all.
func optsName(e ast.Expr) ast.Expr {
	if u, ok := e.(*ast.UnaryExpr); ok {
		e = u.X
	}
	lit, ok := e.(*ast.CompositeLit)
	if !ok {
		return nil
	}
	var name ast.Expr
	for _, el := range lit.Elts {
		kv, ok := el.(*ast.KeyValueExpr)
		if !ok {
			return nil
		}
		switch k, _ := kv.Key.(*ast.Ident); {
		case k == nil:
			return nil
		case k.Name == "Name":
			name = kv.Value
		case k.Name == "Namespace" || k.Name == "Subsystem":
			return nil
		}
	}
	return name
}

func stringLit(n ast.Node) (string, bool) {
	b, ok := n.(*ast.BasicLit)
	if !ok || b.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(b.Value)
	return s, err == nil
}

// selector is one series selector of an expression: a metric and its label matchers.
type selector struct {
	metric   string
	matchers []matcher
}

type matcher struct{ label, op, value string }

// refs is what an expression names: its selectors and the labels of its by/without/on/
// ignoring/group_left/group_right clauses.
type refs struct {
	selectors []selector
	grouping  []string
}

type tok struct {
	kind byte // 'i' identifier, 's' string, 'n' number or duration, else the punctuation
	text string
}

// lexPromQL splits a PromQL expression into the tokens scanRefs needs; it is not a full
// parser (promtool checks the syntax), only enough to find names and labels.
func lexPromQL(expr string) ([]tok, error) {
	var toks []tok
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			s := expr[i+1 : j]
			if c != '`' {
				u, err := strconv.Unquote(`"` + strings.ReplaceAll(s, `"`, `\"`) + `"`)
				if err == nil {
					s = u
				}
			}
			toks = append(toks, tok{'s', s})
			i = j + 1
		case c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i
			for j < len(expr) && (expr[j] == '_' || expr[j] == ':' || expr[j] >= 'a' && expr[j] <= 'z' || expr[j] >= 'A' && expr[j] <= 'Z' || expr[j] >= '0' && expr[j] <= '9') {
				j++
			}
			toks = append(toks, tok{'i', expr[i:j]})
			i = j
		case c >= '0' && c <= '9' || c == '.':
			j := i
			for j < len(expr) && (expr[j] == '.' || expr[j] >= '0' && expr[j] <= '9' || expr[j] >= 'a' && expr[j] <= 'z' || expr[j] >= 'A' && expr[j] <= 'Z') {
				j++
			}
			toks = append(toks, tok{'n', expr[i:j]})
			i = j
		default:
			if i+1 < len(expr) && slices.Contains([]string{"=~", "!~", "!=", "==", ">=", "<="}, expr[i:i+2]) {
				toks = append(toks, tok{'o', expr[i : i+2]})
				i += 2
				continue
			}
			toks = append(toks, tok{c, string(c)})
			i++
		}
	}
	return toks, nil
}

var groupingWords = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}

func scanRefs(expr string) (refs, error) {
	toks, err := lexPromQL(expr)
	if err != nil {
		return refs{}, err
	}
	var r refs
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if t.kind != 'i' {
			continue
		}
		next := byte(0)
		if i+1 < len(toks) {
			next = toks[i+1].kind
		}
		switch {
		case slices.Contains(groupingWords, t.text) && next == '(':
			j := i + 2
			for ; j < len(toks) && toks[j].kind != ')'; j++ {
				if toks[j].kind == 'i' {
					r.grouping = append(r.grouping, toks[j].text)
				}
			}
			i = j
		case next == '{':
			sel := selector{metric: t.text}
			j := i + 2
			for ; j+2 < len(toks) && toks[j].kind != '}'; j++ {
				if toks[j].kind == ',' {
					continue
				}
				if toks[j].kind != 'i' || toks[j+2].kind != 's' {
					return refs{}, fmt.Errorf("cannot read the matchers of %s", t.text)
				}
				sel.matchers = append(sel.matchers, matcher{toks[j].text, toks[j+1].text, toks[j+2].text})
				j += 2
			}
			r.selectors = append(r.selectors, sel)
			i = j
		case next != '(' && (strings.HasPrefix(t.text, "hyp_") || strings.HasPrefix(t.text, "process_") || strings.HasPrefix(t.text, "go_") || isPromFamily(t.text)):
			r.selectors = append(r.selectors, selector{metric: t.text})
		}
	}
	return r, nil
}

func isPromFamily(name string) bool {
	_, ok := promFamilies[name]
	return ok
}

// closedValue is a matcher value that names label values outright (a word, or words joined
// by |), as opposed to a pattern or a dashboard variable.
var closedValue = regexp.MustCompile(`^[a-z0-9_]+(\|[a-z0-9_]+)*$`)

// checkExpr lists what expr names that hyp does not register: metrics, labels of a
// selector or clause, and label values the registering package never spells.
func checkExpr(fams map[string]family, lits map[string]map[string]bool, expr string) []string {
	r, err := scanRefs(expr)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	known := slices.Clone(scrapeLabels)
	for _, s := range r.selectors {
		fam, ok := promFamilies[s.metric]
		allowed := slices.Clone(scrapeLabels)
		if !ok {
			fam, ok = fams[s.metric]
		}
		if !ok {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				base, found := strings.CutSuffix(s.metric, suffix)
				if f, isFam := fams[base]; found && isFam && f.histogram {
					fam, ok = f, true
					if suffix == "_bucket" {
						allowed = append(allowed, "le")
					}
				}
			}
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("metric %s is not registered by internal/", s.metric))
			continue
		}
		allowed = append(allowed, fam.labels...)
		known = append(known, allowed...)
		for _, m := range s.matchers {
			if !slices.Contains(allowed, m.label) {
				problems = append(problems, fmt.Sprintf("%s has no label %s (it has %v)", s.metric, m.label, allowed))
				continue
			}
			if slices.Contains(scrapeLabels, m.label) || (m.op != "=" && m.op != "=~") || !closedValue.MatchString(m.value) {
				continue
			}
			for _, v := range strings.Split(m.value, "|") {
				if !lits[fam.dir][v] {
					problems = append(problems, fmt.Sprintf("%s{%s=%q}: %s never spells %q", s.metric, m.label, m.value, fam.dir, v))
				}
			}
		}
	}
	for _, l := range r.grouping {
		if !slices.Contains(known, l) {
			problems = append(problems, fmt.Sprintf("grouping label %s is on none of the expression's metrics", l))
		}
	}
	return problems
}

func TestRegistrationScanFindsTheMetrics(t *testing.T) {
	fams, _ := registered(t)
	// A scan that silently stopped finding constructors would pass every check below.
	want := map[string][]string{
		"hyp_sink_lag_rows":                   {"sink", "dataset", "partition"},
		"hyp_ingest_unavailable_total":        {"reason"},
		"hyp_cache_lost_rows_total":           nil,
		"hyp_cluster_commit_lag_seconds":      nil,
		"hyp_ingest_request_duration_seconds": {"endpoint"},
	}
	for name, labels := range want {
		f, ok := fams[name]
		if !ok {
			t.Errorf("scan did not find %s (found %d families)", name, len(fams))
			continue
		}
		if !slices.Equal(f.labels, labels) {
			t.Errorf("%s: labels %v, want %v", name, f.labels, labels)
		}
	}
	if !fams["hyp_ingest_request_duration_seconds"].histogram {
		t.Error("hyp_ingest_request_duration_seconds not seen as a histogram")
	}
}

func TestCheckExprCatchesMistakes(t *testing.T) {
	fams, lits := registered(t)
	cases := []struct {
		name, expr string
		problem    string // substring of the one problem expected; "" for none
	}{
		{"known", `sum by (sink, dataset) (hyp_sink_lag_rows{job="hyp",sink=~"$sink"})`, ""},
		{"histogram bucket", `histogram_quantile(0.99, sum by (le, endpoint) (rate(hyp_ingest_request_duration_seconds_bucket[5m])))`, ""},
		{"closed values", `hyp_ingest_unavailable_total{reason=~"disk_full|io_error"}`, ""},
		{"up", `up{job="hyp"} == 0`, ""},
		{"process collector", `process_open_fds / process_max_fds > 0.8`, ""},
		{"unregistered runtime metric", `go_memstats_lookups_total`, "not registered"},
		{"unknown metric", `rate(hyp_sink_lag_rowz[5m])`, "hyp_sink_lag_rowz is not registered"},
		{"unknown label", `hyp_sink_lag_rows{table="t"}`, "no label table"},
		{"unknown value", `hyp_ingest_unavailable_total{reason="disk_ful"}`, `never spells "disk_ful"`},
		{"unknown grouping", `sum by (table) (hyp_sink_lag_rows)`, "grouping label table"},
		{"bucket of a gauge", `hyp_sink_lag_rows_bucket`, "not registered"},
		{"le off a bucket", `hyp_ingest_request_duration_seconds_count{le="1"}`, "no label le"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := checkExpr(fams, lits, c.expr)
			switch {
			case c.problem == "" && len(got) > 0:
				t.Errorf("problems %q, want none", got)
			case c.problem != "" && (len(got) != 1 || !strings.Contains(got[0], c.problem)):
				t.Errorf("problems %q, want one containing %q", got, c.problem)
			}
		})
	}
}

func TestExpressionsUseRegisteredMetrics(t *testing.T) {
	fams, lits := registered(t)
	exprs := map[string]string{}
	for _, r := range loadRules(t).rules() {
		exprs["rule "+r.name()] = r.Expr
	}
	for name, e := range dashboardExprs(t) {
		exprs[name] = e
	}
	if len(exprs) < 20 {
		t.Fatalf("found only %d expressions in the rules and the dashboard", len(exprs))
	}
	for name, e := range exprs {
		for _, p := range checkExpr(fams, lits, e) {
			t.Errorf("%s: %s\n  in %s", name, p, e)
		}
	}
}
