package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hyp-project/hyp/internal/partition"
	"github.com/hyp-project/hyp/internal/redact"
)

// GatewayIDSyntax is SPEC 5's rule for gateway_id, which partition.ValidateGateway checks.
const GatewayIDSyntax = `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`

// problem is one validation failure, tied to the key path it concerns so
// the message can point at the line in the file.
type problem struct {
	key string
	msg string
}

func problemf(key, format string, args ...any) problem {
	return problem{key: key, msg: fmt.Sprintf(format, args...)}
}

// resolveSinks fills in what a sink given in the file leaves implicit: the
// default schedule, a forward sink's default compression and format, and absolute paths
// for the local-fs root and token file.
// Default sinks never pass through here, as they are already resolved.
func resolveSinks(home string, sinks map[string]Sink) []problem {
	var probs []problem
	for _, name := range slices.Sorted(maps.Keys(sinks)) {
		s := sinks[name]
		key := "sinks." + name
		if s.Schedule == "" {
			s.Schedule = defaultSchedule
		}
		if s.Type == "forward" && s.Compression == "" {
			s.Compression = DefaultCompression
		}
		if s.Type == "forward" && s.Format == "" {
			s.Format = DefaultForwardFormat
		}
		// An empty path stays empty so validation reports it missing
		// instead of it silently meaning HYP_HOME itself.
		if s.Destination.Type == "local-fs" && s.Destination.Path != "" {
			p, err := resolvePath(home, s.Destination.Path)
			if err != nil {
				probs = append(probs, problemf(key+".destination.path", "%q: %v", s.Destination.Path, err))
			} else {
				s.Destination.Path = p
			}
		}
		if s.Type == "iceberg" {
			probs = append(probs, resolveIceberg(home, key, &s)...)
		}
		if s.TokenFile != "" {
			p, err := resolvePath(home, s.TokenFile)
			if err != nil {
				probs = append(probs, problemf(key+".token_file", "%q: %v", s.TokenFile, err))
			} else {
				s.TokenFile = p
			}
		}
		sinks[name] = s
	}
	return probs
}

// resolvePath makes p absolute the way hyp.yaml paths are read: "~/" is
// the user's home directory and a relative path is relative to HYP_HOME,
// not to whatever directory the daemon was started from.
func resolvePath(home, p string) (string, error) {
	switch {
	case p == "~" || strings.HasPrefix(p, "~/"):
		u, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		return filepath.Join(u, p[1:]), nil
	case strings.HasPrefix(p, "~"):
		return "", errors.New("only ~/ is expanded, not ~user")
	case filepath.IsAbs(p):
		return filepath.Clean(p), nil
	default:
		return filepath.Join(home, p), nil
	}
}

func validate(c *Config) []problem {
	var probs []problem
	add := func(p problem) { probs = append(probs, p) }

	if c.GatewayID != "" {
		if err := partition.ValidateGateway(c.GatewayID); err != nil {
			add(problemf("gateway_id", "%v (want %s)", err, GatewayIDSyntax))
		}
	}
	if err := checkListen(c.Ingest.Listen); err != nil {
		add(problemf("ingest.listen", "%q is not host:port: %v", c.Ingest.Listen, err))
	}
	if c.Ingest.MaxBodyBytes <= 0 {
		add(problemf("ingest.max_body_bytes", "must be greater than 0, got %d", c.Ingest.MaxBodyBytes))
	}
	if c.MemoryLimitBytes < 0 {
		add(problemf("memory_limit_bytes", "must be 0 (no limit) or more, got %d", c.MemoryLimitBytes))
	}
	positive := func(key string, d Duration) {
		if d <= 0 {
			add(problemf(key, "must be greater than 0, got %v", time.Duration(d)))
		}
	}
	nonNegative := func(key string, d Duration) {
		if d < 0 {
			add(problemf(key, "must not be negative, got %v", time.Duration(d)))
		}
	}
	positive("cache.flush_interval", c.Cache.FlushInterval)
	positive("cache.compaction.interval", c.Cache.Compaction.Interval)
	r := c.Cache.Retention
	nonNegative("cache.retention.default", r.Default)
	nonNegative("cache.retention.max_age", r.MaxAge)
	for _, ds := range slices.Sorted(maps.Keys(r.Datasets)) {
		key := "cache.retention.datasets." + ds
		if !DatasetName().MatchString(ds) {
			add(problemf(key, "bad dataset name %q: want %s", ds, DatasetName()))
		}
		nonNegative(key, r.Datasets[ds])
	}

	for _, name := range slices.Sorted(maps.Keys(c.Sinks)) {
		probs = append(probs, validateSink(name, c.Sinks[name])...)
	}
	return probs
}

func checkListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}

