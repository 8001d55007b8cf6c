package transform

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/hyp-project/hyp/internal/query"
)

// checker judges transforms from DuckDB's own syntax tree (json_serialize_sql), so that
// what is judged is what DuckDB will run, not what a second parser thinks it says.
type checker struct {
	// refused maps the lower-case name of each function a transform may not call to why.
	// It comes from the DuckDB that runs the transforms, so a function a DuckDB upgrade adds
	// is judged by its kind, not missed by a list written for an older one.
	refused map[string]string
}

// stateFunctions are scalar functions that read or change the database's state rather than
// compute from their arguments: a transform must be a function of its rows alone.
var stateFunctions = []string{
	"current_setting", "getvariable", "setseed", "nextval", "currval", "sleep_ms", "write_log",
}

// newChecker reads, from the DuckDB behind conn, which functions a transform may not call:
// aggregates, table functions (unnest among them: it makes rows), table macros, pragmas,
// stateFunctions, and the scalar macros that call any of these (geomean is exp(avg(ln(x)))).
func newChecker(ctx context.Context, conn driver.Conn) (*checker, error) {
	c := &checker{refused: map[string]string{}}
	scalar := map[string]bool{}
	err := queryRows(ctx, conn, "SELECT DISTINCT lower(function_name), function_type FROM duckdb_functions()", nil, func(v []driver.Value) error {
		name, _ := v[0].(string)
		typ, _ := v[1].(string)
		switch typ {
		case "scalar", "macro":
			scalar[name] = true
		case "aggregate":
			c.refused[name] = fmt.Sprintf("aggregate function %s is not row-wise", name)
		case "table", "table_macro", "pragma":
			if _, ok := c.refused[name]; !ok {
				c.refused[name] = fmt.Sprintf("table function %s is not allowed", name)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("transform: list DuckDB's functions: %w", err)
	}
	for name, why := range c.refused {
		// range, repeat, generate_series and version are table functions and scalar ones too;
		// in an expression DuckDB calls the scalar one. Aggregates have no scalar twin.
		if scalar[name] && strings.HasPrefix(why, "table function") {
			delete(c.refused, name)
		}
	}
	c.refused["unnest"] = "unnest is not row-wise (it makes rows)"
	for _, name := range stateFunctions {
		c.refused[name] = fmt.Sprintf("function %s reads or changes the database's state, not the row's", name)
	}

	// Macros: what each calls, then refuse, until nothing changes, those that call a refused
	// function (a macro may call another macro).
	calls := map[string][]string{}
	err = queryRows(ctx, conn, "SELECT lower(function_name), json_serialize_sql('SELECT ' || macro_definition)::VARCHAR "+
		"FROM duckdb_functions() WHERE function_type = 'macro'", nil, func(v []driver.Value) error {
		name, _ := v[0].(string)
		text, _ := v[1].(string)
		tree, err := decodeJSON(text)
		if err != nil {
			return fmt.Errorf("macro %s: %w", name, err)
		}
		if m, ok := tree.(map[string]any); ok && m["error"] == true {
			return fmt.Errorf("macro %s: DuckDB cannot serialize its definition: %v", name, m["error_message"])
		}
		walkJSON(tree, func(m map[string]any) {
			switch m["class"] {
			case "FUNCTION", "WINDOW":
				if f, ok := m["function_name"].(string); ok && strings.ToLower(f) != name {
					calls[name] = append(calls[name], strings.ToLower(f))
				}
			}
			if m["class"] == "WINDOW" || m["class"] == "SUBQUERY" {
				calls[name] = append(calls[name], "") // "" stands for "not row-wise in itself"
			}
		})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("transform: read DuckDB's macros: %w", err)
	}
	for changed := true; changed; {
		changed = false
		for name, callees := range calls {
			if _, done := c.refused[name]; done {
				continue
			}
			for _, f := range callees {
				if _, bad := c.refused[f]; bad || f == "" {
					what := f
					if what == "" {
						what = "a window function or subquery"
					}
					c.refused[name] = fmt.Sprintf("function %s is not row-wise (it calls %s)", name, what)
					changed = true
					break
				}
			}
		}
	}
	return c, nil
}

// queryRows runs q on conn and calls fn with each row's values.
func queryRows(ctx context.Context, conn driver.Conn, q string, args []driver.NamedValue, fn func([]driver.Value) error) error {
	rows, err := conn.(driver.QueryerContext).QueryContext(ctx, q, args)
	if err != nil {
		return err
	}
	defer rows.Close()
	v := make([]driver.Value, len(rows.Columns()))
	for {
		switch err := rows.Next(v); {
		case errors.Is(err, io.EOF):
			return rows.Close()
		case err != nil:
			return err
		}
		if err := fn(v); err != nil {
			return err
		}
	}
}

func decodeJSON(text string) (any, error) {
	d := json.NewDecoder(strings.NewReader(text))
	d.UseNumber() // query_location is a uint64 that float64 would round
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// walkJSON calls fn with every object in v, depth first, parents before children.
func walkJSON(v any, fn func(map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		fn(v)
		for _, k := range sortedKeys(v) {
			walkJSON(v[k], fn)
		}
	case []any:
		for _, e := range v {
			walkJSON(e, fn)
		}
	}
}

// sortedKeys makes walks, and so the problem reported first, deterministic.
func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// check reports whether sql is an allowed transform: nil, or a *Error naming the first
// problem. Other errors are DuckDB failing to answer. conn is only asked to parse sql.
func (c *checker) check(ctx context.Context, conn driver.Conn, sql string) error {
	_, _, err := c.judge(ctx, conn, sql)
	return err
}

// judge is check that also returns, for an allowed transform, the columns of rows it names
// (referenced): lower-cased, as DuckDB matches them; and the names no column may pass
// through under (opaque; nil when none may: passthrough.go).
func (c *checker) judge(ctx context.Context, conn driver.Conn, sql string) (referenced []string, opaque map[string]bool, err error) {
	if strings.IndexByte(sql, 0) >= 0 {
		// DuckDB takes SQL as a C string: it would see only the text before the NUL.
		return nil, nil, refuse("the SQL holds a NUL byte")
	}
	if !utf8.ValidString(sql) {
		// DuckDB's strings are UTF-8: it cannot even take the text as a value to parse.
		return nil, nil, refuse("the SQL is not valid UTF-8")
	}
	switch n, verb, read := query.ReadStatement(sql); {
	case n == 0:
		return nil, nil, refuse("the SQL is empty: a transform is one SELECT … FROM rows")
	case n > 1:
		return nil, nil, refuse("expected exactly one SQL statement, got %d", n)
	case !read:
		return nil, nil, refuse("%s is not allowed: a transform is one SELECT … FROM rows", verb)
	}
	var text string
	err = queryRows(ctx, conn, "SELECT json_serialize_sql($1::VARCHAR)::VARCHAR", []driver.NamedValue{{Ordinal: 1, Value: sql}}, func(v []driver.Value) error {
		text, _ = v[0].(string)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("transform: parse the SQL with DuckDB: %w", err)
	}
	tree, err := decodeJSON(text)
	if err != nil {
		return nil, nil, fmt.Errorf("transform: read DuckDB's syntax tree: %w", err)
	}
	if err := checkTree(tree, c.refused); err != nil {
		return nil, nil, err
	}
	referenced = referencedColumns(tree)
	if opaque, ok := passShape(tree, referenced); ok {
		return referenced, opaque, nil
	}
	return referenced, nil, nil
}

// referencedColumns are the column names an allowed transform's tree names: column
// references (the last part of a qualified one), and the names a * EXCLUDEs, REPLACEs or
// RENAMEs. A lambda's parameters look like column references and are left out. (A name
// that is only a select-list alias, which DuckDB lets a later expression use, is taken for a
// column too: a unit without such a column then reads NULL there, not the alias, as DuckDB
// prefers a relation's column to an alias.) Apply shows
// a unit that lacks one of them a NULL column under its name, as a query shows a column a
// partition never had, so one transform serves every dataset and partition a sink covers.
func referencedColumns(tree any) []string {
	params := map[string]bool{}
	walkJSON(tree, func(m map[string]any) {
		if m["class"] == "LAMBDA" {
			walkJSON(m["lhs"], func(p map[string]any) {
				if p["class"] == "COLUMN_REF" {
					if name := lastName(p["column_names"]); name != "" {
						params[strings.ToLower(name)] = true
					}
				}
			})
		}
	})
	seen := map[string]bool{}
	var out []string
	add := func(name string) {
		name = strings.ToLower(name)
		if name != "" && !params[name] && !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	walkJSON(tree, func(m map[string]any) {
		switch m["class"] {
		case "COLUMN_REF":
			add(lastName(m["column_names"]))
		case "STAR":
			for _, key := range []string{"exclude_list", "qualified_exclude_list"} {
				for _, e := range asList(m[key]) {
					add(starColumn(e))
				}
			}
			for _, key := range []string{"replace_list", "rename_list"} {
				for _, e := range asList(m[key]) {
					if kv, ok := e.(map[string]any); ok {
						add(starColumn(kv["key"]))
					}
				}
			}
		}
	})
	slices.Sort(out)
	return out
}

// starColumn is the column a * modifier's entry names: a plain name, or a qualified one
// ({"column": …}, as RENAME keys and qualified EXCLUDEs come).
func starColumn(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case map[string]any:
		if c, ok := v["column"].(string); ok {
			return c
		}
		return lastName(v["column_names"])
	}
	return ""
}

// lastName is the last part of a column reference's column_names.
func lastName(v any) string {
	parts := asList(v)
	if len(parts) == 0 {
		return ""
	}
	s, _ := parts[len(parts)-1].(string)
	return s
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// checkTree judges the output of json_serialize_sql.
func checkTree(tree any, refused map[string]string) error {
	root, _ := tree.(map[string]any)
	if root == nil {
		return fmt.Errorf("transform: DuckDB's syntax tree is not an object")
	}
	if root["error"] == true {
		msg, _ := root["error_message"].(string)
		if strings.HasPrefix(msg, "Only SELECT statements") {
			return refuse("only a SELECT is allowed: a transform is one SELECT … FROM rows")
		}
		return refuse("%s", msg)
	}
	stmts, _ := root["statements"].([]any)
	if len(stmts) != 1 {
		return refuse("expected exactly one SQL statement, got %d", len(stmts))
	}
	stmt, _ := stmts[0].(map[string]any)
	node, _ := stmt["node"].(map[string]any)
	if node == nil {
		return fmt.Errorf("transform: DuckDB's syntax tree has no query node")
	}
	if err := checkNode(node); err != nil {
		return err
	}
	if err := checkExpressions(node, refused); err != nil {
		return err
	}
	return checkSelectList(node)
}

func isEmpty(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case []any:
		return len(v) == 0
	case map[string]any:
		return len(v) == 0
	case string:
		return v == ""
	}
	return false
}

// checkNode judges the query node's clauses: one SELECT over rows, nothing that groups,
// orders, limits, deduplicates, samples or joins.
func checkNode(node map[string]any) error {
	switch node["type"] {
	case "SELECT_NODE":
	case "SET_OPERATION_NODE":
		return refuse("set operations (UNION, EXCEPT, INTERSECT) are not allowed")
	case "CTE_NODE", "RECURSIVE_CTE_NODE":
		return refuse("WITH (common table expressions) is not allowed")
	default:
		return refuse("only a SELECT is allowed, not %v", node["type"])
	}
	if ctes, _ := node["cte_map"].(map[string]any); ctes != nil && !isEmpty(ctes["map"]) {
		return refuse("WITH (common table expressions) is not allowed")
	}
	if err := checkFrom(node["from_table"]); err != nil {
		return err
	}
	if node["aggregate_handling"] != "STANDARD_HANDLING" || !isEmpty(node["group_expressions"]) || !isEmpty(node["group_sets"]) {
		return refuse("GROUP BY is not row-wise")
	}
	if !isEmpty(node["having"]) {
		return refuse("HAVING is not row-wise")
	}
	if !isEmpty(node["qualify"]) {
		return refuse("QUALIFY is not row-wise (it filters on window functions)")
	}
	if !isEmpty(node["sample"]) {
		return refuse("SAMPLE is not allowed (it keeps rows at random)")
	}
	mods, _ := node["modifiers"].([]any)
	for _, m := range mods {
		mod, _ := m.(map[string]any)
		switch mod["type"] {
		case "ORDER_MODIFIER":
			return refuse("ORDER BY is not allowed")
		case "LIMIT_MODIFIER", "LIMIT_PERCENT_MODIFIER":
			return refuse("LIMIT and OFFSET are not allowed")
		case "DISTINCT_MODIFIER":
			return refuse("DISTINCT is not row-wise")
		default:
			return refuse("%v is not allowed", mod["type"])
		}
	}
	return nil
}

// checkFrom requires the base table rows itself: no schema or catalog (which could name
// another relation), no time travel, no sample, no column aliases (which would rename
// columns by position, the internal ones among them).
func checkFrom(v any) error {
	from, _ := v.(map[string]any)
	switch from["type"] {
	case "BASE_TABLE":
	case "JOIN":
		return refuse("join: FROM must be the table rows only")
	case "TABLE_FUNCTION":
		name := "?"
		if f, ok := from["function"].(map[string]any); ok {
			name, _ = f["function_name"].(string)
		}
		return refuse("table function %s is not allowed: FROM must be the table rows only", name)
	case "SUBQUERY":
		return refuse("subqueries are not allowed: FROM must be the table rows only")
	case "EMPTY":
		return refuse("FROM rows is missing")
	case "PIVOT":
		return refuse("PIVOT and UNPIVOT are not row-wise")
	case "EXPRESSION_LIST":
		return refuse("VALUES is not allowed: FROM must be the table rows only")
	case "SHOW_REF":
		return refuse("DESCRIBE, SHOW and SUMMARIZE are not allowed: a transform is one SELECT … FROM rows")
	default:
		return refuse("FROM must be the table rows only, not %v", from["type"])
	}
	table, _ := from["table_name"].(string)
	if !strings.EqualFold(table, relation) || !isEmpty(from["schema_name"]) || !isEmpty(from["catalog_name"]) {
		return refuse("FROM must be the table rows only, not %s", qualifiedName(from))
	}
	if !isEmpty(from["at_clause"]) {
		return refuse("AT (time travel) is not allowed")
	}
	if !isEmpty(from["sample"]) {
		return refuse("TABLESAMPLE is not allowed (it keeps rows at random)")
	}
	if !isEmpty(from["column_name_alias"]) {
		return refuse("column aliases on rows are not allowed (they rename columns by position): alias columns in the select list")
	}
	return nil
}

func qualifiedName(from map[string]any) string {
	var parts []string
	for _, k := range []string{"catalog_name", "schema_name", "table_name"} {
		if s, _ := from[k].(string); s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, ".")
}

// hasInternalPrefix reports whether name starts with _hyp_ in any letter case: readers that
// ignore case would take such a column for one of hyp's.
func hasInternalPrefix(name string) bool {
	return len(name) >= len(internalPrefix) && strings.EqualFold(name[:len(internalPrefix)], internalPrefix)
}

// isKept reports whether name is one of the columns every output row must keep.
func isKept(name string) bool { return name == seqColumn || name == ingestedColumn }

func keepMessage(col string) *Error {
	return refuse("the select list must keep %s (select * or the column itself)", col)
}

// checkSelectList requires _hyp_ingest_seq and _hyp_ingested_at exactly once each, as
// they are, and no other output name with the internal prefix. Names of computed columns
// without an alias are DuckDB's to choose; Apply checks those on the result.
func checkSelectList(node map[string]any) error {
	from, _ := node["from_table"].(map[string]any)
	alias, _ := from["alias"].(string)
	ownRelation := func(name string) bool {
		return strings.EqualFold(name, relation) || (alias != "" && strings.EqualFold(name, alias))
	}
	kept := map[string]int{}
	items, _ := node["select_list"].([]any)
	for _, it := range items {
		item, _ := it.(map[string]any)
		name, _ := item["alias"].(string)
		switch item["class"] {
		case "STAR":
			if item["columns"] != false || !isEmpty(item["expr"]) {
				return columnsRefused()
			}
			if rel, _ := item["relation_name"].(string); rel != "" && !ownRelation(rel) {
				return refuse("%s.* names no relation of a transform: FROM must be the table rows only", rel)
			}
			dropped := map[string]string{} // kept column → how the star drops it
			for _, e := range asList(item["exclude_list"]) {
				if s, ok := e.(string); ok {
					dropped[strings.ToLower(s)] = "EXCLUDE"
				}
			}
			for _, e := range asList(item["qualified_exclude_list"]) {
				if m, ok := e.(map[string]any); ok {
					s, _ := m["column"].(string)
					dropped[strings.ToLower(s)] = "EXCLUDE"
				}
			}
			for _, e := range asList(item["replace_list"]) {
				m, _ := e.(map[string]any)
				s, _ := m["key"].(string)
				if hasInternalPrefix(s) {
					return refuse("* REPLACE (… AS %s): the internal columns pass through unchanged", s)
				}
			}
			for _, e := range asList(item["rename_list"]) {
				m, _ := e.(map[string]any)
				key, _ := m["key"].(map[string]any)
				from, _ := key["column"].(string)
				to, _ := m["value"].(string)
				if hasInternalPrefix(from) {
					return refuse("* RENAME (%s AS …): the internal columns keep their names", from)
				}
				if hasInternalPrefix(to) {
					return refuse("* RENAME (… AS %s): names starting with %s (in any letter case) are hyp's own", to, internalPrefix)
				}
			}
			for _, col := range []string{seqColumn, ingestedColumn} {
				if how, ok := dropped[col]; ok {
					return refuse("* %s (%s): the select list must keep %s", how, col, col)
				}
				kept[col]++
			}
		case "COLUMN_REF":
			parts := asList(item["column_names"])
			if len(parts) == 0 {
				return fmt.Errorf("transform: DuckDB's syntax tree has a column reference without a name")
			}
			col, _ := parts[len(parts)-1].(string)
			if name == "" {
				name = col
			}
			qualifiedOK := len(parts) == 1
			if len(parts) == 2 {
				rel, _ := parts[0].(string)
				qualifiedOK = ownRelation(rel)
			}
			switch {
			case name == col && qualifiedOK && (isKept(col) || col == overflowColumn):
				// The column itself, under its own name: it passes through.
				if isKept(col) {
					kept[col]++
				}
			case hasInternalPrefix(name):
				return refuse("output column %q: names starting with %s (in any letter case) are hyp's own", name, internalPrefix)
			}
		default:
			if hasInternalPrefix(name) {
				return refuse("output column %q: names starting with %s (in any letter case) are hyp's own", name, internalPrefix)
			}
		}
	}
	for _, col := range []string{seqColumn, ingestedColumn} {
		switch kept[col] {
		case 0:
			return keepMessage(col)
		case 1:
		default:
			return refuse("the select list keeps %s %d times: once, through * or the column itself", col, kept[col])
		}
	}
	return nil
}

// columnsRefused: COLUMNS(…) picks columns by pattern or lambda, so which columns a
// transform keeps, the internal ones among them, would depend on the unit's schema.
func columnsRefused() *Error {
	return refuse("COLUMNS(…) is not allowed: name the columns, or use * EXCLUDE, REPLACE or RENAME")
}

// allowedClasses are the expression kinds a row-wise transform may use anywhere. Every
// other kind is refused, so that one a DuckDB upgrade adds is refused until judged.
var allowedClasses = map[string]bool{
	"CASE": true, "CAST": true, "COLUMN_REF": true, "COMPARISON": true, "CONJUNCTION": true,
	"CONSTANT": true, "FUNCTION": true, "OPERATOR": true, "COLLATE": true, "BETWEEN": true,
	"LAMBDA": true, "LAMBDA_REF": true, "POSITIONAL_REFERENCE": true,
}

// checkExpressions walks every object under node, not only the clauses a transform may
// have, so that nothing hides in a corner of the tree: each expression's kind, each
// function's name, and no query node but node itself. The select list's own stars were
// judged by checkSelectList (their REPLACE expressions are walked here); any other star,
// as in * LIKE 'x%' or inside an expression, is refused.
func checkExpressions(node map[string]any, refused map[string]string) error {
	var first error
	visit := func(m map[string]any) {
		if first != nil {
			return
		}
		if _, isNode := m["select_list"]; isNode {
			first = refuse("subqueries are not allowed")
			return
		}
		if t, _ := m["type"].(string); strings.HasSuffix(t, "_NODE") {
			first = refuse("subqueries are not allowed")
			return
		}
		class, ok := m["class"].(string)
		if !ok {
			return
		}
		switch {
		case class == "STAR":
			first = refuse("* and COLUMNS(…) are only allowed as select-list items (not * LIKE, * SIMILAR TO or inside an expression)")
		case class == "SUBQUERY":
			first = refuse("subqueries are not allowed")
		case class == "WINDOW":
			f, _ := m["function_name"].(string)
			first = refuse("window function %s is not row-wise", f)
		case class == "PARAMETER":
			first = refuse("parameters ($1, ?) are not allowed")
		case !allowedClasses[class]:
			first = refuse("%s expressions are not allowed", strings.ToLower(class))
		case class == "FUNCTION":
			first = checkFunction(m, refused)
		}
	}
	for _, k := range sortedKeys(node) {
		if k != "select_list" {
			walkJSON(node[k], visit)
			continue
		}
		for _, it := range asList(node[k]) {
			if m, ok := it.(map[string]any); ok && m["class"] == "STAR" {
				if m["columns"] != false || !isEmpty(m["expr"]) {
					return columnsRefused()
				}
				for _, kk := range sortedKeys(m) {
					walkJSON(m[kk], visit)
				}
				continue
			}
			walkJSON(it, visit)
		}
	}
	return first
}

func checkFunction(m map[string]any, refused map[string]string) error {
	name, _ := m["function_name"].(string)
	lower := strings.ToLower(name)
	if lower == "count_star" {
		lower = "count" // count(*), as written
	}
	if why, ok := refused[lower]; ok {
		return refuse("%s", why)
	}
	if m["distinct"] == true {
		return refuse("%s(DISTINCT …) is not row-wise", name)
	}
	if !isEmpty(m["filter"]) {
		return refuse("%s(…) FILTER is not row-wise", name)
	}
	if ob, _ := m["order_bys"].(map[string]any); ob != nil && !isEmpty(ob["orders"]) {
		return refuse("ORDER BY inside %s(…) is not row-wise", name)
	}
	if m["export_state"] == true {
		return refuse("EXPORT_STATE is not row-wise")
	}
	return nil
}
