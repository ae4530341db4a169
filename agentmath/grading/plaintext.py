"""Plain-text and Unicode math in an answer, spelled as the LaTeX math-verify reads.

math-verify parses a boxed answer as LaTeX first, so plain-text math that people and small
models write is misread: ``pi/4`` is ``(i*p)/4``, ``sqrt2`` is ``s*q*r*t*2``, ``x**2`` does not
parse, and ``90°``, ``√2``, ``∞``, ``ln(2)``, ``exp(2)``, ``2 sqrt(3)`` fail against their
LaTeX gold (measured: each graded wrong against ``\\frac{\\pi}{4}``, ``\\sqrt{2}``, ``x^2``,
``90^\\circ``, ...). A dataset whose reference answers are plain text (a user's file, a
contaminated copy's answer field) then grades right answers wrong, and the decontamination's
same-story rule, which compares answers, takes a reworded benchmark problem filed with
``(3, pi/2)`` for another question.

A number with a plain unit after it (``42 in.``, ``12 cm^2``) is spelled as math-verify's unit
stripping expects (``42 \\text{ in}``, ``12 \\text{ cm}^2``), and scientific notation (``1e3``,
``2.5E-4``) as a power of ten; Unicode's vulgar fractions (``½``, ``2½``) as fractions and
superscript digits (``x²``, ``10⁻³``) as powers. A repeating decimal (``0.\\overline{3}``,
``1.2\\overline{45}``) is read as its digits: it is rewritten as the exact fraction it is.

No option of math-verify's normalisation covers these spellings, so this module rewrites them
before parsing: a few regular expressions and one scan for the parentheses of ``sqrt(...)``.
Each rule touches only a bare word (not one after a backslash or a letter, not one before a
letter), so LaTeX answers pass through unchanged (``\\pi``, ``\\sqrt{2}``, ``\\ln``, ``pie``,
``\\text{spin}``).
"""

from __future__ import annotations

import re
import unicodedata
from fractions import Fraction

__all__ = ["latex_spelling"]

_UNICODE = {"π": r"\pi ", "∞": r"\infty ", "°": r"^\circ ", "−": "-", "×": r"\times ",
            "·": r"\cdot ", "≤": r"\le ", "≥": r"\ge ", "≠": r"\ne ", "÷": "/"}
# Unicode's vulgar fractions (decomposed "1⁄2") and superscript digits ("x²", "10¹⁰").
_VULGAR_RE = re.compile(r"(\d*)\s*([\u00bc-\u00be\u2150-\u215e\u2189])")
_SUPERSCRIPTS = "⁰¹²³⁴⁵⁶⁷⁸⁹"
_SUPERSCRIPT_RE = re.compile(f"⁻?[{_SUPERSCRIPTS}]+")
_BARE = r"(?<![A-Za-z\\])"  # not inside a longer word, not a LaTeX command already
_PI_RE = re.compile(_BARE + r"pi(?![A-Za-z])")
_FUNCTION_RE = re.compile(
    _BARE + r"(arcsin|arccos|arctan|sinh|cosh|tanh|sin|cos|tan|sec|csc|cot|ln|log|exp)"
    r"(?=\s*[(\d])")
_ROOT_RE = re.compile(_BARE + r"(?:sqrt|√)\s*")
_ROOT_ARGUMENT_RE = re.compile(r"\d+(?:\.\d+)?|[A-Za-z](?![A-Za-z])")
# Units of measure after a number; one-letter ones only after a space ("3m" may be 3 times m).
_UNITS = ("mm|cm|dm|km|in|inch|inches|ft|feet|foot|yd|yards?|mi|miles?|mg|kg|lbs?|oz|ml|mL|"
          "sec|seconds?|min|minutes?|hr|hrs|hours?|days?|weeks?|years?|mph|km/h|m/s|cents?|"
          "dollars?|units?|sq|square")
_NUMBER_UNIT_RE = re.compile(r"^\s*(-?[\d.,/]*\d)(?:\s*(" + _UNITS + r")|\s+([mgslLh]))"
                             r"\.?\s*(\^\s*\{?[23]\}?)?\.?\s*$")
