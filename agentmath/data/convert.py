"""Code injection: turn a text chain-of-thought into a verified tool-augmented trajectory.

A :class:`Converter` plans a trajectory as model text and code snippets, without outputs
(:class:`RuleBasedConverter` does it from a problem's steps; a teacher-LLM converter can
implement the same protocol). :func:`inject` runs each problem's snippets in order in ONE
sandbox session, renders every result with the tool format exactly as the agent loop does, and
keeps a trajectory only if every snippet ran, printed the step's expected value, and the final
boxed answer verifies against the gold. Every dropped problem is counted with its reason.

Output records (one JSON object per line), read by the SFT module::

    {"id": ..., "messages": [system, user], "answer": ...,
     "completion": [{"text": ..., "train": true}, {"text": <tool output>, "train": false}, ...]}

or, for native tool calling (``native=True``), a chat record that the SFT module renders with
the tokenizer's chat template (assistant turns trained, the rest masked)::

    {"id": ..., "messages": [system, user, assistant+tool_calls, tool, ..., assistant],
     "tools": [<the python tool schema>], "answer": ...}

``messages`` come from :func:`agentmath.agent.build_messages`, so training prompts are the
inference prompts. The completion's concatenated text is exactly what the agent loop produces:
each model turn ends where generation stops (the format's stop string), the tool output is
``fmt.render(result, max_chars=max_output_chars)``, and the final piece has no end-of-turn
token (the SFT module appends the tokenizer's EOS).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from agentmath.agent.prompts import CHAT_SYSTEM_PROMPT, build_messages
from agentmath.config import LoopConfig
from agentmath.data.synthetic import Step, SyntheticProblem
from agentmath.errors import DataError, SandboxError
from agentmath.formats.base import ToolFormat
from agentmath.formats.openai_tools import OPENAI_TOOLS, TOOL_NAME, tool_message, tool_spec
from agentmath.grading import averify, extract_answer
from agentmath.jsonl import read_jsonl as read_jsonl  # re-exported: part of the data API
from agentmath.jsonl import write_jsonl as write_jsonl
from agentmath.sandbox.pool import SandboxPool
from agentmath.sandbox.result import ExecResult

DROP_REASONS = ("no_plan", "malformed", "error", "mismatch", "wrong_answer")
TEXT_SYSTEM_PROMPT = ("Solve the problem step by step. Put the final answer in \\boxed{}.")


@dataclass(frozen=True)
class Piece:
    """One planned piece of a trajectory: model ``text`` or a ``code`` snippet to run."""

    kind: Literal["text", "code"]
    text: str


class Converter(Protocol):
    """Plans a tool trajectory for a problem; None when it cannot (counted as ``no_plan``)."""

    name: str

    def convert(self, problem: SyntheticProblem) -> list[Piece] | None:
        """Text and code pieces in order, without tool outputs (execution fills those in).

        Code pieces should print the values they compute, one per snippet, in step order:
        :func:`inject` checks the printed values against the steps.
        """
        ...


class RuleBasedConverter:
    """One snippet per step: a lead sentence (without the result), then ``name = expr``.

    Snippets use the names of earlier steps, so they rely on the session's state; the
    trajectory ends with ``The answer is \\boxed{ANSWER}.``.
    """

    name = "rule_based"

    def lead(self, step: Step) -> str:
        """The step's sentence with the computed number left out: what is computed and why."""
        premise, sep, _ = step.text.rpartition(", so ")
        what = step.what or f"the value of {step.name}"
        return f"{premise}, so I compute {what}." if sep else f"I compute {what}."

    def code(self, step: Step) -> str:
        """The snippet of one step: assign it, then print it."""
        return f"{step.name} = {step.expr}\nprint({step.name})"

    def convert(self, problem: SyntheticProblem) -> list[Piece] | None:
        """Lead and code for each step, then the last step's value as the boxed answer (so a
        gold answer that disagrees with the steps is caught by the check against the gold)."""
        if not problem.steps:
            return None
        pieces: list[Piece] = []
        for step in problem.steps:
            pieces.append(Piece("text", self.lead(step) + "\n"))
            pieces.append(Piece("code", self.code(step)))
        pieces.append(Piece("text", f"The answer is \\boxed{{{problem.steps[-1].value}}}."))
        return pieces


def call_text(fmt: ToolFormat, code: str) -> str:
    """The call for ``code`` as a model writes it at inference: up to the end of the stop.

    ``render_call`` may end just before the stop string is complete (markdown's stop is
    ``"\\n```\\n"`` but its call ends with the fence): the rest of the stop string is
    appended, because the loop's model text always ends with the matched stop string.
    """
    text = fmt.render_call(code)
    for stop in fmt.stop_strings:
        if stop in text:
            return text[: text.index(stop) + len(stop)]
    for stop in fmt.stop_strings:
        for k in range(len(stop) - 1, 0, -1):
            if text.endswith(stop[:k]):
                return text + stop[k:]
    return text


