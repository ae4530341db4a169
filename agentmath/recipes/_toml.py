"""A minimal TOML writer for config dicts (tomllib reads TOML but cannot write it; the
recipes' files under configs/rl/ are generated from agentmath/recipes/grpo.py with it).

``notes`` maps a dotted key (``loop.max_model_tokens``; a table's own name, ``stages.stages``
for an array of tables) to a comment written on the lines above it: where a recipe's setting
comes from and where it deviates, kept next to the value it explains."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping
from typing import Any

_WIDTH = 98


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_value(x)}" for k, x in v.items()) + " }"
    if v is None:
        raise ValueError("TOML has no null; leave the key out")
    return repr(v)


def _note(notes: Mapping[str, str], key: str) -> str:
    """The comment lines of ``key`` (empty when it has none)."""
    text = notes.get(key)
    if not text:
        return ""
    return "\n".join(textwrap.wrap(text, _WIDTH, initial_indent="# ",
                                   subsequent_indent="# ")) + "\n"


def _is_tables(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and isinstance(v[0], dict)


def dumps(data: dict[str, Any], prefix: str = "",
          notes: Mapping[str, str] | None = None) -> str:
    """``data`` as TOML: scalars first, then tables, then arrays of tables; each key with a
    note in ``notes`` preceded by it as a comment."""
    notes = notes or {}
    out = "".join(_note(notes, prefix + k) + f"{k} = {_value(v)}\n" for k, v in data.items()
                  if v is not None and not isinstance(v, dict) and not _is_tables(v))
    for k, v in data.items():
        if isinstance(v, dict):
            out += f"\n{_note(notes, prefix + k)}[{prefix}{k}]\n" + dumps(v, f"{prefix}{k}.",
                                                                        notes)
    for k, v in data.items():
        if _is_tables(v):
            for i, item in enumerate(v):
                head = _note(notes, prefix + k) if i == 0 else ""
                out += f"\n{head}[[{prefix}{k}]]\n" + dumps(item, f"{prefix}{k}.", notes)
    return out
