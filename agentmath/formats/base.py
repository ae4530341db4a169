"""What a tool format is, and the pieces the built-in text formats share.

A *tool format* decides how a model writes a call to the Python sandbox in its text, where
generation stops so that the loop can run the call, and how the sandbox's result is written back
into the text. The loop only talks to the :class:`ToolFormat` protocol, so a new format is a new
object, not a change to the loop.

Conventions shared by the built-in text formats (see :class:`DelimitedFormat`):

* ``find_call`` returns the last complete call that is not followed by an output block. A call
  is complete when its closing marker is present (text after it, e.g. a final token that
  overshot the stop string, is ignored: ``ToolCall.end`` says where to cut). A call *without*
  its closing marker at the very end of the text counts too when its body is complete (valid
  Python, or valid JSON for JSON bodies): that is what a backend that strips the stop string
  leaves. A body cut mid-statement (e.g. by a token limit) is an unclosed call, not a call.
  When a backend reports which stop string matched, re-appending it before ``find_call`` is
  more exact than relying on this check.
* ``render`` returns ``"\\n<open>\\n" + body + "\\n<close>\\n"``: the text goes right after
  ``ToolCall.end``, so it first ends the line of the closing marker.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from agentmath.sandbox.result import ExecResult

EMPTY_OUTPUT = "(no output)"
TIMEOUT_LINE = "TimeoutError: execution exceeded the time limit"
CRASH_LINE = "SandboxCrash: the sandbox process crashed"
LOST_SUFFIX = "; the session was restarted and variables from earlier cells are lost"
RESTART_NOTE = ("Note: the session was restarted before this cell ran; variables from earlier "
                "cells are lost.")
TRUNCATED_NOTE = "... [output truncated] ..."


@dataclass(frozen=True)
class ToolCall:
    """One call found in model text: the code to run and where the call sits in the text."""

    code: str  # the Python source to run
    start: int  # char offset in the model text where the call's opening marker starts
    end: int  # char offset just after its closing marker


@runtime_checkable
class ToolFormat(Protocol):
    """How calls and results are written in model text; the loop depends only on this."""

    name: str
    stop_strings: tuple[str, ...]

    def instructions(self) -> str:
        """System-prompt text that teaches a model the format, with a tiny example."""
        ...

    def find_call(self, text: str) -> ToolCall | None:
        """The last complete, not-yet-answered call in ``text``; None if there is none."""
        ...

    def render(self, result: ExecResult, *, max_chars: int = 4000) -> str:
        """The output block appended after a call, markers and newlines included."""
        ...

    def render_call(self, code: str) -> str:
        """The text of a call for ``code``; ``find_call`` on it gives ``code`` back."""
        ...


def cap_middle(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` chars, keeping its head and tail around a marker.

    Head and tail both matter to a model: the head shows what the code printed first, the tail
    holds the last lines and usually the answer. The marker says how much was left out.
    """
    limit = max(limit, 0)
    if len(text) <= limit:
        return text
    marker_len = len(f"\n... [{len(text)} characters omitted] ...\n")
    keep = limit - marker_len
    if keep < 2:
        return text[:limit]
    head, tail = keep - keep // 2, keep // 2
    omitted = len(text) - head - tail
    return f"{text[:head]}\n... [{omitted} characters omitted] ...\n{text[len(text) - tail:]}"


def _status_line(result: ExecResult) -> str:
    """How the cell failed (error, timeout or crash), or "" when it did not."""
    if result.timed_out:
        status = result.error or TIMEOUT_LINE
    elif result.crashed:
        status = result.error or CRASH_LINE
    else:
        status = result.error or ""
    if status and result.state_lost and "lost" not in status:
        status += LOST_SUFFIX
    return status


def output_text(result: ExecResult) -> str:
    """stdout, then stderr, then the value of the final expression, each on its own lines."""
    parts = [s.removesuffix("\n") for s in (result.stdout, result.stderr) if s]
    if result.value is not None:
        parts.append(result.value)
    text = "\n".join(parts)
    if result.truncated and "omitted]" not in text:
        text = f"{text}\n{TRUNCATED_NOTE}" if text else TRUNCATED_NOTE
    return text


