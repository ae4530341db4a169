"""The real rollout benchmark's ``--server-nice``: 0 or more, a clear argparse error
otherwise (a negative value would need privileges to raise the servers above the client)."""

from __future__ import annotations

import argparse

import pytest

from benchmarks._rollout_real import add_real_arguments


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rollout.py")
    add_real_arguments(parser)
    return parser


def test_server_nice_defaults_to_ten_and_takes_zero() -> None:
    assert _parser().parse_args([]).server_nice == 10
    assert _parser().parse_args(["--server-nice", "0"]).server_nice == 0


@pytest.mark.parametrize(("value", "message"), [("-1", "must be 0 or more"),
                                                ("x", "not a whole number")])
def test_bad_server_nice_is_a_clear_usage_error(value: str, message: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _parser().parse_args(["--server-nice", value])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
