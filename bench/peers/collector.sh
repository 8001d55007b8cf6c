#!/bin/bash
# The OpenTelemetry Collector at its defaults (batch processor {}, otlphttp exporter {}) sending
# to a hyp daemon at its defaults: the load generator POSTs to the collector, which forwards to
# hyp; once the collector's queue has drained, prints what was accepted from the generator, what
# hyp stored, and what the collector logged as dropped (a 413 is permanent to its exporter).
# Usage: PEERS=<dir built with build.sh> HYP=<hyp binary> [BODY=150 RECORDS=1000 CLIENTS=4 DUR=10s FORMAT=proto
#        MAX_BODY=<hyp's ingest.max_body_bytes>] ./collector.sh
set -u
P=${PEERS:?}; HYP=${HYP:?path to a hyp binary}
OUT=${OUT:-$(mktemp -d)}; mkdir -p "$OUT/home"
printf 'ingest:\n  listen: 127.0.0.1:18600\n  max_body_bytes: %s\nsinks: {}\n' "${MAX_BODY:-16777216}" > "$OUT/home/hyp.yaml"
cat > "$OUT/otel.yaml" <<YAML
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:4318
processors:
  batch: {}
exporters:
  otlphttp:
    endpoint: http://127.0.0.1:18600
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    logs:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlphttp]
YAML
wait_up() { for _ in $(seq 1 150); do curl -s -o /dev/null "$1" && return 0; sleep 0.1; done; return 1; }
"$HYP" daemon --home "$OUT/home" > "$OUT/hyp.log" 2>&1 & hp=$!
"$P/otelcol" --config "$OUT/otel.yaml" > "$OUT/otel.log" 2>&1 & cp=$!
wait_up http://127.0.0.1:18600/healthz; wait_up http://127.0.0.1:4318/ || true; sleep 0.5
"$P/load/bin/loadgen" -format "${FORMAT:-proto}" -clients "${CLIENTS:-4}" -records "${RECORDS:-1000}" \
  -body "${BODY:-150}" -duration "${DUR:-10s}" -json "$OUT/load.json" > /dev/null
sent=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ok_records"])' "$OUT/load.json")
count() { "$HYP" query sql "select count(*) as n from logs" --home "$OUT/home" --format json 2>/dev/null |
  python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["n"])' 2>/dev/null || echo 0; }
prev=-1; n=0; still=0
for _ in $(seq 1 200); do # until all are in, or the count stops moving for 30 s (the collector
  # retries 503s with a backoff of up to 30 s)
  sleep 3; n=$(count); [ "$n" = "$sent" ] && break
  if [ "$n" = "$prev" ]; then still=$((still+1)); [ $still -ge 10 ] && break; else still=0; fi; prev=$n
done
# Each record's body holds its id: a record stored twice shows as fewer distinct bodies.
distinct=$("$HYP" query sql "select count(distinct body) as n from logs" --home "$OUT/home" --format json 2>/dev/null |
  python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["n"])' 2>/dev/null || echo 0)
echo "max_body_bytes=${MAX_BODY:-16777216} body=${BODY:-150}B records/request=${RECORDS:-1000} accepted_by_collector=$sent stored_by_hyp=$n distinct_stored=$distinct" \
  "collector_drop_lines=$(grep -ci 'dropping data\|permanent' "$OUT/otel.log")" \
  "hyp_503=$(grep -c 'Code 503' "$OUT/otel.log") hyp_413=$(grep -c 'Code 413' "$OUT/otel.log")" \
  "hyp_peak=$(awk '/VmHWM/{print int($2/1024) "MiB"}' /proc/$hp/status)" \
  "collector_peak=$(awk '/VmHWM/{print int($2/1024) "MiB"}' /proc/$cp/status)"
kill $cp $hp; wait 2>/dev/null
