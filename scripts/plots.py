#!/usr/bin/python3
"""Draws kvserve's plots (SVG) from the JSON results the CLI writes.

  scripts/plots.py                          # every plot of docs/ from its committed JSON
  scripts/plots.py controller IN.json OUT.svg   # `kvserve simulate --plot-data IN.json`
  scripts/plots.py pareto IN.json OUT.svg       # `kvserve pareto TABLE --plot-data IN.json`
  scripts/plots.py e2e IN.json JCT.svg SWITCH.svg  # `kvserve e2e --results IN.json`

Needs Debian's python3-matplotlib (scripts/setup.sh installs it), hence
/usr/bin/python3. The SVGs are deterministic for the same JSON (fixed hash
salt, no date), so regenerated files differ only where the data does.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402

matplotlib.rcParams.update({
    "svg.hashsalt": "kvserve",
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.size": 9,
})

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]

# The plots of docs/ and the JSON they are drawn from (relative to the root).
DOC_PLOTS = [
    ("controller", "docs/results/plots/controller_latency.json", ["docs/controller_latency.svg"]),
    ("pareto", "docs/results/plots/profiling_pareto.json", ["docs/profiling_pareto.svg"]),
    ("e2e", "docs/results/e2e.json", ["docs/e2e_jct.svg", "docs/e2e_switch.svg"]),
]


def load(path, fmt):
    with open(path) as f:
        data = json.load(f)
    if data.get("format") != fmt:
        sys.exit(f"plots.py: {path}: expected format {fmt!r}, got {data.get('format')!r}")
    return data


def save(fig, path):
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)
    print(f"wrote {path}")


def controller(src, out):
    """Latency over time (rolling mean) of the main policies, and the link rate."""
    d = load(src, "kvserve-simulation-plot")
    t = d["time_seconds"]
    fig, ax = plt.subplots(figsize=(9.6, 4.4))
    slow = d["codec_slowdown"]
    i = 0
    while i < len(t):  # shade periods of codec slowdown
        if slow[i] != 1.0:
            j = i
            while j < len(t) and slow[j] == slow[i]:
                j += 1
            ax.axvspan(t[i], t[j] if j < len(t) else t[-1], color="#f3e8ff", lw=0)
            ax.text(t[i], 0.98, f" codec {slow[i]:.2g}x slower", transform=ax.get_xaxis_transform(),
                    va="top", color="#7b4fa0")
            i = j
        else:
            i += 1
    colors = {"raw": "#999999", "no-controller": "#d62728", "no-bandit": "#ff7f0e",
              "full": "#1f77b4", "oracle": "#2ca02c"}
    for name, ms in d["latency_rolling_mean_ms"].items():
        ax.plot(t, ms, color=colors.get(name, "#000000"), lw=2.2 if name == "full" else 1.4, label=name)
    ax.set_xlabel("time (s)")
    ax.set_ylabel(f"KV latency, rolling mean of {d['rolling_window']} requests (ms)")
    ax.set_ylim(bottom=0)
    bw = ax.twinx()
    bw.plot(t, d["bandwidth_gbps"], color="#555555", ls="--", lw=1, label="bandwidth")
    bw.set_ylabel("bandwidth (Gbps, dashed)", color="#555555")
    bw.set_ylim(bottom=0)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    save(fig, out)


def pareto(src, out):
    """CR on x, quality on y, colour = codec time per byte; the frontier ringed."""
    d = load(src, "kvserve-pareto-plot")
    pts = d["points"]
    fig, ax = plt.subplots(figsize=(7.2, 4.8))
    cr = [p["compression_ratio"] for p in pts]
    q = [p["quality"] for p in pts]
    ns = [p["codec_ns_per_byte"] for p in pts]
    front = [p["on_front"] for p in pts]
    norm = matplotlib.colors.LogNorm(vmin=min(ns), vmax=max(ns)) if pts and min(ns) > 0 else None
    sc = ax.scatter(cr, q, c=ns, cmap="coolwarm", norm=norm, s=[40 if f else 14 for f in front],
                    edgecolors=["black" if f else "none" for f in front], linewidths=1.2)
    fig.colorbar(sc, ax=ax, label="codec ns per byte (1/s_p)")
    ax.set_xlabel("compression ratio")
    ax.set_ylabel("quality (relative)")
    ax.set_title(f"Pareto profiles, workload {d['workload']} (ringed: on the frontier)")
    fig.tight_layout()
    save(fig, out)


def e2e(src, out_jct, out_switch):
    """Mean JCT per bandwidth and method; the bandwidth-change run."""
    d = load(src, "kvserve-e2e-results")
    fig, ax = plt.subplots(figsize=(7.6, 4.4))
    gbps = [p["gbps"] for p in d["points"]]
    for m, method in enumerate(d["methods"]):
        xs = [g for g, p in zip(gbps, d["points"]) if p["mean_jct_seconds"][m] is not None]
        ys = [p["mean_jct_seconds"][m] * 1e3 for p in d["points"] if p["mean_jct_seconds"][m] is not None]
        ax.plot(xs, ys, marker="o", ms=3, color=COLORS[m % len(COLORS)], label=method["label"],
                lw=2.6 if method["adaptive"] else 1.4, ls="-" if method["adaptive"] else "--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("link bandwidth (Gbps, log)")
    ax.set_ylabel("mean JCT (ms, log)")
    ax.set_title(f"Mean JCT vs link bandwidth ({d['prompt_tokens']} prompt tokens)")
    ax.grid(True, which="both", color="#eeeeee")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8)
    fig.tight_layout()
    save(fig, out_jct)

    sw = d["switches"]
    fig, ax = plt.subplots(figsize=(7.6, 3.8))
    profiles = sorted({s["profile"] for s in sw})
    color = {p: COLORS[(i + 1) % len(COLORS)] for i, p in enumerate(profiles)}
    for p in profiles:
        ax.bar([s["index"] for s in sw if s["profile"] == p],
               [s["jct_seconds"] * 1e3 for s in sw if s["profile"] == p], color=color[p], alpha=0.8, label=p)
    ax.set_xlabel("request (bars: JCT, coloured by profile; solid line: link rate; dashed: controller's estimate)")
    ax.set_ylabel("JCT (ms)")
    ax.set_title("Link rate changes mid-run: kvserve's JCT and choices")
    rate = ax.twinx()
    rate.plot([s["index"] for s in sw], [s["gbps"] for s in sw], color="black", lw=2)
    rate.plot([s["index"] for s in sw], [s["estimate_gbps"] for s in sw], color="black", lw=1.5, ls="--")
    rate.set_ylabel("Gbps")
    rate.set_ylim(bottom=0)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), fontsize=7, ncol=1, frameon=False)
    fig.tight_layout()
    save(fig, out_switch)


KINDS = {"controller": (controller, 2), "pareto": (pareto, 2), "e2e": (e2e, 3)}


def main(argv):
    if len(argv) == 0:
        for kind, src, outs in DOC_PLOTS:
            src = os.path.join(ROOT, src)
            if not os.path.exists(src):
                print(f"skipped {kind}: no {os.path.relpath(src, ROOT)}")
                continue
            KINDS[kind][0](src, *[os.path.join(ROOT, o) for o in outs])
        return 0
    if argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    kind = argv[0]
    if kind not in KINDS or len(argv) - 1 != KINDS[kind][1]:
        sys.exit(__doc__.strip())
    try:
        KINDS[kind][0](*argv[1:])
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"plots.py {kind}: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
