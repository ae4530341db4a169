"""An agentmath trajectory as the fields of verl's ``AgentLoopOutput``.

verl trains on ``prompt_ids`` + ``response_ids`` where the response is every token after the
prompt, the model's and the tools' alike, with ``response_mask`` 1 on model tokens and 0 on
tool tokens, and ``response_logprobs`` aligned with it. agentmath's trajectory already holds
exactly that, segment by segment, and its trainer's :func:`agentmath.rl.batch.to_train_sample`
already builds the ids, the loss mask (tool tokens masked, or not for the DeepMath ablation)
and the sampler's logprobs from it; this module reuses that and only splits it at the prompt
and fills verl's conventions (0.0 logprob off model tokens, the response cut to verl's
``response_length``). No verl import.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agentmath.agent.trajectory import Trajectory
from agentmath.rl.batch import ScoredSample, to_train_sample


@dataclass(slots=True)
class VerlSample:
    """What an AgentLoopOutput needs from a trajectory (plain lists, aligned)."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None
    num_turns: int
    generate_s: float
    tool_s: float
    truncated: bool


def to_verl_sample(trajectory: Trajectory, response_length: int | None = None, *,
                   mask_tool_tokens: bool = True) -> VerlSample:
    """Split ``trajectory`` at its prompt into verl's prompt and response fields.

    ``response_mask`` is the trajectory's loss mask after the prompt (1 on model tokens, 0 on
    tool tokens; with ``mask_tool_tokens`` False tool tokens carry 1, as DeepMath's trainer
    had it). ``response_logprobs`` is the sampler's logprob on model tokens and 0.0 on tool
    tokens (verl pads with 0.0 too), or None when any model token lacks one (verl was asked
    for no logprobs). ``num_turns`` counts the prompt and every model and tool segment.
    A response longer than ``response_length`` is cut (``truncated``), as verl's own loops do.
    """
    sample = to_train_sample(ScoredSample("", 0, trajectory, 0.0, {}, False),
                             mask_tool_tokens=mask_tool_tokens)
    start = trajectory.prompt_length
    response_ids = sample.ids[start:]
    mask = sample.mask[start:]
    logps = sample.sampler_logp[start:]
    model = [s for s in trajectory.segments if s.source == "model"]
    has_logprobs = all(s.logprobs is not None and len(s.logprobs) == len(s.token_ids)
                       for s in model)
    sources = [seg.source for seg in trajectory.segments for _ in seg.token_ids][start:]
    logprobs = ([lp if src == "model" and not math.isnan(lp) else 0.0
                 for lp, src in zip(logps, sources, strict=True)] if has_logprobs else None)
    cut = response_length is not None and len(response_ids) > response_length
    if cut:
        assert response_length is not None
        response_ids, mask = response_ids[:response_length], mask[:response_length]
        logprobs = logprobs[:response_length] if logprobs is not None else None
    tools = [s for s in trajectory.segments if s.source == "tool"]
    return VerlSample(
        prompt_ids=sample.ids[:start], response_ids=response_ids, response_mask=mask,
        response_logprobs=logprobs, num_turns=1 + len(model) + len(tools),
        generate_s=sum(s.duration_ms for s in model) / 1000.0,
        tool_s=sum(s.duration_ms for s in tools) / 1000.0, truncated=cut)
