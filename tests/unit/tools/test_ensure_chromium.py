"""tools/ensure_chromium.sh, the first step of `make test` and .ci/run: a present browser passes,
a missing one is installed with apt-get when that needs no password, and otherwise the run
stops at once with the command to install it. Run with a PATH of fake commands only."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
SCRIPT = REPO_ROOT / "tools" / "ensure_chromium.sh"


def fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


@pytest.fixture
def bin_dir(tmp_path):
    directory = tmp_path / "bin"
    directory.mkdir()
    return directory


def run(bin_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/bash", str(SCRIPT)], capture_output=True, text=True, timeout=30,
                          env={"PATH": str(bin_dir), "LOG": str(bin_dir / "calls.log")})


def test_a_present_browser_passes_without_installing(bin_dir):
    fake(bin_dir, "chromium-browser", "exit 0")
    fake(bin_dir, "apt-get", 'echo "apt-get $*" >> "$LOG"')
    result = run(bin_dir)
    assert result.returncode == 0, result.stderr
    assert not (bin_dir / "calls.log").exists()


def test_root_installs_debians_chromium_with_apt_get(bin_dir):
    fake(bin_dir, "id", "echo 0")
    # the fake apt-get "installs" chromium: the script checks it is on PATH afterwards
    chromium = bin_dir / "chromium"
    fake(bin_dir, "apt-get", f'echo "apt-get $*" >> "$LOG"; case "$*" in *install*) '
                             f'printf "#!/bin/sh\\nexit 0\\n" > {chromium}; /bin/chmod +x {chromium};; esac')
    result = run(bin_dir)
    assert result.returncode == 0, result.stderr
    assert (bin_dir / "calls.log").read_text().splitlines() == ["apt-get update -qq",
                                                               "apt-get install -y -qq chromium"]
    assert "installing Debian's chromium" in result.stderr


def test_without_root_or_passwordless_sudo_it_stops_with_the_command(bin_dir):
    fake(bin_dir, "id", "echo 1000")
    fake(bin_dir, "sudo", 'echo "sudo $*" >> "$LOG"; exit 1')  # sudo -n: a password would be needed
    fake(bin_dir, "apt-get", 'echo "apt-get $*" >> "$LOG"')
    result = run(bin_dir)
    assert result.returncode == 1
    assert "install it with: sudo sh -c 'apt-get update && apt-get install -y chromium'" in result.stderr
    assert (bin_dir / "calls.log").read_text().splitlines() == ["sudo -n true"]  # nothing installed


def test_without_apt_get_it_stops_naming_the_browsers_it_takes(bin_dir):
    fake(bin_dir, "id", "echo 0")
    result = run(bin_dir)
    assert result.returncode == 1
    assert "there is no apt-get here" in result.stderr and "google-chrome" in result.stderr


def test_make_test_and_ci_call_it_before_anything_else():
    dry = subprocess.run(["make", "-n", "test"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "MAKEFLAGS": ""})
    commands = [line for line in dry.stdout.splitlines() if line.strip()]
    assert commands[0] == "tools/ensure_chromium.sh", dry.stdout
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert ci.index("tools/ensure_chromium.sh") < ci.index("make test\n")
