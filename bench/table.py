#!/usr/bin/env python3
"""One table of the lean-agent figures (issue 26) from one `make bench`: the start-up and idle
figures (bench/startup.sh JSON=...), and hyp beside the OpenTelemetry Collector on a quiet
machine and with a CPU hog (bench/peers/sbs.sh OUT=... and HOG=1 OUT=...), each with its
target. Ratios are of medians over the runs; a peak RSS must hold in every run.

With FORWARD_DIR (bench/peers/forward.sh OUT=...) and CLUSTER.json (`bench -only cluster
-cluster-json ...`) it prints a second table, the central tier's figures against issue 28's
targets: the forward's CPU and rate against the daemon's own NDJSON ingest in the same run, and
the cluster figure.

Usage: bench/table.py STARTUP.json QUIET_DIR BUSY_DIR [FORWARD_DIR CLUSTER.json]
"""
import glob
import json
import os
import statistics
import sys


def runs(d, system, fmt):
    return [json.load(open(f)) for f in sorted(glob.glob(os.path.join(d, f"{system}-{fmt}-*.json")))]


def med(rs, key):
    return statistics.median(r[key] for r in rs) if rs else None


def main():
    startup_path, dirs = sys.argv[1], {"quiet": sys.argv[2], "busy": sys.argv[3]}
    rows = []  # (figure, quiet, busy, target, met)

    def ratio_row(name, fmt, vs, target):
        vals, met = {}, True
        for host, d in dirs.items():
            h, o = runs(d, "hyp", fmt), runs(d, "otel", vs)
            if not h or not o:
                vals[host] = "—"
                met = False
                continue
            r = med(h, "records_per_s") / med(o, "records_per_s")
            vals[host] = f"{r:.2f}× ({med(h, 'records_per_s'):,.0f} vs {med(o, 'records_per_s'):,.0f} rec/s)"
            met = met and r >= target
        rows.append((name, vals["quiet"], vals["busy"], f"≥{target}×", met))

    ratio_row("records/s, OTLP/JSON, hyp/collector", "json", "json", 1.5)
    ratio_row("records/s, OTLP/protobuf, hyp/collector", "proto", "proto", 1.5)
    ratio_row("records/s, NDJSON, hyp / collector's OTLP/JSON", "ndjson", "json", 2.0)
    for fmt, label in (("json", "OTLP/JSON"), ("proto", "OTLP/protobuf")):
        vals, met = {}, True
        for host, d in dirs.items():
            h, o = runs(d, "hyp", fmt), runs(d, "otel", fmt)
            if not h or not o:
                vals[host], met = "—", False
                continue
            hc, oc = med(h, "target_cpu_s_per_million_records"), med(o, "target_cpu_s_per_million_records")
            vals[host] = f"{hc / oc:.2f}× ({hc:.2f} vs {oc:.2f})"
            met = met and hc / oc <= 0.75
        rows.append((f"CPU-s per 1M records, {label}, hyp/collector", vals["quiet"], vals["busy"], "≤0.75×", met))
    vals, met = {}, True
    for host, d in dirs.items():
        peaks = [r["target_peak_rss_mib"] for fmt in ("json", "proto", "ndjson") for r in runs(d, "hyp", fmt)]
        otel = [r["target_peak_rss_mib"] for fmt in ("json", "proto") for r in runs(d, "otel", fmt)]
        if not peaks:
            vals[host], met = "—", False
            continue
        vals[host] = f"{max(peaks):.0f} MiB (collector {max(otel):.0f})" if otel else f"{max(peaks):.0f} MiB"
        met = met and max(peaks) <= 100
    rows.append(("peak RSS under load, worst run", vals["quiet"], vals["busy"], "≤100 MiB", met))

    s = json.load(open(startup_path))
    rows.append(("idle daemon RSS, 10 s after ready", f"{s['idle_rss_mib']:.0f} MiB (anon {s['idle_anon_mib']:.0f}, file {s['idle_file_mib']:.0f})", "", "≤40 MiB", s["idle_rss_mib"] <= 40))
    rows.append(("`hyp --help`, median of 5", f"{s['help_ms']} ms", "", "≤50 ms", s["help_ms"] <= 50))
    rows.append(("daemon start to /healthz 200", f"{s['start_s']:.2f} s", "", "≤0.2 s", s["start_s"] <= 0.2))
    rows.append(("binary from `make build`", f"{s['binary_bytes'] / 1e6:.1f} MB", "", "≤100 MB", s["binary_bytes"] <= 100e6))

    print("| figure | quiet | CPU hog | target | met |")
    print("|---|---|---|---|---|")
    for name, q, b, target, met in rows:
        print(f"| {name} | {q} | {b} | {target} | {'yes' if met else '**no**'} |")
    if len(sys.argv) > 5:
        central(sys.argv[4], sys.argv[5])


def central(forward_dir, cluster_path):
    """The central tier's table (issue 28): medians over forward.sh's runs, each run's ratios
    taken against that run's own ingest; the cluster figure's one- and two-replica runs."""
    rows = []  # (figure, value, target, met)
    fw = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(forward_dir, "forward-*.json")))]
    if fw:
        def ratio(key, base):
            return statistics.median(r[key] / r[base] for r in fw)
        srv, snd = ratio("server_cpu_s_per_million", "ingest_cpu_s_per_million"), ratio("sender_cpu_s_per_million", "ingest_cpu_s_per_million")
        rate = ratio("forward_rows_per_s", "ingest_records_per_s")
        ing = med(fw, "ingest_cpu_s_per_million")
        rows.append(("server CPU per 1M forwarded rows / daemon's NDJSON ingest CPU per 1M", f"{srv:.2f}× ({med(fw, 'server_cpu_s_per_million'):.2f} vs {ing:.2f})", "≤0.6×", srv <= 0.6))
        rows.append(("sender CPU per 1M / ingest CPU per 1M", f"{snd:.2f}× ({med(fw, 'sender_cpu_s_per_million'):.2f} vs {ing:.2f})", "≤0.5×", snd <= 0.5))
        rows.append(("backlog drain to a local `hyp server` / ingest rate", f"{rate:.2f}× ({med(fw, 'forward_rows_per_s'):,.0f} vs {med(fw, 'ingest_records_per_s'):,.0f} rows/s)", "≥1.0×", rate >= 1.0))
    figs = json.load(open(cluster_path)) if os.path.exists(cluster_path) else []
    for f in figs:
        who = f"{f['gateways']} gateways, {f['replicas']} replica(s)"
        if f["replicas"] == 1:
            rows.append((f"cluster rows/s stored, {who}", f"{f['rows_per_s']:,.0f} ({f['replica_cpu_s_per_million_rows']:.2f} replica CPU-s per 1M)", "≥400,000", f["rows_per_s"] >= 400_000))
        rows.append((f"cluster staged data files per 1M rows, {who}", f"{f['staged_files_per_million_rows']:.1f}", "≤20", f["staged_files_per_million_rows"] <= 20))
        rows.append((f"cluster largest commit lag, {who}", f"{f['max_commit_lag_s']:.1f} s", f"≤{2 * f['commit_interval_s']:.0f} s", f["max_commit_lag_s"] <= 2 * f["commit_interval_s"]))
        rows.append((f"cluster rows stored twice, {who}", f"{f['stored_twice']}", "0", f["stored_twice"] == 0))
    print()
    print("| central tier (issue 28) | value | target | met |")
    print("|---|---|---|---|")
    for name, v, target, met in rows:
        print(f"| {name} | {v} | {target} | {'yes' if met else '**no**'} |")


if __name__ == "__main__":
    main()
