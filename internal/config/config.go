// Package config owns parsing hyp.yaml (with ${NAME} expansion from the environment),
// validating it with every problem named at once, the embedded defaults, and the effective
// config as `hyp config show` prints it, secrets redacted (internal/redact recognises them;
// a URI whose password it cannot locate unambiguously is a problem). It never touches the
// cache or the network, and never reads a secret: token files are paths to it.
package config

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"regexp"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	hyphome "github.com/hyp-project/hyp/internal/home"
	"github.com/hyp-project/hyp/internal/redact"
)

// DatasetName is the syntax of a dataset name. It and sinkName are compiled on first use, not
// at package init: the bounded repetition unrolls into ~50 KB of program each, which every
// process paid before main (1% of the CPU of `hyp --help`), whether it read a config or not.
var DatasetName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`) })

// sinkName is the syntax of a sink instance name (the key under sinks:).
var sinkName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`) })

// Config is the effective configuration: defaults overlaid with hyp.yaml.
type Config struct {
	// GatewayID names this machine to a `hyp server` (SPEC 5); empty means the id generated
	// once for the home. Changing it needs a restart.
	GatewayID string          `yaml:"gateway_id"`
	Ingest    Ingest          `yaml:"ingest"`
	Cache     Cache           `yaml:"cache"`
	Sinks     map[string]Sink `yaml:"sinks"` // keyed by instance name
	Server    Server          `yaml:"server"`
	// MemoryLimitBytes is the Go runtime's soft memory limit for the daemon and the server
	// (0: none): the collector makes its garbage collector work harder near it instead of
	// letting the heap double, and returns freed memory. GOMEMLIMIT, when set, wins.
	MemoryLimitBytes int64 `yaml:"memory_limit_bytes"`
	// File is the path Load was given ("" for <home>/hyp.yaml or the defaults), so a
	// reload reads the same place.
	File string `yaml:"-"`
}

// Ingest configures the ingest API, OTLP/HTTP and /metrics listener.
type Ingest struct {
	Listen       string       `yaml:"listen"` // host:port
	MaxBodyBytes int64        `yaml:"max_body_bytes"`
	TLS          *ListenerTLS `yaml:"tls,omitempty"` // nil: plain HTTP
}

// Cache configures the durable log and the Iceberg tables behind it.
type Cache struct {
	FlushInterval Duration   `yaml:"flush_interval"`
	Retention     Retention  `yaml:"retention"`
	Compaction    Compaction `yaml:"compaction"`
}

// Retention says how long rows are kept, measured from ingest time.
// A zero Default or per-dataset value means rows never expire by age;
// a zero MaxAge means there is no hard cap.
type Retention struct {
	Default      Duration            `yaml:"default"`
	Datasets     map[string]Duration `yaml:"datasets"`
	HoldForSinks bool                `yaml:"hold_for_sinks"` // keep rows some sink has not exported yet
	MaxAge       Duration            `yaml:"max_age"`        // overrides HoldForSinks
}

// Compaction configures background compaction of the tables.
type Compaction struct {
	Interval Duration `yaml:"interval"`
}

// Sink is one export instance. Blob sinks use Format and Destination;
// forward sinks use URL, TokenFile and Compression; iceberg sinks (SPEC 6b) use
// Catalog, Warehouse, Namespace, PartitionBy, S3 and Maintain.
type Sink struct {
	Type            string      `yaml:"type"`   // "blob", "forward" or "iceberg"
	Format          string      `yaml:"format"` // blob: "parquet" or "jsonl"; forward: "arrow" (default) or "ndjson"
	Destination     Destination `yaml:"destination"`
	URL             URLs        `yaml:"url"`         // forward: one URL or a central's replicas
	TokenFile       string      `yaml:"token_file"`  // absolute after loading
	Compression     string      `yaml:"compression"` // forward: gzip (default), zstd or none
	Schedule        string      `yaml:"schedule"`    // see ParseSchedule
	Datasets        []string    `yaml:"datasets"`    // empty means every dataset
	WithholdSources []string    `yaml:"withhold_sources"`
	TLS             *SinkTLS    `yaml:"tls,omitempty"` // forward: nil means the defaults of https URLs
	// Transform is a row-wise SQL SELECT over a unit's rows (the relation rows) whose
	// result the sink exports instead of the rows as cached; empty means none. Load checks
	// its syntax only through Checks.Transform: config cannot run SQL itself.
	Transform string `yaml:"transform,omitempty"`

	Catalog     Catalog   `yaml:"catalog"`
	Warehouse   string    `yaml:"warehouse"`    // s3://bucket/prefix, or a local path (absolute after loading)
	Namespace   string    `yaml:"namespace"`    // default "hyp"
	PartitionBy string    `yaml:"partition_by"` // day (default), hour or none
	S3          S3Options `yaml:"s3"`
	Maintain    Maintain  `yaml:"maintain"`
}

