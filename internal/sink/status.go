package sink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyp-project/hyp/internal/cache"
	"github.com/hyp-project/hyp/internal/promreg"
	"github.com/hyp-project/hyp/internal/watermark"
)

// PartitionStatus is where one sink stands on one partition (SPEC 7 `sink status --json`).
type PartitionStatus struct {
	Dataset      string `json:"dataset"`
	Partition    string `json:"partition"`
	WatermarkSeq int64  `json:"watermark_seq"`
	HeadSeq      int64  `json:"head_seq"`
	// LagRows counts the cached rows above the watermark; rows retention removed before the
	// sink read them are in Gaps instead.
	LagRows                    int64                   `json:"lag_rows"`
	ExportedRows               int64                   `json:"exported_rows"`
	OldestUnexportedAt         *time.Time              `json:"oldest_unexported_at"`
	OldestUnexportedAgeSeconds float64                 `json:"oldest_unexported_age_seconds"`
	LastExportAt               *time.Time              `json:"last_export_at"`
	LastError                  string                  `json:"last_error"`
	Gaps                       []watermark.Gap         `json:"gaps"`
	Quarantined                []watermark.Quarantined `json:"quarantined"`
	// Withheld says the sink's withhold_sources match the partition now; WithheldRows
	// counts the rows it skipped and advanced past so far.
	Withheld     bool  `json:"withheld"`
	WithheldRows int64 `json:"withheld_rows"`
	// FilteredRows counts the exported rows the sink's transform dropped.
	FilteredRows int64           `json:"filtered_rows"`
	InFlight     *watermark.Unit `json:"in_flight"`
	// Queued is the unit decided behind InFlight (a forward sink ships it the moment
	// InFlight is answered): while it ships, the watermark still stands before InFlight.
	Queued     *watermark.Unit   `json:"queued"`
	LastRewind *watermark.Rewind `json:"last_rewind"`
	Generation int64             `json:"generation"`
}

// InstanceStatus is one sink and every partition it covers.
type InstanceStatus struct {
	Instance   string            `json:"instance"`
	Type       string            `json:"type"`
	Error      string            `json:"error,omitempty"`   // why the sink cannot run, if it cannot
	Replica    string            `json:"replica,omitempty"` // forward sinks: the url the next unit goes to
	Partitions []PartitionStatus `json:"partitions"`
	Tables     []TableStatus     `json:"tables,omitempty"` // iceberg sinks
}

// Status reports instance (every instance when empty) on every partition it covers. It
// reads watermark files and the cache's position index; it never opens more than the
// boundary row groups of a partition.
func (d *Driver) Status(ctx context.Context, name string) ([]InstanceStatus, error) {
	sel, err := d.selectInstances(name)
	if err != nil {
		return nil, err
	}
	parts := d.cache.Status()
	out := []InstanceStatus{}
	for _, x := range sel {
		is := InstanceStatus{Instance: x.name, Type: x.cfg.Type, Partitions: []PartitionStatus{}}
		if x.broken != nil {
			is.Error = x.broken.Error()
		}
		if f, ok := x.shipper().(*forwardShipper); ok {
			is.Replica = f.client.State().Current
		}
		for _, cp := range parts {
			if !x.covers(cp.Dataset) {
				continue
			}
			ps, err := d.partitionStatus(ctx, x, cp)
			if errors.Is(err, cache.ErrNoPartition) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("sink %s %s %s: %w", x.name, cp.Dataset, cp.Partition, err)
			}
			is.Partitions = append(is.Partitions, ps)
		}
		is.Tables = x.tableStatus(ctx, datasetsOf(parts))
		out = append(out, is)
	}
	return out, nil
}

func (d *Driver) partitionStatus(ctx context.Context, x *instance, cp cache.PartitionStatus) (PartitionStatus, error) {
	p := Part{Dataset: cp.Dataset, Partition: cp.Partition}
	st, err := d.store.Get(watermark.Key{Instance: x.name, Dataset: p.Dataset, Partition: p.Partition})
	if err != nil {
		// An unreadable file (a bad hand edit) is this partition's problem, shown as its
		// error; the export of it fails the same way until the file is fixed.
		st = watermark.State{LastError: err.Error()}
	}
	lag, err := d.lag.of(ctx, d.cache, x.name, cp, st.Seq)
	if err != nil {
		return PartitionStatus{}, err
	}
	ps := PartitionStatus{
		Dataset: p.Dataset, Partition: p.Partition,
		WatermarkSeq: st.Seq, HeadSeq: lag.head, LagRows: lag.rows, ExportedRows: st.ExportedRows,
		LastExportAt: st.LastExportAt, LastError: st.LastError,
		Gaps: st.Gaps, Quarantined: st.Quarantined,
		Withheld: x.withheld(p), WithheldRows: st.WithheldRows, FilteredRows: st.FilteredRows,
		InFlight: st.Intent, Queued: st.Next, LastRewind: st.LastRewind, Generation: st.Generation,
	}
	if ps.Gaps == nil {
		ps.Gaps = []watermark.Gap{}
	}
	if ps.Quarantined == nil {
		ps.Quarantined = []watermark.Quarantined{}
	}
	if lag.rows > 0 {
		at := lag.oldest.Time()
		ps.OldestUnexportedAt = &at
		ps.OldestUnexportedAgeSeconds = max(d.now().Sub(at).Seconds(), 0)
	}
	return ps, nil
}

