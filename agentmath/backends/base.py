"""The generation backend protocol: token ids in, sampled token ids out.

The agent loop is token-exact because it only ever sends token ids to a backend and records the
ids the backend sampled; text is for people and for finding code blocks. A backend also owns
tokenization (prompt rendering through the model's chat template, tool output encoding) so the
loop never guesses at a tokenizer the server does not use.

Beyond :class:`Backend`, a backend may offer optional capabilities, each a small protocol
declared here and checked with ``isinstance`` by whoever uses it (never found by probing
attribute names): :class:`Addressed` (a server URL), :class:`ChatCompletion` (a chat
endpoint), :class:`ModelThread` (an in-process model the RL update shares a thread
with), :class:`PolicyVersioned` (told about weight updates), :class:`StickyHomes` (keeps
episodes on one server and is told when they end), :class:`ModelNamed` (the model name its
requests send can change: a LoRA adapter per policy version), :class:`HealthChecked` (answers
a cheap health probe), :class:`PrefixCacheCounted` (reports its prefix-cache counters) and
:class:`Interruptible` (a generate call that can be cut short, keeping what it sampled).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")
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
    (the model ended its turn) or ``length`` (``max_tokens`` reached, or the generation was
    cut short by an interrupt: ``interrupted`` True, see :class:`Interruptible`).
    """

    token_ids: list[int]
    text: str
    finish_reason: FinishReason
    stop_string: str | None = None
    logprobs: list[float] | None = None
    info: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False


def nothing_sampled(sampling: SamplingParams, *, interrupted: bool = False,
                    **info: Any) -> Generation:
    """A call's output when it sampled no token (finish "length"): a budget of nothing, or a
    generation ``interrupted`` before its first token."""
    return Generation([], "", "length", None, [] if sampling.logprobs else None, dict(info),
                      interrupted=interrupted)


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


# ------------------------------------------------------------------ optional capabilities


@runtime_checkable
class Addressed(Protocol):
    """A backend that talks to one server at a URL: errors and stats name the server by it."""

    base_url: str


@runtime_checkable
class ChatCompletion(Protocol):
    """A backend with a chat endpoint (OpenAI-compatible ``/v1/chat/completions``): native
    tool calling, and teachers that reply through the server's own chat template."""

    async def chat(self, messages: Sequence[dict[str, Any]], *,
                   tools: Sequence[dict[str, Any]] | None = None, max_tokens: int = 1024,
                   sampling: SamplingParams | None = None, **extra: Any) -> dict[str, Any]:
        """One assistant message (``content``, ``tool_calls``, ``finish_reason``...)."""
        ...


@runtime_checkable
class ModelThread(Protocol):
    """A backend that runs an in-process model on a thread of its own (``hf``): an RL trainer
    runs its update there, so that training and generation share one thread pool."""

    async def run_on_model_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the thread that generates."""
        ...


@runtime_checkable
class PolicyVersioned(Protocol):
    """A backend that keeps state per policy version (a router's group homes): told when
    new weights are live."""

    def set_policy_version(self, version: int) -> None:
        """Weights of ``version`` are live from now on (versions never go back)."""
        ...


@runtime_checkable
class StickyHomes(Protocol):
    """A backend that keeps an episode, and its group, on one server (a router): told when
    an episode or a group is done, so that it can drop their homes."""

    def forget(self, episode_id: str | None = None, group_id: str | None = None) -> None:
        """Drop the home of a finished episode and/or group (unknown ids are fine)."""
        ...


@runtime_checkable
class ModelNamed(Protocol):
    """A backend whose requests name the served model (an OpenAI-compatible client, or a
    router over such clients): the name can change, e.g. to a LoRA adapter per version."""

    def use_model(self, name: str) -> None:
        """Send ``name`` as the model of every request from now on."""
        ...


@runtime_checkable
class HealthChecked(Protocol):
    """A backend that answers a cheap health probe (a router probes a down server with it)."""

    async def healthy(self) -> bool:
        """Whether the server answers now (never raises)."""
        ...


@runtime_checkable
class PrefixCacheCounted(Protocol):
    """A backend that reports its server's prefix-cache counters (vLLM's ``/metrics``)."""

    async def prefix_cache_counters(self) -> tuple[float, float]:
        """``(hits, queries)`` in tokens since the server started (BackendError if unknown)."""
        ...


@runtime_checkable
class Interruptible(Protocol):
    """A backend whose generate call can be cut short and still return what it sampled: at a
    partial-rollout iteration's end the engine cuts the running model turns instead of waiting
    for them (``RolloutConfig.interrupt_turns``); the next iteration continues each turn from
    its ids, as it continues a turn cut by the segment budget."""

    async def generate_interruptible(self, prompt_ids: Sequence[int], *, stop: Sequence[str],
                                     max_tokens: int, sampling: SamplingParams,
                                     interrupt: asyncio.Event) -> Generation:
        """As ``generate``; once ``interrupt`` is set, return soon with the tokens sampled so
        far (possibly none) and ``finish_reason`` ``length``, ``interrupted`` True."""
        ...


Reconnected = Callable[[str], Awaitable[None]]  # a hook: the server (its URL) answers again


@runtime_checkable
class Reconnecting(Protocol):
    """A backend that knows when a server it lost answers again: after a connection to the
    server was refused (its process gone) the server that answers later has restarted, and a
    restarted vLLM server runs the weights it was started from. Each hook runs with the
    server's URL before the first request sent to it after that (an RL trainer's: load the
    current weights into it); one that fails keeps the request from being sent there."""

    def on_reconnect(self, hook: Reconnected) -> None:
        """Run ``hook(url)`` whenever a server of this backend is reached again after it was
        lost, before any request goes to it (hooks in the order given)."""
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
