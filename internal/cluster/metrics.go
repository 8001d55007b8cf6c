package cluster

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyp-project/hyp/internal/promreg"
)

type metrics struct {
	committer     prometheus.Gauge
	staged        prometheus.Gauge
	lag           prometheus.Gauge
	commits       *prometheus.CounterVec
	commitSeconds prometheus.Histogram
	stageSeconds  prometheus.Histogram
	groupChunks   prometheus.Histogram
	maintains     *prometheus.CounterVec
	orphans       prometheus.Counter
	dataFiles     *prometheus.GaugeVec
}

// newMetrics registers on reg when it is not nil; without one the metrics still count.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		committer: prometheus.NewGauge(prometheus.GaugeOpts{Name: "hyp_cluster_committer",
			Help: "1 while this replica holds the committer lock, else 0."}),
		staged: prometheus.NewGauge(prometheus.GaugeOpts{Name: "hyp_cluster_staged_rows",
			Help: "Rows stored by any replica and not yet committed to the lake tables (cluster-wide, as of this replica's last heartbeat)."}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{Name: "hyp_cluster_commit_lag_seconds",
			Help: "Age of the oldest staged file not yet committed (0 when none)."}),
		commits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hyp_cluster_commits_total",
			Help: "Commit intents this replica finished as committer: committed, already (found in the table) or failed."}, []string{"result"}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "hyp_cluster_commit_seconds",
			Help: "Time to commit one intent's staged files to the lake.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 12)}),
		stageSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "hyp_cluster_stage_seconds",
			Help: "Time to write one group's staged data files of one table to the warehouse.", Buckets: prometheus.ExponentialBuckets(0.002, 2, 12)}),
		groupChunks: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "hyp_cluster_group_chunks",
			Help: "Chunks stored together in one group (one PostgreSQL transaction, one stage per table).", Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
		maintains: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hyp_cluster_maintain_total",
			Help: "Table upkeep runs of this replica as committer, by result (ok or failed)."}, []string{"result"}),
		orphans: prometheus.NewCounter(prometheus.CounterOpts{Name: "hyp_cluster_orphans_removed_total",
			Help: "Files no table and no staged record named (a replica died between writing and recording them), removed by upkeep."}),
		dataFiles: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hyp_cluster_data_files",
			Help: "Live data files of a lake table after this replica's last upkeep."}, []string{"table"}),
	}
	if reg == nil {
		return m, nil
	}
	collectors := []prometheus.Collector{m.committer, m.staged, m.lag, m.commits, m.commitSeconds, m.stageSeconds, m.groupChunks, m.maintains, m.orphans, m.dataFiles}
	if err := promreg.Register(reg, collectors...); err != nil {
		return nil, fmt.Errorf("cluster: registering metrics: %w", err)
	}
	return m, nil
}
