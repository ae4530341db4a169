"""The table of tool formats by name, so that a config can say ``format: markdown``.

Any object that satisfies :class:`~agentmath.formats.base.ToolFormat` can be registered; the
loop looks formats up here and never needs to know the built-ins.
"""

from __future__ import annotations

from agentmath.errors import ConfigError
from agentmath.formats.base import ToolFormat

_FORMATS: dict[str, ToolFormat] = {}
_METHODS = ("instructions", "find_call", "render", "render_call")


def _check(fmt: object) -> None:
    """Raise TypeError naming what ``fmt`` lacks to be a ToolFormat."""
    name = getattr(fmt, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"a tool format needs a non-empty str 'name', got {name!r}")
    stops = getattr(fmt, "stop_strings", None)
    if not isinstance(stops, tuple) or not all(isinstance(s, str) and s for s in stops):
        raise TypeError(f"format {name!r}: 'stop_strings' must be a tuple of non-empty str")
    missing = [m for m in _METHODS if not callable(getattr(fmt, m, None))]
    if missing:
        raise TypeError(f"format {name!r} lacks method(s): {', '.join(missing)}")


def register_format(fmt: ToolFormat, *, replace: bool = False) -> ToolFormat:
    """Make ``fmt`` available as ``get_format(fmt.name)``; returns ``fmt``.

    A name that is taken raises :class:`ConfigError` (a ValueError) unless ``replace`` is true,
    so that two plugins cannot silently shadow each other.
    """
    _check(fmt)
    if fmt.name in _FORMATS and not replace:
        raise ConfigError(f"tool format {fmt.name!r} is already registered; "
                          "pass replace=True to replace it")
    _FORMATS[fmt.name] = fmt
    return fmt


def get_format(name: str) -> ToolFormat:
    """The format registered as ``name``; an unknown name raises ConfigError listing the known."""
    try:
        return _FORMATS[name]
    except KeyError:
        known = ", ".join(available_formats()) or "none"
        raise ConfigError(f"unknown tool format {name!r}; known formats: {known}") from None


def available_formats() -> list[str]:
    """The registered format names, sorted."""
    return sorted(_FORMATS)
