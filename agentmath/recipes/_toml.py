"""A minimal TOML writer for config dicts (tomllib reads TOML but cannot write it; the
recipes' files under configs/rl/ are generated from agentmath/recipes/grpo.py with it)."""

from __future__ import annotations

import json
from typing import Any


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


def dumps(data: dict[str, Any], prefix: str = "") -> str:
    """``data`` as TOML: scalars first, then tables, then arrays of tables."""
    lines = [f"{k} = {_value(v)}" for k, v in data.items() if v is not None
             and not isinstance(v, dict)
             and not (isinstance(v, list) and v and isinstance(v[0], dict))]
    out = "\n".join(lines) + ("\n" if lines else "")
    for k, v in data.items():
        if isinstance(v, dict):
            out += f"\n[{prefix}{k}]\n" + dumps(v, f"{prefix}{k}.")
    for k, v in data.items():
        if isinstance(v, list) and v and isinstance(v[0], dict):
            for item in v:
                out += f"\n[[{prefix}{k}]]\n" + dumps(item, f"{prefix}{k}.")
    return out
