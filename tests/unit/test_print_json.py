"""``--json`` output is strict JSON: NaN and infinities (a diverged loss, an empty mean) are
written as null, at any depth, never as the ``NaN`` tokens strict parsers refuse."""

from __future__ import annotations

import json
import math

import pytest

from agentmath.cli._common import print_json
from agentmath.jsonl import finite


def _strict(text: str) -> object:
    def refuse(token: str) -> None:
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_numbers_are_null_at_any_depth(capsys: pytest.CaptureFixture[str]) -> None:
    data = {"loss": math.nan, "last": {"grad_norm": math.inf, "series": [1.0, -math.inf, 2]},
            "pair": (math.nan, "x"), "ok": 0.5, "flag": True}
    print_json(data)
    out = capsys.readouterr().out
    assert out.endswith("\n") and out.count("\n") == 1
    assert _strict(out) == {"loss": None, "last": {"grad_norm": None, "series": [1.0, None, 2]},
                            "pair": [None, "x"], "ok": 0.5, "flag": True}


def test_finite_keeps_everything_else() -> None:
    data = {"a": [1, 2.5, "s", None, False], "b": {"c": 0.0}}
    assert finite(data) == data
