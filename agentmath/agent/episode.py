"""A pausable episode: advance it under a budget, park it, resume it later (even under new weights).

An :class:`Episode` owns everything one attempt at a problem needs: the exact token ids so far,
its budgets, its sandbox session and the cells that ran in it. ``advance`` runs it (generate ->
tool -> generate ...) until it finishes or the *segment* budget given to this call (model tokens,
tool calls) is spent; it then returns with the episode parked: nothing is lost, the sandbox
session stays open, and the next ``advance`` continues exactly where it stopped. This is what
partial rollout (Kimi k1.5, AgentMath) needs: long episodes are cut into segments across RL
iterations, and every model segment records the ``policy_version`` that sampled it.

Exactness of a cut inside a model turn: the next ``advance`` sends the same ids (prompt, the
turn's partial ids) so greedy decoding continues as if never cut. One hazard is a stop string
split by the cut (``"</co"`` | ``"de>"``): the server matches stop strings only in new text and
would run past it. So a cut is never left on a proper prefix of a stop string: the turn is
extended one token at a time until it is not (or the stop completes), tokens the uncut run
would have sampled anyway.

A lost sandbox session (its process died, a remote service expired it) is rebuilt before the
next snippet by replaying the episode's recorded cells in a new session. The same replay moves a
parked episode to another process: :meth:`Episode.progress` is what it has done (a picklable
:class:`Progress`), and :meth:`Episode.restore` continues it in a fresh episode (the Ray
rollout workers do this when the worker holding a parked episode is gone).

The model side is a driver (:mod:`agentmath.agent.drivers`): token-exact text formats, or a
server's native chat tool calling. Budgets, time limits, tool calls, answers and the sandbox are
handled here once for both.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from agentmath.agent.drivers import Call, ChatDriver, ModelTurn, TextDriver
from agentmath.agent.drivers import loop_time as _now
from agentmath.agent.trajectory import Trajectory
from agentmath.backends.base import Backend, RequestTag, SamplingParams, tagged
from agentmath.config import LoopConfig
from agentmath.errors import AgentMathError, SandboxError
from agentmath.formats.base import ToolFormat
from agentmath.sandbox.client import SandboxClient, SandboxSession
from agentmath.sandbox.result import ExecResult

Status = Literal["new", "parked", "finished"]
TurnHook = Callable[["Episode"], Awaitable[None]]
_PARK = "parked"  # internal: the segment budget is spent, the episode goes on later
_ids = itertools.count()


@dataclasses.dataclass(slots=True)
class Progress:
    """What a started episode has done, enough to continue it elsewhere: its trajectory so far
    (every token id, its chat messages), its budgets and counters, the cells its
    session holds (replayed in a new session before the next snippet) and the calls of a
    finished turn not yet run. Picklable (sent between Ray workers)."""

    trajectory: Trajectory
    config: LoopConfig
    status: Status
    model_used: int
    calls: int
    advances: int
    active_s: float
    replays: int
    cells: list[str]
    pending: list[Call]
    context_tokens: int  # the driver's context length (a chat driver cannot recount it)

    def to_dict(self) -> dict[str, Any]:
        """Plain containers (JSON, or a checkpoint's ``torch.save`` payload read back with
        ``weights_only``): what an RL checkpoint keeps of a parked episode."""
        return {"trajectory": self.trajectory.to_dict(),
                "config": self.config.model_dump(mode="json"), "status": self.status,
                "model_used": self.model_used, "calls": self.calls, "advances": self.advances,
                "active_s": self.active_s, "replays": self.replays, "cells": list(self.cells),
                "pending": [{"code": c.code, "error": c.error, "id": c.id}
                            for c in self.pending],
                "context_tokens": self.context_tokens}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Progress:
        """Inverse of :meth:`to_dict` (KeyError, TypeError or ValueError when malformed)."""
        status = data["status"]
        if status not in ("new", "parked", "finished"):
            raise ValueError(f"unknown episode status {status!r}")
        return cls(Trajectory.from_dict(data["trajectory"]),
                   LoopConfig.model_validate(data["config"]), status,
                   int(data["model_used"]), int(data["calls"]), int(data["advances"]),
                   float(data["active_s"]), int(data["replays"]),
                   [str(c) for c in data["cells"]],
                   [Call(c["code"], c["error"], c["id"]) for c in data["pending"]],
                   int(data["context_tokens"]))


def _extract(text: str) -> str | None:
    from agentmath.grading import extract_answer  # lazy: grading pulls in math-verify

    return extract_answer(text)


class Episode:
    """One episode of the agent loop that can be advanced in segments.

    ``sandbox`` may be None for a text-only run (a tool call then ends the episode). ``chat``
    selects native tool calling over ``/v1/chat/completions`` (the backend needs a ``chat``
    method; not token-exact, see docs/agent-loop.md). ``episode_id``/``group_id`` tag every
    generate call (:class:`~agentmath.backends.base.RequestTag`) so that a router keeps the
    episode and its group on one server.
    """

    def __init__(self, problem: str, backend: Backend, fmt: ToolFormat,
                 sandbox: SandboxClient | None, config: LoopConfig | None = None,
                 sampling: SamplingParams | None = None, *,
                 few_shot: Sequence[tuple[str, str]] = (), meta: dict[str, Any] | None = None,
                 episode_id: str | None = None, group_id: str | None = None,
                 chat: bool = False, problem_id: str | None = None,
                 sample_index: int | None = None) -> None:
        self.backend = backend
        self.fmt = fmt
        self.sandbox = sandbox
        self.config = config or LoopConfig()
        self.sampling = sampling or SamplingParams()
        self.id = episode_id or f"ep-{next(_ids)}"
        self.group_id = group_id
        self.driver: TextDriver | ChatDriver = ChatDriver(self) if chat else TextDriver(self)
        self.trajectory = Trajectory(problem=problem, meta={
            "format": self.driver.format_name,
            "backend": backend.name,
            "budgets": self.config.model_dump(exclude={"system_prompt", "history_rewrite"}),
            **(meta or {})},
            problem_id=problem_id, sample_index=sample_index,
            sampling=dataclasses.replace(self.sampling))
        self.few_shot = tuple(few_shot)
        self.status: Status = "new"
        self.model_used = 0  # model tokens over all segments
        self.calls = 0  # tool calls over all segments
        self.advances = 0  # segments run (calls of advance that did work)
        self.active_s = 0.0  # time spent inside advance (parked time does not count)
        self.policy_version = 0  # of the segment being run
        self.cells: list[str] = []  # code whose effects the live session holds, for replay
        self.session: SandboxSession | None = None
        self.replays = 0
        self._deadline = 0.0
        self._seg_tokens: int | None = None  # model tokens left in this segment
        self._seg_calls: int | None = None
        self._seg_turns: int | None = None
        self._stop: asyncio.Event | None = None
        self._interrupt: asyncio.Event | None = None  # cuts a running turn when set
        self.interrupted = False  # the last advance parked with its running turn cut
        self._before_turn: TurnHook | None = None
        self._pending: list[Call] = []  # calls of a finished turn not yet run (parked before)

    # ------------------------------------------------------------------------------ public
    @property
    def finished(self) -> bool:
        return self.status == "finished"

    @property
    def tag(self) -> RequestTag:
        """The tag of this episode's generate calls."""
        return RequestTag(self.id, self.group_id, self.policy_version)

    async def advance(self, *, max_tokens: int | None = None, max_tool_calls: int | None = None,
                      max_turns: int | None = None, policy_version: int = 0,
                      stop: asyncio.Event | None = None, interrupt_turns: bool = False,
                      before_turn: TurnHook | None = None) -> bool:
        """Run until the episode finishes or this segment's budget is spent; True when finished.

        ``max_tokens`` bounds the model tokens, ``max_tool_calls`` the snippets and
        ``max_turns`` the model turns (each with its tool calls) of this segment (None: only
        the episode's own budgets). A set ``stop`` event parks the episode at its next turn
        boundary (the end of a partial-rollout iteration); with ``interrupt_turns`` it also
        cuts the model turn running then, where the backend is
        :class:`~agentmath.backends.base.Interruptible` (the turn's sampled ids are kept and
        the next ``advance`` continues it). ``before_turn`` is awaited before
        every model turn (the engine's admission control waits there). Never raises for
        model, sandbox or budget failures: they finish the episode with a finish reason and
        ``error``.
        """
        if self.finished:
            return True
        if max_tokens is not None and max_tokens < 1:
            raise ValueError("max_tokens of a segment must be at least 1")
        self._seg_tokens, self._seg_calls = max_tokens, max_tool_calls
        self._seg_turns, self._stop, self._before_turn = max_turns, stop, before_turn
        self._interrupt = stop if interrupt_turns and self.driver.can_cut else None
        self.interrupted = False
        self.policy_version = policy_version
        self.advances += 1
        started = _now()
        self._deadline = started + max(0.0, self.config.time_limit_s - self.active_s)
        finish: str | None = None
        try:
            with tagged(self.tag):
                await self._start()
                finish = await self._run_turns()
        except (AgentMathError, OSError, ValueError) as exc:
            finish = "error"
            self.trajectory.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.active_s += _now() - started
        if finish == _PARK:
            self.status = "parked"
            return False
        await self._finish(finish or "error")
        return True

    async def prepare(self) -> bool:
        """Render the prompt now (it is otherwise rendered by the first ``advance``), so that
        the episode's context length is known before it runs; False if that failed (the
        episode is then finished with the error)."""
        if self.status != "new":
            return True
        try:
            with tagged(self.tag):
                await self._start()
        except (AgentMathError, OSError, ValueError) as exc:
            self.trajectory.error = f"{type(exc).__name__}: {exc}"
            await self._finish("error")
            return False
        return True

    async def _start(self) -> None:
        if self.status == "new":
            await self.driver.start()
            self.status = "parked"

    async def close(self) -> None:
        """Release the sandbox session (an unfinished episode can still resume: its cells are
        replayed in a new session). Idempotent."""
        if self.session is not None:
            session, self.session = self.session, None
            await session.close()

    def progress(self) -> Progress:
        """What this episode has done (see :class:`Progress`); the lists are copies."""
        return Progress(self.trajectory, self.config, self.status, self.model_used, self.calls,
                        self.advances, self.active_s, self.replays, list(self.cells),
                        list(self._pending), self.driver.context_tokens())

    def restore(self, progress: Progress) -> None:
        """Continue ``progress`` in this (new) episode: the next ``advance`` goes on where it
        stopped, its cells replayed in a new session before the next snippet runs."""
        if self.status != "new" or self.session is not None:
            raise ValueError("only a new episode can restore another's progress")
        self.trajectory, self.config = progress.trajectory, progress.config
        self.status = progress.status
        self.model_used, self.calls = progress.model_used, progress.calls
        self.advances, self.active_s = progress.advances, progress.active_s
        self.replays = progress.replays
        self.cells, self._pending = list(progress.cells), list(progress.pending)
        if isinstance(self.driver, TextDriver):
            self.driver.context = self.trajectory.token_ids
        else:
            self.driver.messages = self.trajectory.messages
            self.driver.context = progress.context_tokens

    # ------------------------------------------------------------------------------ turns
    async def _run_turns(self) -> str:
        finish: str | None = None
        turns = 0
        while finish is None:
            if (self._stop is not None and self._stop.is_set()) or (
                    self._seg_turns is not None and turns >= self._seg_turns):
                return _PARK
            if self._before_turn is not None:
                await self._before_turn(self)
            finish = await self._turn()
            turns += 1
        return finish

    def turn_budget(self) -> tuple[int, bool]:
        """Tokens the next generate call may use, and whether the segment (not the episode)
        is what bounds it. A driver that cannot continue a cut turn (native chat) is bounded
        by the segment only between turns."""
        cfg = self.config
        budget = min(cfg.max_model_tokens - self.model_used,
                     cfg.max_total_tokens - self.driver.context_tokens())
        if cfg.max_tokens_per_turn is not None:
            budget = min(budget, cfg.max_tokens_per_turn - self.driver.open_turn_tokens())
        seg = self._seg_tokens
        if seg is not None and seg < budget and (self.driver.can_cut or seg <= 0):
            return seg, True
        return budget, False

    async def _turn(self) -> str | None:
        """One model turn (+ its tool calls). A finish reason, _PARK, or None to go on."""
        if self._pending:
            calls, self._pending = self._pending, []
            return await self._run_calls(calls)
        budget, by_segment = self.turn_budget()
        if budget <= 0:
            return _PARK if by_segment else "token_budget"
        if self._deadline - _now() <= 0:
            return "time_budget"
        if self._interrupt is not None and self._interrupt.is_set():
            return _PARK  # the iteration ended while this episode waited to be let in
        turn = await self.driver.model_turn(budget, self._deadline, self._interrupt)
        if isinstance(turn, str):
            return turn
        self._spend(turn.tokens)
        if turn.cut and (by_segment or turn.interrupted):
            self.interrupted = turn.interrupted
            return await self._park_mid_turn()
        return await self._end_of_turn(turn)

    async def _end_of_turn(self, turn: ModelTurn) -> str | None:
        """What a complete model turn leads to: an answer, the end, or its tool calls."""
        if self.config.stop_on_answer and _extract(turn.answer_text) is not None:
            return "answered"
        if turn.cut:
            return "token_budget"
        if not turn.calls:
            return "eos"
        return await self._run_calls(turn.calls)

    async def _run_calls(self, calls: list[Call]) -> str | None:
        """Run a turn's calls in order; a call past the segment's budget waits (parked) for
        the next segment, one past the episode's budget ends the episode."""
        for index, call in enumerate(calls):
            if self.sandbox is None or self.calls >= self.config.max_tool_calls:
                return "tool_budget"
            if self._seg_calls is not None and self._seg_calls <= 0:
                self._pending = calls[index:]
                return _PARK
            self.calls += 1
            if self._seg_calls is not None:
                self._seg_calls -= 1
            result = (await self.run_code(call.code) if call.code is not None
                      else ExecResult(error=call.error, error_type="ToolCallError"))
            error = await self.driver.add_tool(call, result)
            if error is not None:
                self.trajectory.error = error
                return "error"
        return None

    def _spend(self, tokens: int) -> None:
        self.model_used += tokens
        if self._seg_tokens is not None:
            self._seg_tokens -= tokens

    async def _park_mid_turn(self) -> str | None:
        """Park inside a model turn, first making sure no stop string straddles the cut: the
        turn grows one token at a time (a bounded overshoot of the segment) until its text no
        longer ends in a stop string's prefix. Should the turn end meanwhile, it is handled
        as any complete turn."""
        while self.driver.ends_in_partial_stop():
            budget, _ = self.turn_budget()
            if self.config.max_model_tokens - self.model_used <= 0 or (
                    budget <= 0 and self._seg_tokens is None):
                return "token_budget"
            turn = await self.driver.model_turn(1, self._deadline)
            if isinstance(turn, str):
                return turn
            self._spend(turn.tokens)
            if not turn.cut:
                return await self._end_of_turn(turn)
        return _PARK

    # ------------------------------------------------------------------------------ sandbox
    async def run_code(self, code: str) -> ExecResult:
        """Run ``code`` in the episode's session (rebuilding a lost one first); sandbox
        failures become a result, never an exception."""
        assert self.sandbox is not None
        try:
            session = await self._live_session()
            result = await session.run(code, timeout=self.config.tool_timeout_s)
        except SandboxError as exc:
            return ExecResult(error=f"SandboxError: {exc}", error_type="SandboxError",
                              crashed=True, state_lost=True, infra=True)
        if result.timed_out or result.crashed:
            self.cells = []  # the session restarted: nothing before (or from) this cell holds
        elif result.state_lost:
            self.cells = [code]  # lost before this cell ran: only this cell's effects hold
        else:
            self.cells.append(code)
        return result

    async def _live_session(self) -> SandboxSession:
        """The episode's session; a lost one is replaced and its cells replayed."""
        assert self.sandbox is not None
        if self.session is not None and await self.session.alive():
            return self.session
        if self.session is not None:
            await self.session.close()
        self.session = self.sandbox.session()
        if self.cells:
            self.replays += 1
            for code in self.cells:
                await self.session.run(code, timeout=self.config.tool_timeout_s)
        return self.session

    # ------------------------------------------------------------------------------ ending
    async def _finish(self, reason: str) -> None:
        traj = self.trajectory
        traj.finish_reason = reason
        traj.answer = _extract(traj.model_text)
        traj.duration_ms = self.active_s * 1000.0
        if self.advances > 1 or self.replays:
            traj.advances = self.advances
            traj.session_replays = self.replays
        self.status = "finished"
        try:
            await self.close()
        except (SandboxError, OSError) as exc:  # closing must not undo a finished episode
            traj.session_close_error = f"{type(exc).__name__}: {exc}"
