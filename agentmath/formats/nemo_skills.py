"""NeMo-Skills' code-execution formats (github.com/NVIDIA/NeMo-Skills), from its code tags.

NeMo-Skills describes a format by four strings (``nemo_skills/prompt/code_tags/*.yaml``):
``code_begin``, ``code_end`` (also the stop string), ``code_output_begin``, ``code_output_end``.
Its ``CodeExecutionWrapper`` (``nemo_skills/inference/model/code_execution.py``) generates until
``code_end``, keeps it, runs the text between the last ``code_begin`` and ``code_end`` in an
IPython session, and appends ``format_code_output`` (``nemo_skills/code_execution/utils.py``,
the ``qwen`` output format): ``code_output_begin + stdout + stderr + code_output_end``.
Two tag sets are registered:

``nemo_skills`` (``nemotron.yaml``: OpenMath / Nemotron ``<llm-code>`` markers; the original
OpenMathInstruct-1 layout gives the same bytes for a cell that printed something)::

    <llm-code>\\nprint(2 + 2)\\n</llm-code>\\n<llm-code-output>\\n4\\n</llm-code-output>\\n

``openmath`` (``openmath.yaml``: OpenMath-Nemotron / OpenMathReasoning tool-integrated
reasoning)::

    <tool_call>\\nprint(2 + 2)\\n</tool_call>\\n```output\\n4\\n```\\n

The streams are what NeMo-Skills' sandbox returns (``local_sandbox_server.py``): IPython's
output, where the value of a final expression is a line of stdout and an error is a Plain-mode
traceback in stdout; ``postprocess_output`` then drops leading empty lines and trailing
whitespace and ends a non-empty stream with one newline; a stream over the limit keeps its first
``limit`` characters and gets ``"<output cut>"`` (no newline). Here the limit is set so that the
whole block fits ``max_chars``. Approximations: the traceback is rebuilt from agentmath's
one-line error (``Traceback (most recent call last):``, the offending line indented by four
spaces, ``Type: message``; for a syntax error the line, a caret under its first character and
``Type: message``), where IPython prints every frame and puts the caret at the error's column; a
timeout or crash is reported in stderr by agentmath's status line (NeMo-Skills: ``Execution
timed out after N seconds``); an agentmath-only restart note opens stdout. NeMo-Skills'
optional "Remaining code executions" notice needs the call count, which a format's ``render``
is not given, so it is not written.

``find_call`` takes the text between the last ``code_begin`` and the next ``code_end``, as
NeMo-Skills' extraction does, minus the newline that ends the ``code_begin`` line and the one
before ``code_end`` (``nemo_skills`` needs ``"<llm-code>\\n"``: NeMo-Skills splits on it). The
``nemo_skills`` stop (``"</llm-code>\\n"``) needs the newline too, so a closing tag inside a
one-line string literal does not end the call; the bare tag is accepted only at the very end
of the text. For ``openmath`` any ``</tool_call>`` ends it, as in
NeMo-Skills. An output that contains ``code_output_end`` is defused (:mod:`.exact`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentmath.formats.base import DelimitedFormat, ToolCall
from agentmath.formats.exact import failure_line, neutralise, restart_note, split_error
from agentmath.sandbox.result import ExecResult

OUTPUT_CUT = "<output cut>"
TRACEBACK_HEAD = "Traceback (most recent call last):"
_SYNTAX_ERRORS = ("SyntaxError", "IndentationError", "TabError")


@dataclass(frozen=True)
class CodeTags:
    """One NeMo-Skills code-tags file: the four markers of calls and outputs."""

    code_begin: str
    code_end: str
    code_output_begin: str
    code_output_end: str


NEMOTRON_TAGS = CodeTags("<llm-code>\n", "</llm-code>\n", "<llm-code-output>\n",
                         "</llm-code-output>\n")
OPENMATH_TAGS = CodeTags("<tool_call>", "</tool_call>", "\n```output\n", "```\n")


def _stream(text: str) -> str:
    """NeMo-Skills' ``postprocess_output`` on plain text: no leading empty lines, no trailing
    whitespace, and one final newline if anything is left."""
    lines = text.split("\n")
    while lines and lines[0] == "":
        lines.pop(0)
    text = "\n".join(lines).rstrip()
    return text + "\n" if text else ""


def _line(text: str) -> str:
    """``text`` ending with a newline unless it is empty (so that a line can follow)."""
    return text if not text or text.endswith("\n") else text + "\n"


def ipython_traceback(error: str, error_type: str | None) -> str:
    """A Plain-mode IPython traceback, as NeMo-Skills returns it, from an agentmath error."""
    head, src = split_error(error)
    if error_type in _SYNTAX_ERRORS:
        return f"    {src}\n    ^\n{head}\n" if src else f"{head}\n"
    shown = f"    {src}\n" if src else ""
    return f"{TRACEBACK_HEAD}\n{shown}{head}\n"


def ipython_streams(result: ExecResult) -> tuple[str, str]:
    """``(stdout, stderr)`` of a cell as NeMo-Skills' IPython sandbox reports them."""
    out, err = restart_note(result) + result.stdout, result.stderr
    failed = failure_line(result)
    if failed is not None:
        err = _line(err) + failed
    elif result.error:
        out = _line(out) + ipython_traceback(result.error, result.error_type)
    elif result.value is not None:
        out = _line(out) + result.value
    return _stream(out), _stream(err)


