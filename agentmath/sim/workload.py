"""A synthetic agentic-RL workload with AgentMath-like statistics, reproducible per episode.

A workload is ``n_groups`` problems sampled ``group_size`` times (GRPO's G). Each episode
follows a *script* (:class:`EpisodeScript`): its prompt length, and per model turn the tokens
the model writes, then either a tool call (tool output length, tool latency) or, on the last
turn, the final ``\\boxed{}`` answer. The simulated model (:mod:`.policy`) and sandbox
(:mod:`.sandbox`) play the scripts; the real agent loop and scheduler drive them.

Reproducibility: a script is drawn from its own random stream, seeded by ``(seed, group,
sample)`` only, so it does not depend on the order in which a scheduler starts or advances
episodes: every scheduler variant of a benchmark table does exactly the same work.

What AgentMath states, and the defaults take as given: G = 8 samples per problem; trajectories
average **8.3 tool calls** and **16.9k tokens**, with at most **96 tool calls** and **96k tokens**
(the loop's budgets here: ``max_calls`` = 96, ``max_episode_tokens`` = 96 x 1024, whether the
paper's "96k" is 96,000 or 98,304 is not stated). Batch 64 problems and the 10 s weight update
are the benchmark's (``benchmarks/_rollout_sim.py``). "Tokens per trajectory" is read as the
final context: prompt + model + tool tokens (an assumption). ``calls_mean`` (8.35) and the
median of ``turn_tokens`` (1,040) are set so that the generated episodes have those means
(``tests/unit/test_simulator_costs.py`` checks them on 8,192 episodes); they are not fitted to
any benchmark row.

What the paper does not state, assumed here (the shapes of the distributions):

* calls per episode: negative binomial (a gamma-Poisson mixture) with mean ``calls_mean`` and
  shape ``calls_shape`` = 4, capped at ``max_calls``: p99 ~24 calls, the longest ~40 of 8k;
* tokens per model turn: lognormal ``turn_tokens`` (sigma 1.0) times a per-group (sigma 0.4)
  and a per-episode (sigma 0.6) lognormal factor of mean 1, so that hard problems and unlucky
  samples are long in every turn; median episode ~11.5k tokens, p90 ~36k, p99 ~93k; the tail
  reaches the context cap (~0.8% of episodes are cut there);
* prompt tokens (median 400), tool output tokens (median 80, at most 1,024) and tool latency
  (median 0.4 s): lognormal, capped.

So 4096 episodes (512 groups) are ~69M tokens.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from agentmath.config import LoopConfig
from agentmath.tasks import Task

__all__ = ["EpisodeScript", "LogNormal", "Turn", "Workload"]

_PROBLEM_RE = re.compile(r"Simulated problem (\d+)\b")
_EPISODE_RE = re.compile(r"#(\d+)(?:r\d+)?$")


@dataclass(frozen=True, slots=True)
class LogNormal:
    """A lognormal with the given ``median`` and log-space ``sigma``, clipped to [low, high]."""

    median: float
    sigma: float
    low: float = 0.0
    high: float = math.inf

    def draw(self, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
        """Clipped draws (an array; of shape ``size``)."""
        values = self.median * np.exp(self.sigma * rng.standard_normal(size))
        return np.clip(values, self.low, self.high)


@dataclass(frozen=True, slots=True)
class Turn:
    """One model turn of a script: ``gen_tokens`` written by the model (the call or answer
    included), then, for a tool turn, ``tool_tokens`` of output after ``tool_latency_s``."""

    gen_tokens: int
    tool_tokens: int = 0
    tool_latency_s: float = 0.0


@dataclass(frozen=True, slots=True)
class EpisodeScript:
    """What one episode does. Every turn but the last ends in a tool call; the last ends in
    the answer (``ending="answer"``) or is cut by the context cap (``"truncated"``: the model
    would go on writing, the loop's token budget stops it)."""

    group: int
    sample: int
    prompt_tokens: int
    turns: tuple[Turn, ...]
    ending: Literal["answer", "truncated"]

    @property
    def calls(self) -> int:
        """Tool calls the episode makes."""
        return len(self.turns) - 1

    @property
    def model_tokens(self) -> int:
        """Tokens the model writes over all turns."""
        return sum(t.gen_tokens for t in self.turns)

    @property
    def tool_tokens(self) -> int:
        """Tool output tokens over all calls."""
        return sum(t.tool_tokens for t in self.turns)

    @property
    def total_tokens(self) -> int:
        """Prompt + model + tool tokens: the episode's final context length."""
        return self.prompt_tokens + self.model_tokens + self.tool_tokens


@dataclass(frozen=True)
class Workload:
    """The episodes of a simulated run (see the module docstring); frozen and hashable."""

    #: Seed of every random draw: the same seed is the same work.
    seed: int = 0
    #: Problems (GRPO groups).
    n_groups: int = 512
    #: Samples per problem (G).
    group_size: int = 8
    #: Prompt tokens (system prompt + problem), shared by the samples of a group.
    prompt_tokens: LogNormal = field(default_factory=lambda: LogNormal(400, 0.5, 64, 4096))
    #: Mean of the calls' mixture (8.35 gives the paper's 8.3 calls per episode after the
    #: context cap cuts a few episodes short).
    calls_mean: float = 8.35
    #: Shape of the negative binomial of calls (smaller: more spread; inf: Poisson).
    calls_shape: float = 4.0
    #: Most tool calls of an episode (the paper: up to 96).
    max_calls: int = 96
    #: Tokens per model turn, before the group and episode factors.
    turn_tokens: LogNormal = field(default_factory=lambda: LogNormal(1040, 1.0, 16, 16384))
    #: Log-space sigma of the per-group length factor (hard problems are long).
    group_sigma: float = 0.4
    #: Log-space sigma of the per-episode length factor.
    episode_sigma: float = 0.6
    #: Tool output tokens per call.
    tool_tokens: LogNormal = field(default_factory=lambda: LogNormal(80, 1.0, 4, 1024))
    #: Seconds one snippet runs in the sandbox (queueing for a worker comes on top).
    tool_latency_s: LogNormal = field(default_factory=lambda: LogNormal(0.4, 1.0, 0.01, 30.0))
    #: Context cap of an episode (prompt + model + tool tokens), as the loop's budget.
    max_episode_tokens: int = 96 * 1024
    #: Characters per token of simulated text (tool output sizes).
    chars_per_token: float = 4.0

    # ------------------------------------------------------------------ episodes

    @property
    def episodes(self) -> int:
        """Episodes in the workload."""
        return self.n_groups * self.group_size

    def script(self, group: int, sample: int) -> EpisodeScript:
        """The script of sample ``sample`` of problem ``group`` (cached; order-independent)."""
        return _script(self, group, sample)

    def scripts(self) -> list[EpisodeScript]:
        """Every episode's script, group by group."""
        return [self.script(g, s) for g in range(self.n_groups) for s in range(self.group_size)]

    def group_prompt_tokens(self, group: int) -> int:
        """Prompt tokens of problem ``group``."""
        return _group_draws(self, group)[0]

    def with_turn_sigma(self, sigma: float) -> Workload:
        """This workload with the per-turn spread ``sigma`` (log space) instead of
        ``turn_tokens.sigma``, its median moved so that the mean turn, and so the paper's
        16.9k tokens per episode, stays the same (a lognormal's mean is its median times
        ``exp(sigma**2 / 2)``). The per-turn spread is not stated by the paper; it sets how
        long the slowest turn of a lockstep round is, and so the ``sync`` row."""
        if sigma < 0:
            raise ValueError("sigma must be non-negative")
        t = self.turn_tokens
        median = t.median * math.exp((t.sigma ** 2 - sigma ** 2) / 2)
        return replace(self, turn_tokens=LogNormal(median, sigma, t.low, t.high))

    # ------------------------------------------------------------------ the problems as text

    def problem(self, group: int) -> str:
        """Problem text of ``group``; the simulated model recognises it in the prompt."""
        return f"Simulated problem {group}: find the answer (agentmath rollout simulator)."

    def answer(self, group: int) -> str:
        """The reference answer of ``group`` (what every episode puts in ``\\boxed{}``)."""
        return str((group * 7919) % 1000)

    def tasks(self) -> list[Task]:
        """The problems as tasks for the rollout engine (ids ``sim-<group>``)."""
        return [Task(f"sim-{g}", self.problem(g), self.answer(g), {"group": g})
                for g in range(self.n_groups)]

    @staticmethod
    def group_of_text(text: str) -> int | None:
        """The group whose :meth:`problem` text occurs in ``text`` (None when none does)."""
        m = _PROBLEM_RE.search(text)
        return int(m.group(1)) if m else None

    @staticmethod
    def sample_of_episode(episode_id: str) -> int | None:
        """The sample index in a rollout-engine episode id (``<group_id>#<index>[r<n>]``)."""
        m = _EPISODE_RE.search(episode_id)
        return int(m.group(1)) if m else None

    def loop_config(self, **overrides: object) -> LoopConfig:
        """A :class:`LoopConfig` whose budgets let every script play out as drawn: tokens capped
        at ``max_episode_tokens``, calls at ``max_calls``, tool output long enough, the time
        limits far beyond any simulated episode (the loop measures them in wall time)."""
        most = min(self.tool_tokens.high, self.max_episode_tokens)
        chars = int(most * self.chars_per_token) + 256
        values: dict[str, object] = {
            "max_tool_calls": self.max_calls, "max_total_tokens": self.max_episode_tokens,
            "max_model_tokens": self.max_episode_tokens, "max_output_chars": chars,
            "tool_timeout_s": min(3600.0, max(60.0, self.tool_latency_s.high * 2)),
            "time_limit_s": 86_400.0}
        values.update(overrides)
        return LoopConfig(**values)  # type: ignore[arg-type]


def _rng(workload: Workload, *key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(workload.seed, spawn_key=key))


@functools.lru_cache(maxsize=1 << 16)
def _group_draws(workload: Workload, group: int) -> tuple[int, float]:
    """(prompt tokens, length factor) of a group, from the group's own stream."""
    rng = _rng(workload, group)
    prompt = int(workload.prompt_tokens.draw(rng))
    s = workload.group_sigma
    factor = float(np.exp(s * rng.standard_normal() - s * s / 2))
    return prompt, factor


@functools.lru_cache(maxsize=1 << 16)
def _script(workload: Workload, group: int, sample: int) -> EpisodeScript:
    prompt, group_factor = _group_draws(workload, group)
    rng = _rng(workload, group, 1 + sample)
    shape = workload.calls_shape
    lam = (rng.gamma(shape, workload.calls_mean / shape) if math.isfinite(shape)
           else workload.calls_mean)
    calls = min(int(rng.poisson(lam)), workload.max_calls)
    s = workload.episode_sigma
    factor = group_factor * float(np.exp(s * rng.standard_normal() - s * s / 2))
    gen = workload.turn_tokens.draw(rng, calls + 1) * factor
    tools = workload.tool_tokens.draw(rng, calls)
    latency = workload.tool_latency_s.draw(rng, calls)
    turns: list[Turn] = []
    used, cap = prompt, workload.max_episode_tokens
    for i in range(calls + 1):
        g = max(8, int(gen[i]))
        if used + g > cap:  # the context cap cuts this turn: the episode ends here
            turns.append(Turn(max(0, cap - used)))
            return EpisodeScript(group, sample, prompt, tuple(turns), "truncated")
        if i == calls:
            turns.append(Turn(g))
            break
        t = min(int(tools[i]), cap - used - g)  # the cap cuts a tool output too
        turns.append(Turn(g, t, float(latency[i])))
        used += g + t
    return EpisodeScript(group, sample, prompt, tuple(turns), "answer")
