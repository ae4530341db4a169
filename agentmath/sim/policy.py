"""The simulated model: what it writes, as token ids and text that the real agent loop parses.

The server model (:mod:`.server`) decides *when* tokens come out; this module decides *which*:
it plays each episode's :class:`~.workload.EpisodeScript`. A tool turn is filler (text: a "."
every 64 tokens, so that the loop's parsing stays cheap at 10^8 tokens) followed by a
call in the tool format (``<code>\\nprint("x" * N)  # sim: latency_s=...\\n</code>`` for
``code_interpreter``), ending at the format's stop string, so ``fmt.find_call`` finds the call
and the simulated sandbox reads the scripted output size and latency from its code. The last
turn ends with ``\\boxed{<answer>}`` and an end-of-turn id (finish ``eos``). ``max_tokens`` cuts
a turn (finish ``length``); the next call continues the same turn, as partial rollout needs.

Token ids are synthetic but behave like real ones for prefix caching: a group's siblings share
their prompt ids, every (episode, turn) continues with its own pseudo-random ids, and tool
outputs are hashed from their text. Ids are small ints (CPython shares them), and continuation
ids are slices of one pre-drawn pool, so 10^8 tokens cost little memory and time.

Which script: the group comes from the problem text in the prompt (:meth:`Workload.problem`);
the sample from the episode id of the current :class:`~agentmath.backends.base.RequestTag`
(the rollout engine's ``<group>#<index>``), else the order in which the group's episodes first
asked. Where the episode is within its script (turn, tokens of the open turn) is tracked per
episode id from the lengths of successive contexts, so it costs O(1) per call; a context that
does not extend the last one (a restarted episode) is re-read from its tool-output markers.
"""

from __future__ import annotations

import zlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agentmath.backends.base import RequestTag
from agentmath.formats import get_format
from agentmath.formats.base import ToolFormat
from agentmath.sim.workload import EpisodeScript, Turn, Workload

__all__ = ["EOS_ID", "TOOL_END", "TOOL_MARK", "Planned", "SimPolicy"]

EOS_ID = 0  #: ends the final turn
TOOL_MARK = 1  #: first id of every tool output (``tokenize``)
TOOL_END = 2  #: last id of every tool output
_LOW, _HIGH = 3, 256  # continuation ids are drawn from [3, 256): CPython's shared small ints
_POOL = 1 << 20
FILLER_EVERY = 64  #: filler tokens per "." of text
_MASK64 = (1 << 64) - 1


def _mix(*values: int) -> int:
    """A deterministic 64-bit mix of ints (splitmix64 steps): stable across processes."""
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = (h ^ (v & _MASK64)) * 0xBF58476D1CE4E5B9 & _MASK64
        h = (h ^ (h >> 31)) * 0x94D049BB133111EB & _MASK64
        h ^= h >> 29
    return h


