package config

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/hyp-project/hyp/internal/icebergpath"
	"github.com/hyp-project/hyp/internal/redact"
)

// Iceberg sink defaults (SPEC 3).
const (
	defaultNamespace       = "hyp"
	defaultPartitionBy     = "day"
	defaultExpireOlderThan = Duration(7 * 24 * time.Hour)
	defaultRetainLast      = 10
)

// SQLiteScheme is the URI scheme of a single-machine sql catalog: sqlite:///path.
const SQLiteScheme = "sqlite"

// IsS3Warehouse reports whether a warehouse lives in an object store rather than on disk.
func IsS3Warehouse(w string) bool { return strings.HasPrefix(w, "s3://") }

// resolveIceberg fills in an iceberg sink's defaults and makes its local paths (the
// warehouse, a sqlite catalog file) absolute the way every hyp.yaml path is read.
func resolveIceberg(home, key string, s *Sink) []problem {
	var probs []problem
	if s.Namespace == "" {
		s.Namespace = defaultNamespace
	}
	if s.PartitionBy == "" {
		s.PartitionBy = defaultPartitionBy
	}
	if s.Maintain.ExpireOlderThan == 0 {
		s.Maintain.ExpireOlderThan = defaultExpireOlderThan
	}
	if s.Maintain.RetainLast == 0 {
		s.Maintain.RetainLast = defaultRetainLast
	}
	if s.Warehouse != "" && !strings.Contains(s.Warehouse, "://") {
		p, err := resolvePath(home, s.Warehouse)
		if err != nil {
			probs = append(probs, problemf(key+".warehouse", "%q: %v", s.Warehouse, err))
		} else {
			s.Warehouse = p
		}
	}
	if rest, ok := strings.CutPrefix(s.Catalog.URI, SQLiteScheme+"://"); ok && s.Catalog.Type == "sql" && rest != "" {
		p, err := resolvePath(home, rest)
		if err != nil {
			probs = append(probs, problemf(key+".catalog.uri", "%q: %v", s.Catalog.URI, err))
		} else {
			s.Catalog.URI = SQLiteScheme + "://" + p
		}
	}
	return probs
}

func validateIceberg(key string, s Sink) []problem {
	var probs []problem
	add := func(p problem) { probs = append(probs, p) }
	s3 := IsS3Warehouse(s.Warehouse)
	switch {
	case s.Warehouse == "":
		add(problemf(key+".warehouse", "required for iceberg sinks (s3://bucket/prefix or a local path)"))
	case s3:
		u, err := url.Parse(s.Warehouse)
		if err != nil || u.Host == "" {
			add(problemf(key+".warehouse", "%q: want s3://bucket/prefix", s.Warehouse))
		}
	case strings.Contains(s.Warehouse, "://"):
		add(problemf(key+".warehouse", "%q: want s3://bucket/prefix or a local path", s.Warehouse))
	case filepath.Dir(s.Warehouse) == s.Warehouse:
		add(problemf(key+".warehouse", "%q: the file system root cannot be a warehouse", s.Warehouse))
	}
	switch s.Catalog.Type {
	case "sql":
		if err := checkCatalogURI(s.Catalog.URI); err != nil {
			add(problemf(key+".catalog.uri", "%v", err))
		}
	case "hadoop":
		if !s3 && s.Warehouse != "" {
			if err := icebergpath.CheckHadoopWarehouse(s.Warehouse); err != nil {
				add(problemf(key+".warehouse", "%v", err))
			}
		}
		if s.Catalog.URI != "" {
			add(problemf(key+".catalog.uri", "not used by the hadoop catalog (its metadata lives in the warehouse)"))
		}
		if s3 {
			add(problemf(key+".catalog.type", "the hadoop catalog cannot be used with an s3:// warehouse: commits there are not atomic and concurrent writers can lose data; use catalog {type: sql, uri: postgres://...}"))
		}
	case "":
		add(problemf(key+".catalog.type", "required for iceberg sinks: sql or hadoop"))
	default:
		add(problemf(key+".catalog.type", "must be sql or hadoop, got %q", s.Catalog.Type))
	}
	if !DatasetName().MatchString(s.Namespace) {
		add(problemf(key+".namespace", "bad namespace %q: want %s", s.Namespace, DatasetName()))
	}
	switch s.PartitionBy {
	case "day", "hour", "none":
	default:
		add(problemf(key+".partition_by", "must be day, hour or none, got %q", s.PartitionBy))
	}
	if s.S3 != (S3Options{}) && !s3 {
		add(problemf(key+".s3", "only used with an s3:// warehouse"))
	}
	if s.S3.Endpoint != "" {
		if err := checkHTTPURL(s.S3.Endpoint); err != nil {
			add(problemf(key+".s3.endpoint", "%q: %v", s.S3.Endpoint, err))
		}
	}
	m := s.Maintain
	if m.Schedule != "" {
		if _, err := ParseSchedule(m.Schedule); err != nil {
			add(problemf(key+".maintain.schedule", "%v", err))
		}
	}
	if m.ExpireOlderThan < 0 {
		add(problemf(key+".maintain.expire_older_than", "must not be negative, got %v", time.Duration(m.ExpireOlderThan)))
	}
	if m.RetainLast < 1 {
		add(problemf(key+".maintain.retain_last", "must be at least 1, got %d", m.RetainLast))
	}
	return probs
}

// checkCatalogURI accepts what an sql catalog can open: postgres://... or sqlite:///path.
func checkCatalogURI(uri string) error {
	if uri == "" {
		return fmt.Errorf("required for the sql catalog: postgres://... or sqlite:///path")
	}
	// What follows sqlite:// is a file path taken as written, not URI text, so that a
	// path with a space or a '%' in it means that file.
	if rest, ok := strings.CutPrefix(uri, SQLiteScheme+"://"); ok {
		if !filepath.IsAbs(rest) {
			return fmt.Errorf("%q: want sqlite:///absolute/path (or a path relative to HYP_HOME after sqlite://)", uri)
		}
		return nil
	}
	// The message quotes uri as written: check redacts every message.
	u, err := redact.ParseURI(uri)
	if err != nil {
		return fmt.Errorf("%q: %v", uri, err)
	}
	switch u.Scheme {
	case "postgres", "postgresql":
		if u.Host == "" {
			return fmt.Errorf("%q: missing host", uri)
		}
	default:
		return fmt.Errorf("%q: scheme must be postgres or sqlite", uri)
	}
	return nil
}
