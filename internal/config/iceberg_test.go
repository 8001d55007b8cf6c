package config

import (
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestParseIceberg(t *testing.T) {
	sink := func(body string) string { return "sinks:\n  lake:\n    type: iceberg\n" + body }
	tests := []struct {
		name    string
		yaml    string
		want    *Sink // nil when wantErr is set
		wantErr []string
	}{
		{
			name: "sqlite catalog, local warehouse, defaults filled in",
			yaml: sink("    catalog: {type: sql, uri: \"sqlite:///var/lib/hyp/catalog.db\"}\n    warehouse: lake\n"),
			want: &Sink{Type: "iceberg", Schedule: defaultSchedule,
				Catalog: Catalog{Type: "sql", URI: "sqlite:///var/lib/hyp/catalog.db"}, Warehouse: filepath.Join(home, "lake"),
				Namespace: "hyp", PartitionBy: "day", Maintain: Maintain{ExpireOlderThan: Duration(7 * 24 * time.Hour), RetainLast: 10}},
		},
		{
			name: "sqlite path relative to the home",
			yaml: sink("    catalog: {type: sql, uri: \"sqlite://cat.db\"}\n    warehouse: /w\n"),
			want: &Sink{Type: "iceberg", Schedule: defaultSchedule,
				Catalog: Catalog{Type: "sql", URI: "sqlite://" + filepath.Join(home, "cat.db")}, Warehouse: "/w",
				Namespace: "hyp", PartitionBy: "day", Maintain: Maintain{ExpireOlderThan: Duration(7 * 24 * time.Hour), RetainLast: 10}},
		},
		{
			name: "postgres catalog, s3 warehouse, every key",
			yaml: sink("    catalog: {type: sql, uri: \"postgres://u:p@db:5432/lake\"}\n    warehouse: s3://bucket/prefix\n    namespace: tele\n    partition_by: hour\n" +
				"    s3: {region: eu-west-1, endpoint: \"http://minio:9000\", force_path_style: true}\n    schedule: \"@every 5m\"\n" +
				"    maintain: {schedule: \"@every 1h\", compact: true, expire_older_than: 2d, retain_last: 3}\n"),
			want: &Sink{Type: "iceberg", Schedule: "@every 5m",
				Catalog: Catalog{Type: "sql", URI: "postgres://u:p@db:5432/lake"}, Warehouse: "s3://bucket/prefix",
				Namespace: "tele", PartitionBy: "hour", S3: S3Options{Region: "eu-west-1", Endpoint: "http://minio:9000", ForcePathStyle: true},
				Maintain: Maintain{Schedule: "@every 1h", Compact: true, ExpireOlderThan: Duration(48 * time.Hour), RetainLast: 3}},
		},
		{
			name: "hadoop catalog on local disk",
			yaml: sink("    catalog: {type: hadoop}\n    warehouse: /data/lake\n    partition_by: none\n"),
			want: &Sink{Type: "iceberg", Schedule: defaultSchedule, Catalog: Catalog{Type: "hadoop"}, Warehouse: "/data/lake",
				Namespace: "hyp", PartitionBy: "none", Maintain: Maintain{ExpireOlderThan: Duration(7 * 24 * time.Hour), RetainLast: 10}},
		},
		{
			// What follows sqlite:// is taken as a path, as written.
			name: "sqlite path with a space and a percent sign",
			yaml: sink("    catalog: {type: sql, uri: \"sqlite:///tmp/my dir/100%/catalog.db\"}\n    warehouse: /tmp/my dir/100%/lake\n"),
			want: &Sink{Type: "iceberg", Schedule: defaultSchedule,
				Catalog: Catalog{Type: "sql", URI: "sqlite:///tmp/my dir/100%/catalog.db"}, Warehouse: "/tmp/my dir/100%/lake",
				Namespace: "hyp", PartitionBy: "day", Maintain: Maintain{ExpireOlderThan: Duration(7 * 24 * time.Hour), RetainLast: 10}},
		},
		{
			name: "relative sqlite path with a space",
			yaml: sink("    catalog: {type: sql, uri: \"sqlite://my cat.db\"}\n    warehouse: /w\n"),
			want: &Sink{Type: "iceberg", Schedule: defaultSchedule,
				Catalog: Catalog{Type: "sql", URI: "sqlite://" + filepath.Join(home, "my cat.db")}, Warehouse: "/w",
				Namespace: "hyp", PartitionBy: "day", Maintain: Maintain{ExpireOlderThan: Duration(7 * 24 * time.Hour), RetainLast: 10}},
		},
		{name: "hadoop warehouse with a percent sign", yaml: sink("    catalog: {type: hadoop}\n    warehouse: /tmp/100%/lake\n"),
			wantErr: []string{`sinks.lake.warehouse: "/tmp/100%/lake": the hadoop catalog cannot use a path with "%" in it`, "catalog {type: sql"}},
		{name: "hadoop warehouse with a space", yaml: sink("    catalog: {type: hadoop}\n    warehouse: \"/data/my lake\"\n"),
			wantErr: []string{`sinks.lake.warehouse: "/data/my lake": the hadoop catalog cannot use a path with " " in it (iceberg-go would write its data files under "/data/my%20lake")`}},
		{name: "hadoop catalog on s3 refused", yaml: sink("    catalog: {type: hadoop}\n    warehouse: s3://b/p\n"),
			wantErr: []string{"sinks.lake.catalog.type: the hadoop catalog cannot be used with an s3:// warehouse", "use catalog {type: sql"}},
		{name: "hadoop takes no uri", yaml: sink("    catalog: {type: hadoop, uri: \"sqlite:///x\"}\n    warehouse: /w\n"), wantErr: []string{"catalog.uri: not used by the hadoop catalog"}},
		{name: "missing warehouse and catalog", yaml: sink(""), wantErr: []string{"sinks.lake.warehouse: required", "sinks.lake.catalog.type: required"}},
		{name: "unknown catalog type", yaml: sink("    catalog: {type: rest}\n    warehouse: /w\n"), wantErr: []string{"catalog.type: must be sql or hadoop"}},
		{name: "sql without uri", yaml: sink("    catalog: {type: sql}\n    warehouse: /w\n"), wantErr: []string{"catalog.uri: required for the sql catalog"}},
		{name: "sql with a mysql uri", yaml: sink("    catalog: {type: sql, uri: \"mysql://h/db\"}\n    warehouse: /w\n"), wantErr: []string{"scheme must be postgres or sqlite"}},
		{name: "postgres without host", yaml: sink("    catalog: {type: sql, uri: \"postgres:///db\"}\n    warehouse: /w\n"), wantErr: []string{"missing host"}},
		{name: "gs warehouse", yaml: sink("    catalog: {type: sql, uri: \"sqlite:///c\"}\n    warehouse: gs://b/p\n"), wantErr: []string{"want s3://bucket/prefix or a local path"}},
		{name: "s3 warehouse without bucket", yaml: sink("    catalog: {type: sql, uri: \"sqlite:///c\"}\n    warehouse: s3:///p\n"), wantErr: []string{"want s3://bucket/prefix"}},
		{name: "bad partition_by", yaml: sink("    catalog: {type: hadoop}\n    warehouse: /w\n    partition_by: month\n"), wantErr: []string{"partition_by: must be day, hour or none"}},
		{name: "bad namespace", yaml: sink("    catalog: {type: hadoop}\n    warehouse: /w\n    namespace: My-NS\n"), wantErr: []string{"namespace: bad namespace"}},
		{name: "s3 options on a local warehouse", yaml: sink("    catalog: {type: hadoop}\n    warehouse: /w\n    s3: {region: r}\n"), wantErr: []string{"sinks.lake.s3: only used with an s3:// warehouse"}},
		{name: "bad maintain", yaml: sink("    catalog: {type: hadoop}\n    warehouse: /w\n    maintain: {schedule: never, retain_last: -1, expire_older_than: -1h}\n"),
			wantErr: []string{"maintain.schedule", "maintain.retain_last: must be at least 1", "maintain.expire_older_than: must not be negative"}},
		{name: "blob keys on an iceberg sink", yaml: sink("    catalog: {type: hadoop}\n    warehouse: /w\n    format: parquet\n    url: http://x\n"),
			wantErr: []string{"format: \"parquet\" is not used by iceberg sinks", "url: \"http://x\" is not used by iceberg sinks"}},
		{name: "iceberg keys on a blob sink", yaml: "sinks:\n  b:\n    type: blob\n    format: parquet\n    destination: {type: local-fs, path: /x}\n    warehouse: /w\n    catalog: {type: hadoop}\n",
			wantErr: []string{"sinks.b.warehouse: only used by iceberg sinks", "sinks.b.catalog: only used by iceberg sinks"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := parseCase(t, tt.yaml, tt.wantErr)
			if c == nil {
				return
			}
			if got := c.Sinks["lake"]; tt.want == nil || !reflect.DeepEqual(got, *tt.want) {
				t.Errorf("sink = %+v\nwant   %+v", got, tt.want)
			}
		})
	}
}
