#!/usr/bin/env python3
"""Side-by-side table of a bench/run.sh results folder.

Usage: table.py RESULTS_DIR     (reads the ENGINE_runN.json files compare.py wrote)

One row per point, one column per initiating engine, holding the median over runs of each
run's median. Throughput rows are GB/s of payload (higher is better); latency rows p50 in us
and scatter rows ms per call (lower is better). The last column is tidewire's advantage over
Mooncake on that point, oriented so that >1 always means tidewire did better.
"""
import glob
import json
import os
import statistics
import sys
from collections import defaultdict

def row_of(p):
    """(sort key, label, metric, higher_is_better) for a point, or None."""
    sec = p.get("section")
    if sec == "tput":
        return ((0, p["op"], p["block"], p["batch"]), f"{p['op']} {p['block']}B x{p['batch']}",
                "gbps", True)
    if sec == "lat":
        return ((1, p["op"], p["size"], 0), f"{p['op']} {p['size']}B p50", "p50_us", False)
    if sec == "scatter":
        return ((2, p["op"], p["n"], p["frag"]), f"read {p['n']}x{p['frag']}B", "ms_per_op",
                False)
    return None


def load(results_dir):
    values = defaultdict(lambda: defaultdict(list))  # row -> engine -> [per-run medians]
    errors = defaultdict(list)
    setups = set()
    for path in sorted(glob.glob(os.path.join(results_dir, "*_run*.json"))):
        with open(path) as f:
            res = json.load(f)
        engine = res.get("engine") or os.path.basename(path).split("_")[0]
        setups.add((res.get("mode"), engine, res.get("target_engine")))
        if res.get("error"):
            errors[engine].append(f"{os.path.basename(path)}: {res['error']}")
        for p in res.get("points", []):
            row = row_of(p)
            if row is None:
                continue
            m = p.get(row[2])
            if p.get("error") or not isinstance(m, dict) or m.get("median") is None:
                errors[engine].append(f"{row[1]}: {p.get('error')}")
                continue
            values[row][engine].append(m["median"])
    return values, errors, setups


def advantage(cells, higher_is_better):
    tw, mc = cells.get("tidewire"), cells.get("mooncake")
    if not tw or not mc:
        return ""
    return f"{(tw / mc if higher_is_better else mc / tw):.2f}x"


def render(results_dir):
    values, errors, setups = load(results_dir)
    engines = sorted({e for per in values.values() for e in per})
    lines = [f"# {results_dir}", ""]
    for mode, engine, target in sorted(setups, key=str):
        lines.append(f"- {engine} -> {target}, {mode}")
    lines += ["", "| point | metric | " + " | ".join(engines) + " | tidewire advantage |",
              "|---|---|" + "---|" * len(engines) + "---|"]
    for row in sorted(values):
        cells = {e: statistics.median(v) for e, v in values[row].items() if v}
        shown = " | ".join(f"{cells[e]:.4g}" if e in cells else "FAIL" for e in engines)
        lines.append(f"| {row[1]} | {row[2]} | {shown} | {advantage(cells, row[3])} |")
    for engine, errs in sorted(errors.items()):
        lines.append("")
        lines.append(f"{engine} errors: " + "; ".join(errs[:10])
                     + (f" (and {len(errs) - 10} more)" if len(errs) > 10 else ""))
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(render(sys.argv[1]))
