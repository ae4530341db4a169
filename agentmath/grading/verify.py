"""Answer verification with a hard timeout: :func:`verify`, :func:`grade` and async variants.

A comparison first tries :func:`~agentmath.grading.fastpath.quick_compare` in the calling
process; undecided pairs go to math-verify in a :class:`~agentmath.grading.pool.VerifierPool`
worker, which is killed (and replaced) when it overruns the timeout. That works from any
thread and inside asyncio, where math-verify's ``signal.alarm`` timeouts cannot.

Every part of grading sits under the timeout: a response longer than
:data:`INLINE_EXTRACT_MAX_CHARS` has its answer extracted in a worker too (extraction is
linear, but a multi-megabyte response still costs real time), and answers longer than
:data:`FAST_PATH_MAX_CHARS` skip the in-process shortcuts. Extraction and verification share
one budget: verification gets what extraction left of ``timeout``.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from agentmath.errors import GradingError
from agentmath.grading.extract import DEFAULT_STRATEGIES, check_strategies, extract_answer
from agentmath.grading.fastpath import quick_compare
from agentmath.grading.pool import VerifierPool

if TYPE_CHECKING:
    from agentmath.grading.options import GradingOptions

DEFAULT_TIMEOUT_S = 5.0
# Named, not imported: only worker processes import math-verify (and sympy).
_MATHVERIFY_MODULE = "agentmath.grading._mathverify"
_VERIFY_TARGET = f"{_MATHVERIFY_MODULE}:verify_answers"
_WARM_UP_TARGET = f"{_MATHVERIFY_MODULE}:warm_up"
_EXTRACT_TARGET = "agentmath.grading.extract:extract_answer_args"
#: Responses up to this many characters are searched for their answer in the calling process
#: (linear time: well under a millisecond); longer ones in a worker, under the timeout.
INLINE_EXTRACT_MAX_CHARS = 16_384
#: Answers (and golds) longer than this skip the in-process shortcuts and go to a worker.
FAST_PATH_MAX_CHARS = 1_024
Method = Literal["fast", "math_verify", "none"]


@dataclass(frozen=True, slots=True)
class GradeResult:
    """The grade of one response.

    ``correct`` is None when the gold answer itself could not be parsed (the row is ungradable,
    not wrong). A timeout or a verifier crash grades False, with ``timed_out``/``error`` set so
    that callers can tell "wrong" from "could not check". ``method`` says what decided it.
    """

    extracted: str | None
    correct: bool | None
    timed_out: bool = False
    error: str | None = None
    method: Method = "none"


_pool_lock = threading.Lock()
_pool: VerifierPool | None = None
_pool_workers = 2
_pool_memory_mb: int | None = 4096


def configure_pool(workers: int = 2, memory_mb: int | None = 4096) -> None:
    """Set the size and per-worker memory cap (MiB, None = no cap) of the shared pool.

    A change closes the current pool; the next verification starts one with the new settings.
    """
    global _pool, _pool_workers, _pool_memory_mb
    if workers < 1:
        raise GradingError(f"the grading pool needs at least one worker, got {workers}")
    with _pool_lock:
        if (workers, memory_mb) == (_pool_workers, _pool_memory_mb):
            return
        old, _pool = _pool, None
        _pool_workers, _pool_memory_mb = workers, memory_mb
    if old is not None and old.pid == os.getpid():  # never kill a parent's workers after fork
        old.close()


def get_pool() -> VerifierPool:
    """The process-wide verifier pool, created on first use (and again after a fork)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool.pid != os.getpid():
            _pool = VerifierPool(
                _pool_workers, preload=(_WARM_UP_TARGET,), memory_mb=_pool_memory_mb
            )
        return _pool


def shutdown_pool() -> None:
    """Stop the shared pool's workers (also run at interpreter exit)."""
    global _pool
    with _pool_lock:
        old, _pool = _pool, None
    if old is not None and old.pid == os.getpid():
        old.close()


atexit.register(shutdown_pool)


def _check_args(gold: object, timeout: float) -> None:
    if not isinstance(gold, str):
        raise GradingError(f"gold answer must be a str, got {type(gold).__name__}")
    if not timeout > 0:
        raise GradingError(f"timeout must be > 0 seconds, got {timeout!r}")


def _fast(gold: str, predicted: str | None, fast_path: bool,
          options: GradingOptions | None = None) -> GradeResult | None:
    """The grade if it is known without a worker, else None."""
    if predicted is None:
        return GradeResult(predicted, False, method="none")
    if max(len(gold), len(predicted)) > FAST_PATH_MAX_CHARS:
        return None  # normalising a huge answer is real work: it belongs under the timeout
    decided = quick_compare(gold, predicted, options) if fast_path else None
    if decided is None:
        return None
    return GradeResult(predicted, decided, method="fast")


def _slow(gold: str, predicted: str, timeout: float,
          options: GradingOptions | None = None) -> GradeResult:
    """Run math-verify in the pool; a timeout or crash grades False and is reported."""
    args = (gold, predicted) if options is None else (gold, predicted, options)
    outcome = get_pool().call(_VERIFY_TARGET, args, timeout)
    if outcome.status == "ok":
        error = "gold answer could not be parsed" if outcome.value is None else None
        return GradeResult(predicted, outcome.value, error=error, method="math_verify")
    timed_out = outcome.status == "timeout"
    return GradeResult(predicted, False, timed_out, outcome.error, method="math_verify")


