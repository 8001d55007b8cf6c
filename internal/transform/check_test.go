package transform

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// The SPEC's example transform.
const specExample = `SELECT * EXCLUDE (secret) REPLACE (regexp_replace(msg, 'tok-[0-9]+', 'tok-***') AS msg) FROM rows WHERE level <> 'debug'`

// refusedCases are transforms Check refuses, each with the message it must give.
var refusedCases = []struct{ sql, msg string }{
	// Aggregation.
	{"SELECT count(*) FROM rows", "transform: aggregate function count is not row-wise"},
	{"SELECT _hyp_ingest_seq, _hyp_ingested_at, sum(n) AS s FROM rows", "transform: aggregate function sum is not row-wise"},
	{"SELECT *, max(n) AS m FROM rows", "transform: aggregate function max is not row-wise"},
	{"SELECT *, list(msg) AS l FROM rows", "transform: aggregate function list is not row-wise"},
	{"SELECT level FROM rows GROUP BY level", "transform: GROUP BY is not row-wise"},
	{"SELECT * FROM rows GROUP BY ALL", "transform: GROUP BY is not row-wise"},
	{"SELECT level FROM rows GROUP BY GROUPING SETS ((level), ())", "transform: GROUP BY is not row-wise"},
	{"SELECT * FROM rows HAVING n > 1", "transform: HAVING is not row-wise"},
	{"SELECT *, geomean(x) AS g FROM rows", "transform: function geomean is not row-wise (it calls avg)"},
	{"SELECT *, json_group_array(msg) AS j FROM rows", "transform: function json_group_array is not row-wise (it calls string_agg)"},
	// Joins and other relations.
	{"SELECT * FROM rows JOIN rows AS r2 USING (n)", "transform: join: FROM must be the table rows only"},
	{"SELECT * FROM rows, rows AS r2", "transform: join: FROM must be the table rows only"},
	{"SELECT * FROM rows POSITIONAL JOIN rows", "transform: join: FROM must be the table rows only"},
	{"SELECT * FROM rows, LATERAL (SELECT 1)", "transform: join: FROM must be the table rows only"},
	{"SELECT * FROM other", "transform: FROM must be the table rows only, not other"},
	{"SELECT * FROM main.rows", "transform: FROM must be the table rows only, not main.rows"},
	{"SELECT * FROM memory.main.rows", "transform: FROM must be the table rows only, not memory.main.rows"},
	{"SELECT 1 AS one", "transform: FROM rows is missing"},
	{"SELECT * FROM (SELECT * FROM rows)", "transform: subqueries are not allowed: FROM must be the table rows only"},
	{"SELECT * FROM rows AS r(a, b)", "transform: column aliases on rows are not allowed (they rename columns by position): alias columns in the select list"},
	{"SELECT * FROM rows AT (VERSION => 1)", "transform: AT (time travel) is not allowed"},
	{"FROM rows PIVOT (sum(n) FOR level IN ('a'))", "transform: PIVOT and UNPIVOT are not row-wise"},
	// Ordering, limits, deduplication, sampling.
	{"SELECT * FROM rows ORDER BY n", "transform: ORDER BY is not allowed"},
	{"SELECT * FROM rows ORDER BY ALL", "transform: ORDER BY is not allowed"},
	{"SELECT * FROM rows LIMIT 5", "transform: LIMIT and OFFSET are not allowed"},
	{"SELECT * FROM rows OFFSET 1", "transform: LIMIT and OFFSET are not allowed"},
	{"SELECT * FROM rows LIMIT 10%", "transform: LIMIT and OFFSET are not allowed"},
	{"SELECT DISTINCT * FROM rows", "transform: DISTINCT is not row-wise"},
	{"SELECT DISTINCT ON (level) * FROM rows", "transform: DISTINCT is not row-wise"},
	{"SELECT * FROM rows USING SAMPLE 10%", "transform: SAMPLE is not allowed (it keeps rows at random)"},
	{"SELECT * FROM rows TABLESAMPLE 10%", "transform: TABLESAMPLE is not allowed (it keeps rows at random)"},
	// Windows.
	{"SELECT *, row_number() OVER () AS rn FROM rows", "transform: window function row_number is not row-wise"},
	{"SELECT *, sum(n) OVER (ORDER BY n) AS s FROM rows", "transform: window function sum is not row-wise"},
	{"SELECT *, lag(n) OVER w AS p FROM rows WINDOW w AS (ORDER BY n)", "transform: window function lag is not row-wise"},
	{"SELECT * FROM rows QUALIFY row_number() OVER () = 1", "transform: QUALIFY is not row-wise (it filters on window functions)"},
	// Set operations, CTEs, subqueries.
	{"SELECT * FROM rows UNION ALL SELECT * FROM rows", "transform: set operations (UNION, EXCEPT, INTERSECT) are not allowed"},
	{"SELECT * FROM rows EXCEPT SELECT * FROM rows", "transform: set operations (UNION, EXCEPT, INTERSECT) are not allowed"},
	{"SELECT * FROM rows INTERSECT SELECT * FROM rows", "transform: set operations (UNION, EXCEPT, INTERSECT) are not allowed"},
	{"WITH x AS (SELECT 1) SELECT * FROM rows", "transform: WITH (common table expressions) is not allowed"},
	{"WITH rows AS (SELECT 1 AS n) SELECT * FROM rows", "transform: WITH (common table expressions) is not allowed"},
	{"SELECT * FROM rows WHERE n IN (SELECT 1)", "transform: subqueries are not allowed"},
	{"SELECT * FROM rows WHERE EXISTS (SELECT 1)", "transform: subqueries are not allowed"},
	{"SELECT *, (SELECT 1) AS one FROM rows", "transform: subqueries are not allowed"},
	{"SELECT * FROM rows WHERE n = ANY (SELECT 1)", "transform: subqueries are not allowed"},
	// Table and file functions, functions of the database's state.
	{"SELECT * FROM read_csv('/etc/passwd')", "transform: table function read_csv is not allowed: FROM must be the table rows only"},
	{"SELECT * FROM read_parquet('x.parquet')", "transform: table function read_parquet is not allowed: FROM must be the table rows only"},
	{"SELECT * FROM glob('*')", "transform: table function glob is not allowed: FROM must be the table rows only"},
	{"SELECT *, read_text('/etc/passwd') AS t FROM rows", "transform: table function read_text is not allowed"},
	{"SELECT *, unnest([1, 2]) AS u FROM rows", "transform: unnest is not row-wise (it makes rows)"},
	{"SELECT *, regexp_split_to_table(msg, ' ') AS w FROM rows", "transform: function regexp_split_to_table is not row-wise (it calls unnest)"},
	{"SELECT *, current_setting('threads') AS t FROM rows", "transform: function current_setting reads or changes the database's state, not the row's"},
	{"SELECT *, getvariable('x') AS v FROM rows", "transform: function getvariable reads or changes the database's state, not the row's"},
	{"SELECT *, setseed(0.5) AS s FROM rows", "transform: function setseed reads or changes the database's state, not the row's"},
	// Statements.
	{"SELECT * FROM rows; SELECT * FROM rows", "transform: expected exactly one SQL statement, got 2"},
	{"", "transform: the SQL is empty: a transform is one SELECT … FROM rows"},
	{" -- nothing", "transform: the SQL is empty: a transform is one SELECT … FROM rows"},
	{"INSERT INTO rows VALUES (1)", "transform: INSERT is not allowed: a transform is one SELECT … FROM rows"},
	{"DELETE FROM rows", "transform: DELETE is not allowed: a transform is one SELECT … FROM rows"},
	{"COPY rows TO 'x.csv'", "transform: COPY is not allowed: a transform is one SELECT … FROM rows"},
	{"CREATE TABLE t AS SELECT * FROM rows", "transform: CREATE is not allowed: a transform is one SELECT … FROM rows"},
	{"SET threads = 4", "transform: SET is not allowed: a transform is one SELECT … FROM rows"},
	{"ATTACH 'x.db'", "transform: ATTACH is not allowed: a transform is one SELECT … FROM rows"},
	{"PRAGMA show_tables", "transform: PRAGMA is not allowed: a transform is one SELECT … FROM rows"},
	{"EXPLAIN SELECT * FROM rows", "transform: EXPLAIN is not allowed: a transform is one SELECT … FROM rows"},
	{"WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x", "transform: INSERT is not allowed: a transform is one SELECT … FROM rows"},
	{"VALUES (1)", "transform: VALUES is not allowed: FROM must be the table rows only"},
	{"DESCRIBE rows", "transform: DESCRIBE, SHOW and SUMMARIZE are not allowed: a transform is one SELECT … FROM rows"},
	{"SUMMARIZE rows", "transform: DESCRIBE, SHOW and SUMMARIZE are not allowed: a transform is one SELECT … FROM rows"},
	{"PIVOT rows ON level", "transform: only a SELECT is allowed: a transform is one SELECT … FROM rows"},
	{"SELECT * FROM rows\x00; DROP TABLE x", "transform: the SQL holds a NUL byte"},
	{"SELECT * FROM rows WHERE msg = '\xff'", "transform: the SQL is not valid UTF-8"},
	// The internal columns.
	{"SELECT msg FROM rows", "transform: the select list must keep _hyp_ingest_seq (select * or the column itself)"},
	{"SELECT _hyp_ingest_seq, msg FROM rows", "transform: the select list must keep _hyp_ingested_at (select * or the column itself)"},
	{"SELECT _hyp_ingest_seq AS seq, _hyp_ingested_at FROM rows", "transform: the select list must keep _hyp_ingest_seq (select * or the column itself)"},
	{"SELECT * EXCLUDE (_hyp_ingest_seq) FROM rows", "transform: * EXCLUDE (_hyp_ingest_seq): the select list must keep _hyp_ingest_seq"},
	{`SELECT * EXCLUDE ("_HYP_INGESTED_AT") FROM rows`, "transform: * EXCLUDE (_hyp_ingested_at): the select list must keep _hyp_ingested_at"},
	{"SELECT * EXCLUDE (rows._hyp_ingest_seq) FROM rows", "transform: * EXCLUDE (_hyp_ingest_seq): the select list must keep _hyp_ingest_seq"},
	{"SELECT * REPLACE (0 AS _hyp_ingest_seq) FROM rows", "transform: * REPLACE (… AS _hyp_ingest_seq): the internal columns pass through unchanged"},
	{"SELECT * REPLACE (now() AS _hyp_ingested_at) FROM rows", "transform: * REPLACE (… AS _hyp_ingested_at): the internal columns pass through unchanged"},
	{"SELECT * RENAME (_hyp_ingest_seq AS seq) FROM rows", "transform: * RENAME (_hyp_ingest_seq AS …): the internal columns keep their names"},
	{"SELECT * RENAME (msg AS _hyp_msg) FROM rows", "transform: * RENAME (… AS _hyp_msg): names starting with _hyp_ (in any letter case) are hyp's own"},
	{"SELECT *, 1 AS _HYP_x FROM rows", `transform: output column "_HYP_x": names starting with _hyp_ (in any letter case) are hyp's own`},
	{"SELECT *, msg AS _hyp_msg FROM rows", `transform: output column "_hyp_msg": names starting with _hyp_ (in any letter case) are hyp's own`},
	{"SELECT _hyp_ingest_seq + 0 AS _hyp_ingest_seq, _hyp_ingested_at FROM rows", `transform: output column "_hyp_ingest_seq": names starting with _hyp_ (in any letter case) are hyp's own`},
	{"SELECT _HYP_INGEST_SEQ, _hyp_ingested_at FROM rows", `transform: output column "_HYP_INGEST_SEQ": names starting with _hyp_ (in any letter case) are hyp's own`},
	{"SELECT *, _hyp_ingest_seq FROM rows", "transform: the select list keeps _hyp_ingest_seq 2 times: once, through * or the column itself"},
	{"SELECT *, * FROM rows", "transform: the select list keeps _hyp_ingest_seq 2 times: once, through * or the column itself"},
	{"SELECT other._hyp_ingest_seq, _hyp_ingested_at FROM rows", `transform: output column "_hyp_ingest_seq": names starting with _hyp_ (in any letter case) are hyp's own`},
	// Stars that select by pattern, parameters.
	{"SELECT COLUMNS('m.*') FROM rows", "transform: COLUMNS(…) is not allowed: name the columns, or use * EXCLUDE, REPLACE or RENAME"},
	{"SELECT *, COLUMNS(c -> c LIKE 'm%') FROM rows", "transform: COLUMNS(…) is not allowed: name the columns, or use * EXCLUDE, REPLACE or RENAME"},
	{"SELECT * LIKE 'm%' FROM rows", "transform: * and COLUMNS(…) are only allowed as select-list items (not * LIKE, * SIMILAR TO or inside an expression)"},
	{"SELECT * FROM rows WHERE n = $1", "transform: parameters ($1, ?) are not allowed"},
	{"SELECT * FROM rows WHERE n = ?", "transform: parameters ($1, ?) are not allowed"},
}

