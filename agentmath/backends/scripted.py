"""A backend that plays back fixed model turns: for tests, benchmarks and pipeline dry runs.

It behaves like a real backend at the token level: turns are tokenized (by a given tokenizer,
or by a built-in byte tokenizer whose ids are UTF-8 bytes, so decoding is exact), generation is
cut just after the first stop string (finish ``stop``), a turn without one ends with an
end-of-turn id (``eos``), and ``max_tokens`` cuts it (``length``). The turn played is chosen by
the number of tool outputs already in the context, so concurrent episodes each get their own
sequence. An optional ``delay`` stands in for model latency.

A turn cut by ``max_tokens`` continues where it stopped when the next call's context is the
cut one (a parked episode resuming), and, like vLLM, stop strings are then matched only in the
newly generated text: exactly the behaviour partial rollout must be exact under.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from agentmath.backends.base import Generation, SamplingParams, chat_prompt_ids
from agentmath.errors import BackendError

EOS_ID = 256  # the byte tokenizer's end-of-turn id
TOOL_MARK = 257  # the byte tokenizer marks the start of every tool output with this id


class ByteTokenizer:
    """ids = UTF-8 bytes; ``EOS_ID`` ends a turn; tool outputs start with ``TOOL_MARK``."""

    eos_token_id = EOS_ID

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class ScriptedBackend:
    """Replays ``turns``: turn *i* is played when the context holds *i* tool outputs."""

    name = "scripted"

    def __init__(self, turns: Sequence[str], tokenizer: Any = None, *, delay: float = 0.0,
                 fail_at: int | None = None) -> None:
        self.turns = list(turns)
        self.tokenizer = tokenizer
        self.delay = delay
        self.fail_at = fail_at
        self.calls = 0
        self._byte = ByteTokenizer() if tokenizer is None else None
        self._eos = tokenizer.eos_token_id if tokenizer is not None else EOS_ID
        # context after a cut turn -> chars played (kept: sibling samples share contexts)
        self._cut: dict[tuple[int, ...], int] = {}

    def _encode(self, text: str) -> list[int]:
        if self._byte is not None:
            return self._byte.encode(text)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _decode(self, ids: Sequence[int]) -> str:
        if self._byte is not None:
            return self._byte.decode(ids)
        return self.tokenizer.decode(list(ids))

    async def render_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        if self.tokenizer is not None:
            return chat_prompt_ids(self.tokenizer, messages)
        text = "".join(f"<{m['role']}>{m['content']}\n" for m in messages) + "<assistant>"
        return self._encode(text)

    async def tokenize(self, text: str) -> list[int]:
        ids = self._encode(text)
        return [TOOL_MARK, *ids] if self._byte is not None else ids

    def _turn_index(self, prompt_ids: Sequence[int]) -> int:
        if self._byte is not None:
            return sum(1 for t in prompt_ids if t == TOOL_MARK)
        return self.calls  # with a real tokenizer, tool outputs are not marked: play in order

    async def generate(self, prompt_ids: Sequence[int], *, stop: Sequence[str],
                       max_tokens: int, sampling: SamplingParams) -> Generation:
        if self.fail_at is not None and self.calls == self.fail_at:
            self.calls += 1
            raise BackendError("scripted failure: server unavailable")
        index = min(self._turn_index(prompt_ids), len(self.turns) - 1)
        self.calls += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        full = self.turns[index]
        done = self._cut.get(tuple(prompt_ids), 0)  # chars of this turn already generated
        text = full[done:]
        hits = [(text.find(s) + len(s), s) for s in stop if s in text]
        if hits:
            end, matched = min(hits)
            ids, reason = self._encode(text[:end]), "stop"
        else:
            ids, reason, matched = self._encode(text) + [self._eos], "eos", None
        if len(ids) > max_tokens:
            ids, reason, matched = ids[:max_tokens], "length", None
            self._cut[(*prompt_ids, *ids)] = done + len(self._decode(ids))
        return Generation(ids, self._decode(ids), reason, matched,  # type: ignore[arg-type]
                          [-0.5] * len(ids))

    async def aclose(self) -> None:
        return None
