package lake

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
)

// Column is one column of a table's current schema, typed as the cache types columns
// ("string", "long", "double", "boolean", "timestamptz").
type Column struct {
	Name string
	Type string
}

// TableFiles is what a read-only query needs of one dataset's table: its current schema,
// with the Parquet field id each column is stored under, and the local paths of the data
// files its current snapshot holds.
type TableFiles struct {
	Dataset  string
	Columns  []Column
	FieldIDs map[string]int
	Files    []string
}

// Tables lists every table of the sink's namespace with its live files, for
// `hyp query sql --sink`. Files of a local warehouse are named where they are; files on S3
// are copied into scratch, a directory the caller removes afterwards, because the query
// engine reads local files only.
func (l *Lake) Tables(ctx context.Context, scratch string) ([]TableFiles, error) {
	var out []TableFiles
	for ident, err := range l.cat.ListTables(ctx, l.ns) {
		if err != nil {
			return nil, fmt.Errorf("list tables of %s: %w", l.ns[0], err)
		}
		dataset := ident[len(ident)-1]
		tbl, err := l.load(ctx, dataset)
		if err != nil || tbl == nil {
			return nil, err
		}
		tf := TableFiles{Dataset: dataset, FieldIDs: map[string]int{}}
		for _, f := range tbl.Schema().Fields() {
			tf.Columns = append(tf.Columns, Column{Name: f.Name, Type: columnType(f.Type)})
			tf.FieldIDs[f.Name] = f.ID
		}
		if tbl.CurrentSnapshot() != nil {
			tasks, err := tbl.Scan().PlanFiles(ctx)
			if err != nil {
				return nil, fmt.Errorf("plan %s.%s: %w", l.ns[0], dataset, err)
			}
			fsys, err := tbl.FS(ctx)
			if err != nil {
				return nil, err
			}
			for i, task := range tasks {
				p, err := localCopy(fsys, task.File.FilePath(), filepath.Join(scratch, fmt.Sprintf("%s-%06d.parquet", dataset, i)))
				if err != nil {
					return nil, err
				}
				tf.Files = append(tf.Files, p)
			}
		}
		out = append(out, tf)
	}
	return out, nil
}

// Namespace is the namespace the sink's tables live in.
func (l *Lake) Namespace() string { return l.ns[0] }

// columnType names an Iceberg type the way the query package types columns.
func columnType(t iceberg.Type) string {
	switch t.(type) {
	case iceberg.Int64Type, iceberg.Int32Type:
		return "long"
	case iceberg.Float64Type, iceberg.Float32Type:
		return "double"
	case iceberg.BooleanType:
		return "boolean"
	case iceberg.TimestampTzType, iceberg.TimestampType:
		return "timestamptz"
	}
	return "string"
}

// localCopy is a data file's local path: the file itself when the warehouse is local, else
// a copy at dst.
func localCopy(fsys icebergio.IO, location, dst string) (string, error) {
	if p, ok := localFile(location); ok {
		return p, nil
	}
	if !strings.HasPrefix(location, "s3://") {
		return "", fmt.Errorf("data file %s: unsupported location", location)
	}
	src, err := fsys.Open(location)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", location, err)
	}
	defer src.Close()
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(f, src); err != nil {
		f.Close()
		return "", fmt.Errorf("copy %s: %w", location, err)
	}
	return dst, f.Close()
}