// allowedCases are transforms Check accepts.
var allowedCases = []string{
	specExample,
	"SELECT _hyp_ingest_seq, _hyp_ingested_at, upper(msg) AS msg FROM rows",
	"SELECT * RENAME (msg AS message) FROM rows",
	`SELECT _hyp_ingest_seq, _hyp_ingested_at, msg AS message, n AS "count" FROM rows`,
	"SELECT *, CASE WHEN n > 1 THEN 'big' ELSE 'small' END AS size FROM rows",
	"SELECT * REPLACE (CAST(n AS VARCHAR) AS n), x::INTEGER AS xi, TRY_CAST(msg AS BIGINT) AS mi FROM rows",
	"SELECT rows.* FROM rows",
	"SELECT r.* FROM rows r WHERE r.n > 1",
	"SELECT r._hyp_ingest_seq, rows._hyp_ingested_at FROM rows AS r",
	"FROM rows WHERE level = 'info'",
	"TABLE rows",
	"(SELECT * FROM rows)",
	"SELECT * FROM ROWS",
	`SELECT * FROM "rows"`,
	"SELECT * FROM rows;",
	"-- only errors\nSELECT * FROM rows WHERE level = 'error' /* and worse */",
	"SELECT *, list_transform([1, 2], v -> v + n) AS l FROM rows",
	"SELECT *, repeat(msg, 2) AS twice, range(3) AS r3, generate_series(1, 2) AS g FROM rows",
	"SELECT *, regexp_replace(msg, '[0-9]', '#', 'g') AS m2 FROM rows WHERE msg LIKE 'a%' AND n BETWEEN 1 AND 5 AND level IN ('info', 'warn')",
	"SELECT *, list_aggr([1, 2, 3], 'sum') AS s, nullif(n, 0) AS nz FROM rows",
	"SELECT *, {'a': n} AS st, [n, n] AS li, MAP {'k': n} AS mp, msg COLLATE nocase AS folded FROM rows",
	"SELECT _hyp_ingest_seq, _hyp_ingested_at, _hyp_overflow FROM rows",
	"SELECT * EXCLUDE (secret, _hyp_overflow) FROM rows",
	"SELECT *, _hyp_ingest_seq * 2 AS double_seq, _hyp_ingest_seq AS seq_copy FROM rows",
	"SELECT * FROM rows WHERE _hyp_ingest_seq % 2 = 0 AND _hyp_ingested_at > TIMESTAMPTZ '2020-01-01 00:00:00+00'",
	"SELECT *, coalesce(msg, '') || '!' AS loud, length(msg) AS len, strftime(_hyp_ingested_at, '%Y') AS year FROM rows",
	"SELECT *, md5(secret) AS secret_hash, json_extract_string(msg, '$.a') AS a FROM rows",
}

