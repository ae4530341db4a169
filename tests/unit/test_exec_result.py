"""ExecResult.to_dict is written out by hand (for the service's CPU per cell): it must stay the
same as dataclasses.asdict over every field, including a new one."""

from __future__ import annotations

import dataclasses

from agentmath.sandbox.result import ExecResult


def test_to_dict_equals_asdict_on_every_field() -> None:
    result = ExecResult(stdout="out", stderr="err", value="3", error="ValueError: x",
                        error_type="ValueError", error_line=2, timed_out=True, truncated=True,
                        state_lost=True, crashed=True, infra=True, sanitized=4,
                        duration_ms=1.5,
                        extra={"nested": {"list": [1, {"a": 2}]}})
    assert result.to_dict() == dataclasses.asdict(result)
    assert list(result.to_dict()) == [f.name for f in dataclasses.fields(ExecResult)]
    # infra only when set, so that records written before it existed come back unchanged
    assert ExecResult().to_dict() == {k: v for k, v in dataclasses.asdict(ExecResult()).items()
                                      if k != "infra"}


def test_to_dict_copies_extra_deeply_and_round_trips() -> None:
    result = ExecResult(extra={"nested": {"list": [1]}})
    out = result.to_dict()
    out["extra"]["nested"]["list"].append(2)
    assert result.extra == {"nested": {"list": [1]}}
    assert ExecResult.from_dict(result.to_dict()) == result

