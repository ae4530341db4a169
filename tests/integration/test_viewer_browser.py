"""viewer.html in a real headless Chromium: loads without console errors, shows a trajectory,
keeps model output as text, and renders to a non-trivial screenshot.

Chromium is driven over the DevTools protocol on ``--remote-debugging-pipe`` (file descriptors
3 and 4, NUL-separated JSON): stdlib only, no network port, no websocket client. Console errors
are the protocol's ``Runtime.exceptionThrown``, ``Runtime.consoleAPICalled`` (error/assert) and
``Log.entryAdded`` (error) events; negative controls inject errors to prove they are caught.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentmath.agent.trajectory import Segment, Trajectory
from agentmath.cli.main import app
from agentmath.sandbox.result import ExecResult

pytestmark = pytest.mark.integration

CHROMIUM = os.environ.get("AGENTMATH_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--window-size=1280,900",
         "--remote-debugging-pipe"]
EVIL = "</script><b>x</b>"
TIMEOUT_S = 60.0


class Browser:
    """A headless Chromium and one attached page, spoken to over the DevTools pipe."""

    def __init__(self, binary: str, profile: Path) -> None:
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def wire_fds() -> None:  # in the child: the pipe ends become fds 3 (in) and 4 (out)
            high_r = fcntl.fcntl(to_child_r, fcntl.F_DUPFD_CLOEXEC, 10)
            high_w = fcntl.fcntl(from_child_w, fcntl.F_DUPFD_CLOEXEC, 10)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            close_fds=False, preexec_fn=wire_fds)  # only fcntl/dup2 run in the child
        os.close(to_child_r)
        os.close(from_child_w)
        self.events: list[dict[str, Any]] = []
        self._inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._next_id = 0
        self._stderr: list[bytes] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self._stderr.extend(self.proc.stderr or []),
                         daemon=True).start()
        self.session = self._attach()

    def _read(self) -> None:
        buffer = b""
        while chunk := os.read(self._from_child, 1 << 16):
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            for message in messages:
                self._inbox.put(json.loads(message))
        self._inbox.put(None)

    def send(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None) -> dict[str, Any]:
        """Send one command and wait for its result; events seen meanwhile are kept."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._get()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def _get(self) -> dict[str, Any]:
        try:
            reply = self._inbox.get(timeout=TIMEOUT_S)
        except queue.Empty:
            raise TimeoutError(f"no reply from chromium: {self.stderr_text()[-2000:]}") from None
        if reply is None:
            raise RuntimeError(f"chromium closed the pipe: {self.stderr_text()[-2000:]}")
        return reply

    def stderr_text(self) -> str:
        return b"".join(self._stderr).decode(errors="replace")

    def _attach(self) -> str:
        targets = self.send("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        session = self.send("Target.attachToTarget",
                            {"targetId": page["targetId"], "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self.send(f"{domain}.enable", session=session)
        return session

    def open(self, url: str) -> None:
        """Navigate and wait for the load event, then let the page settle a moment."""
        self.send("Page.navigate", {"url": url}, self.session)
        deadline = time.monotonic() + TIMEOUT_S
        while not any(e["method"] == "Page.loadEventFired" for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError("page did not load")
            self.events.append(self._get())
        self.evaluate("new Promise(r => setTimeout(r, 200))")

    def evaluate(self, expression: str) -> Any:
        """The value of a JS expression in the page (promises awaited)."""
        result = self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                                "returnByValue": True}, self.session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def console_errors(self) -> list[str]:
        """Every uncaught exception, console.error/assert and error log entry seen so far."""
        errors = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                errors.append(details.get("exception", {}).get("description")
                              or details.get("text", "exception"))
            elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
                errors.append(" ".join(str(a.get("value", a.get("description")))
                                       for a in params["args"]))
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                errors.append(params["entry"]["text"])
        return errors

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", {"format": "png"}, self.session)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=20)
        os.close(self._to_child)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        message = (f"{CHROMIUM} not found; install it with: apt-get install -y chromium "
                   "(or set AGENTMATH_CHROMIUM to a Chromium binary)")
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the browser test: {message}")
        pytest.skip(message)
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    instance = Browser(CHROMIUM, profile)
    yield instance
    instance.close()


def _sample(pid: str, index: int, kind: str, problem: str) -> dict[str, Any]:
    code = {"ok": "import sympy as sp\nx = sp.Symbol('x')  # unknown\nprint(sp.solve(x**2 - 4, x))",
            "error": "print(1/0)", "timeout": "while True:\n    pass"}[kind]
    result = {"ok": ExecResult(stdout="[-2, 2]\n", duration_ms=12.0),
              "error": ExecResult(error="ZeroDivisionError: division by zero",
                                  error_type="ZeroDivisionError", duration_ms=1.0),
              "timeout": ExecResult(timed_out=True, state_lost=True, duration_ms=10000.0)}[kind]
    traj = Trajectory(problem=problem, segments=[
        Segment("prompt", f"User: {problem}", [1, 2, 3]),
        Segment("model", f"I will compute it. {EVIL}\n```python\n{code}\n```\n", [4] * 30),
        Segment("tool", "```output\n...\n```", [5] * 6, code=code, result=result),
        Segment("model", "The answer is \\boxed{2}.", [6] * 7)],
        finish_reason="answered", answer="2", duration_ms=850.0)
    return {"problem_id": pid, "sample_index": index, "gold": "2",
            "extracted": "2" if kind == "ok" else "-2", "correct": kind == "ok",
            "model_tokens": traj.model_tokens, "tool_tokens": 6,
            "prompt_tokens": 3, "total_tokens": traj.total_tokens, "tool_calls": 1,
            "tool_errors": int(kind == "error"), "tool_timeouts": int(kind == "timeout"),
            "output_truncations": 0, "finish_reason": "answered", "duration_ms": 850.0,
            "problem": problem, "problem_meta": {"level": 2, "subject": "Algebra"},
            "trajectory": traj.to_dict()}


def _write_run(root: Path, name: str) -> Path:
    run = root / name
    run.mkdir()
    problems = [("test/algebra/1.json", "Find the positive root of x^2 = 4."),
                ("test/algebra/2.json", "What is <b>bold</b> 2 & 2 / 1?")]
    samples = [_sample(pid, i, kind, text) for pid, text in problems
               for i, kind in enumerate(("ok", "error", "timeout"))]
    stat = {"value": 1 / 3, "stderr": 0.2, "ci95": [0.0, 0.73]}
    metrics = {"n_problems": 2, "n_samples": 6, "k": 3, "avg": stat, "maj": stat,
               "pass": {"1": 1 / 3, "3": 1.0}, "tokens": {"model_mean": 37.0}}
    (run / "config.json").write_text(json.dumps({"name": name, "model": "org/tiny"}))
    (run / "metrics.json").write_text(json.dumps(metrics))
    (run / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    return run


@pytest.fixture
def viewer(tmp_path: Path) -> Path:
    out = tmp_path / "report"
    runs = [str(_write_run(tmp_path, name)) for name in ("run-a", "run-b")]
    result = CliRunner().invoke(app, ["report", *runs, "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    return out / "viewer.html"


def test_viewer_in_chromium(browser: Browser, viewer: Path, tmp_path: Path) -> None:
    browser.open(viewer.as_uri() + "#r=1&p=0&s=1")
    assert browser.console_errors() == []
    text = browser.evaluate("document.getElementById('main').innerText")
    assert "Find the positive root of x^2 = 4." in text
    assert browser.evaluate("document.querySelectorAll('#main pre.code span.n').length") > 0
    assert "ZeroDivisionError: division by zero" in browser.evaluate(
        "document.querySelector('#main pre.err').textContent")
    assert EVIL in text  # model output shown as text ...
    assert browser.evaluate("document.querySelectorAll('#main b').length") == \
        browser.evaluate("document.querySelectorAll('#main .kv b').length")  # ... not as HTML
    assert browser.evaluate("document.getElementById('run').selectedOptions[0].text") == "run-b"
    shot = browser.screenshot(tmp_path / "viewer.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    if os.environ.get("AGENTMATH_SCREENSHOT"):  # keep a copy to look at
        shutil.copy(shot, os.environ["AGENTMATH_SCREENSHOT"])


def test_viewer_interactions(browser: Browser, viewer: Path) -> None:
    browser.open(viewer.as_uri())
    click: Callable[[str], Any] = lambda js: browser.evaluate(js + ".click()")  # noqa: E731
    classes = browser.evaluate("[...document.querySelectorAll('#main pre.code span')]"
                               ".map(s => s.className + ':' + s.textContent)")
    assert {"k:import", "k:as", "c:# unknown", "s:'x'", "n:2", "b:print"} <= set(classes)
    click("document.querySelectorAll('#plist li')[1]")
    assert "<b>bold</b> 2 & 2 / 1?" in browser.evaluate(
        "document.querySelector('.problem-text').textContent")
    click("document.querySelectorAll('#samples button')[2]")
    assert browser.evaluate("document.querySelector('.tool.timeout .badge.warn').textContent") \
        == "timed out"
    browser.evaluate("var s = document.getElementById('search'); s.value = 'positive root';"
                     "s.dispatchEvent(new Event('input'))")
    assert browser.evaluate("document.querySelectorAll('#plist li').length") == 1
    assert browser.console_errors() == []


@pytest.mark.parametrize("injected, expected", [
    ("<script>console.error('deliberate console error')</script>", "deliberate console error"),
    ("<script>null.boom()</script>", "TypeError"),
])
def test_console_errors_are_detected(browser: Browser, viewer: Path, injected: str,
                                     expected: str) -> None:
    """Negative control: errors injected into the page must be reported."""
    broken = viewer.with_name("broken.html")
    broken.write_text(viewer.read_text().replace("</body>", injected + "</body>"))
    browser.open(broken.as_uri())
    errors = browser.console_errors()
    assert any(expected in error for error in errors), errors
