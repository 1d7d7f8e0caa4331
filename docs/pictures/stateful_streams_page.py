"""Takes docs/pictures/stateful-streams-page.png: the "Stateful streams" page of the Airflow
plugin as a logged-in user sees it in a real headless Chromium, while the tasks of a
two-instance application restore. The integration test that checks the page takes it
(tests/integration/test_airflow_services.py, which starts a local broker, Airflow's services
and the application); this script runs that one test.

    .venv/bin/python docs/pictures/stateful_streams_page.py     # about two minutes

Needs Java and the broker jars (``make jars``), Airflow (the test extra) and Debian's
``chromium``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent / "stateful-streams-page.png"
TEST = "tests/integration/test_airflow_services.py::test_stateful_streams_page_in_chromium_while_a_task_restores"


def main() -> int:
    before = OUT.stat().st_mtime_ns if OUT.exists() else None
    code = subprocess.run([sys.executable, "-m", "pytest", TEST, "-q", "-p", "no:cacheprovider"],
                          cwd=REPO_ROOT, env={**os.environ, "STATEFUL_STREAMS_PAGE_SCREENSHOT": str(OUT)}).returncode
    if code == 0 and OUT.exists() and OUT.stat().st_mtime_ns != before:
        print(f"wrote {OUT}")
        return 0
    print(f"error: {OUT} was not written (the test exited {code})", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