// Catalog is where an iceberg sink's tables are registered: "sql" (URI is
// postgres://... or sqlite:///path, the sqlite path absolute after loading) or
// "hadoop" (metadata files in a local warehouse, no URI).
type Catalog struct {
	Type string `yaml:"type"`
	URI  string `yaml:"uri"`
}

// S3Options reach an s3:// warehouse; credentials come from the standard AWS chain.
type S3Options struct {
	Region         string `yaml:"region"`
	Endpoint       string `yaml:"endpoint"`
	ForcePathStyle bool   `yaml:"force_path_style"`
}

// Maintain is an iceberg sink's table upkeep (`hyp sink maintain`); an empty
// Schedule runs it only on demand.
type Maintain struct {
	Schedule        string   `yaml:"schedule"`
	Compact         bool     `yaml:"compact"`
	ExpireOlderThan Duration `yaml:"expire_older_than"` // default 7d
	RetainLast      int      `yaml:"retain_last"`       // default 10
}

// Destination is where a blob sink writes: "local-fs" uses Path, "s3" the
// remaining fields.
type Destination struct {
	Type           string `yaml:"type"`
	Path           string `yaml:"path"` // absolute after loading
	Bucket         string `yaml:"bucket"`
	Prefix         string `yaml:"prefix"`
	Region         string `yaml:"region"`
	Endpoint       string `yaml:"endpoint"`
	ForcePathStyle bool   `yaml:"force_path_style"`
}

// DefaultMemoryLimit keeps a daemon at full ingest speed under 200 MiB of RSS
// (docs/PERFORMANCE.md).
const DefaultMemoryLimit = 112 << 20

// DefaultCompression is a forward sink's `compression` when the file gives none (SPEC 3).
// Loading fills it in; a Sink built in code that leaves it empty means the same.
const DefaultCompression = "gzip"

// DefaultForwardFormat is a forward sink's `format` when the file gives none (SPEC 5): an
// Arrow IPC body is built from the cache's record batches without encoding a row, and the
// server checks it per column. Loading fills it in; an empty Format in code means the same.
const DefaultForwardFormat = "arrow"

// Default returns the embedded defaults resolved for home (HYP_HOME). The
// spec writes the default export root as ~/.hyp/exports; it is really
// <home>/exports, which is the same place when home is ~/.hyp.
func Default(home string) *Config {
	return &Config{
		Ingest:           Ingest{Listen: "127.0.0.1:18521", MaxBodyBytes: 16 << 20},
		MemoryLimitBytes: DefaultMemoryLimit,
		Server:           Server{MaxGatewaysPerToken: DefaultMaxGatewaysPerToken},
		Cache: Cache{
			FlushInterval: Duration(2 * time.Second),
			Retention: Retention{
				Default:      Duration(90 * 24 * time.Hour),
				Datasets:     map[string]Duration{},
				HoldForSinks: true,
			},
			Compaction: Compaction{Interval: Duration(10 * time.Minute)},
		},
		Sinks: map[string]Sink{
			"local-parquet": {
				Type:        "blob",
				Format:      "parquet",
				Destination: Destination{Type: "local-fs", Path: hyphome.Exports(home)},
				Schedule:    defaultSchedule,
			},
		},
	}
}

// Load reads and validates the config file at path, expanding ${NAME} from the process
// environment. With path "" it reads <home>/hyp.yaml, and a missing file there means the
// defaults; a path the caller names explicitly must exist. A file with problems gives a
// *Problems naming every one.
func Load(home, path string, ch Checks) (*Config, error) {
	return load(home, path, os.LookupEnv, ch)
}

// Checks are the checks of values that config cannot make itself, because they need a
// package above it (a sink's transform needs the SQL engine, which sits above config). A
// nil check is skipped.
type Checks struct {
	// Transform reports what is wrong with a sink's transform SQL, or nil.
	Transform func(sql string) error
}

func load(home, path string, env Env, ch Checks) (*Config, error) {
	name, data, err := read(home, path)
	switch {
	case err != nil:
		return nil, err
	case data == nil:
		return Default(home), nil
	}
	cfg, err := parse(home, name, data, env, ch)
	if cfg != nil && path != "" {
		cfg.File = path
	}
	return cfg, err
}

