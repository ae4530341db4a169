"""The streamed-reply cost benchmark (``benchmarks/stream_client.py``) runs and reads every
reply whole in each mode (figures are not asserted beyond their sense)."""

from __future__ import annotations

import asyncio

from benchmarks.stream_client import measure


def test_every_reader_reads_the_replies_and_is_timed_against_the_unstreamed_one() -> None:
    rows = asyncio.run(measure(2, 50, [1, 16]))
    assert [r["tokens_per_chunk"] for r in rows] == [None, 1, 16]
    assert all(r["cpu_us_per_token"] > 0 for r in rows)
    assert rows[0]["vs_unstreamed"] == 1.0
