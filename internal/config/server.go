package config

import (
	"strings"
	"time"

	"github.com/hyp-project/hyp/internal/redact"
)

// Server configures `hyp server` (SPEC 5); the daemon ignores it.
type Server struct {
	// Cluster, when set, makes the server one replica of a cluster: chunks are stored in
	// the shared PostgreSQL database and the lake instead of the local cache.
	Cluster *Cluster `yaml:"cluster"`
	// MaxGatewaysPerToken caps the distinct gateways a token not bound to gateway globs may
	// send as; a chunk from one more is answered 429 too_many_gateways. Every gateway is
	// partitions of its own on the server, so an unbound token could otherwise make as many
	// as it likes. 0 means no cap.
	MaxGatewaysPerToken int `yaml:"max_gateways_per_token"`
}

// DefaultMaxGatewaysPerToken is server.max_gateways_per_token when the file gives none:
// more machines than one token usually serves, far fewer partitions than make a server
// slow.
const DefaultMaxGatewaysPerToken = 1000

// Cluster is cluster mode's shared state.
type Cluster struct {
	Postgres string `yaml:"postgres"` // postgres:// URI of the database every replica shares
	// Lake is the table every replica stages into and the committer commits to: an
	// iceberg sink block. Its schedule is not used; its maintain block is the committer's
	// upkeep between commits, which in a cluster runs every 10m and compacts unless the
	// block says otherwise: every replica stages a file per group of chunks.
	Lake           Sink     `yaml:"lake"`
	CommitInterval Duration `yaml:"commit_interval"`
	// GroupWindow and GroupBytes bound how long a replica gathers the chunks reaching it
	// into one staged file per table and one PostgreSQL transaction (SPEC 5): a group is
	// stored GroupWindow after its first chunk (0: as soon as the previous group is), or
	// once its rows reach GroupBytes of JSON. Each chunk's answer waits for its group.
	GroupWindow Duration `yaml:"group_window"`
	GroupBytes  int64    `yaml:"group_bytes"`
}

// defaultCommitInterval is how often the committer commits staged files (SPEC 5).
const defaultCommitInterval = Duration(30 * time.Second)

// Grouping defaults: a few hundred milliseconds, a few MiB (SPEC 5). maxGroupWindow keeps
// a chunk's answer far inside a sender's request timeout.
const (
	defaultGroupWindow = Duration(250 * time.Millisecond)
	defaultGroupBytes  = 8 << 20
	maxGroupWindow     = Duration(10 * time.Second)
)

const clusterKey = "server.cluster"

// Cluster upkeep defaults (issue 13): small files from many gateways are bounded by
// compacting them, unlike a sink's upkeep, which runs only on demand.
const (
	defaultClusterMaintain = "@every 10m"
	defaultClusterCompact  = true
)

// resolveServer fills in cluster mode's defaults; given says whether the file set a key.
func resolveServer(home string, s *Server, given func(key string) bool) []problem {
	c := s.Cluster
	if c == nil {
		return nil
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = defaultCommitInterval
	}
	if !given(clusterKey + ".group_window") {
		c.GroupWindow = defaultGroupWindow
	}
	if c.GroupBytes == 0 {
		c.GroupBytes = defaultGroupBytes
	}
	if c.Lake.Type == "" {
		c.Lake.Type = "iceberg"
	}
	if c.Lake.Schedule == "" {
		c.Lake.Schedule = defaultSchedule
	}
	if c.Lake.Maintain.Schedule == "" {
		c.Lake.Maintain.Schedule = defaultClusterMaintain
	}
	if !given(clusterKey + ".lake.maintain.compact") {
		c.Lake.Maintain.Compact = defaultClusterCompact
	}
	if c.Lake.Type != "iceberg" {
		return nil // validateServer names it
	}
	return resolveIceberg(home, clusterKey+".lake", &c.Lake)
}

func validateServer(s Server) []problem {
	var probs []problem
	add := func(p problem) { probs = append(probs, p) }
	if s.MaxGatewaysPerToken < 0 {
		add(problemf("server.max_gateways_per_token", "must be 0 (no cap) or more, got %d", s.MaxGatewaysPerToken))
	}
	c := s.Cluster
	if c == nil {
		return probs
	}
	if !strings.HasPrefix(c.Postgres, "postgres://") && !strings.HasPrefix(c.Postgres, "postgresql://") {
		add(problemf(clusterKey+".postgres", "required: a postgres:// URI of the database the replicas share"))
	} else if _, err := redact.ParseURI(c.Postgres); err != nil {
		add(problemf(clusterKey+".postgres", "%q: %v", c.Postgres, err))
	}
	if c.CommitInterval <= 0 {
		add(problemf(clusterKey+".commit_interval", "must be greater than 0, got %v", time.Duration(c.CommitInterval)))
	}
	if c.GroupWindow < 0 || c.GroupWindow > maxGroupWindow {
		add(problemf(clusterKey+".group_window", "must be from 0 to %v, got %v", time.Duration(maxGroupWindow), time.Duration(c.GroupWindow)))
	}
	if c.GroupBytes < 0 {
		add(problemf(clusterKey+".group_bytes", "must be greater than 0, got %d", c.GroupBytes))
	}
	if c.Lake.Type != "iceberg" {
		add(problemf(clusterKey+".lake.type", "must be iceberg (the lake block is an iceberg sink block), got %q", c.Lake.Type))
		return probs
	}
	return append(probs, validateIceberg(clusterKey+".lake", c.Lake)...)
}
