package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	_ "github.com/duckdb/duckdb-go/v2" // the blob exports, read as a stranger to hyp reads them

	"github.com/hyp-project/hyp/internal/testutil/lakeread"
)

// The conformance test (issue 25 item 6): random hostile rows through the shipped binary,
// read back by code that shares nothing with hyp's writers. A daemon ingests them into two
// partitions, flushes and compacts its cache, and exports them twice to every kind of
// sink: Parquet files on local disk, an Iceberg table with the sqlite catalog, and a
// `hyp server`. Then, for the daemon's cache, the server's cache, the Iceberg table and
// the files:
//
//   - a full scan equals the rows sent, value for value;
//   - every Parquet footer's min, max and null count hold the column chunk's values (arrow-go's
//     reader, lakeread.FooterHolds), and every valued chunk has a min and a max;
//   - every manifest entry (lakeread's own Avro reader) has bounds that hold every value of
//     its column in its file (lakeread.BoundsHold), and every valued column has both;
//   - every filtered query (`=`, `<`, `>=`, ... against values drawn from the column, their
//     prefixes around Iceberg's 16-character truncation, IS NULL) returns exactly the rows the
//     full scan filtered in Go does. Queries run through `hyp query sql` (DuckDB over the
//     cache, the server, the table's files) and, for the files, DuckDB's read_parquet.
//
// The rows: long strings over 4 KiB in a few rows of the first row group only (lo is the
// issue's 70,001-row case), unicode up to 4-byte characters, empty strings, dotted names,
// case twins ID/Id/id of three types, int64 and double extremes, -0, bools, nested objects,
// a row's own source field unlike its partition, a column that appears after the first
// export. More than 64 Ki rows land in one partition, so compacted cache files and export
// files hold two row groups.
//
// The seed is logged; HYP_CONFORMANCE_SEED replays one, HYP_CONFORMANCE_RUNS runs that many
// seeds (make soak).

// confField is a field of the rows sent; object fields are sent as JSON objects and read
// back as their text.
type confField struct {
	name   string
	kind   confKind
	object bool
}

type confKind int

const (
	kString confKind = iota
	kLong
	kDouble
	kBool
)

var confFields = []confField{
	{name: "row", kind: kLong},
	{name: "ID", kind: kString},
	{name: "Id", kind: kLong},
	{name: "id", kind: kBool},
	{name: "service.name", kind: kString},
	{name: "http.status_code", kind: kLong},
	{name: "msg", kind: kString},
	{name: "lo", kind: kString},
	{name: "e", kind: kString},
	{name: "n", kind: kLong},
	{name: "f", kind: kDouble},
	{name: "ok", kind: kBool},
	{name: "attrs", kind: kString, object: true},
	{name: "source", kind: kString},
	{name: "uni", kind: kString},
	{name: "late", kind: kString},
}

// lateField, the last field, is sent only after the first export.
var lateField = len(confFields) - 1

// Rows are sent in blocks, each to one partition: every confDBEvery-th block to "db ü/1",
// the others to web, so web holds more than a row group's 64 Ki rows.
const (
	confBlock   = 2000
	confDBEvery = 9
)

// confRow is one row sent: a value per confFields entry (nil: absent), with the JSON text
// of object fields and of doubles as sent.
type confRow struct {
	values []any
	text   []byte // the NDJSON line
}

func confSource(block int) string {
	if block%confDBEvery == confDBEvery-1 {
		return "db ü/1"
	}
	return "web"
}

// confGen draws rows from a seeded generator.
type confGen struct {
	r    *rand.Rand
	long map[int]bool // rows whose msg is over 4 KiB
}

func newConfGen(seed uint64, rows int) *confGen {
	g := &confGen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), long: map[int]bool{}}
	// A few long values, all in the first 40,000 rows: the first of web's row groups.
	for range 3 {
		g.long[1+g.r.IntN(min(rows, 40_000)-1)] = true
	}
	return g
}

// confRunes are drawn from for strings: ASCII (quotes and backslashes included), control
// characters JSON escapes, 2-, 3- and 4-byte characters, combining marks, the replacement
// character and the greatest code point.
var confRunes = []rune("aAzZ09 _-.~\"\\/'%\t\néüßñ€ЖΩ中文日本語한𝄞😀🚀\u0301\ufffd\U0010ffff")

