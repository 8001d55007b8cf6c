package query

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"

	duckdb "github.com/duckdb/duckdb-go/v2"
)

// readKeywords are the words a read statement may start with. DuckDB turns
// some non-reads (PRAGMA show_tables, ...) into SELECT statements, so the
// statement type alone would let PRAGMA through; the first word settles it.
var readKeywords = map[string]bool{
	"SELECT": true, "WITH": true, "VALUES": true, "FROM": true, "TABLE": true,
	"PIVOT": true, "UNPIVOT": true, "EXPLAIN": true,
	"DESCRIBE": true, "DESC": true, "SUMMARIZE": true, "SHOW": true,
}

const allowedStatements = "SELECT, WITH ... SELECT, VALUES, EXPLAIN, DESCRIBE, SUMMARIZE or SHOW"

func readOnlyError(what string) *UsageError {
	return &UsageError{Msg: fmt.Sprintf("queries are read-only: %s is not allowed; use %s", what, allowedStatements)}
}

// prepareReadOnly prepares sql on conn if, and only if, it is a single read
// statement. It never executes anything: duckdb-go's PrepareContext runs every
// statement but the last of a multi-statement string, so only Prepare (which
// refuses more than one) is used.
//
// The statement type DuckDB reports after binding is the real check; the
// leading keyword is looked at first so that a write is refused as such even
// when binding it would fail (INSERT into a view, ...), and because DuckDB
// reports some non-reads, PRAGMA show_tables for one, as SELECT.
func prepareReadOnly(conn *duckdb.Conn, sql string) (*duckdb.Stmt, error) {
	toks := lex(sql)
	switch n := countStatements(toks); {
	case n == 0:
		return nil, &UsageError{Msg: "empty query"}
	case n > 1:
		return nil, &UsageError{Msg: fmt.Sprintf("expected exactly one SQL statement, got %d", n)}
	}
	if err := checkVerb(toks, true); err != nil {
		return nil, err
	}
	// EXPLAIN ANALYZE executes the statement it explains, so that one must be
	// a read as well.
	explained := ""
	if isWord(toks[0], "EXPLAIN") {
		explained = explainedStatement(sql, toks)
		if innerToks := lex(explained); len(innerToks) > 0 {
			if err := checkVerb(innerToks, false); err != nil {
				return nil, err
			}
		}
	}

	stmt, err := prepare(conn, sql)
	if err != nil {
		return nil, err
	}
	want := duckdb.STATEMENT_TYPE_SELECT
	if explained != "" {
		want = duckdb.STATEMENT_TYPE_EXPLAIN
	}
	typ, err := stmt.StatementType()
	if err == nil && typ != want {
		err = readOnlyError("this statement")
	}
	if err == nil && explained != "" {
		err = checkExplained(conn, explained)
	}
	if err != nil {
		return nil, closeAfter(stmt, err)
	}
	return stmt, nil
}

func checkExplained(conn *duckdb.Conn, sql string) error {
	stmt, err := prepare(conn, sql)
	if err != nil {
		return err
	}
	typ, err := stmt.StatementType()
	if err == nil && typ != duckdb.STATEMENT_TYPE_SELECT {
		err = readOnlyError("explaining a statement that is not a read")
	}
	if err != nil {
		return closeAfter(stmt, err)
	}
	return stmt.Close()
}

func prepare(conn *duckdb.Conn, sql string) (*duckdb.Stmt, error) {
	s, err := conn.Prepare(sql)
	var de *duckdb.Error
	switch {
	case errors.As(err, &de):
		return nil, sqlError(err)
	case err != nil:
		// The text is one statement, so DuckDB expanded it into several.
		return nil, &UsageError{Msg: "DuckDB expands this statement into several, which would not be read-only " +
			"(PIVOT does without an explicit IN list; name the pivoted values)"}
	}
	return s.(*duckdb.Stmt), nil
}

