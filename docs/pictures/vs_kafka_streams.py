"""Draws docs/pictures/vs-kafka-streams.png: records per CPU-second of this engine and of
Kafka Streams at both guarantees, with the settings users run (bench/vs_kafka_streams.py
without options: at-least-once at 5 s commits on 1M clicks, exactly_once_v2 at 100 ms on
300k clicks).

The result line of the run is kept next to the picture (vs-kafka-streams.json, with the
CPU model and date) so it can be redrawn without measuring again; the bench draws it.

    .venv/bin/python docs/pictures/vs_kafka_streams.py            # measure (about 6 minutes), then draw
    .venv/bin/python docs/pictures/vs_kafka_streams.py --redraw   # draw the kept result

Needs Java, Maven and the broker jars (``make jars``) to measure, the bench extra
(matplotlib) to draw.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
OUT = HERE / "vs-kafka-streams.png"
RESULT = HERE / "vs-kafka-streams.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redraw", action="store_true", help="draw the kept result, do not measure")
    args = parser.parse_args()
    bench = [sys.executable, "-m", "bench.vs_kafka_streams", "--chart", str(OUT)]
    if args.redraw:
        return subprocess.run([*bench, "--redraw", str(RESULT)], cwd=REPO_ROOT).returncode
    run = subprocess.run(bench, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    lines = run.stdout.strip().splitlines()
    if not lines or not lines[-1].startswith("{"):
        raise SystemExit(f"bench/vs_kafka_streams.py failed ({run.returncode}):\n{run.stdout[-2000:]}")
    RESULT.write_text(lines[-1] + "\n")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