// read returns the file Load reads for path and its contents, which are nil only when
// <home>/hyp.yaml is missing, meaning the defaults; a path named explicitly must exist.
func read(home, path string) (string, []byte, error) {
	name := path
	if name == "" {
		name = hyphome.Config(home)
	}
	data, err := os.ReadFile(name)
	switch {
	case path == "" && errors.Is(err, fs.ErrNotExist):
		return name, nil, nil
	case err != nil:
		return name, nil, err
	case data == nil:
		data = []byte{} // an empty file is there, not missing
	}
	return name, data, nil
}

// Parse parses hyp.yaml contents over the defaults for home, expanding ${NAME} from the
// process environment, and validates the result, without Checks. Its error is a *Problems.
func Parse(home string, data []byte) (*Config, error) {
	return parse(home, "hyp.yaml", data, os.LookupEnv, Checks{})
}

// RetentionFor returns how long rows of dataset are kept: its
// cache.retention.datasets entry if any, else cache.retention.default.
func (c *Config) RetentionFor(dataset string) time.Duration {
	if d, ok := c.Cache.Retention.Datasets[dataset]; ok {
		return time.Duration(d)
	}
	return time.Duration(c.Cache.Retention.Default)
}

// parse is Parse with the file name used in messages and the environment to expand from.
func parse(home, name string, data []byte, env Env, ch Checks) (*Config, error) {
	cfg, probs := check(home, data, env, ch)
	if len(probs) > 0 {
		return nil, &Problems{File: name, List: probs}
	}
	return cfg, nil
}

// check overlays data on the defaults and finds every problem it can in one pass: the
// variables that do not expand, unknown keys and values of the wrong type, then what
// validation says of everything that did decode. A problem quotes what the file says, and
// the file may hold a password where it does not belong or in a form a check refuses, so
// every key and message is redacted here, once (SPEC 9.8).
func check(home string, data []byte, env Env, ch Checks) (*Config, []Problem) {
	cfg, probs := checkTree(home, data, env, ch)
	for i := range probs {
		probs[i].Key, probs[i].Message = redact.String(probs[i].Key), redact.String(probs[i].Message)
	}
	return cfg, probs
}

func checkTree(home string, data []byte, env Env, ch Checks) (*Config, []Problem) {
	cfg := Default(home)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	switch err := dec.Decode(&root); {
	case errors.Is(err, io.EOF):
		// Empty or comment-only file: nothing to overlay.
		return cfg, nil
	case err != nil:
		return nil, []Problem{syntaxProblem(err)}
	}
	var fileProbs []Problem
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		fileProbs = append(fileProbs, Problem{Line: extra.Line, Message: "only one YAML document is allowed"})
	}

	expandProbs := expandTree(&root, env)
	keys := indexKeys(&root)

	// Decoding the expanded tree reports wrong types but, as yaml.v3 offers KnownFields only
	// to a Decoder reading text, not unknown keys: those come from a strict decode of the
	// text as written, which has the same keys since expansion never changes one.
	var msgs []string
	var te *yaml.TypeError
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	if err := strict.Decode(new(Config)); errors.As(err, &te) {
		for _, m := range te.Errors {
			if lm := lineMsg.FindStringSubmatch(m); lm != nil && unknownField.MatchString(lm[2]) {
				msgs = append(msgs, m)
			}
		}
	}
	defaultSinks := cfg.Sinks
	// yaml.v3 merges into an existing map, but a sinks: in the file must
	// replace the defaults whole.
	cfg.Sinks = nil
	if err := root.Decode(cfg); errors.As(err, &te) {
		msgs = append(msgs, te.Errors...)
	} else if err != nil {
		fileProbs = append(fileProbs, Problem{Message: err.Error()})
	}
	decodeProbs := keys.typeErrors(msgs)

	var probs []problem
	if _, given := keys.lines["sinks"]; given {
		if cfg.Sinks == nil {
			cfg.Sinks = map[string]Sink{}
		}
		probs = resolveSinks(home, cfg.Sinks)
	} else {
		cfg.Sinks = defaultSinks
	}
	probs = append(probs, resolveServer(home, &cfg.Server, keys.given)...)
	probs = append(probs, tlsProblems(home, cfg)...)
	probs = append(probs, validate(cfg)...)
	probs = append(probs, checkTransforms(cfg, ch)...)
	probs = append(probs, validateServer(cfg.Server)...)
	all := merge(fileProbs, expandProbs, decodeProbs, keys.problems(probs))
	if len(all) > 0 {
		return nil, all
	}
	return cfg, nil
}
