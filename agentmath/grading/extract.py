"""Pull the final answer out of a model response (or a reference solution).

Strategies are tried in order and the first that finds something wins:

``"boxed"``
    the content of the LAST complete ``\\boxed{...}`` / ``\\fbox{...}`` / ``\\framebox{...}``
    (nested and escaped braces handled), or the token after ``\\boxed`` without braces
    (``\\boxed 5``);
``"phrase"``
    the last "final answer is X" / "the answer is X" / "Answer: X";
``"gsm8k"``
    the last ``#### X`` line (GSM8K's reference format);
``"last_number"``
    the last number in the text. Off by default: it turns an unfinished response into a guess.

Regular expressions here are linear (no nested quantifiers), so a long response cannot stall.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from agentmath.errors import GradingError

BOXED_ONLY: tuple[str, ...] = ("boxed",)
DEFAULT_STRATEGIES: tuple[str, ...] = ("boxed", "phrase", "gsm8k")
ALL_STRATEGIES: tuple[str, ...] = (*DEFAULT_STRATEGIES, "last_number")

_BOXED_RE = re.compile(r"\\(?:boxed|fbox|framebox)(?![A-Za-z])")
_BARE_TOKEN_RE = re.compile(r"[ \t]*([^\s$\\{}]+)")
_PHRASE_RE = re.compile(
    r"final\s+answer\s*(?:is\b|:)"
    r"|\bthe\s+answer\s*(?:is\b|:)"
    r"|(?:^|\n)[ \t]*[*_#]*[ \t]*answer[ \t]*[*_]*[ \t]*:",
    re.IGNORECASE,
)
_MATH_DELIMS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_SENTENCE_END_RE = re.compile(r"\.(?=\s|$)")
_GSM8K_RE = re.compile(r"^[ \t]*####[ \t]*(.+?)[ \t]*$", re.MULTILINE)
_MAX_PHRASE_CHARS = 4096  # how far after an answer phrase to look (bounds the work per match)
_NUMBER_RE = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?")


def _balanced(text: str, open_at: int) -> str | None:
    """Content of the brace group opening at ``text[open_at]``; None if it never closes.

    ``\\{`` and ``\\}`` are LaTeX literal braces and do not count.
    """
    depth = 0
    i = open_at
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : i]
        i += 1
    return None


def _last_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed``/``\\fbox``; an unclosed one is skipped.

    An unclosed box is a truncated response; an earlier, complete box is a real answer.
    """
    for match in reversed(list(_BOXED_RE.finditer(text))):
        i = match.end()
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text) and text[i] == "{":
            content = _balanced(text, i)
        else:
            bare = _BARE_TOKEN_RE.match(text, match.end())
            content = bare.group(1) if bare else None
        if content is not None and clean_answer(content) is not None:
            return content
    return None


def _phrase_value(rest: str) -> str:
    """The answer right after an answer phrase: a whole math span, else the sentence."""
    rest = rest.lstrip(" \t:*_")
    for opener, closer in _MATH_DELIMS:
        if rest.startswith(opener):
            end = rest.find(closer, len(opener))
            if end != -1:
                return rest[len(opener) : end]
            break
    line = rest.split("\n", 1)[0]
    sentence_end = _SENTENCE_END_RE.search(line)
    return line[: sentence_end.start()] if sentence_end else line


def _last_phrase(text: str) -> str | None:
    """The answer after the last "final answer is" / "the answer is" / "Answer:" that has one."""
    for match in reversed(list(_PHRASE_RE.finditer(text))):
        value = _phrase_value(text[match.end() : match.end() + _MAX_PHRASE_CHARS])
        if clean_answer(value) is not None:
            return value
    return None


def _last_gsm8k(text: str) -> str | None:
    matches = _GSM8K_RE.findall(text)
    return matches[-1] if matches else None


def _last_number(text: str) -> str | None:
    matches = _NUMBER_RE.findall(text)
    return matches[-1] if matches else None


_STRATEGIES = {
    "boxed": _last_boxed,
    "phrase": _last_phrase,
    "gsm8k": _last_gsm8k,
    "last_number": _last_number,
}


def clean_answer(answer: str) -> str | None:
    """Strip whitespace, surrounding ``$``/``\\(\\)``/``\\[\\]``, markdown bold and a trailing
    period; None if nothing is left."""
    previous = None
    while answer != previous:
        previous = answer
        answer = answer.strip().strip("*").strip()
        for opener, closer in _MATH_DELIMS:
            if answer.startswith(opener) and answer.endswith(closer) and len(answer) > 1:
                answer = answer[len(opener) : len(answer) - len(closer)]
        if answer.startswith("$") != answer.endswith("$") or not answer.strip("$"):
            answer = answer.strip("$")
        if answer.endswith(".") and not answer.endswith("\\."):
            answer = answer[:-1]
    return answer or None


def extract_answer(
    text: str | None, *, strategies: Sequence[str] = DEFAULT_STRATEGIES
) -> str | None:
    """Return the final answer in ``text`` using ``strategies`` in order, or None if none hits.

    Why ordered fallbacks: models are asked to box the answer, but some write "The answer is 5"
    instead, and GSM8K references end in ``#### 5``. The last-number guess is opt-in
    (``ALL_STRATEGIES``). Raises GradingError for an unknown strategy name.
    """
    unknown = [name for name in strategies if name not in _STRATEGIES]
    if unknown:
        raise GradingError(
            f"unknown extraction strategies {unknown}; choose from {sorted(_STRATEGIES)}")
    if not text:
        return None
    for name in strategies:
        found = _STRATEGIES[name](text)
        if found is not None:
            cleaned = clean_answer(found)
            if cleaned is not None:
                return cleaned
    return None
