package query

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hyp-project/hyp/internal/columns"
)

// The virtual column that names a row's partition, and read_parquet's file name column,
// which is never shown. Which table columns are internal (shown only with
// Options.Internal) is the cache's rule: columns.Internal.
const (
	partitionColumn = "_hyp_partition"
	fileColumn      = "_hyp_file"
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

// Names returns the name each column is queried under. DuckDB folds identifier case, so
// columns whose names differ only in case (`ID` and `id`) cannot share a view under their
// own names. Among such names, the first in byte order keeps its name and the k-th is
// queried as `<name>__k` (k = 2, 3, ...; the next free number when that is taken too).
// Byte order, not arrival order, so a name never changes with the order the cache loads
// its partitions in.
func Names(cols []Column) []string {
	out := make([]string, len(cols))
	taken := make(map[string]bool, len(cols))
	groups := map[string][]int{}
	for i, c := range cols {
		k := strings.ToLower(c.Name)
		groups[k] = append(groups[k], i)
	}
	var clashing [][]int
	for _, g := range groups {
		if len(g) == 1 {
			out[g[0]] = cols[g[0]].Name
			taken[strings.ToLower(cols[g[0]].Name)] = true
			continue
		}
		slices.SortFunc(g, func(a, b int) int { return strings.Compare(cols[a].Name, cols[b].Name) })
		clashing = append(clashing, g)
	}
	// Deterministic order for the renamed ones, so the numbers they take are too.
	slices.SortFunc(clashing, func(a, b []int) int { return strings.Compare(cols[a[0]].Name, cols[b[0]].Name) })
	for _, g := range clashing {
		out[g[0]] = cols[g[0]].Name
		taken[strings.ToLower(cols[g[0]].Name)] = true
	}
	for _, g := range clashing {
		for k, i := range g[1:] {
			for n := k + 2; ; n++ {
				name := fmt.Sprintf("%s__%d", cols[i].Name, n)
				if !taken[strings.ToLower(name)] {
					out[i] = name
					taken[strings.ToLower(name)] = true
					break
				}
			}
		}
	}
	return out
}

type viewColumn struct {
	name     string // as queried
	duckType string
}

// viewSQL returns the CREATE VIEW statement that exposes t under its name.
//
// Files are read by Parquet field id, never by stored column name: read_parquet's schema
// map names each field id of the partition's table as the column is queried, and gives
// NULL for a column a file predates. A column the partition's table does not have at all
// is a typed NULL. Partitions whose tables agree on every field id share one read_parquet,
// so a dataset of many partitions is a few multi-file scans, which DuckDB opens a few
// files at a time (one scan per partition opened every file at once: 10,000 partitions ran
// out of descriptors); with the partition column, each row's file names its partition. A
// mixed file (the cache's rows not yet flushed) stores each row's partition in a column of
// its own, read like the others.
// Binding reads no file until a query uses the view.
func viewSQL(t Table, internal bool) (string, error) {
	names := Names(t.Columns)
	var cols []viewColumn
	var src []Column // the table column behind cols[i]
	for i, c := range t.Columns {
		if !internal && columns.Internal(c.Name) {
			continue
		}
		typ, ok := duckTypes[c.Type]
		if !ok {
			return "", fmt.Errorf("table %q column %q: unsupported type %q", t.Name, c.Name, c.Type)
		}
		cols = append(cols, viewColumn{names[i], typ})
		src = append(src, c)
	}
	if len(cols) == 0 {
		return "", fmt.Errorf("table %q has no columns", t.Name)
	}

	type scan struct {
		ids []int // field id of cols[i] in these files; 0 when they have none
		// partID is the field id of the column holding each row's partition; 0 when each
		// file is of one partition, parts[i] that of files[i].
		partID int
		files  []string
		parts  []string
	}
	var scans []*scan
	byIDs := map[string]*scan{}
	add := func(fieldIDs map[string]int, partID int, files []string, part string) {
		ids := make([]int, len(cols))
		var key strings.Builder
		for i, c := range src {
			ids[i] = fieldIDs[c.Name]
			fmt.Fprintf(&key, "%d,", ids[i])
		}
		fmt.Fprintf(&key, "p%d", partID)
		sc := byIDs[key.String()]
		if sc == nil {
			sc = &scan{ids: ids, partID: partID}
			scans = append(scans, sc)
			byIDs[key.String()] = sc
		}
		for _, f := range files {
			sc.files = append(sc.files, f)
			sc.parts = append(sc.parts, part)
		}
	}
	var broken []string
	for _, p := range t.Partitions {
		if p.Err != nil {
			broken = append(broken, brokenSQL(t.Name, p, cols, internal))
			continue
		}
		if len(p.Files) > 0 {
			add(p.FieldIDs, 0, p.Files, p.Name)
		}
	}
	for _, m := range t.Mixed {
		add(m.FieldIDs, m.PartitionFieldID, []string{m.Path}, "")
	}

	var branches []string
	for _, sc := range scans {
		var entries, sel []string
		for i, c := range cols {
			if sc.ids[i] == 0 {
				sel = append(sel, fmt.Sprintf("CAST(NULL AS %s) AS %s", c.duckType, quoteIdent(c.name)))
				continue
			}
			entries = append(entries, fmt.Sprintf("%d: {name: %s, type: %s, default_value: NULL}", sc.ids[i], quoteString(c.name), quoteString(c.duckType)))
			sel = append(sel, "r."+quoteIdent(c.name))
		}
		files := make([]string, len(sc.files))
		for i, f := range sc.files {
			files[i] = quoteString(f)
		}
		opts, join := "", ""
		if internal {
			// One scan may cover several partitions; each row's file, or its own column,
			// names its partition.
			if sc.partID != 0 {
				entries = append(entries, fmt.Sprintf("%d: {name: %s, type: 'VARCHAR', default_value: NULL}", sc.partID, quoteString(partitionColumn)))
				sel = append(sel, "r."+quoteIdent(partitionColumn))
			} else if parts := slices.Compact(slices.Clone(sc.parts)); len(parts) == 1 {
				sel = append(sel, quoteString(parts[0])+" AS "+quoteIdent(partitionColumn))
			} else {
				opts += ", filename = " + quoteString(fileColumn)
				pairs := make([]string, len(sc.files))
				for i := range sc.files {
					pairs[i] = "(" + files[i] + ", " + quoteString(sc.parts[i]) + ")"
				}
				join = fmt.Sprintf(" JOIN (VALUES %s) AS m(f, p) ON r.%s = m.f", strings.Join(pairs, ", "), quoteIdent(fileColumn))
				sel = append(sel, "m.p AS "+quoteIdent(partitionColumn))
			}
		}
		if len(entries) > 0 {
			opts = ", schema = MAP {" + strings.Join(entries, ", ") + "}" + opts
		}
		branches = append(branches, fmt.Sprintf("SELECT %s FROM read_parquet([%s]%s) AS r%s", strings.Join(sel, ", "), strings.Join(files, ", "), opts, join))
	}
	branches = append(branches, broken...)
	if len(branches) == 0 {
		sel := make([]string, len(cols))
		for i, c := range cols {
			sel[i] = fmt.Sprintf("CAST(NULL AS %s) AS %s", c.duckType, quoteIdent(c.name))
		}
		if internal {
			sel = append(sel, "CAST(NULL AS VARCHAR) AS "+quoteIdent(partitionColumn))
		}
		branches = []string{"SELECT " + strings.Join(sel, ", ") + " WHERE false"}
	}
	return "CREATE VIEW " + quoteIdent(t.Name) + " AS " + strings.Join(branches, " UNION ALL "), nil
}

// unreadablePartition starts the error a read of a partition that cannot be read fails
// with, which tells it from DuckDB's complaints about the SQL.
const unreadablePartition = "unreadable cache partition: "

// brokenSQL is the branch of a view for a partition that cannot be read: it holds no row,
// and reading it fails with the partition's error. The error depends on a row, so DuckDB
// raises it when the branch is read, not when the view is defined.
func brokenSQL(table string, p Partition, cols []viewColumn, internal bool) string {
	sel := make([]string, len(cols))
	for i, c := range cols {
		sel[i] = fmt.Sprintf("CAST(NULL AS %s) AS %s", c.duckType, quoteIdent(c.name))
	}
	if internal {
		sel = append(sel, quoteString(p.Name)+" AS "+quoteIdent(partitionColumn))
	}
	msg := fmt.Sprintf("%stable %q partition %s: %v", unreadablePartition, table, p.Name, p.Err)
	return fmt.Sprintf("SELECT %s FROM range(1) AS r WHERE error(%s || repeat('', r.range::INTEGER)) IS NOT NULL", strings.Join(sel, ", "), quoteString(msg))
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
		for _, m := range t.Mixed {
			paths = append(paths, quoteString(m.Path))
		}
	}
	return "SET allowed_paths = [" + strings.Join(paths, ", ") + "]"
}
