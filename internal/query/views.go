package query

import (
	"fmt"
	"strings"
)

// Names of the internal columns every cache file carries, and of the virtual
// column that names a row's partition. Every column with internalPrefix (a
// central server also keeps the sender's `_hyp_origin_seq`) is shown only with
// Options.Internal.
const (
	internalPrefix  = "_hyp_"
	partitionColumn = "_hyp_partition"
)

var duckTypes = map[string]string{
	"string":      "VARCHAR",
	"long":        "BIGINT",
	"double":      "DOUBLE",
	"boolean":     "BOOLEAN",
	"timestamptz": "TIMESTAMPTZ",
}

func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

func quoteString(s string) string {
	return `'` + strings.ReplaceAll(s, `'`, `''`) + `'`
}

type viewColumn struct {
	ident    string // quoted name
	duckType string
}

// viewSQL returns the CREATE VIEW statement that exposes t under its name.
//
// Each partition's files are read by one read_parquet with union_by_name, so
// files written before a column was added read it as NULL. A column that none
// of a partition's files have is still needed, typed, so every scan is unioned
// BY NAME with a typed relation that has no rows; DuckDB drops that empty side
// when planning and still pushes projections and filters into the Parquet
// scans. Binding this way reads no file until a query uses the view.
func viewSQL(t Table, internal bool) (string, error) {
	var cols []viewColumn
	for _, c := range t.Columns {
		if !internal && strings.HasPrefix(c.Name, internalPrefix) {
			continue
		}
		typ, ok := duckTypes[c.Type]
		if !ok {
			return "", fmt.Errorf("table %q column %q: unsupported type %q", t.Name, c.Name, c.Type)
		}
		cols = append(cols, viewColumn{quoteIdent(c.Name), typ})
	}
	if len(cols) == 0 {
		return "", fmt.Errorf("table %q has no columns", t.Name)
	}

	typedNulls := make([]string, len(cols))
	projection := make([]string, len(cols))
	for i, c := range cols {
		typedNulls[i] = fmt.Sprintf("CAST(NULL AS %s) AS %s", c.duckType, c.ident)
		// The cast pins the declared type whatever the files hold (INT32 written
		// by an older writer, naive timestamps, ...).
		projection[i] = fmt.Sprintf("CAST(%s AS %s) AS %s", c.ident, c.duckType, c.ident)
	}
	empty := "SELECT " + strings.Join(typedNulls, ", ")

	var branches []string
	for _, p := range t.Partitions {
		if len(p.Files) == 0 {
			continue
		}
		files := make([]string, len(p.Files))
		for i, f := range p.Files {
			files[i] = quoteString(f)
		}
		sel := projection
		if internal {
			sel = append(sel[:len(sel):len(sel)], quoteString(p.Name)+" AS "+quoteIdent(partitionColumn))
		}
		branches = append(branches, fmt.Sprintf(
			"SELECT %s FROM (%s WHERE false UNION ALL BY NAME SELECT * FROM read_parquet([%s], union_by_name = true))",
			strings.Join(sel, ", "), empty, strings.Join(files, ", ")))
	}
	if len(branches) == 0 {
		if internal {
			empty += ", CAST(NULL AS VARCHAR) AS " + quoteIdent(partitionColumn)
		}
		branches = []string{empty + " WHERE false"}
	}
	return "CREATE VIEW " + quoteIdent(t.Name) + " AS " + strings.Join(branches, " UNION ALL "), nil
}

// allowedPathsSQL lists every file the views read: once external access is
// switched off these are the only files SQL can open, so a query cannot
// wander into stale or foreign files. Writing is refused earlier, by
// prepareReadOnly.
func allowedPathsSQL(tables []Table) string {
	var paths []string
	for _, t := range tables {
		for _, p := range t.Partitions {
			for _, f := range p.Files {
				paths = append(paths, quoteString(f))
			}
		}
	}
	return "SET allowed_paths = [" + strings.Join(paths, ", ") + "]"
}
