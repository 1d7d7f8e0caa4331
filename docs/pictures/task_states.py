"""Draws docs/pictures/task-states.svg: the states of a task on an instance, as the status
document reports them (created, restoring, running, suspended, state_lost), and what moves
a task between them.

    .venv/bin/python docs/pictures/task_states.py      # needs the docs extra (matplotlib)
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

OUT = Path(__file__).resolve().parent / "task-states.svg"

#: state -> (x, y, fill colour, what it means)
STATES = {
    "created": (1.2, 3.0, "#f4f4f4", "assigned; stores not open yet"),
    "restoring": (4.4, 3.0, "#fde8d0", "replaying its changelogs\ninto the stores"),
    "running": (7.6, 3.0, "#e4f4e0", "processing records"),
    "suspended": (6.0, 0.9, "#efe6f7", "revoked in a rebalance;\nstores stay open"),
    "state_lost": (2.4, 0.9, "#f9d6d5", "refused: its changelog lost\nwhat its stores held"),
}
WIDTH, HEIGHT = 2.3, 1.1
BOXES: dict = {}


def state(ax, name):
    x, y, colour, meaning = STATES[name]
    BOXES[name] = ax.add_patch(FancyBboxPatch((x - WIDTH / 2, y - HEIGHT / 2), WIDTH, HEIGHT,
                                              boxstyle="round,pad=0.02,rounding_size=0.15", fc=colour, ec="#444444",
                                              lw=1.2))
    ax.text(x, y + 0.2, name, ha="center", va="center", fontsize=12, weight="bold", family="monospace")
    ax.text(x, y - 0.22, meaning, ha="center", va="center", fontsize=7.5)


def transition(ax, a, b, label, bend=0.0, label_xy=None, start=None, end=None):
    (xa, ya, *_), (xb, yb, *_) = STATES[a], STATES[b]
    ax.add_patch(FancyArrowPatch(start or (xa, ya), end or (xb, yb), arrowstyle="-|>", mutation_scale=14, lw=1.3,
                                 color="#333333", connectionstyle=f"arc3,rad={bend}", patchA=BOXES[a],
                                 patchB=BOXES[b], shrinkA=2, shrinkB=2))
    x, y = label_xy or ((xa + xb) / 2, (ya + yb) / 2 + 0.12)
    ax.text(x, y, label, ha="center", va="bottom", fontsize=8.5, style="italic")


def main() -> None:
    plt.rcParams["svg.hashsalt"] = "task-states"
    fig, ax = plt.subplots(figsize=(9.6, 4.6))
    ax.set_xlim(-0.2, 9.2)
    ax.set_ylim(-0.1, 4.7)
    ax.axis("off")
    for name in STATES:
        state(ax, name)
    ax.annotate("", xy=(0.1, 3.0), xytext=(-0.2, 3.0), arrowprops={"arrowstyle": "-|>", "color": "#333333"})
    transition(ax, "created", "restoring", "", start=(2.35, 3.0), end=(3.25, 3.0))
    ax.text(2.8, 3.65, "stores opened: local state,\na snapshot, or empty", ha="center", va="bottom", fontsize=8.5,
            style="italic")
    transition(ax, "restoring", "running", "", start=(5.55, 3.0), end=(6.45, 3.0))
    ax.text(6.0, 3.65, "its own changelogs\nread to their end", ha="center", va="bottom", fontsize=8.5,
            style="italic")
    transition(ax, "running", "suspended", "revoked", label_xy=(7.45, 1.95))
    transition(ax, "restoring", "suspended", "revoked", start=(4.85, 2.45), end=(5.75, 1.45),
               label_xy=(5.75, 2.0))
    transition(ax, "suspended", "restoring", "assigned again", start=(5.3, 1.45), end=(4.4, 2.45),
               label_xy=(4.2, 1.75))
    transition(ax, "created", "state_lost", "checkpoint past what the\nchangelog holds (on_changelog_loss=fail)",
               start=(1.4, 2.45), end=(2.1, 1.45), label_xy=(0.55, 1.75))
    ax.text(4.6, 4.5, "Closed, a task leaves any state (revoked for good, the instance stops). "
                      "A standby stays in restoring, applying its changelogs as they grow.",
            ha="center", va="center", fontsize=8.5, color="#444444")
    fig.savefig(OUT, format="svg", bbox_inches="tight", metadata={"Date": None})
    print(OUT)


if __name__ == "__main__":
    main()
