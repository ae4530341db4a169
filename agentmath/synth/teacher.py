"""The teacher converter: an LLM rewrites a text solution into reasoning interleaved with code.

As in AgentMath, the teacher sees the problem, a reference text solution and its answer, and
writes a trajectory in which every calculation is a Python snippet followed by the output it
*expects* (simulated: the teacher cannot run code). The pipeline then runs every snippet and
replaces the simulated outputs with the real ones (:mod:`agentmath.synth.pipeline`).

The teacher writes in one text tool format (default ``code_interpreter``: ``<code>`` then
``<interpreter>``), whatever format the SFT records are written in: the plan is format-free
pieces, rendered into the target format afterwards. The prompt (system text, user template
with ``{problem}``, ``{solution}``, ``{answer}``, and few-shot examples) is configurable and
loads from TOML/YAML/JSON (:meth:`TeacherPrompt.load`).

The teacher is any :class:`~agentmath.backends.Backend`: an OpenAI-compatible server through
its chat endpoint (so any hosted teacher works), or the ``hf``/``vllm`` backends through the
model's chat template. A failed request or a reply that cannot be parsed is a rejection with
its reason, never a crash.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentmath.backends.base import Backend, ChatCompletion, SamplingParams
from agentmath.config import read_config_file
from agentmath.errors import AgentMathError, ConfigError
from agentmath.formats.base import DelimitedFormat
from agentmath.formats.code_interpreter import CODE_INTERPRETER
from agentmath.synth.pieces import Piece, Rejected
from agentmath.tasks import Task

DEFAULT_SYSTEM = (
    "You turn worked math solutions into tool-integrated solutions. Rewrite the reference "
    "solution as step-by-step reasoning in which every calculation (arithmetic, algebra, "
    "counting, checking a case) is done by a short Python snippet instead of by hand. Write "
    "each snippet between <code> and </code> (the closing tag on its own line), immediately "
    "followed by the output you expect it to print between <interpreter> and </interpreter>. "
    "Snippets run in one persistent session, in order: later snippets may use earlier "
    "variables. Each snippet must compute something and print the result; after each output, "
    "continue the reasoning from that output. Use only the Python standard library, numpy, "
    "sympy and scipy. Do not state a result before the code that computes it. End with the "
    "final answer in \\boxed{}."
)
#: What a failed teacher or judge request raises (a backend error, a socket, a timeout).
REQUEST_ERRORS = (AgentMathError, OSError, TimeoutError)
DEFAULT_USER = ("Problem:\n{problem}\n\nReference solution:\n{solution}\n\n"
                "Final answer: {answer}\n\nWrite the tool-integrated solution.")


@dataclass(frozen=True)
class FewShot:
    """A worked example of the rewrite: a problem, its text solution and its trajectory."""

    problem: str
    solution: str
    answer: str
    trajectory: str


@dataclass(frozen=True)
class TeacherPrompt:
    """The teacher's instructions: system text, user template, few-shot examples."""

    system: str = DEFAULT_SYSTEM
    user: str = DEFAULT_USER
    examples: tuple[FewShot, ...] = field(default_factory=tuple)

    def render_user(self, problem: str, solution: str, answer: str) -> str:
        return (self.user.replace("{problem}", problem).replace("{solution}", solution)
                .replace("{answer}", answer))

    def messages(self, task: Task) -> list[dict[str, str]]:
        """The chat sent to the teacher for ``task``: system, few-shot turns, the task."""
        out = [{"role": "system", "content": self.system}]
        for ex in self.examples:
            out.append({"role": "user",
                        "content": self.render_user(ex.problem, ex.solution, ex.answer)})
            out.append({"role": "assistant", "content": ex.trajectory})
        out.append({"role": "user",
                    "content": self.render_user(task.problem, task.solution, task.answer)})
        return out

    @classmethod
    def load(cls, path: str | Path) -> TeacherPrompt:
        """From a TOML/YAML/JSON file with optional ``system``, ``user`` and ``examples``
        (a list of tables with ``problem``, ``solution``, ``answer``, ``trajectory``)."""
        data = read_config_file(path)
        unknown = set(data) - {"system", "user", "examples"}
        if unknown:
            raise ConfigError(f"{path}: unknown field(s) {sorted(unknown)}; "
                              "expected system, user, examples")
        examples = []
        for i, row in enumerate(data.get("examples") or [], start=1):
            if not isinstance(row, dict):
                raise ConfigError(f"{path}: examples[{i}] is not a table")
            missing = [k for k in ("problem", "solution", "answer", "trajectory")
                       if not isinstance(row.get(k), str) or not row.get(k)]
            if missing:
                raise ConfigError(f"{path}: examples[{i}] lacks text field(s) {missing}")
            examples.append(FewShot(row["problem"], row["solution"], str(row["answer"]),
                                    row["trajectory"]))
        for key in ("system", "user"):
            if key in data and (not isinstance(data[key], str) or not data[key].strip()):
                raise ConfigError(f"{path}: {key} must be non-empty text")
        if "user" in data and "{problem}" not in data["user"]:
            raise ConfigError(f"{path}: the user template must contain {{problem}}")
        return cls(data.get("system", DEFAULT_SYSTEM), data.get("user", DEFAULT_USER),
                   tuple(examples))


