"""Startup checks (agentmath/backends/preflight.py) through the commands, and eval's exit
status and truncation warning.

Before its first sample a command that uses a server or a model fails within seconds, exit 1,
with a message naming what is wrong: a closed port (the URL), a missing directory (the path),
a tokenizer without a chat template (the directory), a hub id on an offline machine (the
name), a server that serves another model (both names). A run whose samples end in errors
exits 3 with everything saved; a run built to truncate warns which budget cut how many.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentmath.cli.main import app
from tests.fixtures.fault_server import (  # noqa: F401
    Fault,
    FaultServer,
    fault_server_fixture,
)

pytestmark = pytest.mark.integration
ROWS = [{"id": f"p{i}", "problem": f"What is {i} plus {i}?", "answer": str(2 * i)}
        for i in range(1, 4)]
LIMIT_S = 10.0  # the bound on a failed startup check


def closed_port_url() -> str:
    """The URL of a port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def cli(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str],
                                                                float]:
    """``agentmath ARGS`` in a fresh process (as a user runs it), and its wall time."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "agentmath.cli", *args], capture_output=True,
                          text=True, timeout=120, env=env)
    return proc, time.monotonic() - started


def message(proc: subprocess.CompletedProcess[str]) -> str:
    return " ".join(proc.stderr.split())


def dataset(path: Path, server: FaultServer | None = None) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    if server is not None:
        server.answers.update({r["problem"]: r["answer"] for r in ROWS})
    return path


def model_dir(path: Path, template: str | None) -> Path:
    """A model directory's config and tokenizer (a word-level one that transformers loads),
    with ``template`` as its chat template or none: the checks read no weights."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    Tokenizer(WordLevel({"[UNK]": 0, "hi": 1}, unk_token="[UNK]")).save(
        str(path / "tokenizer.json"))
    config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast"}
    if template is not None:
        config["chat_template"] = template
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


def test_eval_against_a_closed_port_exits_1_naming_the_url(tmp_path: Path) -> None:
    url, out = closed_port_url(), tmp_path / "run"
    proc, wall = cli("eval", "--dataset", str(dataset(tmp_path / "d.jsonl")), "--model", "m",
                     "--base-url", url, "--out", str(out), "--json")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert f"cannot reach the model server at {url}" in message(proc)
    assert wall < LIMIT_S and proc.stdout == "" and not (out / "samples.jsonl").exists()


def test_eval_with_a_missing_model_directory_exits_1_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "model"
    proc, wall = cli("eval", "--dataset", str(dataset(tmp_path / "d.jsonl")), "--model",
                     str(missing), "--out", str(tmp_path / "run"))
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert f"{missing}: no such model directory" in message(proc) and wall < LIMIT_S


def test_a_tokenizer_without_a_chat_template_exits_1_naming_the_directory(
        tmp_path: Path) -> None:
    model = model_dir(tmp_path / "no-template", None)
    proc, wall = cli("eval", "--dataset", str(dataset(tmp_path / "d.jsonl")), "--model",
                     str(model), "--backend", "hf", "--out", str(tmp_path / "run"))
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert f"{model}: its tokenizer has no chat template" in message(proc) and wall < LIMIT_S
    result, _ = invoke("solve", "What is 1 + 1?", "--model", str(model))
    assert result.exit_code == 1 and "no chat template" in said(result)


def invoke(*args: str) -> tuple[Any, float]:
    """``agentmath ARGS`` in this process (cheaper than a fresh one), and its wall time."""
    started = time.monotonic()
    result = CliRunner().invoke(app, list(args))
    return result, time.monotonic() - started


def said(result: Any) -> str:
    return " ".join(result.output.split())


