# hyp: two commands on a fresh machine.
#   make run   builds and runs the daemon on the embedded default config
#   make test  runs every test (installs the MinIO and PostgreSQL the tests run first)
GO       ?= go
BIN      := bin/hyp
HYP_HOME ?= $(HOME)/.hyp
export CGO_ENABLED := 1

# MinIO for the S3 tests; HYP_MINIO_BIN overrides it (internal/testutil/miniotest).
MINIO_VERSION := v0.0.0-20260212201848-7aac2a2c5b7c
MINIO         := $(HOME)/.cache/hyp-tools/bin/minio
export HYP_MINIO_BIN ?= $(MINIO)

# promtool for the alert-rule tests (deploy/); HYP_PROMTOOL_BIN overrides it.
PROMTOOL_VERSION := v0.316.0
PROMTOOL         := $(HOME)/.cache/hyp-tools/bin/promtool
export HYP_PROMTOOL_BIN ?= $(PROMTOOL)

# `make install`: PREFIX for the binary and share/hyp, SYSTEMD_DIR for the units, DESTDIR
# for staging. The configs always go to /etc/hyp, where the units read them.
PREFIX      ?= /usr/local
SYSTEMD_DIR ?= /lib/systemd/system

.PHONY: build build-failpoints run test binary-check tools postgres systemd-analyze install soak fuzz bench clean

# Every build and test of hyp compiles against bin/mod/go.mod: go.mod plus replaces of the
# modules in PATCHED_MODULES by copies patched with patches/NAME.patch, which keep their
# heavy set-up out of every process start (iceberg-go's Substrait catalogue: 32 MB and
# 0.1-0.4 s before main, and its manifest schemas: 1.2 MB; arrow-go's compute registry: ~5 MiB
# of code paged in, and arrow/flight's protobuf descriptors, which pqarrow no longer links), stop
# duckdb-go's Arrow views from leaking a schema per statement (sinks' transforms), and keep
# out of the binary code hyp never runs (issue 26: arrow's arithmetic kernels, the Brotli
# codec, goccy/go-json, the MySQL/SQL Server/Oracle catalog dialects, Substrait, gRPC; each
# patch file says what and why). A plain
# `go build -tags=duckdb_arrow` still works, without the patches. A patch must apply exactly: after an upgrade of its
# module, redo it or drop it. duckdb_arrow gives duckdb-go's Arrow interface, which sinks'
# transforms (internal/transform) run on: without it hyp does not build. grpcnotrace kept gRPC (linked only for types, by gocloud's
# retry package) from importing x/net/trace, whose html/template makes the linker keep every
# exported method of every type: 20 MB of the binary. gocloud's patch now keeps gRPC out
# altogether; the tag stays so that a dependency bringing it back does not bring that too.
PATCHED_MODULES := iceberg-go=github.com/apache/iceberg-go arrow-go=github.com/apache/arrow-go/v18 duckdb-go=github.com/duckdb/duckdb-go/v2 \
                   geoarrow-go=github.com/geoarrow/geoarrow-go gocloud=gocloud.dev
BUILD_MOD := bin/mod/go.mod
HYP_TAGS := grpcnotrace,duckdb_arrow
HYP_GOFLAGS = -modfile=$(CURDIR)/$(BUILD_MOD) -tags=$(HYP_TAGS)
# go test and go vet, and the `go build` of cmd/hyp's end-to-end tests, get them from GOFLAGS.
HYPGO = GOFLAGS="$$($(GO) env GOFLAGS) $(HYP_GOFLAGS)" $(GO)
# The shipped binary is stripped, and leaves DuckDB's C++ symbols out of the dynamic symbol
# table (its cgo flags ask for -rdynamic, but nothing is loaded into hyp that would look them
# up: query switches DuckDB's extension loading off): 6.8 MB less to ship and to map.
LDFLAGS := -s -w -extldflags=-Wl,--no-export-dynamic

build: $(BUILD_MOD)
	$(GO) build $(HYP_GOFLAGS) -trimpath -ldflags='$(LDFLAGS)' -o $(BIN) ./cmd/hyp

