"""``<code>`` tags for calls, ``<interpreter>`` tags for results (AgentMath style)::

    <code>
    print(2 + 2)
    </code>
    <interpreter>
    4
    </interpreter>

AgentMath models put a ```python fence inside the tags
(``<code>\\n```python\\n...\\n```\\n</code>``); ``find_call`` strips such a fence.

Stop string: ``"\\n</code>"``, the closing tag at the start of a line (as both styles write
it), so that ``"</code>"`` inside a string literal of the code does not stop generation.
``find_call`` also accepts a closing tag that ends a line.
"""

from __future__ import annotations

import re

from agentmath.formats.base import DelimitedFormat

_OPEN_FENCE = re.compile(r"\A[ \t]*```[ \t]*(?:python3?|py)?[ \t]*\n", re.IGNORECASE)
_CLOSE_FENCE = re.compile(r"\n?[ \t]*```[ \t]*\n?\Z")


class CodeInterpreterFormat(DelimitedFormat):
    """Python between ``<code>`` tags (fenced or not); output between ``<interpreter>`` tags."""

    name = "code_interpreter"
    stop_strings = ("\n</code>",)
    call_open = "<code>\n"
    call_close = "</code>"
    output_open = "<interpreter>"
    output_close = "</interpreter>"
    opener = re.compile(r"<code>[ \t]*\n")
    closer = re.compile(r"(?m)^</code>|</code>(?=[ \t]*$)")
    output_closer = re.compile(r"</interpreter>")

    def decode(self, body: str) -> str:
        """The code of a call body, without a ```python fence around it if there is one."""
        fence = _OPEN_FENCE.match(body)
        if fence is None:
            return body
        return _CLOSE_FENCE.sub("", body[fence.end():], count=1)


CODE_INTERPRETER = CodeInterpreterFormat()
