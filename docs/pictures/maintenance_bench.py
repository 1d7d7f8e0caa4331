"""Draws docs/pictures/maintenance-bench.svg from bench/maintenance.py's results: the stores'
bytes on disk and the changelog on the broker per simulated day, with and without the daily
maintenance.

    .venv/bin/python -m bench.maintenance --json docs/pictures/maintenance-bench.json
    .venv/bin/python docs/pictures/maintenance_bench.py

Needs the docs extra (matplotlib).
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "maintenance-bench.json"
OUT = HERE / "maintenance-bench.svg"
LABELS = {"no-ttl": "no TTL", "ttl": "TTL {} days, stream time only",
          "ttl+maintenance": "TTL {} days + daily maintenance (retention, compaction)"}


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "maintenance-bench"
    result = json.loads(RESULTS.read_text())
    fig, (disk, changelog) = plt.subplots(1, 2, figsize=(11, 4.4))
    for run in result["runs"]:
        days = [d["day"] for d in run["daily"]]
        label = LABELS[run["setup"]].format(result["ttl_days"])
        disk.plot(days, [d["store_bytes"] / 1e6 for d in run["daily"]], linewidth=2, label=label)
        changelog.plot(days, [d["changelog_bytes"] / 1e6 for d in run["daily"]], linewidth=2, label=label)
    per_key = result["live"]["store_bytes"] / result["live"]["rows"] / 1e6
    daily = result["runs"][0]["daily"]
    live = [d["live_keys"] * per_key for d in daily]
    disk.plot([d["day"] for d in daily], live, color="grey", linestyle="--", label="live data only")
    disk.plot([d["day"] for d in daily], [1.5 * x for x in live], color="grey", linestyle=":",
              label="1.5 x live data")
    stalled = result["stalled"]
    for ax, title in ((disk, "stores on disk (MB)"), (changelog, "changelog on the broker, compacted (MB)")):
        ax.axvline(stalled["from_day"], color="lightgrey", linewidth=1)
        ax.set_xlabel("simulated day")
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    disk.legend(fontsize=8, loc="upper left")
    fig.suptitle(f"{result['keys']:,} live keys over {result['partitions']} partitions, each updated weekly, a fifth "
                 f"replaced weekly; partition {stalled['partition']} stalls on day {stalled['from_day']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(OUT)
    print(OUT)


if __name__ == "__main__":
    main()