_SCIENTIFIC_RE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[eE]([+-]?\d+)(?![\w.])")
_REPEATING_RE = re.compile(r"(?<![\d.])(\d*)\.(\d*)\\overline\s*\{(\d{1,30})\}")


def latex_spelling(answer: str) -> str:
    """``answer`` with plain-text and Unicode math spelled in LaTeX (module docstring);
    an answer with none of it is returned as it is."""
    for char, latex in _UNICODE.items():
        if char in answer:
            answer = answer.replace(char, latex)
    answer = answer.replace("**", "^")
    if _VULGAR_RE.search(answer):
        answer = _VULGAR_RE.sub(_vulgar_fraction, answer)
    answer = _SUPERSCRIPT_RE.sub(_superscript, answer)
    if "sqrt" in answer or "√" in answer:
        answer = _roots(answer)
    answer = _PI_RE.sub(r"\\pi ", answer)
    unit = _NUMBER_UNIT_RE.match(answer)
    if unit:
        name = unit.group(2) or unit.group(3)
        answer = rf"{unit.group(1)} \text{{ {name}}}{unit.group(4) or ''}"
    answer = _SCIENTIFIC_RE.sub(r"\1\\times 10^{\2}", answer)
    if "overline" in answer:
        answer = _REPEATING_RE.sub(_repeating_fraction, answer)
    return _FUNCTION_RE.sub(r"\\\1", answer).strip()


def _vulgar_fraction(match: re.Match[str]) -> str:
    """``½`` -> ``\\frac{1}{2}``; ``2½`` -> ``\\frac{5}{2}`` (a mixed number)."""
    # unicodedata spells each as "<fraction> 0031 2044 0032": numerator, slash, denominator
    parts = unicodedata.decomposition(match.group(2)).split()[1:]
    slash = parts.index("2044")
    numerator = int("".join(chr(int(code, 16)) for code in parts[:slash]))
    denominator = int("".join(chr(int(code, 16)) for code in parts[slash + 1:]))
    value = Fraction(numerator, denominator) + int(match.group(1) or 0)
    return rf"\frac{{{value.numerator}}}{{{value.denominator}}}"


def _superscript(match: re.Match[str]) -> str:
    """``²`` -> ``^{2}``, ``⁻¹`` -> ``^{-1}``."""
    digits = "".join(str(_SUPERSCRIPTS.index(char)) for char in match.group(0).lstrip("⁻"))
    return "^{" + ("-" if match.group(0).startswith("⁻") else "") + digits + "}"


def _repeating_fraction(match: re.Match[str]) -> str:
    """``a.b\\overline{c}`` as the exact fraction ``\\frac{p}{q}`` it is."""
    whole, fixed, repeat = match.group(1), match.group(2), match.group(3)
    value = Fraction(int(whole or "0")) + Fraction(
        int(fixed + repeat) - int(fixed or "0"),
        (10 ** len(repeat) - 1) * 10 ** len(fixed))
    return rf"\frac{{{value.numerator}}}{{{value.denominator}}}"


def _roots(answer: str) -> str:
    """Each bare ``sqrt`` / ``√`` with its argument (a parenthesised expression, a number or
    one letter) as ``\\sqrt{...}``; one without an argument is left alone."""
    out: list[str] = []
    pos = 0
    for match in _ROOT_RE.finditer(answer):
        if match.start() < pos:
            continue  # inside the argument of the previous root
        start = match.end()
        end, inner = _root_argument(answer, start)
        if end is None:
            continue
        out.append(answer[pos:match.start()] + r"\sqrt{" + _roots(inner) + "}")
        pos = end
    return "".join(out) + answer[pos:]


def _root_argument(text: str, start: int) -> tuple[int | None, str]:
    """Where the argument of a root starting at ``start`` ends, and the argument: through the
    matching ``)`` of a ``(``, or a number or single letter; (None, "") when there is none."""
    if start < len(text) and text[start] == "(":
        depth = 0
        for i in range(start, len(text)):
            depth += (text[i] == "(") - (text[i] == ")")
            if depth == 0:
                return i + 1, text[start + 1:i]
        return None, ""
    found = _ROOT_ARGUMENT_RE.match(text, start)
    return (found.end(), found.group()) if found else (None, "")