def _dots(lo: int, hi: int) -> int:
    """Filler tokens at positions [lo, hi) write a "." every :data:`FILLER_EVERY` tokens and
    nothing otherwise (text stays short, so the loop's parsing of it costs little)."""
    return -(-hi // FILLER_EVERY) - -(-lo // FILLER_EVERY)


@dataclass(slots=True)
class Planned:
    """The output of one generate call, before the server has timed it."""

    token_ids: list[int]
    text: str
    finish_reason: str  # stop | eos | length
    stop_string: str | None
    turn: int
    open_tokens: int  # tokens of the turn before this call


@dataclass(slots=True)
class _Episode:
    group: int
    sample: int
    script: EpisodeScript
    turn: int = 0
    open_tokens: int = 0
    turn_done: bool = False
    expected_len: int = -1  # context length after the last committed output (-1: none yet)


class SimPolicy:
    """Plays a :class:`Workload`'s scripts in tool format ``fmt``; shared by a fleet's servers."""

    def __init__(self, workload: Workload, fmt: ToolFormat | str = "code_interpreter", *,
                 max_tracked: int = 1 << 16) -> None:
        self.workload = workload
        self.fmt = get_format(fmt) if isinstance(fmt, str) else fmt
        self.max_tracked = max_tracked
        rng = np.random.default_rng(np.random.SeedSequence(workload.seed, spawn_key=(1 << 30,)))
        self._pool: list[int] = rng.integers(_LOW, _HIGH, _POOL + 65_536).tolist()
        self._episodes: OrderedDict[str, _Episode] = OrderedDict()
        self._first_seen: dict[int, int] = {}
        self._prompts: dict[int, list[int]] = {}
        self._prompt_groups: dict[tuple[int, ...], int] = {}

    # ------------------------------------------------------------------ prompts and tools

    def _ids(self, key: int, start: int, n: int) -> list[int]:
        """``n`` ids of stream ``key`` from position ``start``: a slice of the pool."""
        out: list[int] = []
        while n > 0:
            pos = (_mix(key, start // _POOL) + start) % _POOL
            take = min(n, _POOL + 65_536 - pos)
            out.extend(self._pool[pos:pos + take])
            start, n = start + take, n - take
        return out

    def prompt_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """The prompt of the group whose problem is in ``messages`` (the workload's length).
        Text from no group of the workload gets a group from its hash."""
        text = "\n".join(m.get("content", "") for m in messages)
        group = Workload.group_of_text(text)
        if group is None:
            group = zlib.crc32(text.encode()) % max(1, self.workload.n_groups)
        ids = self._prompts.get(group)
        if ids is None:
            n = self.workload.group_prompt_tokens(group)
            ids = self._ids(_mix(self.workload.seed, 1, group), 0, n)
            self._prompts[group] = ids
            self._prompt_groups[tuple(ids[:32])] = group
        return list(ids)

    def tool_ids(self, text: str) -> list[int]:
        """Ids of a rendered tool output: ``len(text) / chars_per_token`` tokens (at least 3),
        framed by :data:`TOOL_MARK` and :data:`TOOL_END`."""
        n = max(3, -(-len(text) // max(1, int(self.workload.chars_per_token))))
        return [TOOL_MARK, *self._ids(zlib.crc32(text.encode()), 0, n - 2), TOOL_END]

    # ------------------------------------------------------------------ episodes

    def _episode(self, tag: RequestTag | None, prompt_ids: Sequence[int]) -> _Episode:
        key = tag.episode_id if tag is not None else None
        if key is not None and key in self._episodes:
            self._episodes.move_to_end(key)
            return self._episodes[key]
        group = self._prompt_groups.get(tuple(prompt_ids[:32]))
        if group is None:
            group = zlib.crc32(bytes(i & 0xFF for i in prompt_ids[:64])) % max(
                1, self.workload.n_groups)
        sample = Workload.sample_of_episode(key) if key is not None else 0
        if sample is None:  # an id of unknown shape: the group's k-th distinct episode
            sample = self._first_seen.get(group, 0)
            self._first_seen[group] = sample + 1
        sample %= self.workload.group_size
        ep = _Episode(group, sample, self.workload.script(group, sample))
        if key is not None:
            self._episodes[key] = ep
            if len(self._episodes) > self.max_tracked:
                self._episodes.popitem(last=False)
        return ep

    def _locate(self, ep: _Episode, ctx: Sequence[int]) -> tuple[int, int]:
        """(turn, tokens of that turn already in ``ctx``) for a call with context ``ctx``."""
        n = len(ctx)
        if ep.expected_len >= 0:
            if n == ep.expected_len and not ep.turn_done:
                return ep.turn, ep.open_tokens  # the open turn goes on (a cut, or parking)
            if n > ep.expected_len and ep.turn_done and ctx[n - 1] == TOOL_END:
                return ep.turn + 1, 0  # a tool output was appended: the next turn
        # A first call, or not the continuation we expected: read the markers (O(n), in C).
        ids = ctx if isinstance(ctx, list) else list(ctx)
        turns = ids.count(TOOL_END)
        last = n - ids[::-1].index(TOOL_END) if turns else ep.script.prompt_tokens
        return turns, max(0, n - last)

    # ------------------------------------------------------------------ generation

    def plan(self, ctx: Sequence[int], tag: RequestTag | None, max_tokens: int,
             stop: Sequence[str]) -> Planned:
        """What the model writes next after ``ctx``, at most ``max_tokens`` tokens."""
        ep = self._episode(tag, ctx)
        turn_index, done = self._locate(ep, ctx)
        script = ep.script
        turns = script.turns
        turn = turns[min(turn_index, len(turns) - 1)]
        final = turn_index >= len(turns) - 1
        if final and script.ending == "truncated":
            tail: list[str] = []
            length = 1 << 40  # writes on until the loop's budget stops it
        else:
            tail = self._tail(script, turn, final)
            length = max(turn.gen_tokens, len(tail) + final)
        n = max(1, min(max_tokens, length - done))
        complete = done + n >= length
        key = _mix(self.workload.seed, 2, script.group, script.sample, turn_index)
        ids = self._ids(key, done, n)
        body = length - len(tail) - (1 if final and tail else 0)  # filler positions
        text = "." * _dots(done, max(done, min(done + n, body)))
        lo, hi = max(0, done - body), max(0, min(done + n, body + len(tail)) - body)
        text += "".join(tail[lo:hi])
        if not complete:
            return Planned(ids, text, "length", None, turn_index, done)
        if final:
            ids[-1] = EOS_ID
            return Planned(ids, text, "eos", None, turn_index, done)
        matched = next((s for s in stop if text.endswith(s)), None)
        return Planned(ids, text, "stop" if matched else "eos", matched, turn_index, done)

    def _tail(self, script: EpisodeScript, turn: Turn, final: bool) -> list[str]:
        """The texts of the last tokens of a turn: the call (split into its opening line, the
        code and the stop string) or the boxed answer."""
        if final:
            return ["\\boxed{", self.workload.answer(script.group), "}"]
        chars = int(turn.tool_tokens * self.workload.chars_per_token)
        code = f'print("x" * {chars})  # sim: latency_s={turn.tool_latency_s:.6f}'
        call = self.fmt.render_call(code)
        cut = min((call.find(s) for s in self.fmt.stop_strings if s in call), default=-1)
        if cut < 0:
            return [call]
        head, stop = call[:cut], call[cut:]
        at = head.find(code)
        pieces = [head[:at], head[at:]] if at > 0 else [head]
        return [p for p in pieces if p] + [stop]

    def commit(self, ctx_len: int, tag: RequestTag | None, planned: Planned) -> None:
        """Record that ``planned`` was returned for a context of ``ctx_len`` tokens."""
        if tag is None or tag.episode_id not in self._episodes:
            return
        ep = self._episodes[tag.episode_id]
        ep.turn = planned.turn
        ep.open_tokens = planned.open_tokens + len(planned.token_ids)
        ep.turn_done = planned.finish_reason != "length"
        ep.expected_len = ctx_len + len(planned.token_ids)

    def forget(self, episode_id: str) -> None:
        """Drop an episode's position (it is re-read from its context if it comes back)."""
        self._episodes.pop(episode_id, None)
