"""Draws docs/pictures/restore-times.svg: a cold restore's wall-clock time from the changelog
alone and from a snapshot plus the changelog tail, for changelogs of growing length.

Each point is one run of bench/snapshot_restore.py (its own broker; a key-value store of
``KEYS`` keys; the snapshot taken ``TAIL`` records before the end); the results are kept
next to the picture (restore-times.json) so it can be redrawn without measuring again.

    .venv/bin/python docs/pictures/restore_times.py            # measure (several minutes), then draw
    .venv/bin/python docs/pictures/restore_times.py --redraw   # draw the kept results

Needs Java and the broker jars (``make jars``) to measure, the docs extra (matplotlib) to draw.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
OUT = HERE / "restore-times.svg"
RESULTS = HERE / "restore-times.json"
KEYS, TAIL = 200_000, 20_000
CHANGELOG_RECORDS = (500_000, 1_000_000, 2_000_000)


def measure() -> list[dict]:
    results = []
    for records in CHANGELOG_RECORDS:
        print(f"bench/snapshot_restore.py --records {records:,}", file=sys.stderr)
        run = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "snapshot_restore.py"), "--keys", str(KEYS),
                              "--records", str(records), "--tail", str(TAIL)],
                             cwd=REPO_ROOT, capture_output=True, text=True)
        lines = run.stdout.strip().splitlines()
        if not lines or not lines[-1].startswith("{"):
            raise SystemExit(f"bench/snapshot_restore.py failed ({run.returncode}):\n{run.stdout[-2000:]}"
                             f"\n{run.stderr[-2000:]}")
        result = json.loads(lines[-1])
        if not result["identical"]:
            raise SystemExit(f"the two restores gave different stores: {result}")
        results.append(result)
    return results


def draw(results: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "restore-times"
    records = [r["records"] for r in results]
    changelog = [r["changelog_only"]["seconds"] for r in results]
    snapshot = [r["with_snapshot"]["seconds"] for r in results]
    fig, ax = plt.subplots(figsize=(8, 4.6))
    ax.plot(records, changelog, marker="o", linewidth=2, label="changelog alone (every record replayed)")
    ax.plot(records, snapshot, marker="s", linewidth=2,
            label=f"snapshot + changelog tail ({results[0]['tail']:,} records)")
    for x, y in zip(records, changelog, strict=True):
        ax.annotate(f"{y:.2f} s", (x, y), textcoords="offset points", xytext=(0, 8), ha="center", fontsize=9)
    for x, y, r in zip(records, snapshot, results, strict=True):
        ax.annotate(f"{y:.2f} s ({r['speedup']:.0f}x faster)", (x, y), textcoords="offset points", xytext=(0, 8),
                    ha="center", fontsize=9)
    ax.set_xlabel("changelog records (one partition)")
    ax.set_ylabel("cold restore, seconds")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v / 1e6:g}M"))
    ax.set_xticks(records)
    ax.set_ylim(bottom=0)
    ax.set_title(f"Cold restore of a {results[0]['keys']:,}-key store on an empty state directory\n"
                 f"bench/snapshot_restore.py, {results[0]['machine']}, broker on the same host", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=9)
    fig.tight_layout()
    fig.savefig(OUT, format="svg", metadata={"Date": None})
    print(OUT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redraw", action="store_true", help=f"draw {RESULTS.name} without measuring")
    args = parser.parse_args()
    if args.redraw:
        results = json.loads(RESULTS.read_text())
    else:
        results = measure()
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    draw(results)


if __name__ == "__main__":
    main()
