"""Draws docs/pictures/architecture.svg: what runs where, and what talks to what.

    .venv/bin/python docs/pictures/architecture.py      # needs the docs extra (matplotlib)
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

OUT = Path(__file__).resolve().parent / "architecture.svg"
AIRFLOW, SPARK, KAFKA, STORAGE, ONCALL = "#dceefb", "#fde8d0", "#e4f4e0", "#efe6f7", "#f4f4f4"


def box(ax, x, y, w, h, title, lines=(), color="#ffffff", title_size=11):
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.08", fc=color, ec="#555555",
                                lw=1.1))
    ax.text(x + w / 2, y + h - 0.18, title, ha="center", va="top", fontsize=title_size, weight="bold")
    for i, line in enumerate(lines):
        ax.text(x + 0.12, y + h - 0.55 - i * 0.3, line, ha="left", va="top", fontsize=8.5)


def arrow(ax, start, end, label="", both=False, label_xy=None, bend=0.0):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="<|-|>" if both else "-|>", mutation_scale=12, lw=1.2,
                                 color="#333333", shrinkA=2, shrinkB=2, connectionstyle=f"arc3,rad={bend}"))
    if label:
        x, y = label_xy or ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2 + 0.08)
        ax.text(x, y, label, ha="center", va="bottom", fontsize=8, style="italic", color="#222222")


def main() -> None:
    plt.rcParams["svg.hashsalt"] = "architecture"
    fig, ax = plt.subplots(figsize=(12, 7))
    ax.set_xlim(0, 12)
    ax.set_ylim(0, 7)
    ax.axis("off")

    box(ax, 0.2, 3.4, 3.3, 2.6, "Airflow", ["SubmitTopologyOperator", "RestorationSensor, StandbyLagSensor",
                                              "  (deferrable: in the triggerer)", "store and snapshot maintenance",
                                              "connection stateful_streams"], AIRFLOW)
    box(ax, 0.2, 0.75, 3.3, 1.5, "On-call", ["stateful-streams status | stop |", "  stores | snapshots",
                                             "runbook"], ONCALL)
    box(ax, 4.3, 1.9, 3.6, 4.1, "Spark", [], SPARK)
    box(ax, 4.5, 4.65, 3.2, 0.95, "driver: supervisor", ["one job per instance, restarts, stop"], "#ffffff", 9.5)
    box(ax, 4.5, 3.25, 3.2, 1.15, "executor: instance 0", ["tasks 0_0, 0_2 (active)", "0_1 (standby)  RocksDB"],
        "#ffffff", 9.5)
    box(ax, 4.5, 2.05, 3.2, 0.95, "executor: instance 1", ["tasks 0_1 (active), 0_0 (standby)"], "#ffffff", 9.5)
    box(ax, 8.7, 1.9, 3.1, 4.1, "Kafka", ["input and output topics", "<app>-<store>-changelog",
                                            "<app>-...-repartition", "consumer group <app>", "",
                                            "<app>-status", "  state, restore progress, lag", "",
                                            "<app>-control", "  stop, checkpoint, maintenance"], KAFKA)
    box(ax, 8.7, 0.1, 3.1, 1.3, "Shared storage (optional)", ["store snapshots: s3://, gs://, file://",
                                                            "a moved task restores only the tail"], STORAGE, 10)

    arrow(ax, (3.5, 5.15), (4.5, 5.15), "spark-submit")
    arrow(ax, (7.7, 3.85), (8.7, 3.85), "records,", both=True, label_xy=(8.2, 4.05))
    ax.text(8.2, 3.62, "changelogs", ha="center", va="top", fontsize=8, style="italic")
    arrow(ax, (7.7, 2.55), (8.7, 2.55), both=True)
    arrow(ax, (8.7, 5.15), (7.7, 5.15), "<app>-control")
    arrow(ax, (3.5, 5.75), (8.7, 5.75), "status documents, commands (hook)", both=True, bend=-0.22,
          label_xy=(6.1, 6.62))
    arrow(ax, (3.5, 1.3), (8.7, 2.15), "status, commands (CLI)", both=True, bend=0.18, label_xy=(6.1, 1.05))
    arrow(ax, (7.7, 2.3), (8.7, 1.0), "snapshots", both=True, label_xy=(8.55, 1.55))
    ax.text(0.2, 0.05, "a streams application runs until it is stopped:\nthe DAG run ends, the instances go on",
            ha="left", va="bottom", fontsize=8.5, color="#444444")
    fig.savefig(OUT, format="svg", bbox_inches="tight", metadata={"Date": None})
    print(OUT)


if __name__ == "__main__":
    main()
