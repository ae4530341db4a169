"""Pull the final answer out of a model response (or a reference solution).

Strategies are tried in order and the first that finds something wins:

``"boxed"``
    the content of the LAST complete ``\\boxed{...}`` / ``\\fbox{...}`` / ``\\framebox{...}``
    (nested and escaped braces handled), or the token after ``\\boxed`` without braces
    (``\\boxed 5``);
``"answer_tag"``
    the content of the last closed ``<answer>...</answer>`` (the DeepSeek-R1-Zero template
    that many RL recipes train with: ``<think>...</think> <answer>...</answer>``);
``"phrase"``
    the last "final answer is X" / "the answer is X" / "Answer: X";
``"gsm8k"``
    the last ``#### X`` line (GSM8K's reference format);
``"last_number"``
    the last number in the text. Off by default: it turns an unfinished response into a guess.

Every strategy runs in time linear in the length of the text (no regular expression has
ambiguous adjacent quantifiers, brace groups are matched in one pass, and cleaning moves two
indices instead of re-slicing), so a long or adversarial response (thousands of unclosed
``\\boxed{``) cannot stall the caller. Graders still run extraction of long responses inside a
worker under the grading timeout (see :mod:`agentmath.grading.verify`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from agentmath.errors import GradingError

BOXED_ONLY: tuple[str, ...] = ("boxed",)
DEFAULT_STRATEGIES: tuple[str, ...] = ("boxed", "answer_tag", "phrase", "gsm8k")
ALL_STRATEGIES: tuple[str, ...] = (*DEFAULT_STRATEGIES, "last_number")

_BOXED_RE = re.compile(r"\\(?:boxed|fbox|framebox)(?![A-Za-z])")
_BARE_TOKEN_RE = re.compile(r"[ \t]*([^\s$\\{}]+)")
_PHRASE_RE = re.compile(
    r"final\s+answer\s*(?:is\b|:)"
    r"|\bthe\s+answer\s*(?:is\b|:)"
    r"|(?:^|\n)[ \t]*(?:[*_#]+[ \t]*)?answer[ \t]*(?:[*_]+[ \t]*)?:",
    re.IGNORECASE,
)
_MATH_DELIMS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_SENTENCE_END_RE = re.compile(r"\.(?=\s|$)")
_GSM8K_RE = re.compile(r"^[ \t]*####([^\n]+)$", re.MULTILINE)  # value stripped in Python
_MAX_PHRASE_CHARS = 4096  # how far after an answer phrase to look (bounds the work per match)
_NUMBER_RE = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?")
_BRACE_TOKEN_RE = re.compile(r"\\.|[{}]", re.DOTALL)  # an escape pair, or a brace
_SPACE_RE = re.compile(r"\s*")
_DOLLARS_RE = re.compile(r"\$*")


def _brace_pairs(text: str) -> dict[int, int]:
    """Map the index of every ``{`` that closes to the index of its ``}``, in one pass.

    ``\\{`` and ``\\}`` are LaTeX literal braces and do not count (a backslash escapes the
    character after it). One pass over the whole text replaces a scan per ``\\boxed``, which
    was quadratic when a response holds many unclosed boxes.
    """
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for match in _BRACE_TOKEN_RE.finditer(text):
        token = match.group()
        if token == "{":
            stack.append(match.start())
        elif token == "}" and stack:
            pairs[stack.pop()] = match.start()
    return pairs


def _last_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed``/``\\fbox``; an unclosed one is skipped.

    An unclosed box is a truncated response; an earlier, complete box is a real answer.
    """
    matches = list(_BOXED_RE.finditer(text))
    if not matches:
        return None
    pairs = _brace_pairs(text)
    for match in reversed(matches):
        i = match.end()
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text) and text[i] == "{":
            close = pairs.get(i)
            content = None if close is None else text[i + 1 : close]
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
    newline = rest.find("\n")
    line = rest if newline == -1 else rest[:newline]
    sentence_end = _SENTENCE_END_RE.search(line)
    return line[: sentence_end.start()] if sentence_end else line


def _last_phrase(text: str) -> str | None:
    """The answer after the last "final answer is" / "the answer is" / "Answer:" that has one."""
    for match in reversed(list(_PHRASE_RE.finditer(text))):
        value = _phrase_value(text[match.end() : match.end() + _MAX_PHRASE_CHARS])
        if clean_answer(value) is not None:
            return value
    return None


def _last_answer_tag(text: str) -> str | None:
    """The content of the last ``<answer>...</answer>`` with something in it; each search
    starts left of the previous one, so the scan is linear in the text."""
    close = text.rfind("</answer>")
    while close != -1:
        opening = text.rfind("<answer>", 0, close)
        if opening == -1:
            return None
        content = text[opening + len("<answer>"):close]
        if clean_answer(content) is not None:
            return content
        close = text.rfind("</answer>", 0, opening)
    return None


