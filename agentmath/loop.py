"""The agent loop: generate, stop at a code block, run it in the sandbox, fold the output back.

``run_episode`` runs one episode and returns its :class:`Trajectory`. It is token-exact: the
context sent to the backend at every turn is the concatenation of the ids already recorded
(prompt ids, then each model segment's sampled ids and each tool segment's ids), so what the
model conditioned on and what a trainer later sees are the same ids. Failures of the model
server, the sandbox or the budgets end the episode with a finish reason; they never raise.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from agentmath.backends.base import Backend, Generation, SamplingParams
from agentmath.config import LoopConfig
from agentmath.errors import AgentMathError, BackendError, SandboxError
from agentmath.formats.base import ToolFormat
from agentmath.sandbox.pool import SandboxPool, Session
from agentmath.sandbox.result import ExecResult
from agentmath.trajectory import Segment, Trajectory


def build_messages(problem: str, fmt: ToolFormat, system_prompt: str | None = None,
                   few_shot: Sequence[tuple[str, str]] = ()) -> list[dict[str, str]]:
    """System prompt (the format's instructions by default), few-shot pairs, then the problem."""
    messages = [{"role": "system", "content": system_prompt or fmt.instructions()}]
    for question, answer in few_shot:
        messages.append({"role": "user", "content": question})
        messages.append({"role": "assistant", "content": answer})
    messages.append({"role": "user", "content": problem})
    return messages


def _failure(exc: Exception) -> str:
    """How a failed backend call is recorded: the error's type and message. A backend error
    of an unexpected type (a TypeError in a third-party backend) ends this episode the same
    way, so that one bad reply never takes down a whole evaluation."""
    kind = type(exc).__name__
    if isinstance(exc, BackendError | OSError | ValueError):
        return f"{kind}: {exc}"
    return f"{kind} (unexpected, from the backend): {exc}"


def _extract(text: str) -> str | None:
    from agentmath.grading import extract_answer  # lazy: grading pulls in math-verify

    return extract_answer(text)


class _Episode:
    """State of one running episode (kept off the public API)."""

    def __init__(self, traj: Trajectory, config: LoopConfig, deadline: float) -> None:
        self.traj = traj
        self.config = config
        self.deadline = deadline
        self.context: list[int] = []
        self.model_used = 0
        self.calls = 0
        self.session: Session | None = None

    def add(self, segment: Segment) -> None:
        self.traj.segments.append(segment)
        self.context.extend(segment.token_ids)

    def turn_budget(self) -> int:
        cfg = self.config
        budget = min(cfg.max_model_tokens - self.model_used,
                     cfg.max_total_tokens - len(self.context))
        if cfg.max_tokens_per_turn is not None:
            budget = min(budget, cfg.max_tokens_per_turn)
        return budget


async def _generate(ep: _Episode, backend: Backend, fmt: ToolFormat,
                    sampling: SamplingParams, budget: int) -> Generation | str:
    """One model turn; a string is the finish reason when the turn could not happen."""
    remaining = ep.deadline - time.monotonic()
    if remaining <= 0:
        return "time_budget"
    try:
        return await asyncio.wait_for(
            backend.generate(list(ep.context), stop=fmt.stop_strings, max_tokens=budget,
                             sampling=sampling), remaining)
    except TimeoutError:
        return "time_budget"
    except Exception as exc:  # noqa: BLE001 - any backend failure is this episode's error
        ep.traj.error = _failure(exc)
        return "error"


async def _run_tool(ep: _Episode, pool: SandboxPool, code: str) -> ExecResult:
    """Run code in the episode's own session; sandbox failures become an ExecResult."""
    try:
        if ep.session is None:
            ep.session = pool.session()
        return await ep.session.run(code, timeout=ep.config.tool_timeout_s)
    except SandboxError as exc:
        return ExecResult(error=f"SandboxError: {exc}", error_type="SandboxError",
                          crashed=True, state_lost=True)


async def _turn(ep: _Episode, backend: Backend, fmt: ToolFormat, pool: SandboxPool | None,
                sampling: SamplingParams) -> str | None:
    """One generate (+ tool) step. Returns a finish reason, or None to continue."""
    budget = ep.turn_budget()
    if budget <= 0:
        return "token_budget"
    started = time.perf_counter()
    gen = await _generate(ep, backend, fmt, sampling, budget)
    if isinstance(gen, str):
        return gen
    ep.model_used += len(gen.token_ids)
    ep.add(Segment("model", gen.text, list(gen.token_ids), gen.logprobs, gen.finish_reason,
                   duration_ms=(time.perf_counter() - started) * 1000.0))
    call = fmt.find_call(gen.text) if gen.finish_reason != "length" else None
    answered = ep.config.stop_on_answer and _extract(
        gen.text[: call.start] if call is not None else gen.text) is not None
    if answered:
        return "answered"
    if call is None:
        return {"length": "token_budget"}.get(gen.finish_reason, "eos")
    if pool is None or ep.calls >= ep.config.max_tool_calls:
        return "tool_budget"
    ep.calls += 1
    result = await _run_tool(ep, pool, call.code)
    rendered = fmt.render(result, max_chars=ep.config.max_output_chars)
    try:
        ids = await backend.tokenize(rendered)
    except Exception as exc:  # noqa: BLE001 - any backend failure is this episode's error
        ep.traj.error = f"tokenize failed: {_failure(exc)}"
        return "error"
    ep.add(Segment("tool", rendered, list(ids), code=call.code, result=result,
                   duration_ms=result.duration_ms))
    return None


async def run_episode(
    problem: str,
    backend: Backend,
    fmt: ToolFormat,
    pool: SandboxPool | None,
    config: LoopConfig | None = None,
    sampling: SamplingParams | None = None,
    few_shot: Sequence[tuple[str, str]] = (),
    meta: dict[str, Any] | None = None,
) -> Trajectory:
    """Run one episode of ``problem`` and return its trajectory (never raises for model,
    sandbox or budget failures: they are recorded as the finish reason and ``error``).

    ``pool`` may be None for a text-only run (a tool call then ends the episode).
    """
    config = config or LoopConfig()
    sampling = sampling or SamplingParams()
    start = time.monotonic()
    traj = Trajectory(problem=problem, meta={
        "format": getattr(fmt, "name", type(fmt).__name__),
        "backend": getattr(backend, "name", type(backend).__name__),
        "sampling": {k: getattr(sampling, k) for k in sampling.__slots__},
        "budgets": config.model_dump(exclude={"system_prompt"}), **(meta or {})})
    ep = _Episode(traj, config, start + config.time_limit_s)
    try:
        messages = build_messages(problem, fmt, config.system_prompt, few_shot)
        try:
            prompt_ids = await backend.render_prompt(messages)
        except AgentMathError:
            raise
        except Exception as exc:  # noqa: BLE001 - any backend failure is this episode's error
            raise BackendError(f"render_prompt failed: {_failure(exc)}") from exc
        ep.add(Segment("prompt", "".join(
            f"[{m['role']}] {m['content']}\n" for m in messages), list(prompt_ids)))
        traj.meta["messages"] = messages
        finish = None
        while finish is None:
            finish = await _turn(ep, backend, fmt, pool, sampling)
        traj.finish_reason = finish
    except (AgentMathError, OSError, ValueError) as exc:
        traj.finish_reason = "error"
        traj.error = f"{type(exc).__name__}: {exc}"
    finally:
        if ep.session is not None:
            await ep.session.close()
    traj.answer = _extract(traj.model_text)
    traj.duration_ms = (time.monotonic() - start) * 1000.0
    return traj