func TestCheckRefuses(t *testing.T) {
	ctx := context.Background()
	r := newTestRunner(t)
	for _, tc := range refusedCases {
		err := r.check(ctx, tc.sql)
		var te *Error
		if !errors.As(err, &te) {
			t.Errorf("%q: got %v (%T), want a *Error", tc.sql, err, err)
			continue
		}
		if te.Msg != tc.msg {
			t.Errorf("%q:\n got  %s\n want %s", tc.sql, te.Msg, tc.msg)
		}
	}
}

func TestCheckAccepts(t *testing.T) {
	ctx := context.Background()
	r := newTestRunner(t)
	for _, sql := range allowedCases {
		if err := r.check(ctx, sql); err != nil {
			t.Errorf("%q: %v", sql, err)
		}
	}
}

// TestCheck runs the exported Check, which opens a DuckDB of its own, on a few cases.
func TestCheck(t *testing.T) {
	ctx := context.Background()
	if err := Check(ctx, specExample); err != nil {
		t.Fatalf("spec example: %v", err)
	}
	err := Check(ctx, "SELECT * FROM rows ORDER BY n")
	var te *Error
	if !errors.As(err, &te) || te.Msg != "transform: ORDER BY is not allowed" {
		t.Fatalf("ORDER BY: got %v", err)
	}
	if err := Check(ctx, "SELECT * FROM rows WHERE"); !errors.As(err, &te) || !strings.HasPrefix(te.Msg, "transform: syntax error") {
		t.Fatalf("syntax error: got %v", err)
	}
}

// TestCheckerKnowsDuckDB guards the function lists against a DuckDB upgrade that renames or
// drops what they are built from: every macro's definition parsed (newChecker fails
// otherwise), and the kinds of functions a transform must not call are all there.
func TestCheckerKnowsDuckDB(t *testing.T) {
	r := newTestRunner(t)
	for _, name := range []string{"count", "sum", "avg", "string_agg", "read_csv", "read_parquet", "read_text", "read_blob", "glob", "unnest", "query", "query_table", "geomean"} {
		if _, ok := r.checker.refused[name]; !ok {
			t.Errorf("%s is not refused", name)
		}
	}
	for _, name := range []string{"repeat", "range", "generate_series", "regexp_replace", "upper", "nullif", "list_aggr"} {
		if why, ok := r.checker.refused[name]; ok {
			t.Errorf("%s is refused: %s", name, why)
		}
	}
}
