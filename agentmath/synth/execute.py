"""Run a plan's snippets, in order, in one sandbox session: real outputs for simulated ones.

Every snippet of a trajectory runs in the same session, so state (variables, imports) carries
from one to the next exactly as it will when the trained model calls the tool. A planned
self-correction (:mod:`agentmath.synth.selfcorrect`) runs its faulty snippet first, at the
point where the trajectory makes the mistake, and its *real* error becomes the tool output the
model reads before the fix.

The "code runs" check is here too: a snippet that fails is dropped (stage ``execute``) unless
its author simulated a failure of the same kind (a teacher that wrote a deliberate mistake and
its fix), or the check is turned off.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from agentmath.errors import SandboxError
from agentmath.sandbox.client import SandboxClient, SandboxSession
from agentmath.sandbox.result import ExecResult
from agentmath.synth.pieces import Piece, Rejected
from agentmath.synth.records import Event
from agentmath.synth.selfcorrect import Correction

_ERROR_NAME = re.compile(r"\b([A-Z][A-Za-z]*(?:Error|Exception)|Timeout\w*)\b")


def _failure_reason(result: ExecResult) -> str:
    if result.timed_out:
        return "timeout"
    if result.crashed:
        return "crashed"
    return "error"


def simulated_failure(simulated: str | None, result: ExecResult) -> bool:
    """Whether the author expected this failure: its simulated output names the same error
    type (``ZeroDivisionError``...) as the real one."""
    if not simulated or not result.error_type:
        return False
    return result.error_type in set(_ERROR_NAME.findall(simulated))


def _check_ran(index: int, piece: Piece, result: ExecResult) -> None:
    """Raise Rejected when snippet ``index`` (1-based) failed and was not meant to."""
    if result.ok and not result.state_lost:
        return
    if result.ok or not simulated_failure(piece.simulated, result):
        what = result.error or ("the session was restarted" if result.state_lost else "failed")
        raise Rejected("execute", _failure_reason(result), f"snippet {index}: {what}")


async def _faulty_turn(session: SandboxSession, fix: Correction, index: int,
                       timeout: float) -> list[Event]:
    """Run the faulty version of snippet ``index`` (1-based): its call and real error, then
    the model's reaction; nothing when it did not fail (no self-correction around a success).
    An unplanned failure (e.g. a timeout) may have cost the session its state: Rejected."""
    faulty = await session.run(fix.faulty, timeout=timeout)
    if fix.accepts(faulty):
        return [Event(Piece("code", fix.faulty), faulty, planned=False),
                Event(Piece("text", fix.reaction(faulty)), planned=False)]
    if not faulty.ok or faulty.state_lost:
        raise Rejected("execute", "self_correction_failed",
                       f"snippet {index}: faulty version: {faulty.error}")
    return []


async def execute(pieces: Sequence[Piece], pool: SandboxClient, *, timeout: float,
                  require_ok: bool = True,
                  corrections: Mapping[int, Correction] | None = None) -> list[Event]:
    """Run the code pieces of ``pieces`` in one session; every piece as an :class:`Event`.

    ``corrections``: by 0-based snippet index, a faulty version to run (and show) before the
    snippet, followed by the model's reaction to its error. A faulty version that does not fail
    for real is left out (a self-correction is only written around a real error).
    ``require_ok``: drop the trajectory when a snippet fails (see :func:`simulated_failure`).
    """
    corrections = corrections or {}
    events: list[Event] = []
    index = 0
    try:
        session = pool.session()  # any SandboxClient's session: closed here, not by `with`
        try:
            for piece in pieces:
                if piece.kind == "text":
                    events.append(Event(piece))
                    continue
                fix = corrections.get(index)
                if fix is not None:
                    events += await _faulty_turn(session, fix, index + 1, timeout)
                result = await session.run(piece.text, timeout=timeout)
                index += 1
                if require_ok:
                    _check_ran(index, piece, result)
                events.append(Event(piece, result))
        finally:
            await session.close()
    except SandboxError as exc:
        raise Rejected("execute", "sandbox_error", f"sandbox failure: {exc}") from exc
    return events
