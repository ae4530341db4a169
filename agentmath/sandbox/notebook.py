"""Notebook habits in model-written cells: Jupyter's shell and magic lines, and ``display()``.

Models trained on notebook transcripts write ``!pip install sympy``, ``%timeit f(10)`` or
``display(df)`` in cells that are otherwise plain Python. Without help the whole cell fails
with a SyntaxError or a NameError, and the model loses every line that would have run. Here:

- a cell that does not parse as Python, and does once its lines starting with ``!`` or ``%``
  are set aside, runs without them, and its stderr says which were skipped (a shell, pip and
  IPython's magics do not exist in the sandbox). A cell that parses is never changed, so a
  ``%`` or ``!`` inside a string or an expression keeps its meaning;
- ``display(obj, ...)`` prints each object's repr, as IPython's plain-text display does;
- ``from IPython.display import display, Math, Latex, Markdown, HTML`` (or ``import IPython``)
  gets a small stand-in module: ``display`` as above, and the rich objects print their source
  text (``Math(r"\\frac12")`` shows ``$\\frac12$``), which is what a text-only reader can use,
  where IPython's plain-text repr would be ``<IPython.core.display.Math object>``.

Written by hand: IPython's own transformer would need IPython inside every worker (and it
would then try to run the commands); these are a few dozen lines.
"""

from __future__ import annotations

import ast
import sys
import types
from typing import Any

_NOTEBOOK_PREFIXES = ("!", "%")


def set_aside_commands(code: str) -> tuple[str, list[str]]:
    """``code`` with each line whose first non-blank character is ``!`` or ``%`` replaced by
    ``pass`` at the same indentation (so blocks and line numbers stay as written), and the
    lines replaced. Used only for a cell that does not parse as written."""
    lines = code.split("\n")
    skipped: list[str] = []
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if stripped.startswith(_NOTEBOOK_PREFIXES):
            skipped.append(stripped)
            lines[i] = line[: len(line) - len(stripped)] + "pass"
    return "\n".join(lines), skipped


def parse_cell(code: str, filename: str) -> tuple[ast.Module, list[str]]:
    """The cell's syntax tree and the notebook command lines set aside to get it (none for a
    cell that parses as written). When the cell still does not parse without them, the
    SyntaxError is the one left (the line numbers are the cell's): the command line is not
    what the model has to fix."""
    try:
        return ast.parse(code, filename, "exec"), []
    except SyntaxError:
        python, skipped = set_aside_commands(code)
        if not skipped:
            raise
        return ast.parse(python, filename, "exec"), skipped


def skipped_note(skipped: list[str]) -> str:
    """The stderr line that tells the model which notebook commands did not run."""
    shown = "; ".join(line if len(line) <= 80 else line[:77] + "..." for line in skipped[:3])
    more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
    return (f"[sandbox] skipped {len(skipped)} notebook command line(s): {shown}{more} "
            "(no shell, pip or IPython magics here; the rest of the cell ran)\n")


def display(*objs: Any, **_options: Any) -> None:
    """IPython's ``display()`` as plain text: each object's repr on its own line of stdout."""
    for obj in objs:
        sys.stdout.write(repr(obj) + "\n")


class _RichText:
    """A rich display object of IPython's, shown as its source text."""

    def __init__(self, data: Any = None, *_args: Any, **_kwargs: Any) -> None:
        self.data = "" if data is None else str(data)

    def __repr__(self) -> str:
        return self.data


class Math(_RichText):
    """``IPython.display.Math``: LaTeX math, shown between dollar signs."""

    def __repr__(self) -> str:
        return f"${self.data.strip().strip('$')}$"


class Latex(_RichText):
    """``IPython.display.Latex``."""


class Markdown(_RichText):
    """``IPython.display.Markdown``."""


class HTML(_RichText):
    """``IPython.display.HTML``."""


class Pretty(_RichText):
    """``IPython.display.Pretty``."""


def clear_output(*_args: Any, **_kwargs: Any) -> None:
    """``IPython.display.clear_output``: nothing to clear in a text transcript."""


def ipython_stand_ins() -> dict[str, types.ModuleType]:
    """Modules named ``IPython`` and ``IPython.display`` holding the stand-ins above, for the
    sandbox's import guard to hand out (fresh per worker: a cell may change them)."""
    display_module = types.ModuleType("IPython.display", "agentmath's stand-in (text only)")
    for obj in (display, Math, Latex, Markdown, HTML, Pretty, clear_output):
        setattr(display_module, obj.__name__, obj)
    display_module.__all__ = [name for name in vars(display_module) if not name.startswith("_")]
    package = types.ModuleType("IPython", "agentmath's stand-in: only IPython.display")
    package.display = display_module  # type: ignore[attr-defined]
    return {"IPython": package, "IPython.display": display_module}