func closeAfter(stmt driver.Stmt, err error) error {
	if cerr := stmt.Close(); cerr != nil {
		return fmt.Errorf("%w (closing statement: %v)", err, cerr)
	}
	return err
}

// checkVerb refuses a statement whose verb is not a read. The verb is the
// first word, except that a WITH clause is looked through to the statement
// it prefixes.
func checkVerb(toks []token, allowExplain bool) error {
	verb := toks[0]
	if isWord(verb, "WITH") {
		verb = verbAfterWith(toks)
	}
	if verb.kind == tokPunct && verb.text == "(" {
		return nil
	}
	word := strings.ToUpper(verb.text)
	if verb.kind != tokWord || !readKeywords[word] || (word == "EXPLAIN" && !allowExplain) {
		return readOnlyError(word)
	}
	return nil
}

// verbAfterWith returns the first word outside parentheses that starts a
// statement; the CTE definitions are all parenthesized. Without one it
// returns the WITH itself and leaves the verdict to DuckDB.
func verbAfterWith(toks []token) token {
	depth := 0
	for _, t := range toks[1:] {
		switch {
		case t.kind == tokPunct && t.text == "(":
			depth++
		case t.kind == tokPunct && t.text == ")":
			depth--
		case depth == 0 && t.kind == tokWord && statementVerbs[strings.ToUpper(t.text)]:
			return t
		}
	}
	return toks[0]
}

// ReadStatement is the read-only guard's verdict on sql from its text alone, for callers
// that have DuckDB parse sql themselves instead of preparing it here (sinks' transforms, which
// read DuckDB's syntax tree): how many statements sql holds and, when it is one, its verb
// upper-cased (the word after a WITH clause; "(" for a parenthesized query) and whether
// prepareReadOnly would take that verb as a read. EXPLAIN is not one here: it returns a plan,
// never the rows, and its ANALYZE form runs what it explains.
func ReadStatement(sql string) (statements int, verb string, read bool) {
	toks := lex(sql)
	if statements = countStatements(toks); statements != 1 {
		return statements, "", false
	}
	v := toks[0]
	if isWord(v, "WITH") {
		v = verbAfterWith(toks)
	}
	return 1, strings.ToUpper(v.text), checkVerb(toks, false) == nil
}

// statementVerbs are the words that can follow a WITH clause.
var statementVerbs = map[string]bool{
	"SELECT": true, "VALUES": true, "FROM": true, "TABLE": true, "PIVOT": true, "UNPIVOT": true,
	"INSERT": true, "UPDATE": true, "DELETE": true, "MERGE": true,
}

func isWord(t token, word string) bool {
	return t.kind == tokWord && strings.EqualFold(t.text, word)
}

// explainedStatement returns the text of the statement an EXPLAIN wraps:
// EXPLAIN [ANALYZE|ANALYSE] [(option, ...)] statement. A parenthesis opens the
// options unless a query starts inside it, as in EXPLAIN (SELECT 1).
func explainedStatement(sql string, toks []token) string {
	i := 1
	if i < len(toks) && (isWord(toks[i], "ANALYZE") || isWord(toks[i], "ANALYSE")) {
		i++
	}
	if i+1 < len(toks) && toks[i].kind == tokPunct && toks[i].text == "(" && !startsQuery(toks[i+1]) {
		depth := 0
		for ; i < len(toks); i++ {
			if toks[i].kind != tokPunct {
				continue
			}
			switch toks[i].text {
			case "(":
				depth++
			case ")":
				depth--
			}
			if depth == 0 {
				i++
				break
			}
		}
	}
	if i >= len(toks) {
		return ""
	}
	return sql[toks[i].pos:]
}

func startsQuery(t token) bool {
	return (t.kind == tokPunct && t.text == "(") || (t.kind == tokWord && readKeywords[strings.ToUpper(t.text)])
}

type tokenKind int

