"""Draws docs/pictures/maintenance-bench.svg from bench/maintenance.py's results: the stores'
data files and the changelog per simulated day, with and without the daily maintenance.

    .venv/bin/python -m bench.maintenance --keys 20000 --json docs/pictures/maintenance-bench.json
    .venv/bin/python docs/pictures/maintenance_bench.py

Needs the docs extra (matplotlib).
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "maintenance-bench.json"
OUT = HERE / "maintenance-bench.svg"
LABELS = {"no-ttl": "no TTL", "ttl": "TTL 3 days, stream time only",
          "ttl+maintenance": "TTL 3 days + daily maintenance (retention, compaction)"}


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "maintenance-bench"
    result = json.loads(RESULTS.read_text())
    fig, (disk, changelog) = plt.subplots(1, 2, figsize=(11, 4.4))
    for run in result["runs"]:
        days = [d["day"] for d in run["daily"]]
        disk.plot(days, [d["store_bytes"] / 1e6 for d in run["daily"]], linewidth=2, label=LABELS[run["setup"]])
        changelog.plot(days, [d["changelog_bytes"] / 1e6 for d in run["daily"]], linewidth=2,
                       label=LABELS[run["setup"]])
    live = result["live"]["store_bytes"] / 1e6
    disk.axhline(live, color="grey", linestyle="--", label="live data only")
    disk.axhline(1.5 * live, color="grey", linestyle=":", label="1.5 x live data")
    stalled = result["stalled"]
    for ax, title in ((disk, "store data files (MB)"), (changelog, "changelog, as compaction keeps it (MB)")):
        ax.axvline(stalled["from_day"], color="lightgrey", linewidth=1)
        ax.set_xlabel("simulated day")
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    disk.legend(fontsize=8, loc="upper left")
    fig.suptitle(f"{result['keys']:,} live keys over {result['partitions']} partitions, a fifth replaced weekly; "
                 f"partition {stalled['partition']} stalls on day {stalled['from_day']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(OUT)
    print(OUT)


if __name__ == "__main__":
    main()
