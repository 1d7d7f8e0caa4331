"""A real headless Chromium for tests, driven over the Chrome DevTools Protocol (CDP).

Debian's ``chromium`` package (``tools/ensure_chromium.sh``, the first step of ``make test``
and ``.ci/run``, installs it when missing) is started headless with a new empty profile and
``--remote-debugging-port=0``; the port it picked is read from the ``DevToolsActivePort`` file it
writes into the profile. One page target is attached and
driven with a handful of CDP commands (navigate, set a cookie, evaluate JavaScript, take a
screenshot) over a websocket (``websockets``' synchronous client). No WebDriver, no Node.

    with HeadlessChromium(tmp_path / "profile") as browser:
        browser.set_cookie("_token", token, "http://127.0.0.1:8080")
        browser.navigate("http://127.0.0.1:8080/stateful-streams/")
        rows = browser.evaluate("document.querySelectorAll('tr[data-task]').length")
        browser.screenshot(Path("page.png"))
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from tools.local_processes import die_with_parent

__all__ = ["BrowserError", "HeadlessChromium", "chromium_executable"]

#: Flags that make Chromium run headless in a container, quietly, with nothing from the network.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--remote-debugging-port=0")


class BrowserError(RuntimeError):
    """Chromium could not be started, or a CDP command failed."""


def chromium_executable() -> str | None:
    """Debian's ``chromium`` (or another Chromium/Chrome on PATH), or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class HeadlessChromium:
    """One headless Chromium with one page (see module docstring)."""

    def __init__(self, profile_dir: Path, *, width: int = 1440, height: int = 900, start_timeout: float = 60) -> None:
        self.profile_dir = Path(profile_dir)
        self.width, self.height = width, height
        self.start_timeout = start_timeout
        self.process: subprocess.Popen | None = None
        self._socket: Any = None
        self._ids = itertools.count(1)
        self.log_path = self.profile_dir.parent / f"{self.profile_dir.name}-chromium.log"

    def start(self) -> HeadlessChromium:
        executable = chromium_executable()
        if executable is None:
            raise BrowserError("no chromium on PATH: install Debian's chromium package (apt-get install -y chromium)")
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [executable, *FLAGS, f"--user-data-dir={self.profile_dir}",
                 f"--window-size={self.width},{self.height}", "about:blank"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        port = self._devtools_port()
        self._socket = self._connect_page(port)
        self.command("Page.enable")
        self.command("Network.enable")
        self.command("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height,
                     deviceScaleFactor=1, mobile=False)
        return self

    def _devtools_port(self) -> int:
        active = self.profile_dir / "DevToolsActivePort"
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise BrowserError(f"chromium exited with {self.process.returncode}:\n{self.log_tail()}")
            if active.exists():
                lines = active.read_text().splitlines()
                if lines and lines[0].strip().isdigit():
                    return int(lines[0])
            time.sleep(0.1)
        raise BrowserError(f"chromium wrote no DevToolsActivePort within {self.start_timeout:.0f}s:\n"
                           f"{self.log_tail()}")

    def _connect_page(self, port: int) -> Any:
        from websockets.sync.client import connect

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as response:
            targets = json.loads(response.read())
        pages = [t for t in targets if t.get("type") == "page"]
        if not pages:
            raise BrowserError(f"chromium has no page target: {targets}")
        # entered here, closed in close(): the connection lives as long as the browser
        return connect(pages[0]["webSocketDebuggerUrl"], max_size=64 * 1024 * 1024, open_timeout=10).__enter__()

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return "(no chromium log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    # ---------------------------------------------------------------- CDP

    def command(self, method: str, timeout: float = 30, **params: Any) -> dict:
        """Send one CDP command and return its result (events received meanwhile are dropped)."""
        if self._socket is None:
            raise BrowserError("the browser is not started")
        message_id = next(self._ids)
        self._socket.send(json.dumps({"id": message_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"{method}: no answer within {timeout:.0f}s")
            answer = json.loads(self._socket.recv(timeout=left))
            if answer.get("id") != message_id:
                continue
            if "error" in answer:
                raise BrowserError(f"{method} failed: {answer['error']}")
            return answer.get("result", {})

    def navigate(self, url: str) -> None:
        """Open ``url`` and wait until its document has loaded."""
        result = self.command("Page.navigate", url=url)
        if result.get("errorText"):
            raise BrowserError(f"navigating to {url} failed: {result['errorText']}")
        self.wait_for("document.readyState === 'complete'", f"{url} to load", timeout=60)

    def set_cookie(self, name: str, value: str, url: str) -> None:
        result = self.command("Network.setCookie", name=name, value=value, url=url)
        if not result.get("success", True):
            raise BrowserError(f"cookie {name} for {url} refused")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaited when it is a promise)."""
        result = self.command("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r} raised: {result['exceptionDetails'].get('exception', result)}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, what: str, *, timeout: float) -> Any:
        """Until ``expression`` is truthy in the page; returns its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                text = self.evaluate("document.body ? document.body.innerText : ''")
                raise BrowserError(f"{what}: not within {timeout:.0f}s ({expression!r} is {value!r}); page text:\n"
                                   f"{text}")
            time.sleep(0.2)

    def screenshot(self, path: Path, *, full_page: bool = True) -> Path:
        """A PNG of the page (the whole page when ``full_page``), written to ``path``."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            height = int(self.evaluate("Math.ceil(document.documentElement.scrollHeight)") or self.height)
            params["clip"] = {"x": 0, "y": 0, "width": self.width, "height": max(height, 1), "scale": 1}
            params["captureBeyondViewport"] = True
        data = self.command("Page.captureScreenshot", **params)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    # ---------------------------------------------------------------- stop

    def close(self) -> None:
        if self._socket is not None:
            try:
                self._socket.close()
            finally:
                self._socket = None
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(15)
        self.process = None

    def __enter__(self) -> HeadlessChromium:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
