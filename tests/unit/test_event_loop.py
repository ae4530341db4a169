"""agentmath/_loop.py: the commands' coroutines run on uvloop when it is installed, on asyncio's
loop when AGENTMATH_EVENT_LOOP=asyncio says so, and a bad choice is a clear ConfigError."""

from __future__ import annotations

import asyncio
import sys

import pytest

from agentmath import _loop
from agentmath.errors import ConfigError

uvloop = pytest.importorskip("uvloop")


async def _loop_type() -> type:
    return type(asyncio.get_running_loop())


def test_commands_run_on_uvloop_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_loop.ENV, raising=False)
    assert issubclass(_loop.run(_loop_type()), uvloop.Loop)
    monkeypatch.setenv(_loop.ENV, "uvloop")
    assert issubclass(_loop.run(_loop_type()), uvloop.Loop)


def test_asyncio_loop_when_asked_or_when_uvloop_is_missing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_loop.ENV, "asyncio")
    assert not issubclass(_loop.run(_loop_type()), uvloop.Loop)
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    monkeypatch.setenv(_loop.ENV, "auto")
    assert not issubclass(_loop.run(_loop_type()), uvloop.Loop)
    monkeypatch.setenv(_loop.ENV, "uvloop")
    with pytest.raises(ConfigError, match="uvloop is not installed"):
        _loop.run(_loop_type())


def test_a_bad_choice_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_loop.ENV, "trio")
    with pytest.raises(ConfigError, match="AGENTMATH_EVENT_LOOP='trio'"):
        _loop.run(_loop_type())


def test_run_has_asyncio_run_semantics(monkeypatch: pytest.MonkeyPatch) -> None:
    """The result comes back, and a task still running at the end is cancelled (as
    asyncio.run does), on either loop."""
    cancelled: list[str] = []

    async def forever(choice: str) -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(choice)
            raise

    async def main(choice: str) -> int:
        asyncio.get_running_loop().create_task(forever(choice))
        await asyncio.sleep(0)
        return 7

    for choice in ("uvloop", "asyncio"):
        monkeypatch.setenv(_loop.ENV, choice)
        assert _loop.run(main(choice)) == 7
    assert cancelled == ["uvloop", "asyncio"]


def test_the_cli_names_a_bad_choice_before_any_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad AGENTMATH_EVENT_LOOP is a one-line error (exit 2) from any command, not a
    traceback from deep inside it."""
    from typer.testing import CliRunner

    from agentmath.cli.main import app

    monkeypatch.setenv(_loop.ENV, "trio")
    result = CliRunner().invoke(app, ["solve", "What is 2 + 2?"])
    assert result.exit_code == 2
    assert "AGENTMATH_EVENT_LOOP='trio': choose auto, uvloop or asyncio" in result.output
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)  # the exit, no other exception
