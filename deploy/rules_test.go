package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const (
	rulesFile     = "prometheus/hyp-alerts.yaml"
	rulesTestFile = "prometheus/hyp-alerts_test.yaml"
	dashboardFile = "grafana/hyp.json"
)

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func (r rule) name() string { return r.Alert + r.Record }

func (f ruleFile) rules() []rule {
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	var f ruleFile
	readYAML(t, rulesFile, &f)
	return f
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// labelMentions are the labels an annotation template names.
var labelMentions = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)

func TestAlertRulesAreComplete(t *testing.T) {
	var tests struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	readYAML(t, rulesTestFile, &tests)
	if !slices.Equal(tests.RuleFiles, []string{filepath.Base(rulesFile)}) {
		t.Errorf("%s tests rule_files %v, want [%s]", rulesTestFile, tests.RuleFiles, filepath.Base(rulesFile))
	}
	fires := map[string]bool{}
	for _, g := range tests.Tests {
		for _, c := range g.AlertRuleTest {
			if len(c.ExpAlerts) > 0 {
				fires[c.Alertname] = true
			}
		}
	}
	rules := loadRules(t).rules()
	if len(rules) == 0 {
		t.Fatal("no rules")
	}
	fams, _ := registered(t)
	for _, r := range rules {
		if r.Alert == "" {
			continue
		}
		if s := r.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("%s: wants both a summary and a description annotation", r.Alert)
		}
		if !fires[r.Alert] {
			t.Errorf("%s: no test in %s shows it firing", r.Alert, rulesTestFile)
		}
		// An annotation naming a label the expression drops renders empty.
		refs, err := scanRefs(r.Expr)
		if err != nil {
			t.Fatalf("%s: %v", r.Alert, err)
		}
		kept := keptLabels(fams, r.Expr, refs)
		for _, a := range r.Annotations {
			for _, m := range labelMentions.FindAllStringSubmatch(a, -1) {
				if !slices.Contains(kept, m[1]) {
					t.Errorf("%s: an annotation names $labels.%s, which %q does not keep (keeps %v)", r.Alert, m[1], r.Expr, kept)
				}
			}
		}
	}
}

// keptLabels approximates the labels an alert expression's result carries: an outer
// aggregation keeps its by labels (or none), absent() the matchers of its selector, and
// otherwise the first selector's labels survive.
func keptLabels(fams map[string]family, expr string, r refs) []string {
	e := strings.TrimSpace(expr)
	for _, agg := range []string{"sum", "max", "min", "avg", "count"} {
		if rest, ok := strings.CutPrefix(e, agg); ok {
			rest = strings.TrimSpace(rest)
			if strings.HasPrefix(rest, "by") {
				return r.grouping
			}
			if strings.HasPrefix(rest, "(") {
				return nil
			}
		}
	}
	if len(r.selectors) == 0 {
		return nil
	}
	s := r.selectors[0]
	if strings.HasPrefix(e, "absent(") {
		var ls []string
		for _, m := range s.matchers {
			if m.op == "=" {
				ls = append(ls, m.label)
			}
		}
		return ls
	}
	return append(slices.Clone(scrapeLabels), fams[s.metric].labels...)
}

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *dsRef `json:"datasource"`
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		Expr       string `json:"expr"`
		RefID      string `json:"refId"`
		Datasource *dsRef `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // of a collapsed row
}

type templateVar struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Query      any    `json:"query"` // "prometheus" for the datasource variable, {query: ...} for a query one
	Datasource *dsRef `json:"datasource"`
}

type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []templateVar `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

func (d dashboard) allPanels() []panel {
	var out []panel
	for _, p := range d.Panels {
		out = append(out, p)
		out = append(out, p.Panels...)
	}
	return out
}

const datasourceVar = "${datasource}"

// labelValues is a Grafana variable query, checked as the PromQL it stands for.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// dashboardExprs are the dashboard's PromQL expressions by where they sit, with its
// variable queries rewritten as the PromQL they run.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	d := loadDashboard(t)
	out := map[string]string{}
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			out[fmt.Sprintf("panel %q %s", p.Title, tg.RefID)] = tg.Expr
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)["query"].(string)
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			t.Fatalf("variable %s: query %q is not label_values(SELECTOR, LABEL)", v.Name, q)
		}
		out["variable "+v.Name] = fmt.Sprintf("group by (%s) (%s)", m[2], m[1])
	}
	return out
}

func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: want both", d.UID, d.Title)
	}
	hasDS := slices.ContainsFunc(d.Templating.List, func(v templateVar) bool {
		return v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	})
	if !hasDS {
		t.Error("no datasource variable of type prometheus: the dashboard would be tied to one data source")
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != datasourceVar) {
			t.Errorf("variable %s: datasource %+v, want uid %s", v.Name, v.Datasource, datasourceVar)
		}
	}
	ids := map[int]bool{}
	graphs := 0
	for _, p := range d.allPanels() {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v off the 24-column grid", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		graphs++
		if p.Datasource == nil || p.Datasource.UID != datasourceVar || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %+v and %d targets, want uid %s and a target", p.Title, p.Datasource, len(p.Targets), datasourceVar)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.Expr == "" || tg.RefID == "" || refs[tg.RefID] || tg.Datasource == nil || tg.Datasource.UID != datasourceVar {
				t.Errorf("panel %q: target %+v wants an expr, a unique refId and datasource %s", p.Title, tg, datasourceVar)
			}
			refs[tg.RefID] = true
		}
	}
	if graphs < 10 {
		t.Errorf("%d panels, want the ingest, sink, cache, retention and cluster panels", graphs)
	}
}

// promtool finds promtool the way `make test` provides it. A missing binary fails: the
// rules are only known to work once promtool has evaluated them.
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("HYP_PROMTOOL_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("HYP_PROMTOOL_BIN=%s: %v; run `make test` (it builds promtool) or point HYP_PROMTOOL_BIN at a promtool binary", p, err)
		}
		return p
	}
	if home, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(home, ".cache", "hyp-tools", "bin", "promtool")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	t.Fatal("no promtool: run `make test` (it builds promtool into ~/.cache/hyp-tools/bin) or set HYP_PROMTOOL_BIN")
	return ""
}

func runPromtool(t *testing.T, bin, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// grafanaVars stand in for the variables Grafana substitutes before a query runs.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

func TestRulesWithPromtool(t *testing.T) {
	bin := promtool(t)
	runPromtool(t, bin, "prometheus", "check", "rules", filepath.Base(rulesFile))
	runPromtool(t, bin, "prometheus", "test", "rules", filepath.Base(rulesTestFile))

	// The dashboard's expressions, as recording rules, get promtool's PromQL parser too.
	var f struct {
		Groups []map[string]any `yaml:"groups"`
	}
	var recs []map[string]string
	exprs := dashboardExprs(t)
	names := make([]string, 0, len(exprs))
	for n := range exprs {
		names = append(names, n)
	}
	slices.Sort(names)
	for i, n := range names {
		recs = append(recs, map[string]string{"record": fmt.Sprintf("dashboard:expr_%d", i), "expr": grafanaVars.Replace(exprs[n])})
	}
	f.Groups = append(f.Groups, map[string]any{"name": "dashboard", "rules": recs})
	data, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, bin, dir, "check", "rules", "dashboard.yaml")
}
