"""Helpers for the formats that reproduce another project's text byte for byte.

``deepmath`` and ``nemo_skills``/``openmath`` write calls and results exactly as their source
projects do, which never re-parse a finished trajectory and so never escape anything. agentmath
does parse whole trajectories (``find_call`` skips answered calls by finding the end of their
output block), so an output that contains the format's own closing marker could end its block
early and let text printed by the code pass for a call. :func:`neutralise` defuses such
occurrences by replacing the marker's first character with a look-alike (same length, so caps
still hold); outputs without the marker, i.e. virtually all of them, stay byte-exact.
"""

from __future__ import annotations

import re

from agentmath.formats.base import CRASH_LINE, LOST_SUFFIX, RESTART_NOTE, TIMEOUT_LINE
from agentmath.sandbox.result import ExecResult

#: What the first character of a defused marker becomes: a fence's backtick turns into a
#: modifier grave accent (U+02CB), a tag's ``<`` into a single angle quotation mark (U+2039).
LOOKALIKES = {"`": "\u02cb", "<": "\u2039"}

# " (line 3: y = 1/0)" or " (cell 2, line 3: ...)" or " (line 3)": where the agentmath sandbox
# says an error happened, appended to "Type: message".
_WHERE = re.compile(r" \((?:cell \d+, )?line \d+(?:: (?P<src>[^\n]*))?\)\Z")


def neutralise(text: str, marker: re.Pattern[str]) -> str:
    """``text`` with every match of ``marker`` defused (first character swapped, see module doc).

    ``marker`` must match the marker text itself (not an empty lookahead) and start with a
    character of :data:`LOOKALIKES`; a swap can only destroy matches, never create one.
    """
    def swap(match: re.Match[str]) -> str:
        found = match.group()
        return LOOKALIKES[found[0]] + found[1:]

    while marker.search(text):
        text = marker.sub(swap, text)
    return text


def split_error(error: str) -> tuple[str, str | None]:
    """``("Type: message", offending source line or None)`` of an agentmath sandbox error.

    Formats that mimic another executor's error text (an IPython traceback, a smolagents
    message) need the two parts apart; an error without the location suffix is all head.
    """
    found = _WHERE.search(error)
    if found is None:
        return error, None
    return error[:found.start()], found.group("src") or None


def failure_line(result: ExecResult) -> str | None:
    """How a timed-out or crashed cell failed (with the lost-state note), else None."""
    if result.timed_out:
        line = result.error or TIMEOUT_LINE
    elif result.crashed:
        line = result.error or CRASH_LINE
    else:
        return None
    if result.state_lost and "lost" not in line:
        line += LOST_SUFFIX
    return line


def restart_note(result: ExecResult) -> str:
    """The note, with its newline, that the session restarted before this cell; else ""."""
    restarted = result.state_lost and not (result.timed_out or result.crashed)
    return RESTART_NOTE + "\n" if restarted else ""
