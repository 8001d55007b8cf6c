package status

import (
	"reflect"
	"testing"
	"time"

	"github.com/hyp-project/hyp/internal/sink"
	"github.com/hyp-project/hyp/internal/watermark"
)

func TestSinks(t *testing.T) {
	t0 := time.Date(2026, 8, 12, 0, 50, 47, 0, time.UTC)
	earlier, later := t0, t0.Add(time.Minute)
	for _, tc := range []struct {
		name string
		in   []sink.InstanceStatus
		want []Sink
	}{
		{"no sinks is an empty list", nil, []Sink{}},
		{
			"a sink without partitions has no export and no errors",
			[]sink.InstanceStatus{{Instance: "files", Type: "blob"}},
			[]Sink{{Instance: "files", Type: "blob", Errors: []string{}}},
		},
		{
			"partitions add up; the age is the oldest, the export the latest",
			[]sink.InstanceStatus{{Instance: "lake", Type: "iceberg", Partitions: []sink.PartitionStatus{
				{Dataset: "logs", Partition: "source=web", LagRows: 3, ExportedRows: 10, OldestUnexportedAgeSeconds: 7, LastExportAt: &earlier, WithheldRows: 2,
					Gaps: []watermark.Gap{{Rows: 4}, {Rows: 5}}, Quarantined: []watermark.Quarantined{{Rows: 1}}},
				{Dataset: "logs", Partition: "source=db", LagRows: 1, ExportedRows: 20, OldestUnexportedAgeSeconds: 30, LastExportAt: &later, WithheldRows: 1},
				{Dataset: "metrics", Partition: "source=edge", OldestUnexportedAgeSeconds: 2},
			}}},
			[]Sink{{Instance: "lake", Type: "iceberg", Partitions: 3, LagRows: 4, ExportedRows: 30, OldestUnexportedAgeSeconds: 30, LastExportAt: &later,
				Gaps: 2, GapRows: 9, WithheldRows: 3, Quarantined: 1, Errors: []string{}}},
		},
		{
			"the sink's own error comes first, then each partition's with its name",
			[]sink.InstanceStatus{
				{Instance: "central", Type: "forward", Error: "token file unreadable", Partitions: []sink.PartitionStatus{
					{Dataset: "logs", Partition: "source=web", LastError: "503 from central"},
					{Dataset: "logs", Partition: "source=db"},
					{Dataset: "logs", Partition: "source=api", LastError: "timeout"},
				}},
				{Instance: "files", Type: "blob"},
			},
			[]Sink{
				{Instance: "central", Type: "forward", Partitions: 3, Errors: []string{"token file unreadable", "logs source=web: 503 from central", "logs source=api: timeout"}},
				{Instance: "files", Type: "blob", Errors: []string{}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Sinks(tc.in); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Sinks:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