def render_body(result: ExecResult, *, max_chars: int = 4000) -> str:
    """What the model reads about one executed cell, at most ``max_chars`` chars.

    Output first (stdout, stderr, the final expression's value), then a line on how the cell
    failed, if it did. That line, and a note that the session was restarted before the cell
    ran (``state_lost`` without a timeout or crash of this cell), are kept whole when the output
    has to be capped: they are what the model acts on. An empty result becomes
    :data:`EMPTY_OUTPUT` so that the model sees that the call ran.
    """
    restarted = result.state_lost and not (result.timed_out or result.crashed)
    note = RESTART_NOTE + "\n" if restarted else ""
    status = _status_line(result)
    output = output_text(result)
    if not status:
        output = output or EMPTY_OUTPUT
        return cap_middle(note + cap_middle(output, max_chars - len(note)), max_chars)
    fixed = note + status
    room = max_chars - len(fixed) - 1
    if not output or room < 40:  # nothing to show, or no room for useful output
        return cap_middle(fixed, max_chars)
    return f"{note}{cap_middle(output, room)}\n{status}"


def is_complete_python(code: str) -> bool:
    """True when ``code`` is non-empty, syntactically complete Python (never runs it)."""
    if not code.strip():
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. SyntaxWarning on invalid escapes
        try:
            ast.parse(code)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return False
    return True


class DelimitedFormat:
    """A text format whose calls and outputs are blocks between opening and closing markers.

    Subclasses set the markers and patterns; ``encode``/``decode`` turn code into a call body
    and back (identity by default; JSON for the Hermes-style format).
    """

    name: str = ""
    stop_strings: tuple[str, ...] = ()
    call_open: str = ""  # written by render_call, e.g. "<code>\n"
    call_close: str = ""  # e.g. "</code>"
    output_open: str = ""  # e.g. "<interpreter>"
    output_close: str = ""  # e.g. "</interpreter>"
    opener: re.Pattern[str] = re.compile(r"(?!)")  # what find_call accepts as a call's opening
    closer: re.Pattern[str] = re.compile(r"(?!)")  # ... as its closing marker
    output_closer: re.Pattern[str] = re.compile(r"(?!)")  # ... as an output block's end
    example_code = "from sympy import factorint\nfactorint(360)"
    example_result = ExecResult(value="{2: 3, 3: 2, 5: 1}")

    def encode(self, code: str) -> str:
        """The call body for ``code``."""
        return code

    def decode(self, body: str) -> str:
        """The code of a call body (the inverse of :meth:`encode`)."""
        return body

    def decode_unclosed(self, body: str) -> str | None:
        """The code of a call whose closing marker is missing, or None if it is incomplete."""
        code = self.decode(body.removesuffix("\n"))
        return code if is_complete_python(code) else None

    def render_call(self, code: str) -> str:
        """The text of a call for ``code``, closing marker included (no trailing newline)."""
        return f"{self.call_open}{self.encode(code)}\n{self.call_close}"

    def render(self, result: ExecResult, *, max_chars: int = 4000) -> str:
        """The output block for ``result``; at most ``max_chars`` chars unless that is tiny."""
        prefix, suffix = f"\n{self.output_open}\n", f"\n{self.output_close}\n"
        budget = max(max_chars - len(prefix) - len(suffix), 0)
        return f"{prefix}{render_body(result, max_chars=budget)}{suffix}"

    def _skip_output(self, text: str, end: int) -> int | None:
        """If an output block follows position ``end``, the position after it; else None."""
        m = re.compile(r"\s*" + re.escape(self.output_open)).match(text, end)
        if m is None:
            return None
        close = self.output_closer.search(text, m.end())
        return close.end() if close else len(text)

    def find_call(self, text: str) -> ToolCall | None:
        """The last complete call of ``text`` not followed by an output block (see module doc)."""
        found: ToolCall | None = None
        pos = 0
        while (m := self.opener.search(text, pos)) is not None:
            close = self.closer.search(text, m.end())
            if close is None:
                code = self.decode_unclosed(text[m.end():])
                if code is not None:
                    found = ToolCall(code, m.start(), len(text))
                break
            after = self._skip_output(text, close.end())
            if after is None:
                body = text[m.end():close.start()].removesuffix("\n")
                found = ToolCall(self.decode(body), m.start(), close.end())
                pos = close.end()
            else:
                pos = after
        return found

    def instructions(self) -> str:
        """How to call the sandbox in this format, with a tiny worked example."""
        example = self.render_call(self.example_code) + self.render(self.example_result)
        return (
            "You can run Python code in a persistent session (variables and imports carry over "
            f"between calls). To run code, write it as {self.call_open.strip()} ... "
            f"{self.call_close}, with the closing marker on its own line, then stop. The result "
            f"(printed output, then the value of the last expression, or the error) comes back "
            f"in {self.output_open} ... {self.output_close}; read it before you continue.\n\n"
            f"Example:\n{example}"
        )