func validateSink(name string, s Sink) []problem {
	key := "sinks." + name
	var probs []problem
	add := func(p problem) { probs = append(probs, p) }
	// Keys that belong to the other sink or destination type are rejected
	// rather than ignored: they are almost always a misplaced setting.
	notFor := func(k, set, kind string) {
		if set != "" {
			add(problemf(key+"."+k, "%q is not used by %s", set, kind))
		}
	}

	if !sinkName().MatchString(name) {
		add(problemf(key, "bad sink name %q: want %s", name, sinkName()))
	}
	switch s.Type {
	case "blob":
		if s.Format != "parquet" && s.Format != "jsonl" {
			add(problemf(key+".format", "must be parquet or jsonl, got %q", s.Format))
		}
		probs = append(probs, validateDestination(key+".destination", s.Destination)...)
		notFor("url", s.URL.String(), "blob sinks")
		notFor("token_file", s.TokenFile, "blob sinks")
		notFor("compression", s.Compression, "blob sinks")
	case "iceberg":
		probs = append(probs, validateIceberg(key, s)...)
		notFor("format", s.Format, "iceberg sinks")
		notFor("url", s.URL.String(), "iceberg sinks")
		notFor("token_file", s.TokenFile, "iceberg sinks")
		notFor("compression", s.Compression, "iceberg sinks")
		if s.Destination != (Destination{}) {
			add(problemf(key+".destination", "not used by iceberg sinks (they write to warehouse)"))
		}
	case "forward":
		switch s.Compression {
		case "gzip", "zstd", "none":
		default:
			add(problemf(key+".compression", "must be gzip, zstd or none, got %q", s.Compression))
		}
		probs = append(probs, validateURLs(key+".url", s.URL)...)
		if s.TokenFile == "" {
			add(problemf(key+".token_file", "required for forward sinks"))
		}
		if s.Format != "arrow" && s.Format != "ndjson" {
			add(problemf(key+".format", "must be arrow or ndjson, got %q", s.Format))
		}
		if s.Destination != (Destination{}) {
			add(problemf(key+".destination", "not used by forward sinks"))
		}
	default:
		add(problemf(key+".type", "must be blob, forward or iceberg, got %q", s.Type))
	}
	if s.Type != "iceberg" {
		for _, f := range []struct {
			k   string
			set bool
		}{
			{"catalog", s.Catalog != (Catalog{})}, {"warehouse", s.Warehouse != ""}, {"namespace", s.Namespace != ""},
			{"partition_by", s.PartitionBy != ""}, {"s3", s.S3 != (S3Options{})}, {"maintain", s.Maintain != (Maintain{})},
		} {
			if f.set {
				add(problemf(key+"."+f.k, "only used by iceberg sinks"))
			}
		}
	}
	if _, err := ParseSchedule(s.Schedule); err != nil {
		add(problemf(key+".schedule", "%v", err))
	}
	seen := map[string]bool{}
	for i, ds := range s.Datasets {
		k := fmt.Sprintf("%s.datasets[%d]", key, i)
		switch {
		case !DatasetName().MatchString(ds):
			add(problemf(k, "bad dataset name %q: want %s", ds, DatasetName()))
		case seen[ds]:
			add(problemf(k, "dataset %q listed twice", ds))
		}
		seen[ds] = true
	}
	for i, pat := range s.WithholdSources {
		k := fmt.Sprintf("%s.withhold_sources[%d]", key, i)
		if pat == "" {
			add(problemf(k, "empty source pattern"))
		} else if _, err := path.Match(pat, ""); err != nil {
			add(problemf(k, "bad source pattern %q: %v", pat, err))
		}
	}
	return probs
}

func validateDestination(key string, d Destination) []problem {
	var probs []problem
	add := func(p problem) { probs = append(probs, p) }
	notFor := func(k, set string) {
		if set != "" {
			add(problemf(key+"."+k, "%q is not used by %s destinations", set, d.Type))
		}
	}
	switch d.Type {
	case "local-fs":
		if d.Path == "" {
			add(problemf(key+".path", "required for local-fs destinations"))
		}
		notFor("bucket", d.Bucket)
		notFor("prefix", d.Prefix)
		notFor("region", d.Region)
		notFor("endpoint", d.Endpoint)
		if d.ForcePathStyle {
			add(problemf(key+".force_path_style", "not used by local-fs destinations"))
		}
	case "s3":
		if d.Bucket == "" {
			add(problemf(key+".bucket", "required for s3 destinations"))
		}
		if d.Endpoint != "" {
			if err := checkHTTPURL(d.Endpoint); err != nil {
				add(problemf(key+".endpoint", "%q: %v", d.Endpoint, err))
			}
		}
		notFor("path", d.Path)
	default:
		add(problemf(key+".type", "must be local-fs or s3, got %q", d.Type))
	}
	return probs
}

func checkHTTPURL(s string) error {
	if s == "" {
		return errors.New("required")
	}
	u, err := redact.ParseURI(s)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errors.New("scheme must be http or https")
	}
	if u.Host == "" {
		return errors.New("missing host")
	}
	return nil
}

// checkTransforms runs ch.Transform over every sink's transform, so a refused one is a
// problem of the file, with its line, before anything runs (SPEC 3).
func checkTransforms(c *Config, ch Checks) []problem {
	var probs []problem
	for _, name := range slices.Sorted(maps.Keys(c.Sinks)) {
		sql := c.Sinks[name].Transform
		if sql == "" || ch.Transform == nil {
			continue
		}
		if err := ch.Transform(sql); err != nil {
			probs = append(probs, problemf("sinks."+name+".transform", "%v", err))
		}
	}
	return probs
}