def _fit(text: str, room: int) -> str:
    """NeMo-Skills' output limit, sized to ``room``: the head, then ``<output cut>``."""
    return text if len(text) <= room else text[:max(room - len(OUTPUT_CUT), 0)] + OUTPUT_CUT


def _either(marker: str) -> re.Pattern[str]:
    """``marker``, or, when it ends with a newline, the marker without it at the end of text."""
    bare = marker.removesuffix("\n")
    tail = "|" + re.escape(bare) + r"\Z" if bare != marker else ""
    return re.compile(re.escape(marker) + tail)


class NemoSkillsFormat(DelimitedFormat):
    """A NeMo-Skills code-tags format (see module doc); the tags are chosen at creation."""

    def __init__(self, name: str, tags: CodeTags) -> None:
        self.name = name
        self.tags = tags
        self.stop_strings = (tags.code_end,)
        # The model writes the line break after code_begin when the tag has none
        # ("<tool_call>\ncode"); render_call writes it too, and find_call drops it.
        self.call_open = tags.code_begin.removesuffix("\n") + "\n"
        self.call_close = tags.code_end
        self.output_open = tags.code_output_begin.strip()
        self.output_close = tags.code_output_end.strip()
        bare_begin = tags.code_begin.removesuffix("\n")
        self.opener = re.compile(re.escape(tags.code_begin) if bare_begin != tags.code_begin
                                 else re.escape(bare_begin) + r"\n?")
        self.closer = _either(tags.code_end)
        self.output_closer = _either(tags.code_output_end)
        self._defuse = re.compile(re.escape(tags.code_output_end))

    def find_call(self, text: str) -> ToolCall | None:
        """The last unanswered call, its code taken after the *last* ``code_begin`` before its
        ``code_end``, as NeMo-Skills extracts it (``split(code_begin)[-1]``)."""
        call = super().find_call(text)
        if call is None:
            return None
        begins = [m.start() for m in self.opener.finditer(text, call.start + 1, call.end)]
        inner = super().find_call(text[begins[-1]:call.end]) if begins else None
        if inner is None:
            return call
        return ToolCall(inner.code, begins[-1] + inner.start, begins[-1] + inner.end)

    def render(self, result: ExecResult, *, max_chars: int = 4000) -> str:
        """``code_output_begin + stdout + stderr + code_output_end``, at most ``max_chars``."""
        begin, end = self.tags.code_output_begin, self.tags.code_output_end
        out, err = ipython_streams(result)
        room = max(max_chars - len(begin) - len(end), 0)
        if len(out) + len(err) > room:
            out = _fit(out, room - min(len(err), room // 2))
            err = _fit(err, room - len(out))
        body = neutralise(out + err, self._defuse)
        return f"{begin}{body}{end}"

    def instructions(self) -> str:
        """How to call the sandbox with these tags, with a tiny worked example."""
        example = self.render_call(self.example_code) + self.render(self.example_result)
        return (
            "You can run Python code in a persistent session (variables and imports carry over "
            "between calls). To run code, write it between the code tags exactly as in the "
            "example below, with each tag on its own line, then stop. The result (printed "
            "output, the value of the last expression, or the error) is inserted after the "
            f"call; read it before you continue.\n\nExample:\n{example}"
        )


NEMO_SKILLS = NemoSkillsFormat("nemo_skills", NEMOTRON_TAGS)
OPENMATH = NemoSkillsFormat("openmath", OPENMATH_TAGS)
