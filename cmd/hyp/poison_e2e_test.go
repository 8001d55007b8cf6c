package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The poison corpus: rows a hostile or careless client sends that once wedged the cache or
// lost values (issue: one bad request, row or peer never wedges a node). Every row has an
// integer "id"; want gives, per id, each field's text as every reader must show it, under
// the name it is stored as (a value whose type conflicts goes to `<name>__<type>`).
type poisonRow struct {
	line string
	want map[string]string
}

var bigInt = strings.Repeat("7", 400)

var poisonCorpus = []poisonRow{
	{`{"id":1,"service.name":"api","http.status_code":503,"user-agent":"curl/8","@timestamp":"2026-01-01T00:00:00Z"}`,
		map[string]string{"service.name": "api", "http.status_code": "503", "user-agent": "curl/8", "@timestamp": "2026-01-01T00:00:00Z"}},
	{`{"id":2,"big":1e400,"neg":-1e400,"huge":` + bigInt + `,"tiny":1e-400}`,
		map[string]string{"big": "1e400", "neg": "-1e400", "huge": bigInt, "tiny": "1e-400"}},
	{`{"id":3,"Key":"upper","key":"lower","KEY":"shout"}`,
		map[string]string{"Key": "upper", "key": "lower", "KEY": "shout"}},
	{`{"id":4,"a.b":1,"a_x2Eb":2,"a_2eb":3,"a__2eb":4}`,
		map[string]string{"a.b": "1", "a_x2Eb": "2", "a_2eb": "3", "a__2eb": "4"}},
	{`{"id":5,"sp ace":"x","quo\"te":"y","back\\slash":"z","ünïcödé":"u","emoji😀":"e","nested":{"k":[1,2]},"9lives":true}`,
		map[string]string{"sp ace": "x", `quo"te`: "y", `back\slash`: "z", "ünïcödé": "u", "emoji😀": "e", "nested": `{"k":[1,2]}`, "9lives": "true"}},
	{`{"id":6,"ratio":1.5,"count":7}`, map[string]string{"ratio": "1.5", "count": "7"}},
	{`{"id":7,"ratio":1e400,"count":-1e400}`, map[string]string{"ratio__string": "1e400", "count__string": "-1e400"}},
}

const wideFields = 3000

func wideBody(from, to int) []byte {
	var b bytes.Buffer
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, `{"id":%d,"f%04d":%d}`+"\n", i, i, i)
	}
	return b.Bytes()
}

func wideWant() map[int]map[string]string {
	w := map[int]map[string]string{}
	for i := range wideFields {
		w[i] = map[string]string{fmt.Sprintf("f%04d", i): fmt.Sprint(i)}
	}
	return w
}

func poisonWant(corpus []poisonRow) map[int]map[string]string {
	w := map[int]map[string]string{}
	for i, r := range corpus {
		w[i+1] = r.want
	}
	return w
}

// valueText is how a decoded JSON value is compared: a string as its content, a number as
// its literal, anything else as its JSON.
func valueText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func decodeObject(s string) (map[string]any, error) {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var m map[string]any
	err := d.Decode(&m)
	return m, err
}

// addField files name=text under id, unpacking the overflow column into its fields.
func addField(t *testing.T, got map[int]map[string]string, id int, name, text string) {
	t.Helper()
	if got[id] == nil {
		got[id] = map[string]string{}
	}
	if name != "_hyp_overflow" {
		got[id][name] = text
		return
	}
	m, err := decodeObject(text)
	if err != nil {
		t.Fatalf("row %d: _hyp_overflow %q: %v", id, text, err)
	}
	for k, v := range m {
		got[id][k] = valueText(v)
	}
}

