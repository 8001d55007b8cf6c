#!/bin/bash
# Issue 11's forward figure end to end, with the shipped binary and its CLI only: a hyp daemon
# ingests the load generator's NDJSON (4 clients, 1,000 records a request, one source) for DUR
# with its forward sink idle; then a local `hyp server` starts and `hyp sink run` forwards the
# whole backlog to it, after the same backlog went once to nullcentral (the sender alone, its
# receiver storing nothing). Prints both rates, their ratio (forward/ingest), bytes on the wire per
# row, and the CPU each process spent per million rows: a 2-core machine shares its cores
# between the two ends of the forward as it does between hyp and the generator while ingesting.
# Usage: PEERS=<dir built by build.sh> HYP=<hyp binary> ./forward.sh   (COMP=gzip|zstd|none)
set -u
P=${PEERS:?}; HYP=${HYP:?path to a hyp binary}; DUR=${DUR:-10s}; REPS=${REPS:-2}; COMP=${COMP:-gzip}
OUT=${OUT:-$(mktemp -d)}; mkdir -p "$OUT"
wait_up() { for _ in $(seq 1 150); do curl -s -o /dev/null "$1" && return 0; sleep 0.1; done; return 1; }
# cpu PID: user+system seconds the process has used (/proc/PID/stat fields 14 and 15).
cpu() { awk -v t="$(getconf CLK_TCK)" '{print ($14+$15)/t}' "/proc/$1/stat"; }
# forward SENDER_PID RECEIVER_PID PREFIX: `hyp sink run` now; PREFIX.json is its output,
# PREFIX.cpu the start and end times and both processes' CPU seconds.
forward() {
  local d0 s0 t0
  d0=$(cpu $1); s0=$(cpu $2); t0=$(date +%s.%N)
  "$HYP" sink run central --home "$home" --json > "$3.json" || echo "sink run failed: $(cat "$3.json")"
  echo "$t0 $(date +%s.%N) $d0 $(cpu $1) $s0 $(cpu $2)" > "$3.cpu"
}
echo "central-token" > "$OUT/tokens"; chmod 600 "$OUT/tokens"
for rep in $(seq 1 "$REPS"); do
  home="$OUT/daemon"; srv="$OUT/server"; rm -rf "$home" "$srv"; mkdir -p "$home" "$srv"
  # The sink's schedule never fires during the run: only `hyp sink run` forwards.
  cat > "$home/hyp.yaml" <<EOF
ingest:
  listen: 127.0.0.1:4318
sinks:
  central:
    type: forward
    url: http://127.0.0.1:4319
    token_file: $OUT/tokens
    compression: $COMP
    schedule: "@every 8760h"
EOF
  "$HYP" daemon --home "$home" > "$OUT/daemon.log" 2>&1 & dpid=$!
  wait_up http://127.0.0.1:4318/healthz
  "$P/load/bin/loadgen" -url "http://127.0.0.1:4318/v1/ingest/logs?source=loadgen" -format ndjson -clients 4 \
    -duration "$DUR" -records 1000 -pid $dpid -prefix "f$rep" -label "ingest-$rep" -json "$OUT/ingest-$rep.json" > /dev/null
  # `cache status` flushes what ingest left in the log, so neither forward below pays for it.
  "$HYP" cache status --home "$home" > /dev/null
  # The sender alone first, against nullcentral (reads each body, answers 200, stores
  # nothing); then the same backlog again, rewound, to a real `hyp server`.
  "$P/load/bin/nullcentral" -listen 127.0.0.1:4319 > "$OUT/null.log" 2>&1 & npid=$!
  wait_up http://127.0.0.1:4319/healthz
  forward $dpid $npid "$OUT/null-$rep"
  kill $npid; wait $npid 2>/dev/null
  "$HYP" sink rewind central --home "$home" --to-earliest > /dev/null
  "$HYP" server --home "$srv" --listen 127.0.0.1:4319 --token-file "$OUT/tokens" > "$OUT/server.log" 2>&1 & spid=$!
  wait_up http://127.0.0.1:4319/healthz
  curl -s http://127.0.0.1:4318/metrics > "$OUT/steps0-$rep.txt"
  forward $dpid $spid "$OUT/run-$rep"
  curl -s http://127.0.0.1:4318/metrics > "$OUT/steps1-$rep.txt"
  curl -s http://127.0.0.1:4319/metrics > "$OUT/server-steps-$rep.txt"
  kill -TERM $dpid $spid; wait $dpid $spid 2>/dev/null
  python3 - "$OUT/ingest-$rep.json" "$OUT/null-$rep" "$OUT/run-$rep" "$COMP" "$OUT/steps0-$rep.txt" "$OUT/steps1-$rep.txt" "$OUT/server-steps-$rep.txt" "$OUT/forward-$rep.json" <<'PY'
