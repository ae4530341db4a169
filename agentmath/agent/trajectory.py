"""The record of one episode: every segment in order, with its exact token ids and loss mask.

A trajectory is what evaluation grades, what SFT trains on and what GRPO scores, so it keeps
the truth: the ids the model sampled (never a re-tokenization of its text), the ids of the
prompt and of each rendered tool output, the model's logprobs where the backend gave them, and
a loss mask that is 1 on model tokens and 0 on prompt and tool tokens. It round-trips through
JSON without loss.

What later stages read back is typed: the problem id and sample index the engine ran it as,
the sampling settings it was generated with, its grade (set by whoever grades it: the RL
reward caches it there), and the facts of its execution (see :class:`Trajectory`: the chat
messages, whether it is token-exact, the segments it ran in, its session replays and close
error, the Ray node it ran on, the reward errors). ``meta`` is for free-form extras only
(format, backend, budgets, and whatever the caller passed). Trajectories written before these
fields existed kept them in ``meta`` (``problem_id``, ``sample_index``, ``sampling``,
``correct``/``extracted``, and the execution facts under their old keys, ``segments`` for
:attr:`Trajectory.advances`); :meth:`Trajectory.from_dict` reads them from there.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from agentmath.backends.base import SamplingParams
from agentmath.grading.answer import Grade
from agentmath.sandbox.result import ExecResult

Source = Literal["prompt", "model", "tool"]
#: How training takes an episode whose chat template rewrote its history (a re-rendered
#: prompt that did not extend the ids the model had seen): one sequence per turn, or none.
HistoryRewrite = Literal["per_turn", "refuse"]
FINISH_REASONS = ("answered", "eos", "token_budget", "tool_budget", "time_budget", "error")


@dataclass(slots=True)
class Segment:
    """A contiguous run of tokens from one source.

    Model segments carry ``logprobs`` (one per token, when the backend returns them), the
    generation's ``finish_reason`` and the ``policy_version`` that sampled them (an episode
    parked and resumed under newer weights has model segments of several versions); tool
    segments carry the ``code`` that ran and its ``result``.
    """

    source: Source
    text: str
    token_ids: list[int]
    logprobs: list[float] | None = None
    finish_reason: str | None = None
    code: str | None = None
    result: ExecResult | None = None
    duration_ms: float = 0.0
    policy_version: int | None = None

    @property
    def loss_mask(self) -> list[int]:
        """1 for tokens the model produced (trained on), 0 for prompt and tool tokens."""
        return [1 if self.source == "model" else 0] * len(self.token_ids)

    def to_dict(self) -> dict[str, Any]:
        # What dataclasses.asdict gave (same keys, order and values), built directly: asdict
        # deep-copies every token id and logprob one call at a time, which cost the eval
        # harness about a millisecond per sample (docs/benchmarks.md, evaluation harness).
        return {
            "source": self.source,
            "text": self.text,
            "token_ids": list(self.token_ids),
            "logprobs": list(self.logprobs) if self.logprobs is not None else None,
            "finish_reason": self.finish_reason,
            "code": self.code,
            "result": self.result.to_dict() if self.result is not None else None,
            "duration_ms": self.duration_ms,
            "policy_version": self.policy_version,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Segment:
        data = dict(data)
        if data.get("result") is not None:
            data["result"] = ExecResult.from_dict(data["result"])
        return cls(**data)


#: The fields older trajectories kept in ``meta``: meta key -> field (the grade aside).
_OLD_META_FIELDS = {"problem_id": "problem_id", "sample_index": "sample_index",
                    "sampling": "sampling", "messages": "messages", "token_exact": "token_exact",
                    "segments": "advances", "session_replays": "session_replays",
                    "session_close_error": "session_close_error", "ray_node": "ray_node",
                    "reward_errors": "reward_errors"}


@dataclass(slots=True)
class Trajectory:
    """One episode of the agent loop.

    Besides its segments and outcome, the facts of its execution, each with one writer:

    * ``messages``: the chat messages of the episode, written by its driver when it starts.
      A text format's are the messages its prompt was rendered from; native chat's are the
      whole conversation, the very list the chat driver sends and extends turn by turn. That
      list is the driver's working state, yet it is a field here, not the driver's alone:
      it is the only record of the conversation as it was sent (roles, tool calls and their
      ids, which the segments' texts do not keep), it is what ``samples.jsonl`` keeps of it,
      and it goes with the trajectory to another worker when a parked episode moves
      (:meth:`~agentmath.agent.episode.Episode.restore` hands it to the new driver there).
    * ``token_exact``: False when the ids are not exactly what the sampler saw and sampled
      (native chat through a server that does not report its prompt and sampled ids);
      written by the chat driver.
    * ``history_rewrite``: None while every model turn continued the ids before it (text
      formats always; native chat while each re-rendered prompt extends the previous turn's
      prompt and sampled ids). Written by the chat driver at the first turn whose
      re-rendered prompt does not (a template that drops earlier reasoning, re-serialises
      tool calls or re-tokenizes sampled text): the run's ``LoopConfig.history_rewrite``,
      ``per_turn`` (trained as one sequence per turn, :attr:`sequences`) or ``refuse`` (not
      trained on).
    * ``advances``: the segments it ran in (calls of ``Episode.advance``; more than 1 only
      under partial rollout's segment budgets) and ``session_replays``: the times a lost
      sandbox session was rebuilt by replaying its cells; written by the episode when it
      finishes (as set before: both only when it ran in segments or replayed).
    * ``session_close_error``: why closing its sandbox session after it finished failed.
    * ``ray_node``: the Ray node it ran on, written by the rollout worker.
    * ``reward_errors``: the failures of user reward terms (each counted 0), written by the
      RL reward model.
    """

    problem: str
    segments: list[Segment] = field(default_factory=list)
    finish_reason: str = "error"
    answer: str | None = None
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    duration_ms: float = 0.0
    problem_id: str | None = None
    sample_index: int | None = None
    sampling: SamplingParams | None = None
    grade: Grade | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    token_exact: bool = True
    history_rewrite: HistoryRewrite | None = None
    advances: int = 1
    session_replays: int = 0
    session_close_error: str | None = None
    ray_node: str | None = None
    reward_errors: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------ token views
    @property
    def token_ids(self) -> list[int]:
        """All ids in order: exactly the context the model conditioned on, plus its last turn
        (for an episode whose history was rewritten: its :attr:`sequences`, one after the
        other)."""
        return [t for seg in self.segments for t in seg.token_ids]

    @property
    def sequences(self) -> list[list[Segment]]:
        """The segments cut into the sequences the sampler saw: a prompt segment that follows
        a model or tool segment starts a new one (the chat driver writes one where a turn's
        re-rendered prompt did not extend the ids before it). One sequence, all segments,
        for every episode whose history was never rewritten."""
        out: list[list[Segment]] = []
        for seg in self.segments:
            if not out or (seg.source == "prompt" and out[-1][-1].source != "prompt"):
                out.append([seg])
            else:
                out[-1].append(seg)
        return out

    @property
    def loss_mask(self) -> list[int]:
        """Aligned with :attr:`token_ids`; 1 only on model tokens."""
        return [m for seg in self.segments for m in seg.loss_mask]

    @property
    def logprobs(self) -> list[float | None]:
        """Aligned with :attr:`token_ids`: the sampled token's logprob on model tokens."""
        out: list[float | None] = []
        for seg in self.segments:
            if seg.source == "model" and seg.logprobs is not None:
                out.extend(seg.logprobs)
            else:
                out.extend([None] * len(seg.token_ids))
        return out

    @property
    def prompt_length(self) -> int:
        """Number of tokens before the first model token."""
        n = 0
        for seg in self.segments:
            if seg.source != "prompt":
                break
            n += len(seg.token_ids)
        return n

    # ------------------------------------------------------------------ summaries
    @property
    def model_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.segments if s.source == "model")

    @property
    def tool_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.segments if s.source == "tool")

    @property
    def total_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.segments)

    @property
    def tool_calls(self) -> list[Segment]:
        return [s for s in self.segments if s.source == "tool"]

    @property
    def num_tool_errors(self) -> int:
        return sum(1 for s in self.tool_calls if s.result is not None and s.result.error)

    @property
    def policy_versions(self) -> list[int]:
        """The distinct policy versions of the model segments, oldest first."""
        return sorted({s.policy_version for s in self.segments
                       if s.source == "model" and s.policy_version is not None})

    @property
    def infra_failure(self) -> str | None:
        """Why this episode's outcome says nothing about the model, or None when it does: it
        ended in an error (a server failing after its retries, a tokenizer or episode
        failure: ``finish_reason`` ``error``), a tool call failed for the sandbox's reasons
        rather than its code's (:attr:`ExecResult.infra`), or grading it crashed or timed out
        (an error grade that is not the row's own: an unparsable gold is ungradable for every
        sample alike). A model's own syntax error, exception, timeout or crash is not one."""
        if self.finish_reason == "error":
            return self.error or "the episode ended in an error"
        for seg in self.tool_calls:
            if seg.result is not None and seg.result.infra:
                return seg.result.error or "the sandbox failed"
        grade = self.grade
        if grade is not None and grade.verdict == "error" and not grade.ungradable:
            return f"grading failed: {grade.reason or 'timed out'}"
        return None

    @property
    def completion_text(self) -> str:
        """Everything after the prompt, as text (model and tool segments)."""
        return "".join(s.text for s in self.segments if s.source != "prompt")

    @property
    def model_text(self) -> str:
        """Only what the model wrote."""
        return "".join(s.text for s in self.segments if s.source == "model")

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        """The JSON form; the typed fields are written only when set (``grade`` is rarely)
        or, for the execution facts, when not their default."""
        data: dict[str, Any] = {
            "problem": self.problem,
            "segments": [s.to_dict() for s in self.segments],
            "finish_reason": self.finish_reason,
            "answer": self.answer,
            "error": self.error,
            "meta": self.meta,
            "duration_ms": self.duration_ms,
        }
        if self.problem_id is not None:
            data["problem_id"] = self.problem_id
        if self.sample_index is not None:
            data["sample_index"] = self.sample_index
        if self.sampling is not None:
            data["sampling"] = asdict(self.sampling)
        if self.grade is not None:
            data["grade"] = self.grade.to_dict()
        if self.messages:
            data["messages"] = self.messages
        if not self.token_exact:
            data["token_exact"] = False
        if self.history_rewrite is not None:
            data["history_rewrite"] = self.history_rewrite
        if self.advances != 1:
            data["advances"] = self.advances
        if self.session_replays:
            data["session_replays"] = self.session_replays
        if self.session_close_error is not None:
            data["session_close_error"] = self.session_close_error
        if self.ray_node is not None:
            data["ray_node"] = self.ray_node
        if self.reward_errors:
            data["reward_errors"] = self.reward_errors
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        """Inverse of :meth:`to_dict`; also reads the older form that kept the problem id,
        sample index, sampling settings, RL's cached grade and the execution facts in
        ``meta``."""
        data = dict(data)
        meta = dict(data.get("meta") or {})
        data["segments"] = [Segment.from_dict(s) for s in data.get("segments", [])]
        for key, name in _OLD_META_FIELDS.items():
            if name not in data and key in meta:
                data[name] = meta.pop(key)
        if isinstance(data.get("sampling"), dict):
            data["sampling"] = SamplingParams(**data["sampling"])
        if isinstance(data.get("grade"), dict):
            data["grade"] = Grade.from_dict(data["grade"])
        elif isinstance(meta.get("correct"), bool):  # RL's cache before grades were typed
            data["grade"] = Grade.from_record(meta.pop("correct"), meta.pop("extracted", None),
                                              reason=meta.pop("grade_error", None))
        data["meta"] = meta
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> Trajectory:
        return cls.from_dict(json.loads(text))
