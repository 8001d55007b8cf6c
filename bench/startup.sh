#!/bin/bash
# Start-up and idle figures of one hyp binary (issue 26 item 1): its size, `hyp --help` wall
# time (median of 5), daemon start to the first /healthz 200, and the daemon's RSS 10 s after
# it is ready (anonymous and file-backed, from /proc/PID/status).
# Usage: HYP=<hyp binary> bench/startup.sh   (PORT, default 4399, is the ingest listener's;
# JSON=<file> also writes the figures there, for bench/table.py)
set -u
HYP=${HYP:?path to a hyp binary}; PORT=${PORT:-4399}
# Measure a copy, as `make install` ships one: a binary the Go linker has just written can sit
# in the page cache as 2 MiB folios, mapped whole, which adds ~30 MiB of file-backed RSS that
# an installed copy does not have.
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cp "$HYP" "$work/hyp"; HYP=$work/hyp
now() { date +%s.%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "binary: $(stat -c %s "$HYP" | awk '{printf "%.1f MB", $1/1e6}')"

# Wall time is what the target names; CPU time (user+sys) is printed beside it because on a
# shared machine the wall time is mostly waiting for a core.
TIMEFORMAT='%R %U %S'
for _ in 1 2 3 4 5; do { time "$HYP" --help > /dev/null; } 2>&1; done > "$work/help.times"
awk '{print $1*1000}' "$work/help.times" | median | awk '{printf "hyp --help: %d ms wall", $1}'
awk '{print ($2+$3)*1000}' "$work/help.times" | median | awk '{printf ", %d ms CPU (medians of 5)\n", $1}'

home=$work/home; mkdir -p "$home"
printf 'ingest:\n  listen: 127.0.0.1:%s\nsinks: {}\n' "$PORT" > "$home/hyp.yaml"
t0=$(now)
"$HYP" daemon --home "$home" > "$home/daemon.log" 2>&1 & pid=$!
ready=
for _ in $(seq 1 500); do
  if curl -sf -o /dev/null "http://127.0.0.1:$PORT/healthz"; then ready=$(now); break; fi
  sleep 0.01
done
if [ -z "$ready" ]; then
  echo "daemon never answered /healthz; log:" >&2; cat "$home/daemon.log" >&2
  kill -TERM $pid; wait $pid 2>/dev/null; exit 1
fi
echo "$t0 $ready" | awk '{printf "start to /healthz 200: %.2f s\n", $2-$1}'
sleep 10
awk '/^(VmRSS|RssAnon|RssFile):/ {printf "%s %d MiB  ", $1, $2/1024} END {print "(idle, 10 s after ready)"}' /proc/$pid/status
if [ -n "${JSON:-}" ]; then
  {
    printf '{"binary_bytes": %s, ' "$(stat -c %s "$HYP")"
    awk '{print $1*1000}' "$work/help.times" | median | awk '{printf "\"help_ms\": %d, ", $1}'
    echo "$t0 $ready" | awk '{printf "\"start_s\": %.3f, ", $2-$1}'
    awk '/^VmRSS:/ {r=$2} /^RssAnon:/ {a=$2} /^RssFile:/ {f=$2} END {printf "\"idle_rss_mib\": %.1f, \"idle_anon_mib\": %.1f, \"idle_file_mib\": %.1f}\n", r/1024, a/1024, f/1024}' /proc/$pid/status
  } > "$JSON"
fi
kill -TERM $pid; wait $pid 2>/dev/null
