"""``<tool_call>`` tags around raw Python, results in ``<tool_output>`` (DeepMath style)::

    <tool_call>
    print(2 + 2)
    </tool_call>
    <tool_output>
    4
    </tool_output>

Stop string: ``"\\n</tool_call>"``, the closing tag at the start of a line, as ``render_call``
and the instructions write it. The leading newline keeps a tag inside a string literal of the
code (``print("</tool_call>")``) from stopping generation early. ``find_call`` is a little more
lenient than the stop: it also accepts a closing tag that ends a line (``x = 1</tool_call>``).
"""

from __future__ import annotations

import re

from agentmath.formats.base import DelimitedFormat


class ToolCallFormat(DelimitedFormat):
    """Raw Python between ``<tool_call>`` tags; output between ``<tool_output>`` tags."""

    name = "tool_call"
    stop_strings = ("\n</tool_call>",)
    call_open = "<tool_call>\n"
    call_close = "</tool_call>"
    output_open = "<tool_output>"
    output_close = "</tool_output>"
    opener = re.compile(r"<tool_call>[ \t]*\n")
    closer = re.compile(r"(?m)^</tool_call>|</tool_call>(?=[ \t]*$)")
    output_closer = re.compile(r"</tool_output>")


TOOL_CALL = ToolCallFormat()
