"""The sandbox as a service (agentmath/sandbox/service): auth, sessions, exactly-once cells,
idle expiry, bounds, body limits, validation, worker crashes, SandboxFusion compatibility and
graceful shutdown, against a real uvicorn server on a loopback socket."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from agentmath.config import SandboxConfig
from agentmath.sandbox.service import ServiceConfig, create_app
from tests.fixtures.procs import descendants
from tests.fixtures.sandbox_payloads import ESC

TOKENS = ("token-one", "token-two", "token-three")
SANDBOX = {"spare_workers": 1, "preload": ["math"], "timeout_s": 5, "max_sessions": 16}


@contextlib.contextmanager
def serve(tmp: Path, **overrides: Any) -> Iterator[tuple[str, uvicorn.Server, Any]]:
    """Run the service under uvicorn in a thread on 127.0.0.1:<free port>; yield its URL."""
    token_file = tmp / "tokens"
    token_file.write_text("# test tokens\n" + "\n".join(TOKENS) + "\n")
    config = ServiceConfig(token_file=token_file, sandbox=SandboxConfig(**SANDBOX), **overrides)
    app = create_app(config)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                           lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the service did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", server, app
    finally:
        server.should_exit = True
        thread.join(60)
        assert not thread.is_alive()


def client(url: str, token: str | None = TOKENS[0]) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=url, headers=headers, timeout=30)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serve(tmp_path_factory.mktemp("svc"), max_sessions_per_client=4,
               max_inflight_per_client=1, max_inflight_total=2, max_body_bytes=4096) as (url,
                                                                                        _, _):
        yield url


def run(http: httpx.Client, sid: str, cell: int, code: str, **extra: Any) -> httpx.Response:
    return http.post(f"/v1/sessions/{sid}/run", json={"code": code, "cell": cell, **extra})


def test_auth(service: str) -> None:
    assert httpx.get(f"{service}/health").json()["status"] == "ok"  # open
    for token in (None, "wrong", TOKENS[0] + "x", ""):
        with client(service, token) as http:
            for method, path in (("POST", "/v1/sessions"), ("GET", "/metrics"),
                                 ("POST", "/run_code"), ("POST", "/v1/sessions/x/run")):
                reply = http.request(method, path, json={"code": "print(1)",
                                                         "language": "python"})
                assert reply.status_code == 401 and reply.json()["error"], (token, path)
    assert httpx.get(f"{service}/health").json()["sessions"] == 0  # nothing was opened
    with client(service, TOKENS[1]) as http:
        sid = http.post("/v1/sessions").json()["session_id"]
        assert http.delete(f"/v1/sessions/{sid}").status_code == 204
    # HTTP Basic: the token as password (URL credentials) or as username
    for auth in (("agentmath", TOKENS[2]), (TOKENS[2], "")):
        reply = httpx.post(f"{service}/v1/sessions", auth=auth)
        assert reply.status_code == 201, auth
        httpx.delete(f"{service}/v1/sessions/{reply.json()['session_id']}", auth=auth)
    with client(service) as http:
        other = http.post("/v1/sessions").json()["session_id"]
        with client(service, TOKENS[1]) as http2:  # another client's session does not exist
            assert http2.get(f"/v1/sessions/{other}").status_code == 404
        metrics = http.get("/metrics")
        assert metrics.status_code == 200 and "agentmath_sandbox_cells_total" in metrics.text
        assert 'agentmath_sandbox_rejected_total{reason="auth"}' in metrics.text
        http.delete(f"/v1/sessions/{other}")


def test_run_route_outside_the_router(service: str) -> None:
    """POST /v1/sessions/{id}/run is dispatched by RunCellRoute (hotpath.py), not Starlette's
    router: the same replies, headers and metrics; other methods and paths as the router."""
    with client(service) as http:
        sid = http.post("/v1/sessions").json()["session_id"]
        reply = run(http, sid, 0, "x = 6 * 7\nx")
        assert reply.status_code == 200
        assert reply.headers["content-type"] == "application/json"
        assert reply.json() == {"cell": 0, "result": reply.json()["result"]}
        assert reply.json()["result"]["value"] == "42"
        again = run(http, sid, 0, "x = 0")  # a retry: the stored bytes, byte for byte
        assert again.content == reply.content
        assert http.get(f"/v1/sessions/{sid}/run").status_code == 405
        assert http.post(f"/v1/sessions/{sid}/extra/run", json={}).status_code == 404
        assert run(http, "no-such-session", 0, "1").status_code == 404
        assert run(http, sid, 1, "1", timeout_s=-1).json()["field"] == "timeout_s"
        metrics = http.get("/metrics").text
        assert 'agentmath_sandbox_cells_total{api="session",outcome="ok"}' in metrics
        assert 'agentmath_sandbox_cell_seconds_count{api="session"}' in metrics
        http.delete(f"/v1/sessions/{sid}")


def test_session_keeps_state(service: str) -> None:
    with client(service) as http:
        created = http.post("/v1/sessions")
        assert created.status_code == 201 and created.json()["idle_timeout_s"] > 0
        sid = created.json()["session_id"]
        assert run(http, sid, 0, "x = 41").json() == {"cell": 0, "result": run(
            http, sid, 0, "x = 41").json()["result"]}
        reply = run(http, sid, 1, "print('hi')\nx + 1").json()
        assert reply["cell"] == 1 and reply["result"]["value"] == "42"
        assert reply["result"]["stdout"] == "hi\n"
        assert http.get(f"/v1/sessions/{sid}").json() == {"alive": True, "cells": 2}
        ahead = run(http, sid, 5, "x")
        assert ahead.status_code == 409 and ahead.json()["field"] == "cell"
        assert http.delete(f"/v1/sessions/{sid}").status_code == 204
        for reply in (http.get(f"/v1/sessions/{sid}"), run(http, sid, 2, "x"),
                      http.delete(f"/v1/sessions/{sid}")):
            assert reply.status_code == 404 and "session" in reply.json()["error"]


def test_repeated_cell_runs_once(service: str) -> None:
    with client(service) as http:
        sid = http.post("/v1/sessions").json()["session_id"]
        run(http, sid, 0, "seen = []")
        first = run(http, sid, 1, "seen.append(1)\nlen(seen)").json()
        again = run(http, sid, 1, "seen.append(1)\nlen(seen)").json()
        assert first == again and first["result"]["value"] == "1"
        assert run(http, sid, 2, "len(seen)").json()["result"]["value"] == "1"
        assert 'agentmath_sandbox_cells_replayed_total' in http.get("/metrics").text
        http.delete(f"/v1/sessions/{sid}")


def test_bad_requests(service: str) -> None:
    with client(service) as http:
        sid = http.post("/v1/sessions").json()["session_id"]
        url = f"/v1/sessions/{sid}/run"
        malformed = http.post(url, content=b"{not json")
        assert malformed.status_code == 400 and "JSON" in malformed.json()["error"]
        for body, field in (({"cell": 0}, "code"), ({"code": 1, "cell": 0}, "code"),
                            ({"code": "1", "cell": "zero"}, "cell"),
                            ({"code": "1", "cell": -1}, "cell"),
                            ({"code": "1", "cell": 0, "timeout_s": 0}, "timeout_s"),
                            ({"code": "1", "cell": 0, "bogus": 1}, "bogus")):
            reply = http.post(url, json=body)
            assert reply.status_code == 400 and reply.json()["field"] == field, (body, reply.text)
        for body, field in (({"code": "1", "language": "cpp"}, "language"),
                            ({"language": "python"}, "code"),
                            ({"code": "1", "language": "python", "files": {"a": "eA=="}},
                             "files")):
            reply = http.post("/run_code", json=body)
            assert reply.status_code == 400 and reply.json()["field"] == field, body
        big = "x = '" + "a" * 5000 + "'"
        assert run(http, sid, 0, big).status_code == 413  # Content-Length over the limit
        chunks = (b'{"code": "' + b"a" * 1000 for _ in range(6))  # chunked: no Content-Length
        assert http.post(url, content=chunks).status_code == 413
        assert http.get(f"/v1/sessions/{sid}").json()["cells"] == 0  # nothing ran
        http.delete(f"/v1/sessions/{sid}")


def test_limits_answer_429(service: str) -> None:
    with client(service) as http:
        sids = [http.post("/v1/sessions").json()["session_id"] for _ in range(4)]
        over = http.post("/v1/sessions")
        assert over.status_code == 429 and int(over.headers["Retry-After"]) >= 1
        slow: list[httpx.Response] = []

        def slow_cell(token: str, sid: str | None) -> None:
            with client(service, token) as h:
                if sid is None:
                    sid = h.post("/v1/sessions").json()["session_id"]
                slow.append(run(h, sid, 0, "import time\ntime.sleep(1.5)\n'slept'"))

        threads = [threading.Thread(target=slow_cell, args=(TOKENS[0], sids[0])),
                   threading.Thread(target=slow_cell, args=(TOKENS[1], None))]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10
        while httpx.get(f"{service}/health").json()["inflight"] < 2:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        per_client = run(http, sids[1], 0, "1")  # this client already runs one cell
        assert per_client.status_code == 429 and per_client.headers["Retry-After"]
        with client(service, TOKENS[2]) as h3:  # the service runs its limit of cells
            total = h3.post("/run_code", json={"code": "print(1)", "language": "python"})
            assert total.status_code == 429 and total.headers["Retry-After"]
        for thread in threads:
            thread.join(30)
        assert [r.json()["result"]["value"] for r in slow] == ["'slept'", "'slept'"]
        assert run(http, sids[1], 0, "1").json()["result"]["value"] == "1"  # free again
        for sid in sids:
            http.delete(f"/v1/sessions/{sid}")


def test_worker_killed_during_cell(service: str) -> None:
    with client(service) as http:
        sid = http.post("/v1/sessions").json()["session_id"]
        run(http, sid, 0, "x = 1")
        # os.kill on itself is refused by the sandbox's seccomp filter; os._exit through the
        # escape in tests/fixtures kills the worker process mid-cell all the same.
        crashed = run(http, sid, 1, ESC + "os._exit(0)").json()["result"]
        assert crashed["crashed"] and crashed["state_lost"], crashed
        after = run(http, sid, 2, "y = 2\ny * 21").json()["result"]
        assert after["value"] == "42" and after["error"] is None
        assert http.get(f"/v1/sessions/{sid}").json() == {"alive": True, "cells": 3}
        http.delete(f"/v1/sessions/{sid}")
    assert httpx.get(f"{service}/health").json()["status"] == "ok"


def test_sandbox_fusion_client(service: str) -> None:
    from sandbox_fusion import RunCodeRequest, run_code

    port = service.rsplit(":", 1)[1]
    endpoint = f"http://agentmath:{TOKENS[0]}@127.0.0.1:{port}"

    def call(**kwargs: Any) -> Any:
        return run_code(RunCodeRequest(language="python", **kwargs), endpoint=endpoint,
                        max_attempts=1)

    ok = call(code="import sys\nprint('hello')\nprint('warn', file=sys.stderr)\n2 + 2")
    assert ok.status.value == "Success" and ok.run_result.status.value == "Finished"
    assert ok.run_result.stdout == "hello\n" and ok.run_result.stderr == "warn\n"
    assert ok.run_result.return_code == 0
    failed = call(code="print('before')\nraise ValueError('boom')")
    assert failed.status.value == "Failed" and failed.run_result.status.value == "Finished"
    assert failed.run_result.return_code == 1 and failed.run_result.stdout == "before\n"
    assert "Traceback" in failed.run_result.stderr
    assert "ValueError: boom" in failed.run_result.stderr
    slow = call(code="while True:\n    pass", run_timeout=0.5)
    assert slow.status.value == "Failed"
    assert slow.run_result.status.value == "TimeLimitExceeded"
    echo = call(code="print(input()[::-1])", stdin="abc\n")
    assert echo.run_result.stdout == "cba\n"
    shifted = call(code="print(input())\n1 / 0", stdin="x")
    assert shifted.run_result.stdout == "x\n" and "line 2, in" in shifted.run_result.stderr
    assert call(code="print(1)").run_result.stdout == "1\n"  # a fresh session each time
    with pytest.raises(Exception, match="401"):
        run_code(RunCodeRequest(language="python", code="print(1)"), max_attempts=1,
                 endpoint=f"http://agentmath:wrong@127.0.0.1:{port}")


def test_idle_sessions_expire(tmp_path: Path) -> None:
    with serve(tmp_path, idle_timeout_s=0.5) as (url, _, _), client(url) as http:
        sid = http.post("/v1/sessions").json()["session_id"]
        assert run(http, sid, 0, "x = 1").status_code == 200
        time.sleep(1.5)
        gone = http.get(f"/v1/sessions/{sid}")
        assert gone.status_code == 404 and gone.json()["field"] == "session_id"
        assert httpx.get(f"{url}/health").json()["sessions"] == 0
        assert "agentmath_sandbox_sessions_expired_total 1.0" in http.get("/metrics").text


def _gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (absent or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_graceful_shutdown_finishes_running_cell(tmp_path: Path) -> None:
    replies: list[httpx.Response] = []
    with serve(tmp_path) as (url, server, app):
        pool = app.state.service.pool
        with client(url) as http:
            sid = http.post("/v1/sessions").json()["session_id"]
        zygote = pool._zygote.proc.pid

        def cell() -> None:
            with client(url) as h:
                replies.append(run(h, sid, 0, "import time\ntime.sleep(1)\nprint('done')"))

        thread = threading.Thread(target=cell)
        thread.start()
        while httpx.get(f"{url}/health").json()["inflight"] < 1:
            time.sleep(0.02)
        workers = descendants(zygote)
        assert workers
        server.should_exit = True  # what SIGTERM does; serve() then waits for the thread
        thread.join(30)
    assert replies[0].status_code == 200
    assert replies[0].json()["result"]["stdout"] == "done\n"
    deadline = time.monotonic() + 10
    while not all(_gone(pid) for pid in workers | {zygote}):
        assert time.monotonic() < deadline, [p for p in workers | {zygote} if not _gone(p)]
        time.sleep(0.05)


def _cli(*args: str, **kwargs: Any) -> Any:
    return subprocess.run([sys.executable, "-m", "agentmath.cli", "sandbox", "serve", *args],
                          capture_output=True, text=True, timeout=60, **kwargs)


def test_serve_cli_needs_a_token_file(tmp_path: Path) -> None:
    missing = _cli("--token-file", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    none = _cli()
    assert none.returncode == 2 and "token_file" in none.stderr
    (tmp_path / "empty").write_text("# no tokens\n")
    empty = _cli("--token-file", str(tmp_path / "empty"))
    assert empty.returncode == 2 and "no token" in empty.stderr


def test_serve_cli_runs_and_stops_on_sigterm(tmp_path: Path) -> None:
    (tmp_path / "tokens").write_text(TOKENS[0] + "\n")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentmath.cli", "sandbox", "serve", "--port", str(port),
         "--token-file", str(tmp_path / "tokens"), "--set", "sandbox.spare_workers=0",
         "--set", 'sandbox.preload=["math"]'],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            time.sleep(0.1)
        with client(url) as http:
            sid = http.post("/v1/sessions").json()["session_id"]
            assert run(http, sid, 0, "6 * 7").json()["result"]["value"] == "42"
        children = descendants(proc.pid)
        assert children  # the zygote and the session's worker
        proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal: the exit is "killed by
        # SIGTERM", after the app's lifespan shutdown has closed the pool.
        assert proc.wait(30) in (0, -signal.SIGTERM)
        assert "Application shutdown complete" in (proc.stdout.read() if proc.stdout else "")
        deadline = time.monotonic() + 10
        while not all(_gone(pid) for pid in children):
            assert time.monotonic() < deadline, [p for p in children if not _gone(p)]
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