func (d *Driver) selectInstances(name string) ([]*instance, error) {
	var sel []*instance
	for _, x := range d.insts {
		if name == "" || x.name == name {
			sel = append(sel, x)
		}
	}
	if name != "" && len(sel) == 0 {
		return nil, fmt.Errorf("%w %q (configured: %s)", ErrUnknownSink, name, strings.Join(d.Names(), ", "))
	}
	return sel, nil
}

// lagMemo remembers each position's lag by what determines it (watermark, head and the
// pruned mark, all known from the cache's in-memory index), so a scrape of an idle sink
// pins nothing and reads no data file.
type lagMemo struct {
	mu sync.Mutex
	m  map[lagKey]lagValue
}

type lagKey struct {
	instance, dataset, partition string
}

type lagValue struct {
	seq, head, pruned int64
	rows              int64
	oldest            cache.RowPos
}

func (lm *lagMemo) of(ctx context.Context, c Cache, instance string, cp cache.PartitionStatus, seq int64) (lagValue, error) {
	k := lagKey{instance, cp.Dataset, cp.Partition}
	lm.mu.Lock()
	v, ok := lm.m[k]
	lm.mu.Unlock()
	if ok && v.seq == seq && v.head == cp.HeadSeq && v.pruned == cp.PrunedThrough {
		return v, nil
	}
	pos, err := c.Positions(cp.Dataset, cp.Partition)
	if err != nil {
		return lagValue{}, err
	}
	defer pos.Release()
	v = lagValue{seq: seq, head: pos.Head, pruned: pos.PrunedThrough}
	if v.rows, err = pos.Rows(ctx, seq, pos.Head); err != nil {
		return lagValue{}, err
	}
	if v.rows > 0 {
		if v.oldest, _, err = pos.FirstAfter(ctx, seq); err != nil {
			return lagValue{}, err
		}
	}
	lm.mu.Lock()
	if lm.m == nil {
		lm.m = map[lagKey]lagValue{}
	}
	lm.m[k] = v
	lm.mu.Unlock()
	return v, nil
}

// positionCollector exports every sink's watermark, lag and oldest-unexported age per
// partition at scrape time, from the same numbers `sink status` shows. A dataset's
// partitions beyond the promreg.MaxPartitionSeries with the most lag are folded into
// partition="_other", so thousands of gateway partitions on a server stay a few series.
type positionCollector struct{ d *Driver }

var (
	watermarkDesc = prometheus.NewDesc("hyp_sink_watermark_seq", "Every row of the partition with seq at or below this is exported (or skipped, or a recorded gap) by the sink.", []string{"sink", "dataset", "partition"}, nil)
	lagDesc       = prometheus.NewDesc("hyp_sink_lag_rows", "Cached rows of the partition above the sink's watermark.", []string{"sink", "dataset", "partition"}, nil)
	oldestAgeDesc = prometheus.NewDesc("hyp_sink_oldest_unexported_age_seconds", "Age of the oldest cached row the sink has not exported (0 when none).", []string{"sink", "dataset", "partition"}, nil)
)

func (pc positionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- watermarkDesc
	ch <- lagDesc
	ch <- oldestAgeDesc
}

func (pc positionCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := pc.d.Status(ctx, "")
	if err != nil {
		pc.d.log.Warn("sink position metrics", "err", err)
		return
	}
	for _, is := range st {
		group, rank := make([]string, len(is.Partitions)), make([]float64, len(is.Partitions))
		for i, p := range is.Partitions {
			group[i], rank[i] = p.Dataset, float64(p.LagRows)
		}
		// What the folded partitions say together: every row of theirs at or below the
		// lowest watermark is exported, their lags add up, and the oldest row waits longest.
		type folded struct {
			watermark, lag int64
			age            float64
		}
		others := map[string]*folded{}
		var order []string // datasets with folded partitions, as they came
		for i, keep := range promreg.Keep(group, rank) {
			p := is.Partitions[i]
			if keep {
				ch <- prometheus.MustNewConstMetric(watermarkDesc, prometheus.GaugeValue, float64(p.WatermarkSeq), is.Instance, p.Dataset, p.Partition)
				ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, float64(p.LagRows), is.Instance, p.Dataset, p.Partition)
				ch <- prometheus.MustNewConstMetric(oldestAgeDesc, prometheus.GaugeValue, p.OldestUnexportedAgeSeconds, is.Instance, p.Dataset, p.Partition)
				continue
			}
			o := others[p.Dataset]
			if o == nil {
				o = &folded{watermark: p.WatermarkSeq}
				others[p.Dataset] = o
				order = append(order, p.Dataset)
			}
			o.watermark = min(o.watermark, p.WatermarkSeq)
			o.lag += p.LagRows
			o.age = max(o.age, p.OldestUnexportedAgeSeconds)
		}
		for _, ds := range order {
			o := others[ds]
			ch <- prometheus.MustNewConstMetric(watermarkDesc, prometheus.GaugeValue, float64(o.watermark), is.Instance, ds, promreg.OtherPartition)
			ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, float64(o.lag), is.Instance, ds, promreg.OtherPartition)
			ch <- prometheus.MustNewConstMetric(oldestAgeDesc, prometheus.GaugeValue, o.age, is.Instance, ds, promreg.OtherPartition)
		}
	}
}