func (g *confGen) str(maxRunes int) string {
	var b strings.Builder
	for range g.r.IntN(maxRunes + 1) {
		if g.r.IntN(4) > 0 {
			b.WriteByte(byte('a' + g.r.IntN(26)))
		} else {
			b.WriteRune(confRunes[g.r.IntN(len(confRunes))])
		}
	}
	return b.String()
}

// longStr is a string of at least n bytes.
func (g *confGen) longStr(n int) string {
	s := g.str(40)
	for len(s) < n {
		s += g.str(200)
	}
	return s
}

func (g *confGen) int64() int64 {
	switch g.r.IntN(8) {
	case 0:
		return math.MinInt64
	case 1:
		return math.MaxInt64
	case 2:
		return int64(g.r.IntN(21)) - 10
	}
	return int64(g.r.Uint64())
}

func (g *confGen) double() float64 {
	switch g.r.IntN(12) {
	case 0:
		return math.Copysign(0, -1)
	case 1:
		return 0
	case 2:
		return math.MaxFloat64
	case 3:
		return -math.MaxFloat64
	case 4:
		return math.SmallestNonzeroFloat64
	case 5:
		return float64(g.r.IntN(2001) - 1000) // often sent as an integer literal
	}
	return g.r.NormFloat64() * math.Pow(10, float64(g.r.IntN(40)-20))
}

func (g *confGen) object() string {
	parts := []string{
		fmt.Sprintf(`"k":%d`, g.r.IntN(1000)-500),
		`"s":` + string(jsonString(g.str(12))),
		`"z":{"a":[1,"x",true,null],"b":{}}`,
		`"":0`,
	}
	g.r.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	return "{" + strings.Join(parts[:g.r.IntN(len(parts)+1)], ",") + "}"
}

// row draws row i; late says whether the late field may appear.
func (g *confGen) row(i int, late bool) confRow {
	v := make([]any, len(confFields))                                   // v[j] is confFields[j]'s value
	some := func(p float64) bool { return i == 0 || g.r.Float64() < p } // row 0 has every field
	v[0] = int64(i)
	if some(.7) {
		v[1] = g.str(6)
	}
	if some(.5) {
		v[2] = g.int64()
	}
	if some(.5) {
		v[3] = g.r.IntN(2) == 0
	}
	if some(.9) {
		v[4] = []string{"checkout", "cart", "ünï-svc", "", "a.b", "Checkout"}[g.r.IntN(6)]
	}
	if some(.6) {
		v[5] = []int64{200, 201, 204, 301, 404, 500, 503}[g.r.IntN(7)]
	}
	switch {
	case g.long[i]:
		v[6] = g.longStr(4097 + g.r.IntN(4000))
	case some(.95):
		v[6] = g.str(40)
	}
	// The case: lo's only value in the first 1,000 rows is 5,000 A's, over any
	// statistics limit, so a row group may have no min and max for it at all.
	switch {
	case i == 10:
		v[7] = strings.Repeat("A", 5000)
	case i >= 1000 && some(.8):
		v[7] = fmt.Sprintf("m%07d", i)
	}
	if some(.8) {
		if g.r.IntN(3) == 0 {
			v[8] = ""
		} else {
			v[8] = fmt.Sprintf("e%d", g.r.IntN(100_000))
		}
	}
	if some(.9) {
		v[9] = g.int64()
	}
	if some(.9) {
		v[10] = g.double()
	}
	if some(.7) {
		v[11] = g.r.IntN(2) == 0
	}
	if some(.6) {
		v[12] = g.object()
	}
	if some(.3) {
		v[13] = []string{"zzz", "web", "", g.str(5)}[g.r.IntN(4)]
	}
	if some(.5) {
		v[14] = strings.Repeat("😀", 1+g.r.IntN(3)) + g.str(3)
	}
	if late && some(.5) {
		v[lateField] = g.str(10)
	}
	// An integral double goes as an integer literal now and then (a double column takes
	// integers), never in row 0, whose literals make the column types.
	return confRow{values: v, text: confLine(v, i > 0 && g.r.IntN(2) == 0)}
}

