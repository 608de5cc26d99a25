#!/usr/bin/env python3
"""Charts of a side-by-side benchmark results folder (tidewire next to Mooncake).

Usage: plot_bench.py RESULTS_DIR [OUT_DIR]     (OUT_DIR defaults to RESULTS_DIR/plots)
       make bench-plots RESULTS=RESULTS_DIR [PLOTS=OUT_DIR]

RESULTS_DIR holds ENGINE_runN.json files (one per engine and run, written by the comparison
workload: points with "section" = tput / lat / scatter) and optionally phys.json (this
machine's ceilings measured in the same run: memcpy bandwidth, loopback TCP streams). Each
point's value is the median of its runs' medians, as in the summary table.

Writes PNG files:
  tput_read.png, tput_write.png  GB/s (top) and CPU-seconds per GB (bottom) against block size,
                                 one line per engine and batch depth; the 2-stream TCP ceiling
                                 and memcpy bandwidth of the same run as horizontal lines
  latency.png                    transfer_sync_{read,write} p50 and p99 against size
  scatter.png                    scatter READ time per operation against fragment count

Needs matplotlib. When it is missing:
  python3 -m venv .venv-plot && .venv-plot/bin/pip install matplotlib
  .venv-plot/bin/python scripts/plot_bench.py RESULTS_DIR
(or make bench-plots RESULTS=... PLOT_PY=.venv-plot/bin/python).
"""
import glob
import json
import os
import statistics
import sys
from collections import defaultdict

HOW_TO_INSTALL = (
    "matplotlib is not installed for {py}. Install it into a virtual environment:\n"
    "  python3 -m venv .venv-plot && .venv-plot/bin/pip install matplotlib\n"
    "then run: .venv-plot/bin/python scripts/plot_bench.py RESULTS_DIR\n"
    "     or: make bench-plots RESULTS=RESULTS_DIR PLOT_PY=.venv-plot/bin/python"
)

STYLE = {"tidewire": "-", "mooncake": "--"}
MARKER = {"tidewire": "o", "mooncake": "s"}


def median_of(values):
    return statistics.median(values) if values else None


def load(results_dir):
    """{(section, engine, key...): {metric: [per-run medians]}} and the ceilings."""
    vals = defaultdict(lambda: defaultdict(list))
    for path in sorted(glob.glob(os.path.join(results_dir, "*_run*.json"))):
        name = os.path.basename(path)
        if name.startswith("phys"):
            continue
        with open(path) as f:
            res = json.load(f)
        engine = res.get("engine", name.split("_")[0])
        for p in res.get("points", []):
            if p.get("error"):
                continue
            sec = p.get("section")
            if sec == "tput":
                key = ("tput", engine, p["op"], p["block"], p["batch"])
                metrics = ("gbps", "cpu_s_per_gb")
            elif sec == "lat":
                key = ("lat", engine, p["op"], p["size"])
                metrics = ("p50_us", "p99_us")
            elif sec == "scatter":
                key = ("scatter", engine, p["op"], p["n"])
                metrics = ("ms_per_op",)
            else:
                continue
            for m in metrics:
                v = p.get(m)
                if isinstance(v, dict) and v.get("median") is not None:
                    vals[key][m].append(v["median"])
    ceilings = {}
    phys = os.path.join(results_dir, "phys.json")
    if os.path.exists(phys):
        with open(phys) as f:
            points = json.load(f).get("points", [])
        tcp2 = [p["gbytes_per_s"] for p in points
                if p.get("kind") == "tcp_stream" and p.get("streams") == 2 and "gbytes_per_s" in p]
        mem = [p["median"] for p in points
               if p.get("kind") == "memcpy" and p.get("size", 0) >= 64 << 20 and "median" in p]
        if tcp2:
            ceilings["TCP, 2 streams"] = median_of(tcp2)
        if mem:
            ceilings["memcpy 64 MiB"] = median_of(mem)
    return vals, ceilings


