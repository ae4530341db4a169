"""DeepMath (Intel Labs, github.com/IntelLabs/DeepMath): ``<tool_call>`` code, ```output results.

DeepMath's two sources write the result differently, so there are two formats; calls, stop
strings and parsing are the same.

``deepmath`` — what DeepMath's agent writes (``deep_math/agent.py``: ``MathAgent._step_stream``
builds ``"```output\\n" + logs + "\\n\\n" + output + "\\n```\\n"``, ``collect_all_outputs`` joins
the steps with ``"\\n"``). It is the trajectory text that DeepMath's GRPO training scores and
that its ``inference.py`` saves. After the call's ``</tool_call>`` comes::

    \\n```output\\n{logs}\\n\\n{output}\\n```\\n\\n

``logs`` is what the code printed (smolagents captures ``print`` only, so stderr is not shown)
and ``output`` the value of the cell (``None`` when it has none, as a print-only cell). On a
failure ``output`` is empty, and ``logs`` is ``"Exception: <message>"`` only when nothing was
printed: DeepMath shows no error at all after printed output, and so does this format.
Truncation is smolagents' ``truncate_content``: logs at 500 characters, output at 20000, each
keeping its head and tail around ``"\\n..._This content has been truncated to stay below N
characters_...\\n"``; agentmath's ``max_chars`` cap then applies to the whole block.

``deepmath_fewshot`` — what DeepMath's prompt shows (``deep_math/fewshot.txt``)::

    \\n\\n```output\\n{body}\\n```\\n

with agentmath's usual body (printed output, then the value, or the error; see
:func:`~agentmath.formats.base.render_body`). Use it with DeepMath's few-shot prompt when the
outputs should look like the examples.

Calls: the code is the text between ``<tool_call>`` and the first ``</tool_call>``, stripped
(DeepMath rewrites the tags to a ```python fence that smolagents' ``parse_code_blobs`` extracts
and strips). Stop string ``"</tool_call>"``, anywhere, as DeepMath's. So a closing tag inside a
string literal ends the call early, in DeepMath as here; the cut code fails with a SyntaxError
that the model reads. DeepMath also stops at ``"```\\n"``, ``"<end_code>"``, ``"Observation:"``
and ``"Calling tools:"`` (smolagents CodeAgent leftovers, after which its loop just generates the
next step) and runs ```python blocks too (it rewrites them to tool calls in its memory);
agentmath ends an episode at a stop without a call and never rewrites model text, so it keeps
only the tool-call stop and syntax. Known approximations of the ``deepmath`` body: agentmath's
sandbox reports the value of a final *expression* (as ``repr``), smolagents the value of any
final statement (as ``str``; an assignment yields its value); error messages are rebuilt from
agentmath's ``Type: message (line N: source)`` in smolagents' words.

An output line that is a bare fence (it would close the block early) is defused with a
look-alike first character (:mod:`agentmath.formats.exact`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from agentmath.formats.base import DelimitedFormat, cap_middle, render_body
from agentmath.formats.exact import failure_line, neutralise, restart_note, split_error
from agentmath.sandbox.result import ExecResult

LOG_LIMIT = 500  # DeepMath: truncate_content(execution_logs, max_length=500)
OUTPUT_LIMIT = 20_000  # smolagents' MAX_LENGTH_TRUNCATE_CONTENT, truncate_content's default
_FENCE_LINE = re.compile(r"(?m)^```[ \t]*$")
_AGENT_OPEN, _AGENT_SEP, _AGENT_CLOSE = "\n```output\n", "\n\n", "\n```\n\n"
_FEWSHOT_OPEN, _FEWSHOT_CLOSE = "\n\n```output\n", "\n```\n"


def truncate_content(content: str, max_length: int) -> str:
    """smolagents' ``truncate_content``: over ``max_length``, head and tail around a notice.

    Same slicing as the original (``content[-max_length // 2:]`` included), so the text is
    byte-identical to what DeepMath's agent writes.
    """
    if len(content) <= max_length:
        return content
    notice = f"\n..._This content has been truncated to stay below {max_length} characters_...\n"
    return content[: max_length // 2] + notice + content[-max_length // 2:]


def _exception(result: ExecResult) -> str:
    """The message DeepMath logs for a failed cell, after ``"Exception: "``."""
    failed = failure_line(result)
    if failed is not None:
        return failed
    head, src = split_error(result.error or "")
    if src is None:
        return head
    return f"Code execution failed at line '{src}' due to: {head}"


def agent_parts(result: ExecResult) -> tuple[str, str]:
    """``(logs, output)`` of one cell as DeepMath's agent reports them, truncated likewise."""
    logs = result.stdout
    if result.ok:
        output = result.value if result.value is not None else "None"
    else:
        output = ""
        if not logs:
            logs = "Exception: " + _exception(result)
    logs = restart_note(result) + logs
    return truncate_content(logs, LOG_LIMIT), truncate_content(output, OUTPUT_LIMIT)


def render_agent(result: ExecResult, max_chars: int) -> str:
    """The ``deepmath`` block: DeepMath agent's observation, as joined into its trajectory."""
    logs, output = agent_parts(result)
    room = max(max_chars - len(_AGENT_OPEN + _AGENT_SEP + _AGENT_CLOSE), 0)
    if len(logs) + len(output) > room:
        logs = cap_middle(logs, min(len(logs), max(room - len(output), room // 2)))
        output = cap_middle(output, room - len(logs))
    logs, output = neutralise(logs, _FENCE_LINE), neutralise(output, _FENCE_LINE)
    return f"{_AGENT_OPEN}{logs}{_AGENT_SEP}{output}{_AGENT_CLOSE}"


def render_fewshot(result: ExecResult, max_chars: int) -> str:
    """The ``deepmath_fewshot`` block: the layout of DeepMath's few-shot examples."""
    budget = max(max_chars - len(_FEWSHOT_OPEN) - len(_FEWSHOT_CLOSE), 0)
    body = neutralise(render_body(result, max_chars=budget), _FENCE_LINE)
    return f"{_FEWSHOT_OPEN}{body}{_FEWSHOT_CLOSE}"


class DeepMathFormat(DelimitedFormat):
    """``<tool_call>`` calls and ```output results; the result layout is chosen at creation."""

    stop_strings = ("</tool_call>",)
    call_open = "<tool_call>\n"
    call_close = "</tool_call>"
    output_open = "```output"
    output_close = "```"
    opener = re.compile(r"<tool_call>")
    closer = re.compile(r"</tool_call>")  # the first one, as DeepMath's non-greedy regex
    output_closer = _FENCE_LINE

    def __init__(self, name: str, render_block: Callable[[ExecResult, int], str]) -> None:
        self.name = name
        self._render_block = render_block

    def decode(self, body: str) -> str:
        """The code DeepMath runs for a call body: the body, stripped."""
        return body.strip()

    def render(self, result: ExecResult, *, max_chars: int = 4000) -> str:
        """The output block for ``result``, in this format's layout (see module doc)."""
        return self._render_block(result, max_chars)

    def instructions(self) -> str:
        """DeepMath's format rules in short (after deep_math/prompts.py), with an example."""
        example = self.render_call(self.example_code) + self.render(self.example_result)
        return (
            "You can run Python code in a persistent session (variables and imports carry over "
            "between calls). To run code, write it in a tool call exactly as in the example "
            "below, with each tag on its own line, then stop. An `output` block will be "
            "inserted with the code evaluation results; don't add it yourself. Use the results "
            f"in your reasoning, no need to repeat them.\n\nExample:\n{example}"
        )


DEEPMATH = DeepMathFormat("deepmath", render_agent)
DEEPMATH_FEWSHOT = DeepMathFormat("deepmath_fewshot", render_fewshot)