// confLine is v as an NDJSON line; intDoubles sends integral doubles other than -0 as
// integer literals.
func confLine(v []any, intDoubles bool) []byte {
	b := []byte{'{'}
	for j, f := range confFields {
		if v[j] == nil {
			continue
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, jsonString(f.name)...)
		b = append(b, ':')
		switch x := v[j].(type) {
		case string:
			if f.object {
				b = append(b, x...)
			} else {
				b = append(b, jsonString(x)...)
			}
		case int64:
			b = strconv.AppendInt(b, x, 10)
		case float64:
			s := strconv.FormatFloat(x, 'g', -1, 64)
			if !strings.ContainsAny(s, ".e") && (!intDoubles || math.Signbit(x)) {
				s += ".0" // "-0" would be the integer 0
			}
			b = append(b, s...)
		case bool:
			b = strconv.AppendBool(b, x)
		}
	}
	return append(b, '}', '\n')
}

func jsonString(s string) []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return b
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func TestConformance(t *testing.T) {
	t.Parallel()
	runs := envInt("HYP_CONFORMANCE_RUNS", 1)
	for run := range runs {
		seed := uint64(time.Now().UnixNano()) + uint64(run)
		if s, err := strconv.ParseUint(os.Getenv("HYP_CONFORMANCE_SEED"), 10, 64); err == nil {
			seed = s + uint64(run)
		}
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed %d (HYP_CONFORMANCE_SEED=%d replays it)", seed, seed)
			conformance(t, seed)
		})
	}
}

