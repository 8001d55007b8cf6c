#!/bin/bash
# A/B of two hyp binaries under the load generator, alternating run by run, so that a change
# is measured against the same machine minutes (sbs.sh compares hyp with the collector).
# Usage: PEERS=<dir built by build.sh> A=<hyp binary> B=<hyp binary> ./ab.sh [proto ndjson json]
# Each run: a fresh home with `sinks: {}`, 4 clients, 1,000 records per request, DUR long.
set -u
P=${PEERS:?}; A=${A:?}; B=${B:?}; DUR=${DUR:-12s}; REPS=${REPS:-2}
OUT=${OUT:-$(mktemp -d)}
FORMATS=${*:-proto ndjson json}
for rep in $(seq 1 "$REPS"); do
  for fmt in $FORMATS; do
    for v in A B; do
      bin=${!v}; home="$OUT/home"; rm -rf "$home"; mkdir -p "$home"
      printf 'ingest:\n  listen: 127.0.0.1:4318\nsinks: {}\n' > "$home/hyp.yaml"
      "$bin" daemon --home "$home" > "$OUT/hyp-$v.log" 2>&1 & pid=$!
      for _ in $(seq 1 150); do curl -s -o /dev/null http://127.0.0.1:4318/healthz && break; sleep 0.1; done
      url=http://127.0.0.1:4318/v1/logs; [ "$fmt" = ndjson ] && url="http://127.0.0.1:4318/v1/ingest/logs?source=loadgen"
      "$P/load/bin/loadgen" -url "$url" -format "$fmt" -clients 4 -duration "$DUR" -records 1000 -pid $pid \
        -prefix "$v$rep" -label "$v-$fmt-$rep" -json "$OUT/$v-$fmt-$rep.json" > /dev/null
      kill -TERM $pid; wait $pid 2>/dev/null
      python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(f\"{d['label']:16} {d['records_per_s']:>10,.0f} rec/s  cpu/1M {d['target_cpu_s_per_million_records']:.2f}s  peak RSS {d['target_peak_rss_mib']:.0f} MiB\")" "$OUT/$v-$fmt-$rep.json"
    done
  done
done