def check(
    gold: str, predicted: str | None, *, timeout: float = DEFAULT_TIMEOUT_S,
    fast_path: bool = True, options: GradingOptions | None = None,
) -> GradeResult:
    """Compare a bare predicted answer with the gold answer and return the full GradeResult.

    ``fast_path=False`` skips the string/number shortcuts (used to test math-verify itself);
    ``options`` says which of agentmath's leniencies apply (None: all, the default).
    """
    _check_args(gold, timeout)
    return (_fast(gold, predicted, fast_path, options)
            or _slow(gold, predicted or "", timeout, options))


def verify(
    gold: str, predicted: str | None, *, timeout: float = DEFAULT_TIMEOUT_S,
    fast_path: bool = True, options: GradingOptions | None = None,
) -> bool | None:
    """True if ``predicted`` is mathematically equal to ``gold`` (both bare answers, LaTeX ok).

    None when the gold cannot be parsed; False when ``predicted`` is None or unparsable, or
    when checking took longer than ``timeout`` seconds (a hard limit, safe in any thread).
    """
    return check(gold, predicted, timeout=timeout, fast_path=fast_path,
                 options=options).correct


def _strategies(strategies: Sequence[str] | None,
                options: GradingOptions | None) -> Sequence[str]:
    """The extraction strategies of a call: those named, else the options', else the default."""
    if strategies is not None:
        return strategies
    return DEFAULT_STRATEGIES if options is None else options.extraction


def _extract(response: str | None, strategies: Sequence[str],
             timeout: float) -> tuple[str | None, float] | GradeResult:
    """The answer in ``response`` and the seconds spent finding it, or the GradeResult of a
    failed extraction (a timeout or a worker crash grades False and says so)."""
    if response is None or len(response) <= INLINE_EXTRACT_MAX_CHARS:
        started = time.monotonic()
        found = extract_answer(response, strategies=strategies)
        return found, time.monotonic() - started
    outcome = get_pool().call(_EXTRACT_TARGET, (response, list(strategies)), timeout)
    if outcome.status == "ok" and (outcome.value is None or isinstance(outcome.value, str)):
        return outcome.value, outcome.elapsed_s
    if outcome.status == "timeout":
        return GradeResult(None, False, True, f"answer extraction from a {len(response)}-"
                           f"character response exceeded {timeout:g} s")
    return GradeResult(None, False, error=f"answer extraction failed: "
                       f"{outcome.error or repr(outcome.value)}")


def grade(
    gold: str,
    response: str | None,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    strategies: Sequence[str] | None = None,
    options: GradingOptions | None = None,
) -> GradeResult:
    """Extract the final answer from a whole ``response`` and verify it against ``gold``.

    ``timeout`` bounds extraction and verification together: verification gets what
    extraction left (a result that ran out of time has ``timed_out`` set). ``strategies``
    (default: ``options.extraction``, else :data:`DEFAULT_STRATEGIES`) say where the answer
    is looked for; ``options`` which leniencies the comparison applies.
    """
    _check_args(gold, timeout)
    strategies = _strategies(strategies, options)
    check_strategies(strategies)
    extracted = _extract(response, strategies, timeout)
    if isinstance(extracted, GradeResult):
        return extracted
    predicted, spent = extracted
    left = timeout - spent
    if left <= 0:
        return GradeResult(predicted, False, True, f"answer extraction used the whole "
                           f"{timeout:g} s grading limit")
    return check(gold, predicted, timeout=left, options=options)


async def acheck(
    gold: str, predicted: str | None, *, timeout: float = DEFAULT_TIMEOUT_S,
    fast_path: bool = True, options: GradingOptions | None = None,
) -> GradeResult:
    """Async :func:`check`: the fast path runs inline, math-verify in a thread (loop stays free)."""
    _check_args(gold, timeout)
    decided = _fast(gold, predicted, fast_path, options)
    if decided is not None:
        return decided
    return await asyncio.to_thread(_slow, gold, predicted or "", timeout, options)


async def averify(
    gold: str, predicted: str | None, *, timeout: float = DEFAULT_TIMEOUT_S,
    fast_path: bool = True, options: GradingOptions | None = None,
) -> bool | None:
    """Async :func:`verify`, for use inside an event loop without blocking it."""
    return (await acheck(gold, predicted, timeout=timeout, fast_path=fast_path,
                         options=options)).correct


async def agrade(
    gold: str,
    response: str | None,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    strategies: Sequence[str] | None = None,
    options: GradingOptions | None = None,
) -> GradeResult:
    """Async :func:`grade`, for use inside an event loop without blocking it: a short response
    decided by the shortcuts is graded inline, anything else in a thread (workers do the work)."""
    _check_args(gold, timeout)
    strategies = _strategies(strategies, options)
    check_strategies(strategies)
    if response is None or len(response) <= INLINE_EXTRACT_MAX_CHARS:
        decided = _fast(gold, extract_answer(response, strategies=strategies), True, options)
        if decided is not None:
            return decided
    return await asyncio.to_thread(grade, gold, response, timeout=timeout,
                                   strategies=strategies, options=options)