func conformance(t *testing.T, seed uint64) {
	const phase1, phase2 = 37 * confBlock, 3 * confBlock
	gen := newConfGen(seed, phase1+phase2)
	srvHome, srvAddr, tokens := newServerHome(t)
	startHypServer(t, srvHome, srvAddr, tokens)
	home, addr := t.TempDir(), freePort(t)
	lakeDir := t.TempDir()
	catalogDB, warehouse := filepath.Join(lakeDir, "catalog.db"), filepath.Join(lakeDir, "warehouse")
	exports := filepath.Join(t.TempDir(), "exports")
	writeDaemonYAML(t, home, addr, "",
		localSinkYAML("files", "parquet", exports),
		icebergSinkYAML("lake", "sqlite://"+catalogDB, warehouse),
		forwardSinkYAML("central", "http://"+srvAddr, tokens))
	startHypDaemon(t, home, addr)

	start := time.Now()
	phase := func(what string) { t.Logf("%6.1fs %s", time.Since(start).Seconds(), what) }
	var sent []confRow
	send := func(from, to int, late bool) {
		t.Helper()
		for b := from / confBlock; b*confBlock < to; b++ {
			var body []byte
			for i := b * confBlock; i < (b+1)*confBlock; i++ {
				r := gen.row(i, late)
				sent = append(sent, r)
				body = append(body, r.text...)
			}
			code, m, err := post(addr, "/v1/ingest/logs?source="+url.QueryEscape(confSource(b)), body)
			if err != nil || code != 200 {
				t.Fatalf("ingest block %d: %d %v %v", b, code, m, err)
			}
		}
	}
	runAll := func(rows int64) {
		t.Helper()
		res := requireRun(t, home, "", -1)
		for _, s := range res.Sinks {
			if s.Rows != rows {
				t.Fatalf("sink %s exported %d rows, want %d", s.Instance, s.Rows, rows)
			}
		}
	}
	send(0, phase1, false)
	phase("sent")
	runAll(phase1)
	phase("exported")
	send(phase1, phase1+phase2, true)
	for _, h := range []string{home, srvHome} {
		r := runHyp(t, h, 2*time.Minute, "cache", "compact", "--json")
		if r.code != 0 {
			t.Fatalf("cache compact: %s", r)
		}
		var res struct {
			Partitions []struct {
				BoundsFixed *int `json:"bounds_fixed"`
			}
		}
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || len(res.Partitions) == 0 {
			t.Fatalf("cache compact --json: %v\n%s", err, r)
		}
		for _, p := range res.Partitions {
			if p.BoundsFixed == nil || *p.BoundsFixed != 0 {
				t.Errorf("cache compaction in %s fixed bounds of files hyp just wrote (or says nothing of them): %s", h, r.stdout)
			}
		}
	}
	phase("compacted")
	runAll(phase2)
	phase("exported")
	// The table's files before its compaction (whose writer, iceberg-go's, makes one row
	// group) are checked too; they stay on disk.
	files := map[string][]string{}
	files["iceberg sink"] = tableFiles(t, "iceberg sink", readLake(t, catalogDB))
	r := runHyp(t, home, 2*time.Minute, "sink", "maintain", "lake", "--compact", "--json")
	var rep struct {
		Sinks []struct {
			Tables []struct {
				BoundsFixed *int `json:"bounds_fixed"`
			}
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); r.code != 0 || err != nil || len(rep.Sinks) != 1 || len(rep.Sinks[0].Tables) != 1 {
		t.Fatalf("sink maintain: %v\n%s", err, r)
	}
	if bf := rep.Sinks[0].Tables[0].BoundsFixed; bf == nil || *bf != 0 {
		t.Errorf("sink maintain fixed bounds of files hyp just wrote (or says nothing of them): %s", r.stdout)
	}

	blobs := parquetFiles(t, exports)
	db := blobDB(t, blobs)
	lk := readLake(t, catalogDB)
	targets := []confTarget{
		{name: "daemon cache", query: hypQuery(home), names: queryNames},
		{name: "server cache", query: hypQuery(srvHome), names: queryNames},
		{name: "iceberg sink", query: hypQuery(home, "--sink", "lake"), names: tableNames(t, lk)},
		{name: "blob files", query: duckQuery(db), names: queryNames},
	}
	for _, tg := range targets {
		checkTarget(t, gen.r, tg, sent)
		phase("checked " + tg.name)
	}

	// Manifests and footers, read by lakeread and arrow-go. Each place must hold a file of
	// two row groups, or the case (a long value in one of them only) went untested.
	files["daemon cache"] = tableFiles(t, "daemon cache", cacheTables(t, filepath.Join(home, "cache"))...)
	files["server cache"] = tableFiles(t, "server cache", cacheTables(t, filepath.Join(srvHome, "cache"))...)
	files["iceberg sink"] = append(files["iceberg sink"], tableFiles(t, "iceberg sink", lk)...)
	files["blob files"] = blobs
	phase("manifests")
	for where, paths := range files {
		groups := 0
		for _, p := range paths {
			unstated, err := lakeread.FooterHolds(p)
			if err != nil {
				t.Errorf("%s: footer: %v", where, err)
			}
			if len(unstated) > 0 {
				t.Errorf("%s: footer of %s: columns %v have values and no min or max", where, p, unstated)
			}
			groups = max(groups, parquetFooter(t, p).NumRowGroups())
		}
		if groups < 2 {
			t.Errorf("%s: no file of %d has two row groups", where, len(paths))
		}
		t.Logf("%s: %d Parquet files, up to %d row groups", where, len(paths), groups)
	}
}

func readLake(t *testing.T, catalogDB string) *lakeread.Table {
	t.Helper()
	tbl, err := lakeread.Read(context.Background(), sqliteLake(catalogDB), "logs")
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// tableFiles checks that the bounds of every live entry of tbls hold every value of its
// file, and that every column with values has both; it returns the files' paths.
func tableFiles(t *testing.T, where string, tbls ...*lakeread.Table) []string {
	t.Helper()
	var out []string
	for _, tbl := range tbls {
		for _, df := range tbl.Files {
			p := localFile(t, df.Path)
			lacking, err := lakeread.BoundsHold(p, df.Lower, df.Upper, tbl.Types)
			if err != nil {
				t.Errorf("%s: manifest %s: %v", where, df.Manifest, err)
			}
			if len(lacking) > 0 {
				t.Errorf("%s: manifest %s: the entry of %s has no bounds for fields %v, which hold values", where, df.Manifest, p, lacking)
			}
			out = append(out, p)
		}
	}
	return out
}

// confTarget is somewhere the rows are read back: query runs SQL over a view named logs.
type confTarget struct {
	name  string
	query func(t *testing.T, sql string) []map[string]any
	names func(field string) string // the column a sent field is read under
}

// renaming reads a field under its own name unless twins names another.
func renaming(twins map[string]string) func(string) string {
	return func(field string) string {
		if n, ok := twins[field]; ok {
			return n
		}
		return field
	}
}

// queryNames are the names `hyp query sql` gives case twins (README, "Case").
var queryNames = renaming(map[string]string{"Id": "Id__2", "id": "id__3"})

// tableNames are the names of an Iceberg sink's table. A table never renames a column, so
// of case twins the first spelling the sink saw keeps its name and later ones are
// <name>__2, __3, ... (internal/lake), with a doc naming the field they hold: the order
// the sink met them in, which need not be the byte order of the query names.
func tableNames(t *testing.T, tbl *lakeread.Table) func(string) string {
	t.Helper()
	twins := map[string]string{}
	for id, doc := range tbl.Docs {
		if field, ok := strings.CutPrefix(doc, "hyp: values of the field "); ok {
			twins[field] = tbl.Names[id]
		}
	}
	if len(twins) != 2 {
		t.Fatalf("the table marks %d case twins (%v), want 2 of ID, Id, id", len(twins), twins)
	}
	return renaming(twins)
}

func hypQuery(home string, extra ...string) func(t *testing.T, sql string) []map[string]any {
	return func(t *testing.T, q string) []map[string]any {
		t.Helper()
		r := runHyp(t, home, 2*time.Minute, append([]string{"query", "sql", q, "--format", "json", "--internal"}, extra...)...)
		if r.code != 0 {
			t.Fatalf("query: %s", r)
		}
		dec := json.NewDecoder(strings.NewReader(r.stdout))
		dec.UseNumber()
		var out []map[string]any
		if err := dec.Decode(&out); err != nil {
			t.Fatalf("query output: %v\n%.2000s", err, r.stdout)
		}
		return out
	}
}

// blobDB is DuckDB with a view logs over the Parquet files, Hive keys read from their
// directories as DuckDB does by default. The files keep every name as it is; DuckDB, whose
// names ignore case, reads a file's case twins as ID, Id_1, id_2 in the file's column
// order, which differs between files. So each file is read on its own, its columns (in
// DuckDB's names, matched by position to the file's own, read by arrow-go) renamed to the
// query names, and the files' rows united by name.
func blobDB(t *testing.T, files []string) *sql.DB {
	t.Helper()
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1) // the view lives in the one connection's database
	parts := make([]string, len(files))
	for i, f := range files {
		from := "read_parquet('" + strings.ReplaceAll(f, "'", "''") + "')"
		own := parquetColumns(t, f)
		duck := duckQuery(db)(t, "SELECT column_name FROM (DESCRIBE SELECT * FROM "+from+")")
		if len(duck) < len(own) {
			t.Fatalf("%s: DuckDB reads %d columns of %d", f, len(duck), len(own))
		}
		sel := make([]string, len(own))
		for j, name := range own {
			dn, _ := duck[j]["column_name"].(string)
			if !duckReads(dn, name) {
				t.Fatalf("%s: DuckDB reads column %d, %q, as %q", f, j, name, dn)
			}
			sel[j] = quoteIdent(dn) + " AS " + quoteIdent(queryNames(name))
		}
		parts[i] = "SELECT " + strings.Join(sel, ", ") + " FROM " + from
	}
	if _, err := db.Exec("CREATE VIEW logs AS " + strings.Join(parts, " UNION ALL BY NAME ")); err != nil {
		t.Fatal(err)
	}
	return db
}

// duckReads reports whether dn is how DuckDB names a file's column name: itself, or for
// a case twin after the first, itself with _<k>.
func duckReads(dn, name string) bool {
	if dn == name {
		return true
	}
	k, ok := strings.CutPrefix(dn[min(len(name), len(dn)):], "_")
	_, err := strconv.Atoi(k)
	return ok && err == nil && strings.EqualFold(dn[:min(len(name), len(dn))], name)
}

// parquetFooter is a Parquet file's footer as arrow-go reads it.
func parquetFooter(t *testing.T, path string) *metadata.FileMetaData {
	t.Helper()
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	return pf.MetaData()
}

// parquetColumns are the names of a flat Parquet file's columns, in order, as arrow-go
// reads them.
func parquetColumns(t *testing.T, path string) []string {
	t.Helper()
	sc := parquetFooter(t, path).Schema
	out := make([]string, sc.NumColumns())
	for j := range out {
		out[j] = sc.Column(j).Name()
	}
	return out
}

func duckQuery(db *sql.DB) func(t *testing.T, sql string) []map[string]any {
	return func(t *testing.T, q string) []map[string]any {
		t.Helper()
		rs, err := db.Query(q)
		if err != nil {
			t.Fatalf("duckdb: %v\n%.500s", err, q)
		}
		defer rs.Close()
		cols, err := rs.Columns()
		if err != nil {
			t.Fatal(err)
		}
		var out []map[string]any
		for rs.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rs.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			m := make(map[string]any, len(cols))
			for i, c := range cols {
				m[c] = vals[i]
			}
			out = append(out, m)
		}
		if err := rs.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
}

// parquetFiles lists the Parquet files under root, skipping the destination's temp files.
func parquetFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".hyp-tmp" {
			return fs.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".parquet") {
			out = append(out, p)
		}
		return nil
	})
	if err != nil || len(out) == 0 {
		t.Fatalf("parquet files under %s: %v (%d)", root, err, len(out))
	}
	return out
}