def size_label(n):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def plot_tput(plt, vals, ceilings, op, out):
    points = {k: v for k, v in vals.items() if k[0] == "tput" and k[2] == op}
    if not points:
        return None
    engines = sorted({k[1] for k in points})
    batches = sorted({k[4] for k in points})
    blocks = sorted({k[3] for k in points})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 9), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    for bi, batch in enumerate(batches):
        for eng in engines:
            xs, gb, cpu = [], [], []
            for block in blocks:
                m = points.get(("tput", eng, op, block, batch))
                if not m or not m.get("gbps"):
                    continue
                xs.append(block)
                gb.append(median_of(m["gbps"]))
                cpu.append(median_of(m.get("cpu_s_per_gb", [])))
            if not xs:
                continue
            style = dict(color=colors[bi % len(colors)], linestyle=STYLE.get(eng, ":"),
                         marker=MARKER.get(eng, "^"))
            top.plot(xs, gb, label=f"{eng}, batch {batch}", **style)
            cx = [x for x, c in zip(xs, cpu) if c is not None]
            bottom.plot(cx, [c for c in cpu if c is not None], **style)
    for (name, v), ls in zip(sorted(ceilings.items()), (":", "-.")):
        top.axhline(v, color="grey", linestyle=ls, linewidth=1)
        top.annotate(f"{name}: {v:.2f} GB/s", (blocks[0], v), textcoords="offset points",
                     xytext=(2, 3), fontsize=8, color="grey")
    top.set_xscale("log", base=2)
    top.set_ylabel("GB/s (payload, higher is better)")
    top.set_title(f"{op.upper()} throughput by block size "
                  f"(solid: tidewire, dashed: Mooncake; colour: batch depth)")
    top.grid(True, which="both", alpha=0.3)
    top.legend(fontsize=8, ncol=2)
    bottom.set_xscale("log", base=2)
    bottom.set_yscale("log")
    bottom.set_ylabel("CPU-seconds per GB (both processes)")
    bottom.set_xlabel("block size")
    bottom.set_xticks(blocks)
    bottom.set_xticklabels([size_label(b) for b in blocks], rotation=30)
    bottom.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    path = os.path.join(out, f"tput_{op}.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_latency(plt, vals, out):
    points = {k: v for k, v in vals.items() if k[0] == "lat"}
    if not points:
        return None
    engines = sorted({k[1] for k in points})
    ops = sorted({k[2] for k in points})
    sizes = sorted({k[3] for k in points})
    fig, axes = plt.subplots(1, len(ops), figsize=(5 * len(ops), 4.5), sharey=True, squeeze=False)
    for ax, op in zip(axes[0], ops):
        width = 0.8 / (2 * len(engines))
        for ei, eng in enumerate(engines):
            for qi, q in enumerate(("p50_us", "p99_us")):
                ys = [median_of(points.get(("lat", eng, op, s), {}).get(q, [])) for s in sizes]
                xs = [i + (2 * ei + qi - len(engines) + 0.5) * width for i in range(len(sizes))]
                bars = ax.bar(xs, [y or 0 for y in ys], width,
                              label=f"{eng} {q[:3]}", alpha=1.0 if qi == 0 else 0.55,
                              hatch="" if eng == "tidewire" else "//")
                for b, y in zip(bars, ys):
                    if y:
                        ax.annotate(f"{y:.0f}", (b.get_x() + b.get_width() / 2, y),
                                    ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(sizes)))
        ax.set_xticklabels([size_label(s) for s in sizes])
        ax.set_yscale("log")
        ax.set_title(f"transfer_sync_{op} latency (p50 solid, p99 light)")
        ax.set_xlabel("size")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][0].set_ylabel("microseconds (lower is better)")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(out, "latency.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_scatter(plt, vals, out):
    points = {k: v for k, v in vals.items() if k[0] == "scatter"}
    if not points:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for eng in sorted({k[1] for k in points}):
        ns = sorted(k[3] for k in points if k[1] == eng)
        ys = [median_of(points[("scatter", eng, "read", n)]["ms_per_op"]) for n in ns]
        ax.plot(ns, ys, linestyle=STYLE.get(eng, ":"), marker=MARKER.get(eng, "^"), label=eng)
        for n, y in zip(ns, ys):
            ax.annotate(f"{y:.3g} ms", (n, y), textcoords="offset points", xytext=(4, 4),
                        fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("128-byte fragments per READ")
    ax.set_ylabel("ms per operation (lower is better)")
    ax.set_title("scatter READ")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = os.path.join(out, "scatter.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) >= 2 else 2
    results = argv[1]
    out = argv[2] if len(argv) > 2 else os.path.join(results, "plots")
    if not os.path.isdir(results):
        print(f"plot_bench: {results} is not a directory", file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(HOW_TO_INSTALL.format(py=sys.executable), file=sys.stderr)
        return 3
    vals, ceilings = load(results)
    if not vals:
        print(f"plot_bench: no ENGINE_runN.json points in {results}", file=sys.stderr)
        return 1
    os.makedirs(out, exist_ok=True)
    written = [p for p in (plot_tput(plt, vals, ceilings, "read", out),
                           plot_tput(plt, vals, ceilings, "write", out),
                           plot_latency(plt, vals, out),
                           plot_scatter(plt, vals, out)) if p]
    print(f"plot_bench: wrote {len(written)} charts to {out}:")
    for p in written:
        print(f"  {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
