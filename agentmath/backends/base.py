"""The generation backend protocol: token ids in, sampled token ids out.

The agent loop is token-exact because it only ever sends token ids to a backend and records the
ids the backend sampled; text is for people and for finding code blocks. A backend also owns
tokenization (prompt rendering through the model's chat template, tool output encoding) so the
loop never guesses at a tokenizer the server does not use.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

FinishReason = Literal["stop", "eos", "length"]


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Sampling settings passed to every generate call of an episode."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None
    logprobs: bool = True


@dataclass(slots=True)
class Generation:
    """One generate call's output.

    ``token_ids`` are exactly the ids the model sampled (including a final token that may run
    past the stop string); ``text`` is their decoding as the backend reports it.
    ``finish_reason`` is ``stop`` (a stop string matched: ``stop_string`` says which), ``eos``
    (the model ended its turn) or ``length`` (``max_tokens`` reached).
    """

    token_ids: list[int]
    text: str
    finish_reason: FinishReason
    stop_string: str | None = None
    logprobs: list[float] | None = None
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Backend(Protocol):
    """What the agent loop needs from a model server or a local model."""

    name: str

    async def render_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """Token ids of a chat, rendered with the model's template, ready for generation."""
        ...

    async def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special tokens added (tool output, few-shot text)."""
        ...

    async def generate(self, prompt_ids: Sequence[int], *, stop: Sequence[str],
                       max_tokens: int, sampling: SamplingParams) -> Generation:
        """Continue ``prompt_ids`` until a stop string, the end of turn, or ``max_tokens``."""
        ...

    async def aclose(self) -> None:
        """Release connections or models."""
        ...


@dataclass(frozen=True, slots=True)
class RequestTag:
    """Who a generate call is for, set by the episode around each call (:func:`tagged`).

    A plain backend ignores it. A router (:class:`agentmath.backends.router.Router`) keeps an
    episode, and the sibling samples of its group, on one server so that they share its prefix
    cache; a server backend salts its prefix cache with ``policy_version`` so that KV computed
    under older weights is never reused after a weight update.
    """

    episode_id: str
    group_id: str | None = None
    policy_version: int = 0


#: The tag of the generate call being made in this task (None outside an episode).
current_tag: ContextVar[RequestTag | None] = ContextVar("agentmath_request_tag", default=None)


def chat_prompt_ids(tokenizer: Any, messages: Sequence[Mapping[str, str]],
                    **template_kwargs: Any) -> list[int]:
    """``messages`` rendered with the tokenizer's chat template as text (with the generation
    prompt), then encoded with no special tokens added (the template already holds them): how
    every backend that holds a Hugging Face tokenizer renders a prompt."""
    text = tokenizer.apply_chat_template([dict(m) for m in messages], tokenize=False,
                                         add_generation_prompt=True, **template_kwargs)
    return list(tokenizer.encode(text, add_special_tokens=False))


@contextmanager
def tagged(tag: RequestTag | None) -> Iterator[None]:
    """Make ``tag`` the current request tag for the calls inside the block (task-local)."""
    token = current_tag.set(tag)
    try:
        yield
    finally:
        current_tag.reset(token)
