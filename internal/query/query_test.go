package query

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

const (
	ingestSeqColumn  = "_hyp_ingest_seq"
	ingestedAtColumn = "_hyp_ingested_at"
)

var (
	seqField = arrow.Field{Name: ingestSeqColumn, Type: arrow.PrimitiveTypes.Int64}
	atField  = arrow.Field{Name: ingestedAtColumn, Type: arrow.FixedWidthTypes.Timestamp_us}
	msgField = arrow.Field{Name: "msg", Type: arrow.BinaryTypes.String, Nullable: true}
	nField   = arrow.Field{Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true}
	okField  = arrow.Field{Name: "ok", Type: arrow.FixedWidthTypes.Boolean, Nullable: true}
)

// writeParquet writes rows, given as a JSON array of objects, to path the
// way the cache writes files: through pqarrow, column i with field id ids[i]
// (1, 2, ... when ids is nil).
func writeParquet(t testing.TB, path string, fields []arrow.Field, rows string, ids ...int) {
	t.Helper()
	fields = slices.Clone(fields)
	for i := range fields {
		id := i + 1
		if ids != nil {
			id = ids[i]
		}
		fields[i].Metadata = arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{strconv.Itoa(id)})
	}
	schema := arrow.NewSchema(fields, nil)
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, schema, strings.NewReader(rows))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	var buf bytes.Buffer
	fw, err := pqarrow.NewFileWriter(schema, &buf, parquet.NewWriterProperties(), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

type fixture struct {
	tables []Table
	// stray is a valid Parquet file that belongs to no table.
	stray string
}

// newFixture builds:
//   - logs: partition source=web with file a (msg, n) and file b (msg, n,
//     ok); partition source=it's with file c (msg only) under a path with a
//     quote and '='; partition source=none without files. Column score is
//     in no file at all.
//   - empty: no partitions.
//   - we"ird: identifiers with quotes, spaces, dots and upper case.
func newFixture(t testing.TB) fixture {
	dir := t.TempDir()
	a := filepath.Join(dir, "logs", "source=web", "a.parquet")
	b := filepath.Join(dir, "logs", "source=web", "b.parquet")
	c := filepath.Join(dir, "logs", "source=it's", "c'1.parquet")
	d := filepath.Join(dir, "weird", "d.parquet")
	stray := filepath.Join(dir, "stray.parquet")
	writeParquet(t, a, []arrow.Field{seqField, atField, msgField, nField}, `[
		{"_hyp_ingest_seq": 1, "_hyp_ingested_at": "2024-01-02T03:04:05Z", "msg": "hello", "n": 10},
		{"_hyp_ingest_seq": 2, "_hyp_ingested_at": "2024-01-02T03:04:06Z", "msg": "world", "n": 20}]`)
	writeParquet(t, b, []arrow.Field{seqField, atField, msgField, nField, okField}, `[
		{"_hyp_ingest_seq": 3, "_hyp_ingested_at": "2024-01-02T03:04:07.123456Z", "msg": "late", "n": 30, "ok": true}]`)
	writeParquet(t, c, []arrow.Field{seqField, atField, msgField}, `[
		{"_hyp_ingest_seq": 4, "_hyp_ingested_at": "2024-01-02T03:04:08Z", "msg": "api"}]`)
	writeParquet(t, d, []arrow.Field{seqField, atField,
		{Name: "my col", Type: arrow.BinaryTypes.String},
		{Name: `Quote"d`, Type: arrow.PrimitiveTypes.Int64},
		{Name: "dot.ted", Type: arrow.PrimitiveTypes.Float64},
		{Name: "UPPER", Type: arrow.FixedWidthTypes.Boolean}}, `[
		{"_hyp_ingest_seq": 1, "_hyp_ingested_at": "2024-01-02T03:04:05Z", "my col": "x", "Quote\"d": 7, "dot.ted": 0.5, "UPPER": false}]`)
	writeParquet(t, stray, []arrow.Field{msgField}, `[{"msg": "stray"}]`)
	logsIDs := map[string]int{ingestSeqColumn: 1, ingestedAtColumn: 2, "msg": 3, "n": 4, "ok": 5}

	internal := []Column{{ingestSeqColumn, "long"}, {ingestedAtColumn, "timestamptz"}}
	return fixture{stray: stray, tables: []Table{
		{
			Name:    "logs",
			Columns: append(internal[:2:2], Column{"msg", "string"}, Column{"n", "long"}, Column{"ok", "boolean"}, Column{"score", "double"}),
			Partitions: []Partition{
				{Name: "source=web", Files: []string{a, b}, FieldIDs: logsIDs},
				{Name: "source=it's", Files: []string{c}, FieldIDs: logsIDs},
				{Name: "source=none", FieldIDs: logsIDs},
			},
		},
		{
			Name:    "empty",
			Columns: append(internal[:2:2], Column{"msg", "string"}, Column{"at", "timestamptz"}),
		},
		{
			Name:    `we"ird`,
			Columns: append(internal[:2:2], Column{"my col", "string"}, Column{`Quote"d`, "long"}, Column{"dot.ted", "double"}, Column{"UPPER", "boolean"}),
			Partitions: []Partition{{Name: "p", Files: []string{d}, FieldIDs: map[string]int{
				ingestSeqColumn: 1, ingestedAtColumn: 2, "my col": 3, `Quote"d`: 4, "dot.ted": 5, "UPPER": 6}}},
		},
	}}
}

func run(t *testing.T, tables []Table, sql string, opts Options) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := Run(context.Background(), tables, sql, opts, &out)
	return out.String(), err
}

