"""A lower bound on the makespan of a workload: what no scheduler, router or cache can beat.

Each server step costs ``a + b*n_decode + c*prefill + d*context + e*pairs`` (:mod:`.costs`;
``pairs``: the earlier tokens each prefilled token attends to) and decodes
at most ``n* = min(max_running, max_batched_tokens)`` tokens. Summing over the steps of a server
that decodes ``D_s`` tokens and prefills ``U_s`` tokens::

    time_s >= max(D_s / n*, C_s / K) * a + b * D_s + c * U_s + d * C_s
              + e * sum(position of every prefilled token)

because it needs at least ``D_s / n*`` steps, each paying ``a``, and at least ``C_s / K``
steps, since the contexts decoded in one step must all be in its KV cache of ``K`` tokens
(``C_s``: the summed context under every token it decodes); the other terms are paid per token
wherever and whenever it runs. With agentic contexts the KV term is the larger: 392k tokens of
KV hold ~23 contexts of 17k, so steps are small and ``a`` is paid often. The busiest server
takes at least the average, so the **work bound** is::

    work_s = (a * max(D / n*, C / K) + b * D + c * U + d * C + e * P) / servers

with ``D`` the model tokens of every episode that come out of decode steps (all but the
first of each turn, which the step finishing the turn's prefill produces; one request per
turn), ``U`` the *unavoidable* prefill (each group's
prompt once, as if all G siblings shared it through a perfect prefix cache, plus every tool
output once, since the rest of each turn's context is cached from the previous turn), and
``C`` the summed context length under each decoded token (0 work when ``d`` = 0), ``P`` the
summed positions of the unavoidable prefilled tokens (0 work when ``e`` = 0).

Two more bounds: the **critical path** (the slowest single episode running alone: each of its
tokens in a step of at least ``a + b + d*context``, its prefill, its tool latencies) and the
**sandbox bound** (all tool latency spread over the sandbox's workers). The ideal makespan is
the largest of the three. Tool-output tokens are the script's; the rendered output adds a few
marker tokens per call, which only makes the real work larger (the bound stays a bound).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentmath.sim.costs import ServerCostModel
from agentmath.sim.sandbox import SandboxModel
from agentmath.sim.workload import EpisodeScript, Workload

__all__ = ["IdealMakespan", "StepRegime", "ideal_makespan", "lockstep_bound", "servers_for_step",
           "step_regime", "turn_seconds"]


@dataclass(frozen=True, slots=True)
class IdealMakespan:
    """The bounds of :func:`ideal_makespan` and the totals they come from (seconds, tokens)."""

    servers: int
    episodes: int
    decode_tokens: int  # D: model tokens from decode steps (each turn's first comes from prefill)
    prefill_tokens: int  # U, unavoidable
    context_token_steps: int  # C
    prefill_pairs: int  # P
    work_s: float
    critical_path_s: float
    sandbox_s: float

    @property
    def makespan_s(self) -> float:
        """The lower bound: the largest of the work, critical-path and sandbox bounds."""
        return max(self.work_s, self.critical_path_s, self.sandbox_s)


def _episode_terms(script: EpisodeScript) -> tuple[int, int, float, int]:
    """(summed context under each decode-step token, tokens from decode steps, tool latency,
    summed positions of the tool-output tokens, which are prefilled).

    A turn's first token comes out of the step that finishes its prefill; its other ``g - 1``
    tokens are decode steps, at contexts ``x + 1 .. x + g - 1`` (``x``: the context before).
    """
    ctx = script.prompt_tokens
    context_sum = decoded = pairs = 0
    for turn in script.turns:
        k = max(0, turn.gen_tokens - 1)
        context_sum += k * ctx + k * (k + 1) // 2
        decoded += k
        ctx += turn.gen_tokens
        t = turn.tool_tokens
        pairs += t * ctx + t * (t - 1) // 2
        ctx += t
    latency = sum(t.tool_latency_s for t in script.turns)
    return context_sum, decoded, latency, pairs


def ideal_makespan(workload: Workload, servers: int, cost: ServerCostModel,
                   sandbox: SandboxModel | None = None) -> IdealMakespan:
    """The makespan lower bound of ``workload`` on ``servers`` servers (module docstring)."""
    if servers < 1:
        raise ValueError("servers must be at least 1")
    n_star = min(cost.max_running, cost.max_batched_tokens)
    decode = prefill = context = pairs = 0
    latency_total = 0.0
    critical = 0.0
    for g in range(workload.n_groups):
        prompt = workload.group_prompt_tokens(g)
        prefill += prompt
        pairs += prompt * (prompt - 1) // 2
        for s in range(workload.group_size):
            script = workload.script(g, s)
            ctx_sum, decoded, latency, tool_pairs = _episode_terms(script)
            decode += decoded
            prefill += script.tool_tokens
            context += ctx_sum
            pairs += tool_pairs
            latency_total += latency
            first_tokens = sum(1 for t in script.turns if t.gen_tokens)
            alone = (decoded * (cost.a + cost.b) + cost.d * ctx_sum + first_tokens * cost.a
                     + cost.c * (script.prompt_tokens + script.tool_tokens) + latency
                     + cost.e * (prompt * (prompt - 1) // 2 + tool_pairs))
            critical = max(critical, alone)
    steps = max(decode / n_star, context / max(1, cost.kv_tokens))
    work = (cost.a * steps + cost.b * decode + cost.c * prefill + cost.d * context
            + cost.e * pairs) / servers
    workers = (sandbox or SandboxModel()).workers
    return IdealMakespan(servers, workload.episodes, decode, prefill, context, pairs, work,
                         critical,
                         latency_total / workers)


@dataclass(frozen=True, slots=True)
class StepRegime:
    """What bounds one RL step of ``batch_groups`` groups on a fleet: the work of an average
    batch spread over the servers (``work_s``, the work bound of :func:`ideal_makespan` per
    batch) against a batch's longest episode at its fastest (``longest_episode_s``, decoding
    alone: :func:`turn_seconds`), which an iteration barrier waits for whatever the fleet; and
    ``lockstep_s``, the critical path of a batch run in lockstep (:func:`lockstep_bound`),
    which no fleet brings a ``sync`` step under; both averaged over the workload's batches."""

    servers: int
    batch_groups: int
    work_s: float
    longest_episode_s: float
    lockstep_s: float

    @property
    def tail_ratio(self) -> float:
        """``longest_episode_s / work_s``. Well below 1 a step is throughput-bound: the
        barrier's tail is short beside the work, so request-level scheduling is already near
        the floor and partial rollout can gain little. Near or above 1 the longest episode
        sets the step (the long tail): that is what partial rollout removes."""
        return self.longest_episode_s / self.work_s if self.work_s else float("inf")


