"""The suite profile (tools/suite_profile.py) charges a test with the CPU of the processes it
ran, and its report sums them by module: checked on a real pytest run in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tools.suite_profile import main, per_module

REPO_ROOT = Path(__file__).resolve().parents[3]

BURNING_TESTS = '''
import subprocess, sys

BURN = "import time\\nend = time.process_time() + 1.0\\nwhile time.process_time() < end: pass"

def test_runs_a_child_that_computes_a_second():
    subprocess.run([sys.executable, "-c", BURN], check=True)

def test_does_nothing():
    pass
'''


def test_a_childs_cpu_is_charged_to_the_test_that_ran_it_and_the_report_sums_by_module(tmp_path, capsys):
    (tmp_path / "test_burning.py").write_text(BURNING_TESTS)
    recorded = tmp_path / "profile"
    env = {**os.environ, "SUITE_PROFILE_DIR": str(recorded), "PYTHONPATH": str(REPO_ROOT),
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.pop("PYTEST_XDIST_WORKER", None)
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-c", os.devnull, "--rootdir", str(tmp_path),
                    "-p", "no:cacheprovider", "-p", "tools.suite_profile", str(tmp_path / "test_burning.py")],
                   cwd=tmp_path, env=env, check=True, capture_output=True, timeout=120)

    rows = {line.split("\t")[0]: line.split("\t") for line in (recorded / "main.tsv").read_text().splitlines()}
    burning = rows["test_burning.py::test_runs_a_child_that_computes_a_second"]
    idle = rows["test_burning.py::test_does_nothing"]
    assert float(burning[2]) >= 0.95 and float(burning[1]) >= 0.95
    assert float(idle[2]) < 0.5
    [(module, cpu, wall)] = per_module(recorded)
    assert module == "test_burning.py" and cpu == float(burning[2]) + float(idle[2])

    assert main(["report", "--dir", str(recorded)]) == 0
    assert "test_burning.py" in capsys.readouterr().out
    assert main(["report", "--dir", str(tmp_path / "nothing")]) == 1
