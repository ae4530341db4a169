"""Markdown fences: ```python blocks for calls, ```output blocks for results.

The convention of Qwen2.5-Math's tool-integrated reasoning and of ToRL::

    ```python
    print(2 + 2)
    ```
    ```output
    4
    ```

Stop string: ``"\\n```\\n"``, a fence alone on its line, i.e. the closing fence of a code block.
It cannot match an opening fence (```` ```python ```` has text after the backticks) nor
backticks inside code such as ``print("```")``. Models trained with ``stop=["```output"]``
write the same closing fence first, so they stop at the same place, before they start to
imagine the output. A backend that drops the final newline (or the whole stop string) is
covered by ``find_call``. Limitation: a bare ```` ``` ```` opening fence (a block without a
language) also matches; the instructions ask for ```` ```python ````, and such a segment has no
call, so the loop reads it as an answer in text.

Not byte-identical to ToRA / Qwen2.5-Math: they stop at ```` ```output ````, right-strip the
model's text and append ``"\\n```output\\n...\\n```\\n"``, so their text reads
```` ```\\n```output ````. The loop keeps the stop string ``"\\n```\\n"`` in the model's text and
appends the same block, so a trajectory has a blank line between the two blocks (the example
above shows them without it). See docs/agent-loop.md, "Tool formats".
"""

from __future__ import annotations

import re

from agentmath.formats.base import DelimitedFormat

_FENCE_LINE = re.compile(r"(?m)^```(?=[ \t]*$)")


class MarkdownFormat(DelimitedFormat):
    """```python calls and ```output results (Qwen2.5-Math TIR / ToRL style)."""

    name = "markdown"
    stop_strings = ("\n```\n",)
    call_open = "```python\n"
    call_close = "```"
    output_open = "```output"
    output_close = "```"
    opener = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\n", re.IGNORECASE)
    closer = _FENCE_LINE  # a fence alone on its line; the code's last newline precedes it
    output_closer = _FENCE_LINE

    def instructions(self) -> str:
        """How to call the sandbox with ```python blocks, with a tiny worked example."""
        example = self.render_call(self.example_code) + self.render(self.example_result)
        return (
            "You can run Python code in a persistent session (variables and imports carry over "
            "between blocks). To run code, write a ```python block, close it with ``` on its "
            "own line, and stop. The result (printed output, then the value of the last "
            "expression, or the error) comes back in an ```output block; read it before you "
            f"continue.\n\nExample:\n{example}"
        )


MARKDOWN = MarkdownFormat()