func TestRunQueries(t *testing.T) {
	fx := newFixture(t)
	cases := []struct {
		name     string
		sql      string
		internal bool
		want     string // jsonl
	}{
		{"count", "SELECT count(*) AS n FROM logs", false, `{"n":4}`},
		{"count empty table", "SELECT count(*) AS n FROM empty", false, `{"n":0}`},
		{"schema evolution across files and partitions", "SELECT msg, n, ok, score FROM logs ORDER BY msg", false, `
{"msg":"api","n":null,"ok":null,"score":null}
{"msg":"hello","n":10,"ok":null,"score":null}
{"msg":"late","n":30,"ok":true,"score":null}
{"msg":"world","n":20,"ok":null,"score":null}`},
		{"star hides internal columns", "SELECT * FROM logs WHERE msg = 'late'", false,
			`{"msg":"late","n":30,"ok":true,"score":null}`},
		{"star with internal columns", "SELECT * FROM logs WHERE msg = 'late'", true,
			`{"_hyp_ingest_seq":3,"_hyp_ingested_at":"2024-01-02T03:04:07.123456Z","msg":"late","n":30,"ok":true,"score":null,"_hyp_partition":"source=web"}`},
		{"partition column", "SELECT _hyp_partition AS p, count(*) AS n, max(_hyp_ingest_seq) AS seq FROM logs GROUP BY ALL ORDER BY p", true, `
{"p":"source=it's","n":1,"seq":4}
{"p":"source=web","n":3,"seq":3}`},
		{"filter on a column only some files have", "SELECT msg FROM logs WHERE ok", false, `{"msg":"late"}`},
		{"empty table has typed columns", "SELECT column_name, column_type FROM (DESCRIBE empty)", false, `
{"column_name":"msg","column_type":"VARCHAR"}
{"column_name":"at","column_type":"TIMESTAMP WITH TIME ZONE"}`},
		{"empty table with internal columns", "SELECT column_name, column_type FROM (DESCRIBE empty)", true, `
{"column_name":"_hyp_ingest_seq","column_type":"BIGINT"}
{"column_name":"_hyp_ingested_at","column_type":"TIMESTAMP WITH TIME ZONE"}
{"column_name":"msg","column_type":"VARCHAR"}
{"column_name":"at","column_type":"TIMESTAMP WITH TIME ZONE"}
{"column_name":"_hyp_partition","column_type":"VARCHAR"}`},
		{"view column types follow the schema", "SELECT column_name, column_type FROM (DESCRIBE logs)", false, `
{"column_name":"msg","column_type":"VARCHAR"}
{"column_name":"n","column_type":"BIGINT"}
{"column_name":"ok","column_type":"BOOLEAN"}
{"column_name":"score","column_type":"DOUBLE"}`},
		{"sum of BIGINT is a JSON number", "SELECT sum(n) AS s FROM logs", false, `{"s":60}`},
		{"sum beyond int64 keeps every digit", "SELECT sum(x) AS s FROM (VALUES (9223372036854775807), (9223372036854775807)) t(x)", false,
			`{"s":18446744073709551614}`},
		{"quoted identifiers", `SELECT "my col", "Quote""d", "dot.ted", "UPPER" FROM "we""ird"`, false,
			`{"my col":"x","Quote\"d":7,"dot.ted":0.5,"UPPER":false}`},
		{"timestamps are UTC", "SELECT min(_hyp_ingested_at) AS t, max(_hyp_ingested_at) - min(_hyp_ingested_at) AS span FROM logs", true,
			`{"t":"2024-01-02T03:04:05Z","span":"00:00:03"}`},
		{"joins repeat column names", "SELECT * FROM (SELECT 1 AS a) x, (SELECT 2 AS a) y", false, `{"a":1,"a_1":2}`},
		{"no rows", "SELECT msg FROM logs WHERE false", false, ``},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := run(t, fx.tables, tc.sql, Options{Internal: tc.internal, Format: FormatJSONL})
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.TrimPrefix(tc.want, "\n"); strings.TrimSuffix(got, "\n") != want {
				t.Errorf("got:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func TestRunFormats(t *testing.T) {
	const twoRows = `SELECT * FROM (VALUES
		(1, 'a,b', NULL::BOOLEAN, TIMESTAMPTZ '2024-01-02 05:04:05.5+02', [1, 2]),
		(22, 'say "hi"', true, NULL, NULL)) t(id, "text", flag, ts, l) ORDER BY id`
	const noRows = `SELECT 1 AS id, 'x' AS "text" WHERE false`
	cases := []struct {
		format, sql, want string
	}{
		{FormatTable, twoRows, `
id | text     | flag | ts                     | l
---+----------+------+------------------------+------
 1 | a,b      | NULL | 2024-01-02T03:04:05.5Z | [1,2]
22 | say "hi" | true | NULL                   | NULL
(2 rows)
`},
		{FormatJSON, twoRows, `
[
{"id":1,"text":"a,b","flag":null,"ts":"2024-01-02T03:04:05.5Z","l":[1,2]},
{"id":22,"text":"say \"hi\"","flag":true,"ts":null,"l":null}
]
`},
		{FormatJSONL, twoRows, `
{"id":1,"text":"a,b","flag":null,"ts":"2024-01-02T03:04:05.5Z","l":[1,2]}
{"id":22,"text":"say \"hi\"","flag":true,"ts":null,"l":null}
`},
		{FormatCSV, twoRows, `
id,text,flag,ts,l
1,"a,b",,2024-01-02T03:04:05.5Z,"[1,2]"
22,"say ""hi""",true,,
`},
		{"", "SELECT 'two\nlines' AS s, 'ünï' AS u", `
s          | u
-----------+----
two\nlines | ünï
(1 row)
`},
		{FormatTable, noRows, `
id | text
---+-----
(0 rows)
`},
		{FormatJSON, noRows, "\n[]\n"},
		{FormatJSONL, noRows, "\n"},
		{FormatCSV, noRows, "\nid,text\n"},
	}
	for _, tc := range cases {
		t.Run(tc.format+"/"+tc.want[:min(len(tc.want), 12)], func(t *testing.T) {
			got, err := run(t, nil, tc.sql, Options{Format: tc.format})
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.TrimPrefix(tc.want, "\n"); got != want {
				t.Errorf("got:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func TestRunValues(t *testing.T) {
	cases := []struct {
		name, sql, want string
	}{
		{"decimal", "SELECT 1.50::DECIMAL(10,2) AS d, 12345678901234567890.123::DECIMAL(38,3) AS big, -0.05::DECIMAL(4,2) AS neg",
			`{"d":1.50,"big":12345678901234567890.123,"neg":-0.05}`},
		{"hugeint", "SELECT -170141183460469231731687303715884105727::HUGEINT AS h, 18446744073709551615::UBIGINT AS u",
			`{"h":-170141183460469231731687303715884105727,"u":18446744073709551615}`},
		{"floats", "SELECT 0.1::DOUBLE AS a, 1e21::DOUBLE AS b, 1.5::FLOAT AS c, 'nan'::DOUBLE AS d, '-inf'::DOUBLE AS e, 123456789.0::DOUBLE AS f",
			`{"a":0.1,"b":1e+21,"c":1.5,"d":"NaN","e":"-Infinity","f":123456789}`},
		{"nested keep field order", "SELECT [1, NULL] AS l, {'z': 1, 'a': [2]} AS s, MAP {'k': 1.5, 'j': NULL} AS m, [1, 2]::INTEGER[2] AS arr",
			`{"l":[1,null],"s":{"z":1,"a":[2]},"m":{"k":1.5,"j":null},"arr":[1,2]}`},
		{"union", "SELECT union_value(k := 2) AS u", `{"u":2}`},
		{"uuid", "SELECT '6ba7b810-9dad-11d1-80b4-00c04fd430c8'::UUID AS u, ['6ba7b810-9dad-11d1-80b4-00c04fd430c8'::UUID] AS l",
			`{"u":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","l":["6ba7b810-9dad-11d1-80b4-00c04fd430c8"]}`},
		{"dates and times", "SELECT DATE '2024-02-29' AS d, TIME '01:02:03.25' AS t, TIMETZ '01:02:03+05:30' AS tz, TIMESTAMP '2024-01-01 00:00:00.000001' AS ts, TIMESTAMP_NS '2024-01-01 00:00:00.123456789' AS ns",
			`{"d":"2024-02-29","t":"01:02:03.25","tz":"01:02:03+05:30","ts":"2024-01-01T00:00:00.000001Z","ns":"2024-01-01T00:00:00.123456789Z"}`},
		{"blob and bit", `SELECT '\x00A\x5C'::BLOB AS b, '101'::BIT AS bit`, `{"b":"\\x00A\\x5C","bit":"101"}`},
		{"json document", `SELECT '{"a": [1, "<b>"]}'::JSON AS j`, `{"j":{"a":[1,"<b>"]}}`},
		{"strings are not HTML-escaped", `SELECT '<a & b>' AS s, NULL AS n`, `{"s":"<a & b>","n":null}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := run(t, nil, tc.sql, Options{Format: FormatJSONL})
			if err != nil {
				t.Fatal(err)
			}
			if got = strings.TrimSuffix(got, "\n"); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// DuckDB's own text for these types is what a user knows, so the text
// formats follow it.
func TestTextMatchesDuckDB(t *testing.T) {
	exprs := []string{
		"INTERVAL 90 MINUTE", "INTERVAL '1 year 2 months 3 days'", "INTERVAL '-1.5 seconds'",
		"INTERVAL 0 SECOND", "INTERVAL '1 month 1 day 00:00:00.000001'", "INTERVAL '-14 months'",
		"'\\x00A\\x5C\\xFF'::BLOB", "'6ba7b810-9dad-11d1-80b4-00c04fd430c8'::UUID", "DATE '2024-02-29'",
		"TIME '23:59:59.999999'", "12.340::DECIMAL(6,3)", "-0.05::DECIMAL(4,2)", "0::DECIMAL(4,2)",
	}
	for _, e := range exprs {
		got, err := run(t, nil, "SELECT "+e+" AS v, CAST("+e+" AS VARCHAR) AS duck", Options{Format: FormatCSV})
		if err != nil {
			t.Fatalf("%s: %v", e, err)
		}
		lines := strings.Split(strings.TrimSpace(got), "\n")
		ours, duck, _ := strings.Cut(lines[1], ",")
		if ours != duck {
			t.Errorf("%s: ours %q, DuckDB %q", e, ours, duck)
		}
	}
}

func TestRunRejectsWrites(t *testing.T) {
	fx := newFixture(t)
	dir := t.TempDir()
	target := filepath.Join(dir, "out.csv")
	cacheFile := fx.tables[0].Partitions[0].Files[0]
	before, err := os.ReadFile(cacheFile)
	if err != nil {
		t.Fatal(err)
	}
	cases := writeStatements(target, cacheFile, dir)
	for _, sql := range cases {
		t.Run(sql, func(t *testing.T) {
			_, err := run(t, fx.tables, sql, Options{})
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("got %v (%T), want a *UsageError", err, err)
			}
			if !strings.Contains(ue.Msg, "read-only") && !strings.Contains(ue.Msg, "statement") && ue.Msg != "empty query" {
				t.Errorf("message %q does not explain the refusal", ue.Msg)
			}
		})
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("COPY target exists: %v", err)
	}
	if after, err := os.ReadFile(cacheFile); err != nil || !bytes.Equal(before, after) {
		t.Errorf("cache file changed (err %v)", err)
	}
}

func TestRunAllowsReads(t *testing.T) {
	fx := newFixture(t)
	for _, sql := range []string{
		"SELECT 1",
		"  -- leading comment\nSELECT 1;",
		"/* a /* nested */ comment */ WITH x AS (SELECT 1 AS a) SELECT * FROM x",
		"(SELECT 1) UNION ALL (SELECT 2)",
		"VALUES (1, 'a')",
		"FROM logs",
		"TABLE logs",
		"SELECT ';' AS s, E'\\';' AS e, $$;$$ AS d, \";\" FROM (SELECT 1 AS \";\")",
		"EXPLAIN SELECT count(*) FROM logs",
		"EXPLAIN ANALYZE SELECT count(*) FROM logs",
		"EXPLAIN (FORMAT json) SELECT 1",
		"EXPLAIN (SELECT 1)",
		"DESCRIBE logs",
		"SUMMARIZE logs",
		"SHOW TABLES",
		"SHOW logs",
		"PIVOT logs ON ok IN (true, false) USING count(*)",
	} {
		t.Run(sql, func(t *testing.T) {
			if _, err := run(t, fx.tables, sql, Options{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestRunSQLErrors(t *testing.T) {
	fx := newFixture(t)
	cases := []struct {
		name, sql, wantMsg string
	}{
		{"unknown column", "SELECT nosuch FROM logs", `Referenced column "nosuch" not found`},
		{"unknown table", "SELECT * FROM nosuch", "Table with name nosuch does not exist"},
		{"syntax", "SELECT FROM WHERE", "syntax error"},
		{"conversion at run time", "SELECT CAST(msg AS INTEGER) FROM logs", "Could not convert"},
		{"internal column hidden", "SELECT _hyp_ingest_seq FROM logs", `"_hyp_ingest_seq" not found`},
		{"partition column hidden", "SELECT _hyp_partition FROM logs", `"_hyp_partition" not found`},
		{"file outside the cache listing", "SELECT * FROM read_parquet(" + quoteString(fx.stray) + ")", "Permission Error"},
		{"arbitrary file", "SELECT * FROM read_csv('/etc/passwd')", "Permission Error"},
		{"statement DuckDB expands into several", "PIVOT logs ON ok USING count(*)", "PIVOT"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, fx.tables, tc.sql, Options{})
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("got %v (%T), want a *UsageError", err, err)
			}
			if !strings.Contains(ue.Msg, tc.wantMsg) {
				t.Errorf("message %q lacks %q", ue.Msg, tc.wantMsg)
			}
		})
	}
}

func TestRunBadInput(t *testing.T) {
	var ue *UsageError
	if _, err := run(t, nil, "SELECT 1", Options{Format: "xml"}); !errors.As(err, &ue) {
		t.Errorf("unknown format: got %v, want a *UsageError", err)
	}
	bad := []Table{{Name: "t", Columns: []Column{{"x", "decimal"}}}}
	if _, err := run(t, bad, "SELECT 1", Options{}); err == nil || errors.As(err, &ue) {
		t.Errorf("unknown column type: got %v, want a plain error", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Run(ctx, nil, "SELECT 1", Options{}, &bytes.Buffer{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: got %v", err)
	}
}

func TestStatementLexing(t *testing.T) {
	cases := []struct {
		sql        string
		statements int
		explained  string // for EXPLAIN statements
	}{
		{"SELECT 1", 1, ""},
		{"SELECT 1;;", 1, ""},
		{"SELECT 1; SELECT 2", 2, ""},
		{"SELECT ';' -- ;\n", 1, ""},
		{"SELECT 'it''s;' /* ; */", 1, ""},
		{`SELECT E'\';' ; SELECT 2`, 2, ""},
		{`SELECT "a;""b"`, 1, ""},
		{"SELECT $x$ ; $x$, $1", 1, ""},
		{"EXPLAIN SELECT 1", 1, "SELECT 1"},
		{"explain analyze select 1", 1, "select 1"},
		{"EXPLAIN (FORMAT json, ANALYZE) COPY t TO 'x'", 1, "COPY t TO 'x'"},
		{"EXPLAIN ((SELECT 1))", 1, "((SELECT 1))"},
		{"EXPLAIN ANALYZE", 1, ""},
	}
	for _, tc := range cases {
		toks := lex(tc.sql)
		if got := countStatements(toks); got != tc.statements {
			t.Errorf("%q: %d statements, want %d", tc.sql, got, tc.statements)
		}
		if strings.EqualFold(toks[0].text, "EXPLAIN") {
			if got := explainedStatement(tc.sql, toks); got != tc.explained {
				t.Errorf("%q explains %q, want %q", tc.sql, got, tc.explained)
			}
		}
	}
}

// TestReadStatement: the guard's verdict from the text alone takes what Run takes as a read
// and refuses what it refuses, EXPLAIN included (it never returns rows).
func TestReadStatement(t *testing.T) {
	for _, sql := range writeStatements("/x/out.csv", "/x/cache.parquet", "/x") {
		if n, verb, read := ReadStatement(sql); read {
			t.Errorf("%q: read (%d statements, verb %q), want refused", sql, n, verb)
		}
	}
	cases := []struct {
		sql        string
		statements int
		verb       string
		read       bool
	}{
		{"SELECT 1", 1, "SELECT", true},
		{"from rows where x;", 1, "FROM", true},
		{"WITH a AS (SELECT 1) SELECT * FROM a", 1, "SELECT", true},
		{"(SELECT 1)", 1, "(", true},
		{"EXPLAIN SELECT 1", 1, "EXPLAIN", false},
		{"PRAGMA show_tables", 1, "PRAGMA", false},
		{"SELECT 1; SELECT 2", 2, "", false},
		{" -- nothing", 0, "", false},
	}
	for _, tc := range cases {
		n, verb, read := ReadStatement(tc.sql)
		if n != tc.statements || verb != tc.verb || read != tc.read {
			t.Errorf("%q: (%d, %q, %v), want (%d, %q, %v)", tc.sql, n, verb, read, tc.statements, tc.verb, tc.read)
		}
	}
}

// writeStatements are statements that would write, attach, configure or run more than one
// statement: target is a file they would create, cacheFile one they would overwrite, dir
// a directory they would fill.
func writeStatements(target, cacheFile, dir string) []string {
	return []string{
		"COPY logs TO " + quoteString(target),
		"COPY (SELECT 1) TO " + quoteString(cacheFile) + " (FORMAT parquet)",
		"CREATE TABLE t AS SELECT 1",
		"CREATE VIEW v AS SELECT 1",
		"INSERT INTO logs VALUES ('x')",
		"WITH x AS (SELECT 1) INSERT INTO logs SELECT * FROM x",
		"UPDATE logs SET msg = 'x'",
		"DELETE FROM logs",
		"DROP VIEW logs",
		"ATTACH ':memory:' AS m",
		"ATTACH " + quoteString(filepath.Join(dir, "x.db")),
		"DETACH memory",
		"USE memory",
		"INSTALL httpfs",
		"LOAD parquet",
		"SET threads = 1",
		"RESET threads",
		"PRAGMA threads = 1",
		"PRAGMA show_tables",
		"CALL duckdb_settings()",
		"EXPORT DATABASE " + quoteString(dir),
		"CHECKPOINT",
		"BEGIN",
		"PREPARE p AS SELECT 1",
		"EXPLAIN ANALYZE CREATE TABLE t AS SELECT 1",
		"EXPLAIN ANALYZE COPY (SELECT 1) TO " + quoteString(target),
		"EXPLAIN (ANALYZE) INSERT INTO logs VALUES ('x')",
		"EXPLAIN ANALYZE WITH x AS (SELECT 1) INSERT INTO logs SELECT * FROM x",
		"SELECT 1; COPY logs TO " + quoteString(target),
		"SELECT 1; SELECT 2",
		"",
		" ; -- nothing",
	}
}

// TestRunUnreadablePartition: a partition whose table could not be read fails every read
// of it with its error (an operational error, not a usage one); other tables, and the
// table's other partitions when the query selects them alone, read on.
func TestRunUnreadablePartition(t *testing.T) {
	fx := newFixture(t)
	tables := slices.Clone(fx.tables)
	logs := tables[0]
	logs.Partitions = append(slices.Clone(logs.Partitions), Partition{Name: "source=db", Err: errors.New("load table: /cache/logs/source=db/gen-1/metadata/v3.metadata.json: garbled")})
	tables[0] = logs
	_, err := run(t, tables, "SELECT count(*) AS n FROM logs", Options{})
	var ue *UsageError
	if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), "v3.metadata.json") || !strings.Contains(err.Error(), "source=db") {
		t.Fatalf("read of the unreadable partition: %v (%T)", err, err)
	}
	if got, err := run(t, tables, "SELECT count(*) AS n FROM logs WHERE _hyp_partition = 'source=web'", Options{Internal: true, Format: FormatJSONL}); err != nil || strings.TrimSpace(got) != `{"n":3}` {
		t.Errorf("other partition: %q %v", got, err)
	}
	if got, err := run(t, tables, "SELECT count(*) AS n FROM empty", Options{Format: FormatJSONL}); err != nil || strings.TrimSpace(got) != `{"n":0}` {
		t.Errorf("other table: %q %v", got, err)
	}
}

// A mixed file (the cache's rows not yet flushed) is read by field id like the partitions'
// files, each row in the partition its own column names, beside partitions that have files
// and one that has none yet.
func TestRunMixedFile(t *testing.T) {
	fx := newFixture(t)
	tables := slices.Clone(fx.tables)
	logs := tables[0]
	f := filepath.Join(t.TempDir(), "logs-1.parquet")
	writeParquet(t, f, []arrow.Field{seqField, atField, {Name: "part", Type: arrow.BinaryTypes.String}, msgField, okField}, `[
		{"_hyp_ingest_seq": 5, "_hyp_ingested_at": "2024-01-02T03:04:09Z", "part": "source=web", "msg": "unflushed", "ok": false},
		{"_hyp_ingest_seq": 6, "_hyp_ingested_at": "2024-01-02T03:04:10Z", "part": "source=new", "msg": "first"}]`, 1, 2, 12, 7, 9)
	logs.Mixed = []MixedFile{{Path: f, FieldIDs: map[string]int{ingestSeqColumn: 1, ingestedAtColumn: 2, "msg": 7, "ok": 9}, PartitionFieldID: 12}}
	tables[0] = logs
	for _, tc := range []struct {
		sql      string
		internal bool
		want     string
	}{
		{"SELECT count(*) AS n FROM logs", false, `{"n":6}`},
		{"SELECT * FROM logs WHERE msg IN ('unflushed', 'first') ORDER BY msg", false, `
{"msg":"first","n":null,"ok":null,"score":null}
{"msg":"unflushed","n":null,"ok":false,"score":null}`},
		{"SELECT _hyp_partition AS p, count(*) AS n, max(_hyp_ingest_seq) AS seq FROM logs GROUP BY ALL ORDER BY p", true, `
{"p":"source=it's","n":1,"seq":4}
{"p":"source=new","n":1,"seq":6}
{"p":"source=web","n":4,"seq":5}`},
	} {
		got, err := run(t, tables, tc.sql, Options{Internal: tc.internal, Format: FormatJSONL})
		if err != nil {
			t.Fatal(err)
		}
		if want := strings.TrimPrefix(tc.want, "\n"); strings.TrimSuffix(got, "\n") != want {
			t.Errorf("%s:\ngot:\n%s\nwant:\n%s", tc.sql, got, want)
		}
	}
}
