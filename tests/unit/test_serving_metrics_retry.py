"""agentmath.serving.metrics: a calibration measurement is taken again when a request was
dropped or hung, and fails with a BackendError naming it after its tries."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from agentmath.errors import BackendError
from agentmath.serving.metrics import _measure_again


def test_a_dropped_request_is_measured_again() -> None:
    calls = []

    async def measure() -> float:
        calls.append(1)
        if len(calls) == 1:
            raise httpx.RemoteProtocolError("closed unanswered")
        return 0.25

    assert asyncio.run(_measure_again(measure, tries=3, what="the pair")) == 0.25
    assert len(calls) == 2


def test_a_hung_measurement_times_out_and_the_last_try_names_it() -> None:
    calls = []

    async def hang() -> float:
        calls.append(1)
        await asyncio.sleep(10)
        return 0.0

    with pytest.raises(BackendError, match=r"a decode step: TimeoutError on 2 tries"):
        asyncio.run(_measure_again(hang, tries=2, what="a decode step", timeout_s=0.05))
    assert len(calls) == 2


def test_other_errors_are_not_retried() -> None:
    calls = []

    async def broken() -> float:
        calls.append(1)
        raise ValueError("not a transport failure")

    with pytest.raises(ValueError):
        asyncio.run(_measure_again(broken, tries=3, what="x"))
    assert len(calls) == 1