@dataclass
class ConversionReport:
    """What :func:`inject` produced: kept records and every drop with its reason."""

    records: list[dict[str, Any]] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)
    failures: list[dict[str, str]] = field(default_factory=list)  # id, reason, detail
    seconds: float = 0.0

    @property
    def kept(self) -> int:
        return len(self.records)

    @property
    def total(self) -> int:
        return self.kept + sum(self.dropped.values())

    def summary(self) -> str:
        """One line: kept / total, then the count of each drop reason."""
        reasons = ", ".join(f"{r}={self.dropped[r]}" for r in DROP_REASONS if self.dropped[r])
        return (f"kept {self.kept}/{self.total} ({reasons or 'none dropped'}) "
                f"in {self.seconds:.1f}s")


class ConversionError(DataError):
    """A problem's trajectory failed a check; ``reason`` is one of :data:`DROP_REASONS`."""

    def __init__(self, problem_id: str, reason: str, detail: str) -> None:
        super().__init__(f"{problem_id}: {reason}: {detail}")
        self.problem_id, self.reason, self.detail = problem_id, reason, detail


class _Drop(Exception):
    """Raised inside a conversion; becomes a ConversionError naming the problem."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def _check_turns(completion: Sequence[dict[str, Any]], fmt: ToolFormat) -> None:
    """Replay the loop's parsing: each model turn before a tool output must end with exactly
    its call and hold no final answer before it; the last turn must hold no call."""
    for i, piece in enumerate(completion):
        if not piece["train"]:
            continue
        text = piece["text"]
        call = fmt.find_call(text)
        if i + 1 < len(completion):
            if call is None or text[call.end:].strip():
                raise _Drop("malformed", f"model turn {i + 1} does not end with its call")
            if extract_answer(text[: call.start]) is not None:
                raise _Drop("malformed", f"model turn {i + 1} answers before its call")
        elif call is not None:
            raise _Drop("malformed", "the final model turn contains a call")


def _printed_ok(result: ExecResult, expected: int) -> bool:
    return result.stdout.strip() == str(expected)


async def _execute(pieces: Sequence[Piece], steps: Sequence[Step], fmt: ToolFormat,
                   pool: SandboxPool, timeout: float) -> list[tuple[Piece, ExecResult | None]]:
    """Run the code pieces in one session; each piece with its result (None for text).

    Raises _Drop on a failed check: a snippet that does not survive the format, fails, or
    does not print its step's value.
    """
    n_code = sum(p.kind == "code" for p in pieces)
    if n_code != len(steps):
        raise _Drop("mismatch", f"{n_code} snippets for {len(steps)} steps")
    events: list[tuple[Piece, ExecResult | None]] = []
    index = 0
    async with pool.session() as session:
        for piece in pieces:
            if piece.kind == "text":
                events.append((piece, None))
                continue
            found = fmt.find_call(call_text(fmt, piece.text))
            if found is None or found.code != piece.text:
                raise _Drop("malformed", f"snippet {index + 1} does not survive the format "
                            "(the call text parses to different code)")
            result = await session.run(piece.text, timeout=timeout)
            if not result.ok or result.state_lost:
                raise _Drop("error", f"snippet {index + 1}: {result.error or 'failed'}")
            if not _printed_ok(result, steps[index].value):
                raise _Drop("mismatch", f"snippet {index + 1} printed "
                            f"{result.stdout.strip()!r}, expected {steps[index].value}")
            events.append((piece, result))
            index += 1
    return events


def _completion(events: Sequence[tuple[Piece, ExecResult | None]], fmt: ToolFormat,
                max_output_chars: int) -> list[dict[str, Any]]:
    """The text-format completion: model pieces (train) and rendered tool output (not)."""
    completion: list[dict[str, Any]] = []
    for piece, result in events:
        if result is None:
            completion.append({"text": piece.text, "train": True})
        else:
            completion.append({"text": call_text(fmt, piece.text), "train": True})
            completion.append({"text": fmt.render(result, max_chars=max_output_chars),
                               "train": False})
    return _merge(completion)


def _chat_turns(events: Sequence[tuple[Piece, ExecResult | None]],
                max_output_chars: int) -> list[dict[str, Any]]:
    """The native-tool-calling turns: an assistant message per call (its lead text as content,
    one ``python`` tool call), the ``tool`` message the chat loop would send, then the answer."""
    turns: list[dict[str, Any]] = []
    content = ""
    for piece, result in events:
        if result is None:
            content += piece.text
            continue
        call_id = f"call_{len(turns) // 2}"
        call = {"id": call_id, "type": "function", "function": {
            "name": TOOL_NAME, "arguments": json.dumps({"code": piece.text},
                                                       ensure_ascii=False)}}
        turns.append({"role": "assistant", "content": content.strip(), "tool_calls": [call]})
        turns.append(tool_message(call_id, result, max_chars=max_output_chars))
        content = ""
    turns.append({"role": "assistant", "content": content.strip()})
    return turns


def _merge(completion: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Adjacent pieces with the same ``train`` flag joined (a model turn is one piece)."""
    merged: list[dict[str, Any]] = []
    for piece in completion:
        if merged and merged[-1]["train"] == piece["train"]:
            merged[-1] = {"text": merged[-1]["text"] + piece["text"], "train": piece["train"]}
        else:
            merged.append(dict(piece))
    return merged


