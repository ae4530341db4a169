"""Pluggable tool formats: how a model writes a sandbox call and reads its result.

Built-ins: ``markdown`` (```python / ```output), ``tool_call`` (``<tool_call>`` /
``<tool_output>``), ``code_interpreter`` (``<code>`` / ``<interpreter>``), ``openai_tools``
(native tool calling, and Hermes/Qwen JSON ``<tool_call>`` in text), ``chatml_tools`` (the same
calls with each result a ChatML tool turn, as Qwen chat templates render native tool calls), and
formats that match
other projects byte for byte: ``deepmath`` and ``deepmath_fewshot`` (DeepMath's ``<tool_call>``
/ ```output, as its agent and as its few-shot prompt write results), ``nemo_skills``
(NeMo-Skills' ``<llm-code>`` / ``<llm-code-output>``) and ``openmath`` (NeMo-Skills'
OpenMath-Nemotron ``<tool_call>`` / ```output). Add one with :func:`register_format`; any
object satisfying :class:`ToolFormat` works.
"""

from __future__ import annotations

from agentmath.formats.base import DelimitedFormat, ToolCall, ToolFormat, render_body
from agentmath.formats.code_interpreter import CODE_INTERPRETER
from agentmath.formats.deepmath import DEEPMATH, DEEPMATH_FEWSHOT
from agentmath.formats.markdown import MARKDOWN
from agentmath.formats.nemo_skills import NEMO_SKILLS, OPENMATH
from agentmath.formats.openai_tools import CHATML_TOOLS, OPENAI_TOOLS
from agentmath.formats.registry import available_formats, get_format, register_format
from agentmath.formats.tool_call import TOOL_CALL

for _fmt in (MARKDOWN, TOOL_CALL, CODE_INTERPRETER, OPENAI_TOOLS, CHATML_TOOLS, DEEPMATH,
             DEEPMATH_FEWSHOT, NEMO_SKILLS, OPENMATH):
    register_format(_fmt, replace=True)
del _fmt

__all__ = ["DelimitedFormat", "ToolCall", "ToolFormat", "available_formats", "get_format",
           "register_format", "render_body"]
