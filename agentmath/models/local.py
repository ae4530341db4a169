"""Whether a path names a local model directory: one check for every place that loads one.

Given a path that is not a model directory, transformers answers with a hub-id complaint
("Repo id must use alphanumeric chars ...") or a tokenizer-conversion error that does not say
what is wrong, and a local path is what was meant. The trainers (which always load
local directories) and the in-process backend (which also takes hub ids) ask
:func:`model_dir_problem` first and report its answer.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["model_dir_problem"]


def model_dir_problem(model: str | Path, *, hub_ids: bool = False) -> str | None:
    """What is wrong with ``model`` as a local model directory (``no such model directory``,
    ``a file, not a model directory``, ``not a model directory (no config.json in it)``), or
    None when it is one. With ``hub_ids``, a name that reads as a hub id (not absolute, not
    starting with ``.`` or ``~``, not an existing path) is None too: the loader decides."""
    text = str(model)
    path = Path(text).expanduser()
    if hub_ids and not (path.is_absolute() or text.startswith((".", "~")) or path.exists()):
        return None
    if not path.is_dir():
        return "a file, not a model directory" if path.exists() else "no such model directory"
    if not (path / "config.json").is_file():
        return "not a model directory (no config.json in it)"
    return None
