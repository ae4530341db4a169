"""Scripted lengths, real ids: how ``benchmarks/_rollout_real.py`` plays a simulator
:class:`~agentmath.sim.workload.Workload` on real vLLM servers.

Why: a tiny model writes whatever it writes, but a scheduling benchmark needs the workload's
lengths (long tails, tool calls, latencies) while keeping real engines' behaviour (batching,
prefix caching, context growth). :class:`ScriptedLengths` wraps a real backend: each generate
call asks the server for exactly the tokens left of the scripted turn (vLLM ``min_tokens`` =
``max_tokens`` and ``ignore_eos``, set by :func:`exact_lengths` through
``OpenAIBackend(extra_body=...)``), keeps the ids it really sampled and returns the script's
text (filler, then a ``<code>`` call or the ``\\boxed{}`` answer) for the real agent loop to
parse. The call's snippet sleeps for the scripted latency in the real sandbox and prints about
the scripted number of tokens (:func:`tool_calibration` measures the tokenizer's rate).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from agentmath.backends.base import Generation, SamplingParams, current_tag
from agentmath.errors import BackendError
from agentmath.formats.base import ToolFormat
from agentmath.sandbox.result import ExecResult
from agentmath.sim.workload import Workload

__all__ = ["ScriptedLengths", "exact_lengths", "tool_calibration"]


def exact_lengths(row: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """``extra_body`` making vLLM write exactly ``max_tokens`` tokens, no stop, with the row
    and the policy version as the prefix-cache salt."""
    slug = "".join(c if c.isalnum() else "_" for c in row)  # vLLM refuses '/', '@', '\\'

    def fields(body: dict[str, Any]) -> dict[str, Any]:
        tag = current_tag.get()
        version = tag.policy_version if tag is not None else 0
        return {"min_tokens": body["max_tokens"], "ignore_eos": True, "stop": [],
                "cache_salt": f"{slug}-v{version}"}
    return fields


async def tool_calibration(backend: Any, fmt: ToolFormat) -> dict[str, float]:
    """Tokens of a rendered snippet output: ``framing`` + ``per_item`` x items printed."""
    def out(k: int) -> str:
        return fmt.render(ExecResult(stdout=" ".join(str(i * 37 % 1000) for i in range(k))
                                     + "\n"), max_chars=100_000)
    empty, full = len(await backend.tokenize(out(0))), len(await backend.tokenize(out(400)))
    return {"framing": float(empty), "per_item": (full - empty) / 400}


@dataclasses.dataclass(slots=True)
class _Play:
    """Where an episode is in its script (``expected``: its context after the last output)."""

    script: Any
    turn: int = 0
    done: int = 0
    turn_done: bool = False
    expected: int = -1  # no call yet
    ended: float = 0.0  # loop time the last call returned
    version: int = -1  # the policy version of the last call


class ScriptedLengths:
    """A Backend over a real one that plays a :class:`Workload`'s scripts: every call asks the
    server (through ``inner``, whose ``extra_body`` is :func:`exact_lengths`) for exactly the
    tokens left of the scripted turn (or ``max_tokens``, when fewer) and returns the ids it
    sampled with the script's text. Other attributes (``tokenize``, ``aclose``, a router's
    ``forget``, ``set_policy_version``, ``stats``) are the inner backend's."""

    name = "scripted-lengths"

    def __init__(self, inner: Any, workload: Workload, fmt: ToolFormat,
                 tool: dict[str, float]) -> None:
        self.inner, self.workload, self.fmt, self.tool = inner, workload, fmt, tool
        self._plays: dict[str, _Play] = {}
        #: Per tool call: seconds between a turn's last token and the next call beyond the
        #: scripted latency (sandbox, tokenize, the loop; barriers in the sync row). A call
        #: whose episode parked in between (a new policy version at the next call) is not
        #: counted: the wait for the next iteration is the simulator's to model.
        self.tool_overheads: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def render_prompt(self, messages: Any) -> list[int]:
        """The real template's ids, padded with group-seeded ids to the scripted length."""
        ids = await self.inner.render_prompt(messages)
        group = Workload.group_of_text("\n".join(m["content"] for m in messages)) or 0
        missing = self.workload.group_prompt_tokens(group) - len(ids)
        rng = np.random.default_rng([self.workload.seed, group])
        return ids + [int(x) for x in rng.choice(ids, max(0, missing))]

    def _locate(self, episode: str, group: int, context: int, version: int) -> _Play:
        play = self._plays.get(episode)
        if play is None:
            sample = Workload.sample_of_episode(episode) or 0
            play = self._plays[episode] = _Play(self.workload.script(group, sample))
        elif context > play.expected and play.turn_done:
            latency = play.script.turns[play.turn].tool_latency_s
            if version == play.version:
                self.tool_overheads.append(
                    asyncio.get_running_loop().time() - play.ended - latency)
            play.turn, play.done = play.turn + 1, 0
        elif context != play.expected or play.turn_done:
            raise BackendError(f"scripted workload lost episode {episode}: context of "
                               f"{context} tokens, {play.expected} expected")
        return play

    def _tail(self, play: _Play, final: bool) -> str:
        if final:
            return f" \\boxed{{{self.workload.answer(play.script.group)}}}"
        turn = play.script.turns[play.turn]
        items = max(0, round((turn.tool_tokens - self.tool["framing"]) / self.tool["per_item"]))
        return self.fmt.render_call(f"import time\ntime.sleep({turn.tool_latency_s:.3f})\nprint"
                                    f"(' '.join(str(i * 37 % 1000) for i in range({items})))")

    async def generate(self, prompt_ids: Any, *, stop: Any, max_tokens: int,
                       sampling: SamplingParams) -> Generation:
        return await self._generate(prompt_ids, max_tokens, sampling, None)

    async def generate_interruptible(self, prompt_ids: Any, *, stop: Any, max_tokens: int,
                                     sampling: SamplingParams,
                                     interrupt: asyncio.Event) -> Generation:
        """As :meth:`generate`, cut short by ``interrupt`` (the inner backend's stream): the
        turn goes on from where the server stopped (``Interruptible``)."""
        return await self._generate(prompt_ids, max_tokens, sampling, interrupt)

    async def _generate(self, prompt_ids: Any, max_tokens: int, sampling: SamplingParams,
                        interrupt: asyncio.Event | None) -> Generation:
        tag = current_tag.get()
        if tag is None or tag.group_id is None:
            raise BackendError("scripted workload: a generate call without a request tag")
        play = self._locate(tag.episode_id, int(tag.group_id.split("-")[-1]), len(prompt_ids),
                            tag.policy_version)
        play.version = tag.policy_version
        turns = play.script.turns
        final = play.turn >= len(turns) - 1
        endless = final and play.script.ending == "truncated"
        left = max_tokens if endless else max(1, turns[play.turn].gen_tokens - play.done)
        n = min(max_tokens, left)
        if interrupt is None:
            gen = await self.inner.generate(prompt_ids, stop=(), max_tokens=n,
                                            sampling=sampling)
        else:
            gen = await self.inner.generate_interruptible(prompt_ids, stop=(), max_tokens=n,
                                                          sampling=sampling, interrupt=interrupt)
        if gen.interrupted:  # cut: the same turn continues at the next call
            m = len(gen.token_ids)
            play.done += m
            play.expected, play.ended = len(prompt_ids) + m, asyncio.get_running_loop().time()
            play.turn_done = False
            return Generation(gen.token_ids, "." * m, "length", None, gen.logprobs,
                              interrupted=True)
        if len(gen.token_ids) != n:
            raise BackendError(f"asked {getattr(self.inner, 'name', 'the server')} for exactly "
                               f"{n} tokens, got {len(gen.token_ids)}")
        play.done += n
        play.expected, play.ended = len(prompt_ids) + n, asyncio.get_running_loop().time()
        play.turn_done = not endless and n == left
        if not play.turn_done:
            return Generation(gen.token_ids, "." * n, "length", None, gen.logprobs)
        text = "." * (n - 1) + self._tail(play, final)
        if final:
            return Generation(gen.token_ids, text, "eos", None, gen.logprobs)
        return Generation(gen.token_ids, text, "stop", self.fmt.stop_strings[0], gen.logprobs)