// cacheTables reads the current generation of every partition of a cache directory, a
// hadoop-catalog table each (<cache>/<dataset>/<partition>/CURRENT names it).
func cacheTables(t *testing.T, dir string) []*lakeread.Table {
	t.Helper()
	var out []*lakeread.Table
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "CURRENT" {
			return err
		}
		gen, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		ns, err := filepath.Rel(dir, filepath.Dir(p))
		if err != nil {
			return err
		}
		tbl, err := lakeread.Read(context.Background(), lakeread.Options{Warehouse: dir, Namespace: filepath.ToSlash(ns)}, strings.TrimSpace(string(gen)))
		if err != nil {
			return fmt.Errorf("cache table %s: %w", ns, err)
		}
		out = append(out, tbl)
		return nil
	})
	if err != nil || len(out) == 0 {
		t.Fatalf("cache tables under %s: %v (%d)", dir, err, len(out))
	}
	return out
}

// localFile is a table's file:// data file location as a path.
func localFile(t *testing.T, loc string) string {
	t.Helper()
	u, err := url.Parse(loc)
	if err != nil || (u.Scheme != "file" && u.Scheme != "") {
		t.Fatalf("data file %q is not local", loc)
	}
	return u.Path
}

// rowCol is the index of row, the row's number, among a target's columns.
const rowCol = 1