def test_a_hub_id_offline_fails_fast_naming_it(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result, wall = invoke("eval", "--dataset", str(dataset(tmp_path / "d.jsonl")), "--model",
                          "someone/no-such-model", "--out", str(tmp_path / "run"))
    assert result.exit_code == 1, result.output
    assert "someone/no-such-model: no such model directory" in said(result)
    assert "HF_HUB_OFFLINE" in said(result) and wall < LIMIT_S


def test_solve_synth_sft_and_rl_check_before_any_work(tmp_path: Path) -> None:
    url, missing = closed_port_url(), tmp_path / "missing"
    result, wall = invoke("solve", "What is 1 + 1?", "--model", "m", "--base-url", url)
    assert result.exit_code == 1 and url in said(result) and wall < LIMIT_S
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"problem": "1+1?", "solution": "2", "answer": "2"}) + "\n")
    result, wall = invoke("synth", str(data), "--out", str(tmp_path / "s"), "--teacher-model",
                          "t", "--teacher-url", url)
    assert result.exit_code == 1 and url in said(result) and wall < LIMIT_S
    result, _ = invoke("sft", "--data", str(data), "--model", str(missing), "--out",
                       str(tmp_path / "sft"))
    assert result.exit_code == 1 and f"{missing}: no such model directory" in said(result)
    chats = tmp_path / "chats.jsonl"  # native tool-call records: the template needs tools
    chats.write_text(json.dumps({"messages": [{"role": "user", "content": "1+1?"}],
                                 "tools": [{"type": "function"}]}) + "\n")
    plain = model_dir(tmp_path / "plain", "{{ messages }}")
    result, _ = invoke("sft", "--data", str(chats), "--model", str(plain), "--out",
                       str(tmp_path / "sft2"))
    assert result.exit_code == 1, result.output
    assert f"{plain}: its chat template does not take tools" in said(result)
    rl = ("rl", "--out", str(tmp_path / "rl"), "--steps", "1", "--set",
          f"data.dataset={data}")
    result, _ = invoke(*rl, "--model", str(missing))
    assert result.exit_code == 1 and f"{missing}: no such model directory" in said(result)
    result, wall = invoke(*rl, "--model", str(model_dir(tmp_path / "m", "{{ messages }}")), "--set",
                          "generator.backend=openai", "--set",
                          f"generator.base_urls=[{json.dumps(url)}]")
    assert result.exit_code == 1 and url in said(result) and wall < LIMIT_S


def run_eval_cli(server: FaultServer, data: Path, out: Path, *extra: str) -> Any:
    args = ["eval", "--dataset", str(data), "--model", "m", "--base-url", server.url,
            "--out", str(out), "--json", "--http-retries", "0", "--max-outage", "0",
            "--set", "sandbox.preload=[]", "--set", "sandbox.spare_workers=0", *extra]
    return CliRunner().invoke(app, args)


def test_a_run_with_errored_samples_exits_3_keeping_what_it_saved(
        fault_server: FaultServer, tmp_path: Path) -> None:
    data, out = dataset(tmp_path / "d.jsonl", fault_server), tmp_path / "run"
    fault_server.fail("/v1/completions", Fault(status=500), times=2)
    result = run_eval_cli(fault_server, data, out)
    assert result.exit_code == 3, result.output
    printed = json.loads(result.stdout.strip().splitlines()[-1])
    saved = json.loads((out / "metrics.json").read_text())
    assert printed["n_errors"] == saved["n_errors"] == 2 and saved["n_samples"] == 3
    assert len((out / "samples.jsonl").read_text().splitlines()) == 3
    again = run_eval_cli(fault_server, data, out, "--retry-errors")
    assert again.exit_code == 0, again.output