def _last_gsm8k(text: str) -> str | None:
    """The value of the last ``#### X`` line (surrounding blanks dropped)."""
    matches = _GSM8K_RE.findall(text)
    return matches[-1].strip(" \t") if matches else None


def _last_number(text: str) -> str | None:
    matches = _NUMBER_RE.findall(text)
    return matches[-1] if matches else None


_STRATEGIES = {
    "boxed": _last_boxed,
    "answer_tag": _last_answer_tag,
    "phrase": _last_phrase,
    "gsm8k": _last_gsm8k,
    "last_number": _last_number,
}


def _strip_span(text: str, start: int, end: int, chars: str | None) -> tuple[int, int]:
    """``text[start:end]`` with ``chars`` (None: whitespace) stripped, as new indices."""
    if chars is None:
        start = _SPACE_RE.match(text, start, end).end()  # type: ignore[union-attr]
        while end > start and text[end - 1].isspace():
            end -= 1
        return start, end
    while start < end and text[start] in chars:
        start += 1
    while end > start and text[end - 1] in chars:
        end -= 1
    return start, end


def _skip_dollar_layers(text: str, start: int, end: int) -> tuple[int, int]:
    """Skip at once the passes of :func:`clean_answer` that would each strip ``$$`` and then
    ``$`` from both ends of ``$$$...x...$$$`` (three a side per pass, while both ends have at
    least three): the same result, without one pass per layer."""
    if end - start < 7 or text[start] != "$" or text[end - 1] != "$":
        return start, end
    left = _DOLLARS_RE.match(text, start, end).end() - start  # type: ignore[union-attr]
    if start + left >= end:
        return start, end  # all dollars: the general pass empties it
    right = 0
    while text[end - 1 - right] == "$":
        right += 1
    layers = min(left, right) // 3
    return start + 3 * layers, end - 3 * layers


def clean_answer(answer: str) -> str | None:
    """Strip whitespace, surrounding ``$``/``\\(\\)``/``\\[\\]``, markdown bold and a trailing
    period; None if nothing is left.

    Works on two indices into ``answer`` and slices once at the end, so the time is linear in
    its length however many layers there are to strip (``". . . ."``, ``"$$$$x$$$$"``).
    """
    start, end = 0, len(answer)
    dollars_to = 0  # answer[start:dollars_to] is all "$" (only ever moves right)
    previous = None
    while (start, end) != previous:
        previous = (start, end)
        start, end = _skip_dollar_layers(answer, start, end)
        start, end = _strip_span(answer, start, end, None)
        start, end = _strip_span(answer, start, end, "*")
        start, end = _strip_span(answer, start, end, None)
        for opener, closer in _MATH_DELIMS:
            if (end - start > 1 and answer.startswith(opener, start, end)
                    and answer.endswith(closer, start, end)):
                start, end = start + len(opener), end - len(closer)
                end = max(end, start)
        dollars_to = max(dollars_to, start)
        while dollars_to < end and answer[dollars_to] == "$":
            dollars_to += 1
        opens, closes = answer.startswith("$", start, end), answer.endswith("$", start, end)
        if opens != closes or dollars_to >= end:
            start, end = _strip_span(answer, start, end, "$")
        if answer.endswith(".", start, end) and not answer.endswith("\\.", start, end):
            end -= 1
    return answer[start:end] or None


def check_strategies(strategies: Sequence[str]) -> None:
    """Raise GradingError naming any unknown extraction strategy (before any work is done)."""
    unknown = [name for name in strategies if name not in _STRATEGIES]
    if unknown:
        raise GradingError(
            f"unknown extraction strategies {unknown}; choose from {sorted(_STRATEGIES)}")


def extract_answer_args(text: str | None, strategies: Sequence[str]) -> str | None:
    """:func:`extract_answer` with positional arguments: the target a grading worker runs."""
    return extract_answer(text, strategies=strategies)


def extract_answer(
    text: str | None, *, strategies: Sequence[str] = DEFAULT_STRATEGIES
) -> str | None:
    """Return the final answer in ``text`` using ``strategies`` in order, or None if none hits.

    Why ordered fallbacks: models are asked to box the answer, but some write "The answer is 5"
    instead, and GSM8K references end in ``#### 5``. The last-number guess is opt-in
    (``ALL_STRATEGIES``). Raises GradingError for an unknown strategy name.
    """
    check_strategies(strategies)
    if not text:
        return None
    for name in strategies:
        found = _STRATEGIES[name](text)
        if found is not None:
            cleaned = clean_answer(found)
            if cleaned is not None:
                return cleaned
    return None
