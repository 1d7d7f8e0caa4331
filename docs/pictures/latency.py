"""Draws docs/pictures/latency.svg from bench/latency.py's results: the latency distribution of
each engine at each input rate, one panel per processing guarantee (percentile on the x axis,
spread so the tail gets room; latency on a log axis), and a panel of the events: the max
latency of the inputs in the window after a rebalance or a restore against before it.

    .venv/bin/python bench/latency.py --seconds 20 --json docs/pictures/latency.json
    .venv/bin/python docs/pictures/latency.py

Needs the docs extra (matplotlib).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "latency.json"
OUT = HERE / "latency.svg"
NAMES = {"java": "Kafka Streams", "python": "this engine"}
COLORS = {"java": "tab:orange", "python": "tab:blue"}
STYLES = ("-", "--", ":", "-.")
TITLES = {"at_least_once": "at-least-once (commit 30 s, cache off)",
          "exactly_once_v2": "exactly-once (commit 100 ms, 10 MiB cache)"}


def spread(q: float) -> float:
    """p50 -> 0.3, p90 -> 1, p99 -> 2, p99.9 -> 3: the tail's nines get equal room."""
    return -math.log10(max(1 - q, 1e-5))


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "latency-bench"
    result = json.loads(RESULTS.read_text())
    steady = [r for r in result["results"] if r["event"] is None and r["distribution"]]
    events = [r for r in result["results"] if r["event"] and "max_ms" in r["after"]]
    guarantees = sorted({r["guarantee"] for r in steady})
    panels = len(guarantees) + bool(events)
    fig, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 4.8), squeeze=False)
    if events:
        draw_events(axes[0][-1], events)
    for ax, guarantee in zip(axes[0], guarantees, strict=False):
        runs = sorted((r for r in steady if r["guarantee"] == guarantee), key=lambda r: (r["engine"], r["rate"]))
        rates = sorted({r["rate"] for r in runs})
        for r in runs:
            points = [(spread(q), max(value, 1)) for q, value in r["distribution"]]
            verdict = {True: "", False: " (not sustained)", None: " (producer short)"}[r["sustained"]]
            label = f"{NAMES[r['engine']]}, {r['rate']:,}/s{verdict}"
            ax.plot(*zip(*points, strict=True), color=COLORS[r["engine"]], marker=".", markersize=3,
                    linestyle=STYLES[rates.index(r["rate"]) % len(STYLES)],
                    linewidth=1.8 if r["sustained"] else 0.8, label=label)
        ax.set_yscale("log")
        ax.set_xticks([spread(q) for q in (0.5, 0.9, 0.99, 0.999, 0.9999)],
                      ["p50", "p90", "p99", "p99.9", "p99.99"])
        ax.set_xlabel("percentile")
        ax.set_ylabel("latency, input append to output append (ms)")
        ax.set_title(TITLES.get(guarantee, guarantee), fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"sessionize, one instance each, {result['seconds']:.0f} s per rate\n{result['machine']}, a machine "
                 f"shared with other work, {result['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(OUT)
    print(OUT)


def draw_events(ax, events: list[dict]) -> None:  # type: ignore[no-untyped-def]
    """Max latency in the window after each event (bars) and before it (black ticks), per engine."""
    groups = sorted({(r["guarantee"], r["event"]) for r in events})
    width = 0.38
    for i, engine in enumerate(("java", "python")):
        by = {(r["guarantee"], r["event"]): r for r in events if r["engine"] == engine}
        xs = [g + (i - 0.5) * width for g, key in enumerate(groups) if key in by]
        runs = [by[key] for key in groups if key in by]
        ax.bar(xs, [max(r["after"]["max_ms"], 1) for r in runs], width, color=COLORS[engine], label=NAMES[engine])
        ax.scatter(xs, [max(r["before"].get("max_ms", 1), 1) for r in runs], marker="_", s=200, color="black",
                   zorder=3, label="max before the event" if i else None)
    ax.set_xticks(range(len(groups)), [f"{event}\n{TITLES.get(g, g).split(' (')[0]}" for g, event in groups],
                  fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("max latency in the window after the event (ms)")
    ax.set_title("a second instance joins (rebalance), a restart\non a wiped state directory (restore)", fontsize=10)
    ax.grid(alpha=0.3, axis="y", which="both")
    ax.legend(fontsize=7, loc="upper left")


if __name__ == "__main__":
    main()