import json, re, sys
ing = json.load(open(sys.argv[1]))
def fwd(prefix):
    run = json.load(open(prefix + ".json"))["sinks"][0]
    t0, t1, d0, d1, s0, s1 = map(float, open(prefix + ".cpu").read().split())
    rows = run["rows"]
    perM = 1e6 / max(rows, 1)
    if run["status"] != "ok" or rows != ing["ok_records"]:
        print(f"  sink run: status {run['status']}, {rows} rows of {ing['ok_records']} ingested, errors {run['errors']}")
    return run, rows / (t1 - t0), (d1 - d0) * perM, (s1 - s0) * perM
null, nrate, nsend, _ = fwd(sys.argv[2])
run, rate, send, serve = fwd(sys.argv[3])
print(f"ingest {ing['records_per_s']:>9,.0f} rec/s (hyp {ing['target_cpu_s_per_million_records']:.2f} CPU-s/1M, "
      f"generator {ing['loadgen_cpu_s'] * 1e6 / max(ing['ok_records'], 1):.2f})   "
      f"forward {sys.argv[4]} {rate:>9,.0f} rows/s ({run['rows']} rows, {run['units']} units, {run['bytes'] / max(run['rows'], 1):.1f} bytes/row; "
      f"sender {send:.2f} CPU-s/1M, server {serve:.2f})   "
      f"sender alone {nrate:>9,.0f} rows/s ({nsend:.2f} CPU-s/1M)   RATIO forward/ingest {rate / ing['records_per_s']:.2f}")
# The figures bench/table.py reads (issue 28's targets), one file per run.
json.dump({"ingest_records_per_s": ing["records_per_s"], "ingest_cpu_s_per_million": ing["target_cpu_s_per_million_records"],
           "forward_rows_per_s": rate, "sender_cpu_s_per_million": send, "server_cpu_s_per_million": serve,
           "sender_alone_rows_per_s": nrate, "bytes_per_row": run["bytes"] / max(run["rows"], 1)}, open(sys.argv[8], "w"))
# Mean time per unit in each step during the forward to the server: the sender's from the
# difference of the daemon's hyp_sink_unit_step_seconds before and after it, the server's
# from its hyp_server_chunk_step_seconds (it served only that forward).
def steps(path, metric):
    out = {}
    for line in open(path):
        m = re.match(metric + r'_sum\{(?:sink="central",)?step="(\w+)"\} (\S+)', line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out
a, b = steps(sys.argv[5], "hyp_sink_unit_step_seconds"), steps(sys.argv[6], "hyp_sink_unit_step_seconds")
srv = steps(sys.argv[7], "hyp_server_chunk_step_seconds")
units = max(run["units"], 1)
print("  per unit: " + ", ".join(f"sender {st} {(b.get(st, 0) - a.get(st, 0)) / units * 1e3:.1f} ms" for st in ("read", "record", "ship"))
      + "; " + ", ".join(f"server {st} {srv.get(st, 0) / units * 1e3:.1f} ms" for st in ("read", "parse", "keep")) + f" ({units} units)")
PY
done
