package config

import (
	"testing"
	"time"
)

func TestParseServerCluster(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr []string
	}{
		{name: "good, defaults filled in", yaml: "server:\n  cluster:\n    postgres: postgres://db/hyp\n    lake:\n      catalog: {type: sql, uri: \"postgres://db/hyp\"}\n      warehouse: s3://bucket/lake\n      s3: {endpoint: \"http://minio:9000\"}\n"},
		{name: "missing postgres, bad interval", yaml: "server:\n  cluster:\n    commit_interval: -1s\n    lake:\n      catalog: {type: hadoop}\n      warehouse: /w\n",
			wantErr: []string{"server.cluster.postgres: required", "server.cluster.commit_interval: must be greater than 0"}},
		{name: "lake checked as an iceberg sink", yaml: "server:\n  cluster:\n    postgres: postgres://db/hyp\n    lake:\n      catalog: {type: hadoop}\n      warehouse: s3://b/p\n",
			wantErr: []string{"server.cluster.lake.catalog.type: the hadoop catalog cannot be used with an s3:// warehouse"}},
		{name: "lake of another type", yaml: "server:\n  cluster:\n    postgres: postgres://db/hyp\n    lake: {type: blob}\n",
			wantErr: []string{"server.cluster.lake.type: must be iceberg"}},
		{name: "unknown key", yaml: "server:\n  cluster:\n    postgress: x\n", wantErr: []string{"postgress"}},
		{name: "bad grouping", yaml: "server:\n  cluster:\n    postgres: postgres://db/hyp\n    group_window: 1m\n    group_bytes: -1\n    lake:\n      catalog: {type: sql, uri: \"postgres://db/hyp\"}\n      warehouse: /w\n",
			wantErr: []string{"server.cluster.group_window: must be from 0 to 10s, got 1m0s", "server.cluster.group_bytes: must be greater than 0, got -1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := parseCase(t, tt.yaml, tt.wantErr)
			if c == nil {
				return
			}
			if cl := c.Server.Cluster; cl == nil || cl.CommitInterval != Duration(30*time.Second) || cl.GroupWindow != Duration(250*time.Millisecond) ||
				cl.GroupBytes != 8<<20 || cl.Lake.Type != "iceberg" || cl.Lake.Namespace != "hyp" || cl.Lake.PartitionBy != "day" {
				t.Fatalf("cluster = %+v", cl)
			}
		})
	}
}

// TestClusterUpkeepDefaults: a cluster's committer compacts every 10m unless the lake block's
// maintain says otherwise.
func TestClusterUpkeepDefaults(t *testing.T) {
	const base = "server:\n  cluster:\n    postgres: postgres://db/hyp\n    lake:\n      catalog: {type: sql, uri: \"postgres://db/hyp\"}\n      warehouse: /w\n"
	tests := []struct {
		name, maintain string
		want           Maintain
	}{
		{"absent", "", Maintain{Schedule: "@every 10m", Compact: true, ExpireOlderThan: defaultExpireOlderThan, RetainLast: defaultRetainLast}},
		{"schedule only", "      maintain: {schedule: \"@every 1h\"}\n", Maintain{Schedule: "@every 1h", Compact: true, ExpireOlderThan: defaultExpireOlderThan, RetainLast: defaultRetainLast}},
		{"compaction off", "      maintain: {compact: false, retain_last: 3}\n", Maintain{Schedule: "@every 10m", ExpireOlderThan: defaultExpireOlderThan, RetainLast: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := parseCase(t, base+tt.maintain, nil)
			if got := c.Server.Cluster.Lake.Maintain; got != tt.want {
				t.Fatalf("maintain = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// server.max_gateways_per_token is generous unless set; 0 lifts the cap.
func TestMaxGatewaysPerToken(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       int
		wantErr    []string
	}{
		{"absent", "sinks: {}\n", DefaultMaxGatewaysPerToken, nil},
		{"absent from a server block", "server:\n  cluster: null\n", DefaultMaxGatewaysPerToken, nil},
		{"set", "server:\n  max_gateways_per_token: 50\n", 50, nil},
		{"no cap", "server:\n  max_gateways_per_token: 0\n", 0, nil},
		{"negative", "server:\n  max_gateways_per_token: -1\n", 0, []string{"server.max_gateways_per_token: must be 0 (no cap) or more, got -1"}},
		{"not a number", "server:\n  max_gateways_per_token: lots\n", 0, []string{"max_gateways_per_token"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := parseCase(t, tc.yaml, tc.wantErr)
			if c != nil && c.Server.MaxGatewaysPerToken != tc.want {
				t.Fatalf("max_gateways_per_token = %d, want %d", c.Server.MaxGatewaysPerToken, tc.want)
			}
		})
	}
	if got := Default(home).Server.MaxGatewaysPerToken; got != DefaultMaxGatewaysPerToken {
		t.Fatalf("without a file: %d", got)
	}
}

// A group_window of 0 given in the file stays 0 (store each group as soon as the previous
// one is), unlike an absent one.
func TestClusterGroupWindowZero(t *testing.T) {
	c := parseCase(t, "server:\n  cluster:\n    postgres: postgres://db/hyp\n    group_window: 0s\n    lake:\n      catalog: {type: sql, uri: \"postgres://db/hyp\"}\n      warehouse: /w\n", nil)
	if got := c.Server.Cluster.GroupWindow; got != 0 {
		t.Fatalf("group_window = %v, want 0", time.Duration(got))
	}
}
