package query

import (
	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/lake"
)

// FromCache describes the datasets of a pinned cache view as tables. The view must stay
// pinned while a query runs over them.
func FromCache(v *cache.View) []Table {
	tables := make([]Table, 0, len(v.Tables))
	for _, t := range v.Tables {
		qt := Table{Name: t.Dataset}
		for _, c := range t.Columns {
			qt.Columns = append(qt.Columns, Column{Name: c.Name, Type: c.Type.String()})
		}
		for _, p := range t.Partitions {
			qt.Partitions = append(qt.Partitions, Partition{Name: p.Partition, Files: p.Files, FieldIDs: p.FieldIDs, Err: p.Err})
		}
		for _, u := range t.Unflushed {
			qt.Mixed = append(qt.Mixed, MixedFile{Path: u.Path, FieldIDs: u.FieldIDs, PartitionFieldID: u.PartitionFieldID})
		}
		tables = append(tables, qt)
	}
	return tables
}

// FromLake describes an iceberg sink's tables (lake.Tables) as tables, each one partition
// named after its table, so `_hyp_partition` reads `<namespace>.<dataset>`.
func FromLake(namespace string, tfs []lake.TableFiles) []Table {
	tables := make([]Table, 0, len(tfs))
	for _, tf := range tfs {
		qt := Table{Name: tf.Dataset}
		for _, c := range tf.Columns {
			qt.Columns = append(qt.Columns, Column{Name: c.Name, Type: c.Type})
		}
		qt.Partitions = []Partition{{Name: namespace + "." + tf.Dataset, Files: tf.Files, FieldIDs: tf.FieldIDs}}
		tables = append(tables, qt)
	}
	return tables
}