async def convert_one(problem: SyntheticProblem, converter: Converter, fmt: ToolFormat,
                      pool: SandboxPool, *, system_prompt: str | None = None,
                      timeout: float = 10.0, max_output_chars: int | None = None,
                      native: bool = False) -> dict[str, Any]:
    """The verified record of one problem; raises :class:`ConversionError` when a check
    fails (see :func:`inject`).

    ``native``: a chat record for native tool calling instead (``fmt`` is ignored): the whole
    conversation in ``messages`` (assistant turns with ``tool_calls``, ``tool`` turns) and the
    tool schema in ``tools``, the prompt as :func:`agentmath.agent.loop.run_chat_episode` sends
    it (default system prompt: its ``CHAT_SYSTEM_PROMPT``).
    """
    limit = max_output_chars or LoopConfig().max_output_chars
    check_fmt = OPENAI_TOOLS if native else fmt
    try:
        pieces = converter.convert(problem)
        if not pieces:
            raise _Drop("no_plan", f"converter {converter.name!r} gave no plan")
        events = await _execute(pieces, problem.steps, check_fmt, pool, timeout)
        if native:
            turns = _chat_turns(events, limit)
            if any(extract_answer(t["content"]) is not None for t in turns[:-1]
                   if t["role"] == "assistant"):  # the chat loop would stop there
                raise _Drop("malformed", "an assistant turn answers before its call")
            final = turns[-1]["content"]
        else:
            completion = _completion(events, fmt, limit)
            _check_turns(completion, fmt)
            final = "".join(p["text"] for p in completion if p["train"])
        predicted = extract_answer(final)
        if not await averify(problem.answer, predicted):
            raise _Drop("wrong_answer", f"final answer {predicted!r} != gold {problem.answer}")
    except _Drop as drop:
        raise ConversionError(problem.id, drop.reason, drop.detail) from None
    except SandboxError as exc:
        raise ConversionError(problem.id, "error", f"sandbox failure: {exc}") from exc
    if native:
        messages = build_messages(problem.problem, OPENAI_TOOLS,
                                  system_prompt or CHAT_SYSTEM_PROMPT)
        return {"id": problem.id, "messages": messages + turns, "tools": [tool_spec()],
                "answer": problem.answer}
    return {"id": problem.id, "messages": build_messages(problem.problem, fmt, system_prompt),
            "completion": completion, "answer": problem.answer}


async def inject(problems: Sequence[SyntheticProblem], converter: Converter, fmt: ToolFormat,
                 pool: SandboxPool, *, concurrency: int = 8, system_prompt: str | None = None,
                 timeout: float = 10.0, max_output_chars: int | None = None,
                 native: bool = False) -> ConversionReport:
    """Convert, execute and verify every problem; keep only fully verified trajectories.

    ``system_prompt`` (default: the format's instructions) and ``max_output_chars`` (default:
    :class:`LoopConfig`'s) must match what the agent loop uses at inference. Records keep the
    input order; drops are counted by reason in the report, never silently. ``native``:
    chat records for native tool calling (see :func:`convert_one`).
    """
    started = time.perf_counter()
    gate = asyncio.Semaphore(max(concurrency, 1))

    async def one(problem: SyntheticProblem) -> dict[str, Any] | ConversionError:
        async with gate:
            try:
                return await convert_one(problem, converter, fmt, pool,
                                         system_prompt=system_prompt, timeout=timeout,
                                         max_output_chars=max_output_chars, native=native)
            except ConversionError as exc:
                return exc

    report = ConversionReport()
    for problem, out in zip(problems, await asyncio.gather(*(one(p) for p in problems)),
                            strict=True):
        if isinstance(out, ConversionError):
            report.dropped[out.reason] += 1
            report.failures.append({"id": problem.id, "reason": out.reason,
                                    "detail": out.detail})
        else:
            report.records.append(out)
    report.seconds = time.perf_counter() - started
    return report


def text_only_example(problem: SyntheticProblem,
                      system_prompt: str = TEXT_SYSTEM_PROMPT) -> dict[str, Any]:
    """A record in the same format whose completion is the text CoT (text-only baseline).

    Evaluate such a model with the same ``system_prompt`` set explicitly: the loop's default
    prompt is a tool format's instructions.
    """
    if not system_prompt:
        raise ValueError("text_only_example needs a non-empty system prompt")
    messages = [{"role": "system", "content": system_prompt},
                {"role": "user", "content": problem.problem}]
    return {"id": problem.id, "messages": messages,
            "completion": [{"text": problem.cot, "train": True}], "answer": problem.answer}