def test_a_run_built_to_truncate_warns_which_budget(fault_server: FaultServer,
                                                    tmp_path: Path) -> None:
    data, out = dataset(tmp_path / "d.jsonl", fault_server), tmp_path / "run"
    result = run_eval_cli(fault_server, data, out, "--max-model-tokens", "5")
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout.strip().splitlines()[-1])
    [warning] = printed["warnings"]
    assert warning["kind"] == "truncation" and warning["budget"] == "loop.max_model_tokens"
    assert warning["rate"] == 1.0 and warning["count"] == 3 and warning["limit"] == 5
    assert warning["option"] == "--max-model-tokens"
    stderr = " ".join(result.stderr.split())
    assert "warning: 100.0% of the samples (3) stopped at loop.max_model_tokens = 5" in stderr
    assert "raise it with --max-model-tokens" in stderr
    stops = {s["budget"]: s for s in json.loads((out / "metrics.json").read_text())[
        "truncation"]}
    assert stops["loop.max_model_tokens"]["rate"] == 1.0
    assert stops["loop.max_tool_calls"]["count"] == 0
    report = CliRunner().invoke(app, ["report", str(out), "--out", str(tmp_path / "rep")])
    assert report.exit_code == 0, report.output
    table = (tmp_path / "rep" / "comparison.md").read_text()
    assert "truncated@loop.max_model_tokens %" in table and "100.0" in table


def test_a_run_within_its_budgets_does_not_warn(fault_server: FaultServer,
                                                tmp_path: Path) -> None:
    data, out = dataset(tmp_path / "d.jsonl", fault_server), tmp_path / "run"
    result = run_eval_cli(fault_server, data, out)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["warnings"] == []
    assert "warning" not in result.stderr


class Lister(ThreadingHTTPServer):
    """A server that lists ``served`` at /v1/models and answers /tokenize with ``tokenize``
    (status, body): vLLM's replies, for the checks of a running server."""

    def __init__(self, served: list[str], tokenize: tuple[int, str]) -> None:
        lister = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def _send(self, status: int, body: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                self._send(200, json.dumps({"data": [{"id": m} for m in lister.served]}))

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._send(*lister.tokenize)

        super().__init__(("127.0.0.1", 0), Handler)
        self.served, self.tokenize = served, tokenize
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, daemon=True).start()


def test_a_server_serving_another_model_or_no_template_exits_1_naming_it(
        tmp_path: Path) -> None:
    from agentmath.backends.preflight import check_server
    from agentmath.errors import StartupCheckError

    no_template = (400, json.dumps({"error": {"message": (
        "As of transformers v4.44, default chat template is no longer allowed, so you must "
        "provide a chat template if the tokenizer does not define one.")}}))
    server = Lister(["Qwen/Qwen3-8B"], (200, json.dumps({"tokens": [1], "count": 1})))
    try:
        result, wall = invoke("eval", "--dataset", str(dataset(tmp_path / "d.jsonl")),
                              "--model", "qwen3", "--base-url", server.url + "/v1", "--out",
                              str(tmp_path / "run"))
        assert result.exit_code == 1 and wall < LIMIT_S, result.output
        assert (f"the model server at {server.url} does not serve 'qwen3' (it serves "
                "'Qwen/Qwen3-8B')") in said(result)
        check_server(server.url, "Qwen/Qwen3-8B")  # the right name passes
        server.tokenize = no_template
        with pytest.raises(StartupCheckError, match="cannot render a chat for 'Qwen/Qwen3-8B' "
                                                    r"\(no chat template\)"):
            check_server(server.url, "Qwen/Qwen3-8B")
        check_server(server.url, "Qwen/Qwen3-8B", chat=False)
    finally:
        server.shutdown()
        server.server_close()


def test_of_several_servers_one_that_does_not_answer_is_a_note() -> None:
    from agentmath.backends import BackendSettings
    from agentmath.backends.preflight import check_backend
    from agentmath.errors import StartupCheckError

    dead, other = closed_port_url(), closed_port_url()
    server = Lister(["m"], (200, json.dumps({"tokens": [1], "count": 1})))
    try:
        notes = check_backend("openai", BackendSettings("m", [dead, server.url]))
        assert len(notes) == 1 and f"cannot reach the model server at {dead}" in notes[0]
        with pytest.raises(StartupCheckError, match=f"{dead}.*; .*{other}"):
            check_backend("openai", BackendSettings("m", [dead, other]))
    finally:
        server.shutdown()
        server.server_close()