const (
	tokWord   tokenKind = iota // keyword, bare identifier or number
	tokQuoted                  // "quoted identifier"
	tokString                  // 'string', E'string' or $tag$string$tag$
	tokPunct                   // any other single character, ';' included
)

type token struct {
	kind tokenKind
	text string
	pos  int // byte offset in the statement text
}

// lex splits sql into tokens just well enough to find statement boundaries and
// leading keywords; DuckDB's parser stays the judge of validity. Unterminated
// strings and comments run to the end, where DuckDB reports them.
func lex(sql string) []token {
	var toks []token
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case strings.HasPrefix(sql[i:], "--"):
			end := strings.IndexByte(sql[i:], '\n')
			if end < 0 {
				return toks
			}
			i += end + 1
		case strings.HasPrefix(sql[i:], "/*"):
			i = skipBlockComment(sql, i)
		case c == '\'':
			end := quotedEnd(sql, i, '\'', false)
			toks = append(toks, token{tokString, sql[i:end], i})
			i = end
		case c == '"':
			end := quotedEnd(sql, i, '"', false)
			toks = append(toks, token{tokQuoted, sql[i:end], i})
			i = end
		case (c == 'E' || c == 'e') && i+1 < len(sql) && sql[i+1] == '\'':
			end := quotedEnd(sql, i+1, '\'', true)
			toks = append(toks, token{tokString, sql[i:end], i})
			i = end
		case c == '$' && dollarTag(sql[i:]) != "":
			tag := dollarTag(sql[i:])
			end := strings.Index(sql[i+len(tag):], tag)
			if end < 0 {
				end = len(sql)
			} else {
				end += i + 2*len(tag)
			}
			toks = append(toks, token{tokString, sql[i:end], i})
			i = end
		case isWordByte(c):
			start := i
			for i < len(sql) && (isWordByte(sql[i]) || sql[i] == '$') {
				i++
			}
			toks = append(toks, token{tokWord, sql[start:i], start})
		default:
			toks = append(toks, token{tokPunct, sql[i : i+1], i})
			i++
		}
	}
	return toks
}

// skipBlockComment returns the offset after the comment opening at i;
// block comments nest, as in PostgreSQL.
func skipBlockComment(sql string, i int) int {
	depth := 0
	for i < len(sql) {
		switch {
		case strings.HasPrefix(sql[i:], "/*"):
			depth++
			i += 2
		case strings.HasPrefix(sql[i:], "*/"):
			depth--
			i += 2
			if depth == 0 {
				return i
			}
		default:
			i++
		}
	}
	return i
}

// quotedEnd returns the offset after the quoted text opening at i, where a
// doubled quote stands for itself and, in E'...' strings, a backslash
// escapes.
func quotedEnd(sql string, i int, quote byte, backslash bool) int {
	for i++; i < len(sql); i++ {
		switch {
		case backslash && sql[i] == '\\':
			i++
		case sql[i] == quote:
			if i+1 < len(sql) && sql[i+1] == quote {
				i++
				continue
			}
			return i + 1
		}
	}
	return len(sql)
}

// dollarTag returns the $tag$ that s starts with, or "" ($1 is a parameter).
func dollarTag(s string) string {
	for j := 1; j < len(s); j++ {
		c := s[j]
		switch {
		case c == '$':
			return s[:j+1]
		case c == '_' || (c|0x20 >= 'a' && c|0x20 <= 'z') || (j > 1 && c >= '0' && c <= '9'):
		default:
			return ""
		}
	}
	return ""
}

// isWordByte accepts every non-ASCII byte so identifiers in any script stay
// one word.
func isWordByte(c byte) bool {
	return c == '_' || c >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

func countStatements(toks []token) int {
	n, pending := 0, false
	for _, t := range toks {
		if t.kind == tokPunct && t.text == ";" {
			if pending {
				n++
			}
			pending = false
			continue
		}
		pending = true
	}
	if pending {
		n++
	}
	return n
}