// queriedValues reads every non-null user value of a dataset through `hyp query sql`, under
// the field names `query schema` reports for the names the query used.
func queriedValues(t *testing.T, home, dataset string) map[int]map[string]string {
	t.Helper()
	r := runHyp(t, home, time.Minute, "query", "schema", dataset, "--json")
	if r.code != 0 {
		t.Fatalf("query schema: %s", r)
	}
	var sch struct {
		Columns []struct {
			Name      string `json:"name"`
			QueryName string `json:"query_name"`
		} `json:"columns"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &sch); err != nil {
		t.Fatalf("query schema output: %v\n%s", err, r)
	}
	field := map[string]string{}
	for _, c := range sch.Columns {
		field[c.QueryName] = c.Name
	}
	sql := fmt.Sprintf(`SELECT * FROM (UNPIVOT (SELECT COLUMNS(*)::VARCHAR FROM %s) ON COLUMNS(* EXCLUDE (id)) INTO NAME k VALUE v)`, dataset)
	r = runHyp(t, home, 2*time.Minute, "query", "sql", sql, "--format", "jsonl")
	if r.code != 0 {
		t.Fatalf("query: %s", r)
	}
	got := map[int]map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var row struct{ ID, K, V string }
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatalf("query line %q: %v", sc.Text(), err)
		}
		var id int
		fmt.Sscan(row.ID, &id)
		name, ok := field[row.K]
		if !ok {
			t.Fatalf("query column %q is not in the schema %s", row.K, r.stdout)
		}
		addField(t, got, id, name, row.V)
	}
	return got
}

// exportedValues reads every user value of a dataset from a local jsonl.gz export.
func exportedValues(t *testing.T, root, dataset string) map[int]map[string]string {
	t.Helper()
	got := map[int]map[string]string{}
	eachExportedRow(t, filepath.Join(root, dataset), func(id int, m map[string]any) {
		for k, v := range m {
			if k == "id" || k == "_hyp_ingest_seq" || k == "_hyp_ingested_at" {
				continue
			}
			addField(t, got, id, k, valueText(v))
		}
	})
	return got
}

// eachExportedRow calls fn with the id and fields of every row of the jsonl.gz files under
// dir (a local export), file by file in the order localFiles gives.
func eachExportedRow(t *testing.T, dir string, fn func(id int, m map[string]any)) {
	t.Helper()
	for _, f := range localFiles(t, dir) {
		zr, err := gzip.NewReader(bytes.NewReader(f.data))
		if err != nil {
			t.Fatalf("%s: %v", f.rel, err)
		}
		sc := bufio.NewScanner(zr)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			m, err := decodeObject(sc.Text())
			if err != nil {
				t.Fatalf("%s: %v", f.rel, err)
			}
			id, err := jsonInt(m["id"])
			if err != nil {
				t.Fatalf("%s: %v", f.rel, err)
			}
			fn(int(id), m)
		}
	}
}

func requireValues(t *testing.T, where string, got, want map[int]map[string]string) {
	t.Helper()
	bad := 0
	for id, fields := range want {
		for k, v := range fields {
			if g, ok := got[id][k]; !ok || g != v {
				if bad++; bad <= 10 {
					t.Errorf("%s: row %d field %q = %q (present %v), want %q", where, id, k, g, ok, v)
				}
			}
		}
		if len(got[id]) != len(fields) {
			if bad++; bad <= 10 {
				t.Errorf("%s: row %d has fields %v, want %v", where, id, got[id], fields)
			}
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s: %d rows, want %d", where, len(got), len(want))
	}
}

func TestPoisonCorpus(t *testing.T) {
	t.Parallel()
	srvHome, srvAddr, tokens := newServerHome(t)
	startHypServer(t, srvHome, srvAddr, tokens)

	home, addr := t.TempDir(), freePort(t)
	root := filepath.Join(t.TempDir(), "exports")
	writeDaemonYAML(t, home, addr, "", localSinkYAML("files", "jsonl", root), forwardSinkYAML("central", "http://"+srvAddr, tokens))
	d := startHypDaemon(t, home, addr)

	var body bytes.Buffer
	for _, r := range poisonCorpus {
		body.WriteString(r.line + "\n")
	}
	mustPost(t, addr, "/v1/ingest/poison?source=web", body.Bytes(), http.StatusOK)
	for i := 0; i < wideFields; i += 500 {
		mustPost(t, addr, "/v1/ingest/wide?source=web", wideBody(i, i+500), http.StatusOK)
	}
	// A control character in a field name refuses the whole request.
	code, m, err := post(addr, "/v1/ingest/poison?source=web", []byte(`{"id":100,"ok":1}`+"\n"+`{"id":101,"bad\u0001name":1}`+"\n"))
	if err != nil || code != http.StatusBadRequest || m["error"] != "bad_field" || m["line"] != float64(2) {
		t.Fatalf("control character in a name: %d %v %v", code, m, err)
	}

	corpus := slices.Clone(poisonCorpus)
	check := func(stage string) {
		t.Helper()
		requireValues(t, stage+": query poison", queriedValues(t, home, "poison"), poisonWant(corpus))
		requireValues(t, stage+": query wide", queriedValues(t, home, "wide"), wideWant())
		requireRun(t, home, "", -1)
		requireValues(t, stage+": jsonl poison", exportedValues(t, root, "poison"), poisonWant(corpus))
		requireValues(t, stage+": jsonl wide", exportedValues(t, root, "wide"), wideWant())
		requireValues(t, stage+": central poison", queriedValues(t, srvHome, "poison"), poisonWant(corpus))
		requireValues(t, stage+": central wide", queriedValues(t, srvHome, "wide"), wideWant())
	}
	check("first")

	// The daemon restarts on the same cache, flushes, queries and exports what comes next.
	d.stop(t)
	d = startHypDaemon(t, home, addr)
	mustPost(t, addr, "/v1/ingest/poison?source=web", []byte(`{"id":8,"late.field":1e999,"key":"again"}`+"\n"), http.StatusOK)
	corpus = append(corpus, poisonRow{"", map[string]string{"late.field": "1e999", "key": "again"}})
	check("after restart")
	r := runHyp(t, home, time.Minute, "cache", "status", "--json")
	var st struct{ Losses []any }
	if err := json.Unmarshal([]byte(r.stdout), &st); r.code != 0 || err != nil || st.Losses == nil || len(st.Losses) != 0 {
		t.Errorf("cache status should list no losses (an empty list): %v %s", err, r)
	}
	d.stop(t)
	for _, dir := range []string{home, srvHome, root} {
		requirePrivate(t, dir)
	}
}

// requirePrivate fails for any file or directory hyp made under dir that its owner's group
// or others may read, write or enter (SPEC 2: telemetry holds secrets). hyp.yaml is the
// operator's (the test writes it 0644); the home's own 0700 keeps it from others.
func requirePrivate(t *testing.T, dir string) {
	t.Helper()
	bad := 0
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := d.Info()
		if err == nil && info.Mode().Perm()&0o077 != 0 && d.Name() != "hyp.yaml" {
			if bad++; bad <= 5 {
				t.Errorf("%s is %v, want private (no group or other bits)", p, info.Mode().Perm())
			}
		}
		return nil
	})
}

func mustPost(t *testing.T, addr, path string, body []byte, want int) map[string]any {
	t.Helper()
	code, m, err := post(addr, path, body)
	if err != nil || code != want {
		t.Fatalf("POST %s: %d %v %v, want %d", path, code, m, err, want)
	}
	return m
}