def turn_seconds(script: EpisodeScript, cost: ServerCostModel) -> list[float]:
    """Each turn of ``script`` at its fastest: its tokens decoded alone (``a + b`` per step
    plus ``d`` per context token read) and its tool latency. Prefill is left out, so each is
    a lower bound on that turn's time in any schedule."""
    ctx, out = script.prompt_tokens, []
    for turn in script.turns:
        g = turn.gen_tokens
        out.append(g * (cost.a + cost.b) + cost.d * (g * ctx + g * (g - 1) / 2)
                   + turn.tool_latency_s)
        ctx += g + turn.tool_tokens
    return out


def lockstep_bound(workload: Workload, cost: ServerCostModel, groups: range) -> float:
    """A lower bound on running ``groups`` in lockstep (a barrier after every turn), on any
    number of servers: each round lasts at least its slowest turn (:func:`turn_seconds`), so
    the batch takes at least the sum over rounds of the slowest turn of the episodes still
    running. With a long tail of turn lengths this is several times the longest episode."""
    return _batch_bounds(workload, cost, groups)[0]


def _batch_bounds(workload: Workload, cost: ServerCostModel,
                  groups: range) -> tuple[float, float]:
    """(lockstep bound, longest episode at its fastest) of a batch of ``groups``."""
    turns = [turn_seconds(workload.script(g, s), cost)
             for g in groups for s in range(workload.group_size)]
    rounds = max((len(t) for t in turns), default=0)
    lockstep = sum(max(t[r] for t in turns if len(t) > r) for r in range(rounds))
    return lockstep, max((sum(t) for t in turns), default=0.0)


def step_regime(workload: Workload, servers: int, cost: ServerCostModel,
                batch_groups: int) -> StepRegime:
    """The :class:`StepRegime` of ``workload`` in steps of ``batch_groups`` groups on
    ``servers`` servers: the work of its average batch; the longest episode of a batch and
    the lockstep bound, each at its fastest (:func:`turn_seconds`) and averaged over the
    workload's whole batches."""
    ideal = ideal_makespan(workload, servers, cost)
    share = batch_groups / workload.n_groups
    batches = max(1, workload.n_groups // batch_groups)
    bounds = [_batch_bounds(workload, cost, range(b * batch_groups, (b + 1) * batch_groups))
              for b in range(batches)]
    return StepRegime(servers, batch_groups, ideal.work_s * share,
                      sum(b[1] for b in bounds) / batches, sum(b[0] for b in bounds) / batches)


def servers_for_step(workload: Workload, cost: ServerCostModel, batch_groups: int,
                     step_s: float) -> float:
    """The fewest servers (fractional) on which a step of ``batch_groups`` groups can take
    ``step_s`` seconds at all: the work bound of an average batch on one server over
    ``step_s``. A step time reported for an unstated fleet bounds that fleet from below."""
    if step_s <= 0:
        raise ValueError("step_s must be positive")
    return step_regime(workload, 1, cost, batch_groups).work_s / step_s
