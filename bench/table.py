#!/usr/bin/env python3
"""One table of the lean-agent figures (issue 26) from one `make bench`: the start-up and idle
figures (bench/startup.sh JSON=...), and hyp beside the OpenTelemetry Collector on a quiet
machine and with a CPU hog (bench/peers/sbs.sh OUT=... and HOG=1 OUT=...), each with its
target. Ratios are of medians over the runs; a peak RSS must hold in every run.

Usage: bench/table.py STARTUP.json QUIET_DIR BUSY_DIR
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


if __name__ == "__main__":
    main()