async def chat_text(backend: Backend, messages: Sequence[dict[str, str]], *, max_tokens: int,
                    sampling: SamplingParams) -> tuple[str, str]:
    """One assistant reply as (text, finish reason): through the server's chat endpoint when
    the backend has one (any OpenAI-compatible teacher), else through the chat template."""
    if isinstance(backend, ChatCompletion):
        message = await backend.chat(messages, max_tokens=max_tokens, sampling=sampling)
        return str(message.get("content") or ""), str(message.get("finish_reason") or "stop")
    ids = await backend.render_prompt(messages)
    generation = await backend.generate(ids, stop=(), max_tokens=max_tokens, sampling=sampling)
    return generation.text, generation.finish_reason


def _output_block(text: str, pos: int, fmt: DelimitedFormat) -> tuple[str | None, int]:
    """The simulated output right after ``pos`` (if the teacher wrote one) and where it ends."""
    opened = re.compile(r"\s*" + re.escape(fmt.output_open)).match(text, pos)
    if opened is None:
        return None, pos
    close = fmt.output_closer.search(text, opened.end())
    end = close.start() if close else len(text)
    return text[opened.end():end].strip("\n"), close.end() if close else len(text)


def parse_trajectory(text: str, fmt: DelimitedFormat = CODE_INTERPRETER) -> list[Piece]:
    """Text and code pieces of a teacher's trajectory (simulated outputs on the code pieces).

    Text before a snippet ends with one newline (the call starts a line), text after an
    output block starts without blank lines (the rendered output ends its line). Raises
    :class:`Rejected` (stage ``convert``) for a call left open or a trajectory without code.
    """
    pieces: list[Piece] = []
    pos = 0
    while (m := fmt.opener.search(text, pos)) is not None:
        close = fmt.closer.search(text, m.end())
        if close is None:
            raise Rejected("convert", "unparseable", "a snippet is never closed "
                           f"({fmt.call_close!r} missing after offset {m.start()})")
        lead = text[pos:m.start()]
        if pieces and pieces[-1].kind == "code":
            lead = lead.lstrip("\n")
        lead = lead.rstrip() + "\n" if lead.strip() else ""
        if lead:
            pieces.append(Piece("text", lead))
        code = fmt.decode(text[m.end():close.start()].removesuffix("\n"))
        simulated, pos = _output_block(text, close.end(), fmt)
        pieces.append(Piece("code", code, simulated))
    if not any(p.kind == "code" for p in pieces):
        raise Rejected("convert", "no_code", "the teacher wrote no code snippet")
    tail = text[pos:].lstrip("\n").rstrip()
    pieces.append(Piece("text", tail))
    return pieces


class TeacherConverter:
    """Asks a teacher model for the tool-integrated rewrite of each task's text solution."""

    name = "teacher"

    def __init__(self, backend: Backend, prompt: TeacherPrompt | None = None, *,
                 fmt: DelimitedFormat = CODE_INTERPRETER, max_tokens: int = 4096,
                 sampling: SamplingParams | None = None) -> None:
        if not isinstance(fmt, DelimitedFormat):
            raise ConfigError(f"the teacher format must be a text format with output blocks "
                              f"(code_interpreter, markdown, ...), not {fmt.name!r}")
        self.backend, self.prompt, self.fmt = backend, prompt or TeacherPrompt(), fmt
        self.max_tokens = max_tokens
        self.sampling = sampling or SamplingParams(temperature=0.0, logprobs=False)

    async def convert(self, task: Task) -> list[Piece]:
        """The teacher's plan for ``task``; Rejected when the request or the reply fails."""
        if "{solution}" in self.prompt.user and not task.solution.strip():
            raise Rejected("convert", "no_solution", "the task has no text solution to rewrite")
        try:
            text, finish = await chat_text(self.backend, self.prompt.messages(task),
                                           max_tokens=self.max_tokens, sampling=self.sampling)
        except REQUEST_ERRORS as exc:
            raise Rejected("convert", "request_failed",
                           f"{type(exc).__name__}: {str(exc)[:500]}") from exc
        if finish == "length":
            raise Rejected("convert", "truncated",
                           f"the reply hit max_tokens={self.max_tokens}")
        return parse_trajectory(text, self.fmt)
