"""The distribution as a platform team installs it: ``python -m build`` makes an sdist and a
wheel; a fresh virtual environment gets the wheel alone (its dependencies from the package
index); there ``stateful-streams`` runs, Airflow lists the provider, and the DAG of README.md
parses (``airflow dags list``) without import errors.

Dependencies are pinned to this environment's versions (``pip freeze`` as constraints) so
pip reuses the wheels in its cache and the test does not depend on what the index released
today; ``--no-compile`` skips byte-compiling 1 GB of packages nobody runs here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest

import airflow_stateful_provider
from tools.local_processes import process_cpu_seconds
from tools.waits import wait_progressing

pytestmark = pytest.mark.wheel

REPO_ROOT = Path(__file__).resolve().parents[2]
_PYTHON = f"cp{sys.version_info.major}{sys.version_info.minor}"
#: setuptools' tag of a wheel with a C extension: cp311-cp311-linux_x86_64 on CPython 3.11, Linux x86-64.
WHEEL_TAG = f"{_PYTHON}-{_PYTHON}-{sysconfig.get_platform().replace('-', '_').replace('.', '_')}"
EXTENSION_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
#: A step (building, installing about 140 wheels, migrating an Airflow database) fails when its
#: process gained no CPU time for this long. Alone, the install takes 69 s on 2 cores; inside the
#: suite, with the other workers' brokers and instances beside it, it passed 600 s: a fixed
#: deadline fails a slow machine, a stalled process shows as one that gets no CPU time.
STEP_STALL_S = 120


def readme_dag() -> tuple[str, str]:
    """(dag_id, source) of the DAG README.md shows a new DAG author."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    source = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    dag_id = re.search(r'DAG\(\s*(?:dag_id=)?"([^"]+)"', source).group(1)
    return dag_id, source


def run(command: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    """Run a step to its end; it fails when it exits non-zero or stops gaining CPU time (STEP_STALL_S)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, env=env, cwd=cwd)
        try:
            wait_progressing(lambda: process.poll() is not None,
                             lambda: process_cpu_seconds(process.pid, descendants=True), " ".join(command)[:200],
                             measure="CPU seconds of the step", stall=STEP_STALL_S, interval=1.0)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    assert process.returncode == 0, f"{' '.join(command)} exited {process.returncode}:\n{stdout[-3000:]}" \
                                    f"\n{stderr[-3000:]}"
    return stdout


def json_output(stdout: str):
    """The JSON an ``airflow ... -o json`` command printed after its log lines (Airflow logs
    warnings, such as a missing graphviz, to stdout)."""
    lines = stdout.splitlines()
    for start, line in enumerate(lines):
        if line.startswith(("[", "{")):
            try:
                return json.loads("\n".join(lines[start:]))
            except json.JSONDecodeError:
                continue
    raise AssertionError(f"no JSON in the output:\n{stdout[-3000:]}")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    dist = tmp_path_factory.mktemp("dist")
    # built from a copy: a build writes an egg-info into the source tree (see the Makefile's
    # install step for why the repository must not hold one)
    source = tmp_path_factory.mktemp("source") / "repo"
    shutil.copytree(REPO_ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".local", "*.egg-info", "build", "dist", "__pycache__", ".mypy_cache", ".ruff_cache",
        ".hypothesis", "lib", "*.so"))  # lib: tools/kafka/lib, the broker's jars; *.so: built in place
    run([sys.executable, "-m", "build", "--outdir", str(dist), str(source)])
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


def test_build_makes_a_wheel_and_an_sdist_with_the_license(built):
    version = airflow_stateful_provider.__version__
    # a wheel of this platform: it carries the C loops of the batch decoder and of the restoration
    assert built["wheel"].name == f"airflow_stateful_provider-{version}-{WHEEL_TAG}.whl"
    with zipfile.ZipFile(built["wheel"]) as wheel:
        names = set(wheel.namelist())
    assert {"airflow_stateful_provider/py.typed", "airflow_stateful_provider/spark/app.py",
            "airflow_stateful_provider/streams/kafka/_native_batch_decoding.pyi",
            f"airflow_stateful_provider/streams/kafka/_native_batch_decoding{EXTENSION_SUFFIX}",
            "airflow_stateful_provider/streams/state/keyvalue/_native_changelog_batch.pyi",
            f"airflow_stateful_provider/streams/state/keyvalue/_native_changelog_batch{EXTENSION_SUFFIX}",
            f"airflow_stateful_provider-{version}.dist-info/licenses/LICENSE"} <= names
    assert not [n for n in names if n.startswith(("tests/", "tools/", "dags/", "bench/"))]
    with tarfile.open(built["sdist"]) as sdist:
        members = {Path(m).relative_to(f"airflow_stateful_provider-{version}").as_posix() for m in sdist.getnames()
                   if "/" in m}
    assert {"LICENSE", "README.md", "pyproject.toml", "setup.py", "airflow_stateful_provider/py.typed",
            "airflow_stateful_provider/streams/kafka/_native_batch_decoding.c",
            "airflow_stateful_provider/streams/state/keyvalue/_native_changelog_batch.c"} <= members


@pytest.mark.timeout(2400)  # a safety net only: each step fails once it stalls (STEP_STALL_S)
def test_a_fresh_environment_with_only_the_wheel_runs_the_cli_lists_the_provider_and_parses_the_readme_dag(
        built, tmp_path):
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    constraints = tmp_path / "constraints.txt"
    frozen = run([sys.executable, "-m", "pip", "freeze", "--exclude", "airflow-stateful-provider"])
    constraints.write_text("\n".join(line for line in frozen.splitlines() if not line.startswith("-e ")))
    bin_dir = venv / "bin"
    run([str(bin_dir / "pip"), "install", "--quiet", "--disable-pip-version-check", "--no-compile",
         "--prefer-binary", "-c", str(constraints), str(built["wheel"])])

    version = airflow_stateful_provider.__version__
    assert run([str(bin_dir / "stateful-streams"), "--version"]).strip() == f"stateful-streams {version}"
    for module in ("streams.kafka.batch_decoding", "streams.state.keyvalue.changelog_batch"):  # the C loops
        assert run([str(bin_dir / "python"), "-c", f"from airflow_stateful_provider.{module} "
                    "import NATIVE; print(NATIVE is not None)"]).strip() == "True", module
    assert "usage: stateful-streams" in run([str(bin_dir / "stateful-streams"), "--help"])

    dags = tmp_path / "dags"
    dags.mkdir()
    dag_id, source = readme_dag()
    (dags / "readme_dag.py").write_text(source)
    # Only the fresh environment: no PYTHONPATH to this checkout, an Airflow home of its own.
    env = {"PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin", "HOME": str(tmp_path), "AIRFLOW_HOME": str(tmp_path / "home"),
           "AIRFLOW__CORE__DAGS_FOLDER": str(dags), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    providers = json_output(run([str(bin_dir / "airflow"), "providers", "list", "-o", "json"], env=env, cwd=tmp_path))
    assert {"package_name": "airflow-stateful-provider", "version": version} in [
        {k: p[k] for k in ("package_name", "version")} for p in providers]
    run([str(bin_dir / "airflow"), "db", "migrate"], env=env, cwd=tmp_path)
    listed = json_output(run([str(bin_dir / "airflow"), "dags", "list", "--local", "-o", "json"], env=env,
                             cwd=tmp_path))
    assert [d["dag_id"] for d in listed] == [dag_id]
    errors = run([str(bin_dir / "airflow"), "dags", "list-import-errors", "--local", "-o", "json"], env=env,
                 cwd=tmp_path)
    assert json_output(errors) == [], errors