// confColumn is a column read back: a sent field, or hyp's seq.
type confColumn struct {
	name  string // as the target names it
	field int    // index in confFields; -1 for _hyp_ingest_seq
	kind  confKind
}

// checkTarget reads every row of tg, compares it to sent, and runs filtered queries.
func checkTarget(t *testing.T, r *rand.Rand, tg confTarget, sent []confRow) {
	t.Helper()
	cols := []confColumn{{name: "_hyp_ingest_seq", field: -1, kind: kLong}}
	for j, f := range confFields {
		cols = append(cols, confColumn{name: tg.names(f.name), field: j, kind: f.kind})
	}
	sel := make([]string, len(cols))
	for i, c := range cols {
		sel[i] = quoteIdent(c.name)
	}
	scan := tg.query(t, "SELECT "+strings.Join(sel, ", ")+" FROM logs")
	rows := make([][]any, len(sent)) // by cols, in row order
	for _, m := range scan {
		row := make([]any, len(cols))
		for i, c := range cols {
			v, err := typed(c.kind, m[c.name])
			if err != nil {
				t.Fatalf("%s: column %s: %v", tg.name, c.name, err)
			}
			row[i] = v
		}
		id, ok := row[rowCol].(int64)
		if !ok || id < 0 || id >= int64(len(sent)) || rows[id] != nil {
			t.Fatalf("%s: row %v read back, which was not sent or is read back twice", tg.name, row[rowCol])
		}
		rows[id] = row
	}
	if len(scan) != len(sent) {
		t.Fatalf("%s: %d rows read back, %d sent", tg.name, len(scan), len(sent))
	}
	bad := 0
	for i, s := range sent {
		for ci, c := range cols[1:] {
			if got, want := rows[i][ci+1], s.values[c.field]; !sameValue(got, want) && bad < 10 {
				bad++
				t.Errorf("%s: row %d, column %s: read back %.80q, sent %.80q\nline %.300s", tg.name, i, c.name, fmt.Sprint(got), fmt.Sprint(want), s.text)
			}
		}
	}
	if bad > 0 {
		t.FailNow()
	}

	preds := predicates(r, cols, rows)
	for len(preds) > 0 {
		n := min(len(preds), 60)
		checkPredicates(t, tg, preds[:n], rows)
		preds = preds[n:]
	}
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// typed is a value read back as the Go type of kind: nil, string, int64, float64 or bool.
func typed(kind confKind, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch kind {
	case kString:
		if s, ok := v.(string); ok {
			return s, nil
		}
	case kLong:
		switch x := v.(type) {
		case json.Number:
			return strconv.ParseInt(string(x), 10, 64)
		case int64:
			return x, nil
		case int32:
			return int64(x), nil
		}
	case kDouble:
		switch x := v.(type) {
		case json.Number:
			return strconv.ParseFloat(string(x), 64)
		case float64:
			return x, nil
		}
	case kBool:
		if b, ok := v.(bool); ok {
			return b, nil
		}
	}
	return nil, fmt.Errorf("%T %v is not of the column's type", v, v)
}

// sameValue compares a value read back with the one sent; doubles by their bits, so -0
// stays -0.
func sameValue(got, want any) bool {
	if g, ok := got.(float64); ok {
		w, ok := want.(float64)
		return ok && math.Float64bits(g) == math.Float64bits(w)
	}
	return got == want
}

// confPred is a WHERE clause and what it selects.
type confPred struct {
	sql   string
	match func(v any) bool
	col   int
}

// predicates draws, for every column, IS NULL, IS NOT NULL and comparisons with values
// of the column, their neighbours and, for strings, prefixes of them around Iceberg's 16
// characters and those prefixes incremented (what a truncated upper bound is).
func predicates(r *rand.Rand, cols []confColumn, rows [][]any) []confPred {
	var out []confPred
	for ci, c := range cols {
		q := quoteIdent(c.name)
		out = append(out,
			confPred{sql: q + " IS NULL", col: ci, match: func(v any) bool { return v == nil }},
			confPred{sql: q + " IS NOT NULL", col: ci, match: func(v any) bool { return v != nil }})
		var vals []any
		for _, row := range rows {
			if row[ci] != nil {
				vals = append(vals, row[ci])
			}
		}
		if len(vals) == 0 {
			continue
		}
		for range 3 {
			lit := literal(r, c.kind, vals[r.IntN(len(vals))])
			if lit == nil {
				continue
			}
			for _, op := range []string{"=", "<>", "<", "<=", ">", ">="} {
				if r.IntN(2) == 0 {
					continue
				}
				out = append(out, confPred{sql: q + " " + op + " " + sqlLiteral(c.kind, lit), col: ci, match: comparison(op, lit)})
			}
		}
	}
	return out
}

// literal is a value to compare a column with, near v.
func literal(r *rand.Rand, kind confKind, v any) any {
	switch kind {
	case kString:
		s := []rune(v.(string))
		k := []int{0, 1, 15, 16, 17, 100, len(s)}[r.IntN(7)]
		p := s[:min(k, len(s), 100)]
		if r.IntN(3) == 0 && len(p) > 0 && p[len(p)-1] < utf8.MaxRune && p[len(p)-1] != 0xd7ff {
			p = append(slices.Clone(p[:len(p)-1]), p[len(p)-1]+1)
		}
		return string(p)
	case kLong:
		x := v.(int64)
		switch r.IntN(3) {
		case 1:
			if x > math.MinInt64 {
				x--
			}
		case 2:
			if x < math.MaxInt64 {
				x++
			}
		}
		return x
	case kDouble:
		x := v.(float64)
		switch r.IntN(4) {
		case 1:
			x = math.Nextafter(x, math.Inf(-1))
		case 2:
			x = math.Nextafter(x, math.Inf(1))
		case 3:
			x = math.Copysign(0, -1)
		}
		if math.IsInf(x, 0) {
			return nil
		}
		return x
	case kBool:
		return r.IntN(2) == 0
	}
	return nil
}

func sqlLiteral(kind confKind, v any) string {
	switch kind {
	case kString:
		return "'" + strings.ReplaceAll(v.(string), "'", "''") + "'"
	case kLong:
		return "CAST('" + strconv.FormatInt(v.(int64), 10) + "' AS BIGINT)"
	case kDouble:
		return "CAST('" + strconv.FormatFloat(v.(float64), 'g', -1, 64) + "' AS DOUBLE)"
	}
	return strconv.FormatBool(v.(bool))
}

// comparison is SQL's v op lit for a non-null v: strings by bytes, numbers by value (-0 =
// 0), false below true.
func comparison(op string, lit any) func(v any) bool {
	return func(v any) bool {
		if v == nil {
			return false
		}
		var c int
		switch x := v.(type) {
		case string:
			c = strings.Compare(x, lit.(string))
		case int64:
			c = cmpOrdered(x, lit.(int64))
		case float64:
			c = cmpOrdered(x, lit.(float64))
		case bool:
			c = cmpOrdered(boolNum(x), boolNum(lit.(bool)))
		}
		switch op {
		case "=":
			return c == 0
		case "<>":
			return c != 0
		case "<":
			return c < 0
		case "<=":
			return c <= 0
		case ">":
			return c > 0
		}
		return c >= 0
	}
}

func cmpOrdered[T int64 | float64 | int](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func boolNum(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkPredicates runs preds in one query (a branch each, so each is a filtered scan of
// its own) and compares each one's count, sum and xor-mix of row numbers to the rows';
// for a predicate that differs it lists the rows it missed or added.
func checkPredicates(t *testing.T, tg confTarget, preds []confPred, rows [][]any) {
	t.Helper()
	row := quoteIdent(tg.names("row"))
	branches := make([]string, len(preds))
	for i, p := range preds {
		branches[i] = fmt.Sprintf("SELECT %d AS q, %s AS r FROM logs WHERE %s", i, row, p.sql)
	}
	q := "SELECT q, count(*) AS n, sum(r)::BIGINT AS s, bit_xor(r * 2654435761) AS x FROM (" + strings.Join(branches, " UNION ALL ") + ") GROUP BY q"
	got := map[int64][3]int64{}
	for _, m := range tg.query(t, q) {
		var d [4]int64
		for i, k := range []string{"q", "n", "s", "x"} {
			v, err := typed(kLong, m[k])
			if err != nil {
				t.Fatalf("%s: digest %s: %v", tg.name, k, err)
			}
			d[i] = v.(int64)
		}
		got[d[0]] = [3]int64{d[1], d[2], d[3]}
	}
	for i, p := range preds {
		var want [3]int64
		var ids []int64
		for _, r := range rows {
			if p.match(r[p.col]) {
				id := r[rowCol].(int64)
				want[0]++
				want[1] += id
				want[2] ^= id * 2654435761
				ids = append(ids, id)
			}
		}
		if got[int64(i)] == want {
			continue
		}
		res := tg.query(t, fmt.Sprintf("SELECT %s AS r FROM logs WHERE %s", row, p.sql))
		seen := map[int64]bool{}
		var extra []int64
		for _, m := range res {
			v, _ := typed(kLong, m["r"])
			id, _ := v.(int64)
			seen[id] = true
			if !slices.Contains(ids, id) {
				extra = append(extra, id)
			}
		}
		var missing []int64
		for _, id := range ids {
			if !seen[id] {
				missing = append(missing, id)
			}
		}
		t.Errorf("%s: WHERE %.300s: %d rows, want %d (count, sum, mix %v, want %v): missing rows %v, unexpected %v",
			tg.name, p.sql, len(res), len(ids), got[int64(i)], want, firstIDs(missing), firstIDs(extra))
	}
}

func firstIDs(ids []int64) []int64 {
	slices.Sort(ids)
	return ids[:min(len(ids), 8)]
}