# The crash tests' binary: the shipped one plus the HYP_FAILPOINT switch, which only a build
# with the failpoints tag has (internal/failpoint), so no shipped process can be made to kill
# itself. The end-to-end tests run it only for a process they start with HYP_FAILPOINT set.
ARMED_BIN := bin/hyp-failpoints
build-failpoints: $(BUILD_MOD)
	$(GO) build -modfile=$(CURDIR)/$(BUILD_MOD) -tags=$(HYP_TAGS),failpoints -trimpath -ldflags='$(LDFLAGS)' -o $(ARMED_BIN) ./cmd/hyp

$(BUILD_MOD): go.mod go.sum $(wildcard patches/*.patch)
	rm -rf $(dir $@) && mkdir -p $(dir $@)
	cp go.mod $@.tmp
	for p in $(PATCHED_MODULES); do name=$${p%%=*}; mod=$${p#*=}; dir=$(dir $@)$$name; \
	  $(GO) mod download $$mod && cp -r "$$($(GO) list -m -f '{{.Dir}}' $$mod)" $$dir && \
	  chmod -R u+w $$dir && patch -s -p1 -F0 -d $$dir < patches/$$name.patch && \
	  echo "replace $$mod => ./$$dir" >> $@.tmp || exit 1; \
	done
	cp go.sum $(dir $@)go.sum
	mv $@.tmp $@

# The shipped binary's budget: no package init that allocates more than 4 MB before main
# (what iceberg-go's Substrait catalogue did), and at most 100 MB (issue 26), so that growth
# fails here; today 97.7 MB, of which DuckDB's C++ is ~52 MB with its unwind tables and data.
MAX_BIN_BYTES  ?= 100000000
MAX_INIT_BYTES ?= 4000000
binary-check: build
	@size=$$(stat -c %s $(BIN)); echo "$(BIN): $$size bytes (at most $(MAX_BIN_BYTES))"; \
	  [ $$size -le $(MAX_BIN_BYTES) ] || { echo "$(BIN) is over its size budget" >&2; exit 1; }
	@GODEBUG=inittrace=1 ./$(BIN) --help 2>&1 >/dev/null | \
	  awk '$$1 == "init" && $$8 > $(MAX_INIT_BYTES) { print "heavy package init: " $$0; bad = 1 } END { exit bad }' >&2

run: build
	./$(BIN) daemon --home $(HYP_HOME)

# The first run downloads modules (DuckDB's static library is ~130 MB) and compiles them.
# The end-to-end tests run bin/hyp itself (HYP_TEST_BIN, internal/testutil/hypbin), as
# shipped, and bin/hyp-failpoints for what they crash on purpose (HYP_TEST_FAILPOINT_BIN).
# binary-check comes last, so that a binary over its budget lets every test report.
test soak: export HYP_TEST_BIN := $(CURDIR)/$(BIN)
test soak: export HYP_TEST_FAILPOINT_BIN := $(CURDIR)/$(ARMED_BIN)
test: tools build build-failpoints
	$(HYPGO) vet ./...
	$(HYPGO) test -count=1 -timeout 15m ./...
	$(MAKE) --no-print-directory binary-check

tools: $(HYP_MINIO_BIN) $(HYP_PROMTOOL_BIN) postgres systemd-analyze

# PostgreSQL for the Iceberg SQL-catalog tests (internal/lake): Debian's package, installed
# when missing; each test starts a throwaway cluster with initdb/pg_ctl as the postgres user.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || \
	  (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql)

# Built once (~2-5 min) from a temp dir, so our go.mod is never touched.
$(MINIO):
	tmp=$$(mktemp -d) && cd $$tmp && \
	GOBIN=$(dir $(MINIO)) GOFLAGS=-mod=mod $(GO) install github.com/minio/minio@$(MINIO_VERSION); \
	rc=$$?; rm -rf $$tmp; exit $$rc

# Without the service-discovery plugins (remove_all_sd), which the rule commands never use:
# 2.5 min of CPU from a cold build cache, under half of the full build's.
$(PROMTOOL):
	tmp=$$(mktemp -d) && cd $$tmp && \
	GOBIN=$(dir $(PROMTOOL)) GOFLAGS=-mod=mod $(GO) install -tags remove_all_sd github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION); \
	rc=$$?; rm -rf $$tmp; exit $$rc

# For `systemd-analyze verify` of deploy/systemd's units (deploy/systemd_test.go).
systemd-analyze:
	@command -v systemd-analyze >/dev/null || \
	  (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y systemd)

# Creates no user and enables nothing: README, "Running hyp as a service". A config already
# in /etc/hyp is kept.
install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/hyp
	install -d $(DESTDIR)$(SYSTEMD_DIR) $(DESTDIR)/etc/hyp
	for u in hyp.service hyp-server.service; do \
	  sed 's|/usr/local/bin/hyp|$(PREFIX)/bin/hyp|' deploy/systemd/$$u > $(DESTDIR)$(SYSTEMD_DIR)/$$u && \
	  chmod 0644 $(DESTDIR)$(SYSTEMD_DIR)/$$u || exit 1; \
	done
	for c in hyp.yaml server.yaml; do \
	  [ -e $(DESTDIR)/etc/hyp/$$c ] || install -m 0644 deploy/etc/$$c $(DESTDIR)/etc/hyp/$$c || exit 1; \
	done
	install -D -m 0644 -t $(DESTDIR)$(PREFIX)/share/hyp/prometheus deploy/prometheus/hyp-alerts.yaml deploy/prometheus/hyp-alerts_test.yaml
	install -D -m 0644 -t $(DESTDIR)$(PREFIX)/share/hyp/grafana deploy/grafana/hyp.json

# Long runs kept out of `make test`: the exactly-once model with many more cases, and the
# kill -9 / fault / damage e2e tests repeated, the conformance test over 20 seeds.
soak: tools build build-failpoints
	RAPID_CHECKS=2000 $(HYPGO) test -count=1 -timeout 60m -run 'ExactlyOnceModel|ConcurrentExport' ./internal/sink
	HYP_LEAK_APPLIES=100000 $(HYPGO) test -count=1 -timeout 60m -run 'ApplyDoesNotLeak' ./internal/transform
	$(HYPGO) test -count=10 -timeout 60m -run 'KillNine|ForwardThroughFaults|S3ExactlyOnce|SIGTERMDuring|KillNineLoses' ./cmd/hyp
	$(HYPGO) test -count=10 -timeout 60m -run 'RewindsDuringTicks|HandEditedWatermark|SeedScenario|StalledSink' ./cmd/hyp
	$(HYPGO) test -count=20 -timeout 60m -run 'ForcedPruneKilled|FlippedLogByte|CacheRepair|PoisonCorpus|CopiedHome|EdgeBodyBudget|FullDisk' ./cmd/hyp
	HYP_KILL_LOOPS=200 $(HYPGO) test -count=1 -timeout 60m -run 'KillNineAtRandomInstants|TransformExactlyOnceThroughKills' ./cmd/hyp
	HYP_SERVER_KILLS=40 $(HYPGO) test -count=1 -timeout 60m -run 'ServerKillNineWideFirstRow' ./cmd/hyp
	HYP_CLUSTER_SECONDS=60 $(HYPGO) test -count=3 -timeout 60m -run 'ClusterSixGatewaysThroughKills' ./cmd/hyp
	HYP_GATEWAYS=3000 $(HYPGO) test -count=1 -timeout 60m -v -run 'ManyGatewaysOnOneToken' ./cmd/hyp
	HYP_CONFORMANCE_RUNS=20 $(HYPGO) test -count=1 -timeout 60m -run 'TestConformance' ./cmd/hyp

# Side by side with the OpenTelemetry Collector v0.165.0 under one load generator
# (bench/peers/README.md): the collector is built once with the official builder from the Go
# module proxy (~3 min), then both run alternately, on the quiet machine and again with a CPU
# hog (HOG=1), and the ratios are printed. DUR and REPS (default 15s, 2) set the length;
# figures go to docs/PERFORMANCE.md. Then the forward figure (bench/peers/forward.sh): a
# backlog the generator ingested, forwarded to a local `hyp server`; and the cluster figure
# (bench/cluster.go: 50 gateways to one and two replicas over PostgreSQL and MinIO).
# First the start-up and idle figures (bench/startup.sh): binary size, `hyp --help`, start to
# /healthz, idle RSS.
# Then a sink transform's throughput and fixed cost per Apply (internal/transform's
# BenchmarkApply: two regexp_replace and a WHERE over load-generator log rows).
# Last, one table of the lean-agent figures against their targets (bench/table.py).
PEERS_DIR := $(HOME)/.cache/hyp-tools/peers
BENCH_OUT := $(CURDIR)/bin/bench
bench: build $(PEERS_DIR)/otelcol $(HYP_MINIO_BIN) postgres
	rm -rf $(BENCH_OUT) && mkdir -p $(BENCH_OUT)
	HYP=$(CURDIR)/$(BIN) JSON=$(BENCH_OUT)/startup.json bench/startup.sh
	cd bench/peers/load && $(GO) build -o $(PEERS_DIR)/load/bin/ ./cmd/...
	cp -r bench/peers/configs $(PEERS_DIR)/
	PEERS=$(PEERS_DIR) HYP=$(CURDIR)/$(BIN) OUT=$(BENCH_OUT)/quiet bench/peers/sbs.sh
	PEERS=$(PEERS_DIR) HYP=$(CURDIR)/$(BIN) OUT=$(BENCH_OUT)/busy HOG=1 bench/peers/sbs.sh
	PEERS=$(PEERS_DIR) HYP=$(CURDIR)/$(BIN) OUT=$(BENCH_OUT)/forward bench/peers/forward.sh
	$(HYPGO) run ./bench -only cluster -bin $(CURDIR)/$(BIN) -minio $(HYP_MINIO_BIN) -cluster-json $(BENCH_OUT)/cluster.json
	$(HYPGO) test -run '^$$$$' -bench 'BenchmarkApply' -benchtime 300x ./internal/transform
	python3 bench/table.py $(BENCH_OUT)/startup.json $(BENCH_OUT)/quiet $(BENCH_OUT)/busy $(BENCH_OUT)/forward $(BENCH_OUT)/cluster.json

$(PEERS_DIR)/otelcol:
	mkdir -p $(PEERS_DIR) && cp -r bench/peers/. $(PEERS_DIR)/ && PEERS=$(PEERS_DIR) $(PEERS_DIR)/build.sh

# Longer fuzzing than the seed corpus `make test` runs.
FUZZTIME ?= 60s
fuzz: $(BUILD_MOD)
	$(HYPGO) test -run '^$$' -fuzz '^FuzzKey$$' -fuzztime $(FUZZTIME) ./internal/blob
	$(HYPGO) test -run '^$$' -fuzz '^FuzzPhysicalName$$' -fuzztime $(FUZZTIME) ./internal/cache
	$(HYPGO) test -run '^$$' -fuzz '^FuzzPrintableASCII$$' -fuzztime $(FUZZTIME) ./internal/columns
	$(HYPGO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./internal/config
	$(HYPGO) test -run '^$$' -fuzz '^FuzzExpand$$' -fuzztime $(FUZZTIME) ./internal/config
	$(HYPGO) test -run '^$$' -fuzz '^FuzzParseDuration$$' -fuzztime $(FUZZTIME) ./internal/config
	$(HYPGO) test -run '^$$' -fuzz '^FuzzParseSchedule$$' -fuzztime $(FUZZTIME) ./internal/config
	$(HYPGO) test -run '^$$' -fuzz '^FuzzParseAck$$' -fuzztime $(FUZZTIME) ./internal/forward
	$(HYPGO) test -run '^$$' -fuzz '^FuzzParseRetryAfter$$' -fuzztime $(FUZZTIME) ./internal/forward
	$(HYPGO) test -run '^$$' -fuzz '^FuzzReplicaSelection$$' -fuzztime $(FUZZTIME) ./internal/forward
	$(HYPGO) test -run '^$$' -fuzz '^FuzzIngestHandler$$' -fuzztime $(FUZZTIME) ./internal/ingest
	$(HYPGO) test -run '^$$' -fuzz '^FuzzLines$$' -fuzztime $(FUZZTIME) ./internal/jsonrow
	$(HYPGO) test -run '^$$' -fuzz '^FuzzObject$$' -fuzztime $(FUZZTIME) ./internal/jsonrow
	$(HYPGO) test -run '^$$' -fuzz '^FuzzDecodeLogs$$' -fuzztime $(FUZZTIME) ./internal/otlp
	$(HYPGO) test -run '^$$' -fuzz '^FuzzDecodeMetrics$$' -fuzztime $(FUZZTIME) ./internal/otlp
	$(HYPGO) test -run '^$$' -fuzz '^FuzzDecodeTraces$$' -fuzztime $(FUZZTIME) ./internal/otlp
	$(HYPGO) test -run '^$$' -fuzz '^FuzzSplitProto$$' -fuzztime $(FUZZTIME) ./internal/otlp
	$(HYPGO) test -run '^$$' -fuzz '^FuzzDifferentialLogs$$' -fuzztime $(FUZZTIME) ./internal/otlp
	$(HYPGO) test -run '^$$' -fuzz '^FuzzDifferentialMetrics$$' -fuzztime $(FUZZTIME) ./internal/otlp
	$(HYPGO) test -run '^$$' -fuzz '^FuzzDifferentialTraces$$' -fuzztime $(FUZZTIME) ./internal/otlp
	$(HYPGO) test -run '^$$' -fuzz '^FuzzSpecial$$' -fuzztime $(FUZZTIME) ./internal/otlp
	$(HYPGO) test -run '^$$' -fuzz '^FuzzDecimal$$' -fuzztime $(FUZZTIME) ./internal/otlp
	$(HYPGO) test -run '^$$' -fuzz '^FuzzSegment$$' -fuzztime $(FUZZTIME) ./internal/partition
	$(HYPGO) test -run '^$$' -fuzz '^FuzzSanitizeSource$$' -fuzztime $(FUZZTIME) ./internal/partition
	$(HYPGO) test -run '^$$' -fuzz '^FuzzReadOnlyGuard$$' -fuzztime $(FUZZTIME) ./internal/query
	$(HYPGO) test -run '^$$' -fuzz '^FuzzIngestFlushQuery$$' -fuzztime $(FUZZTIME) ./internal/query
	$(HYPGO) test -run '^$$' -fuzz '^FuzzRedact$$' -fuzztime $(FUZZTIME) ./internal/redact
	$(HYPGO) test -run '^$$' -fuzz '^FuzzAppendString$$' -fuzztime $(FUZZTIME) ./internal/rowjson
	$(HYPGO) test -run '^$$' -fuzz '^FuzzParseForward$$' -fuzztime $(FUZZTIME) ./internal/server
	$(HYPGO) test -run '^$$' -fuzz '^FuzzParseRows$$' -fuzztime $(FUZZTIME) ./internal/server
	$(HYPGO) test -run '^$$' -fuzz '^FuzzIngestedAt$$' -fuzztime $(FUZZTIME) ./internal/server
	$(HYPGO) test -run '^$$' -fuzz '^FuzzReadBody$$' -fuzztime $(FUZZTIME) ./internal/httpbody
	$(HYPGO) test -run '^$$' -fuzz '^FuzzReadZstdBody$$' -fuzztime $(FUZZTIME) ./internal/httpbody
	$(HYPGO) test -run '^$$' -fuzz '^FuzzReadOCF$$' -fuzztime $(FUZZTIME) ./internal/testutil/lakeread
	$(HYPGO) test -run '^$$' -fuzz '^FuzzCheck$$' -fuzztime $(FUZZTIME) ./internal/transform
	$(HYPGO) test -run '^$$' -fuzz '^FuzzHandEditedFile$$' -fuzztime $(FUZZTIME) ./internal/watermark

clean:
	rm -rf bin
