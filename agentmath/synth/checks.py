"""The rule-based checks of the pipeline: the AST filter and the agreement of outputs.

AST filter (stage ``ast``): a snippet must do work the text could not. Rejected are
``syntax_error``; ``trivial`` snippets that compute nothing (a lone ``print(42)``, constants
assigned and printed: no operator, no call other than ``print``, no loop or comprehension, no
import, no subscript, and no name read from the session); snippets that ``restate_text``
(arithmetic on literals only whose printed result the preceding text already states, e.g.
"12 * 13 = 156" then ``print(12 * 13)``); and snippets over the size limits (``too_long``
in lines or characters, ``too_deep`` in AST nesting). Hand-written because it is a handful
of AST walks; no linter answers "does this code add anything".

Output agreement (stage ``outputs``): the real output must say what the simulated one said.
Numbers are compared as numbers (integers exactly; ``0.3333`` agrees with ``0.333333333``:
the real value rounded to the simulated precision, or within a relative 1e-6; every
simulated number must be matched, and a real number left over only where the author elided
with "..."), the rest as words, so a teacher
that formats its simulated output differently is not punished, but one whose reasoning rests
on a value the code does not produce is dropped.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from agentmath.synth.pieces import Piece, Rejected, model_turns

_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?!\w|\.\d)")
_WORD = re.compile(r"[A-Za-z_]\w*")
_WORK = (ast.BinOp, ast.BoolOp, ast.Compare, ast.For, ast.AsyncFor, ast.While, ast.ListComp,
         ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Import, ast.ImportFrom,
         ast.Subscript, ast.Attribute, ast.AugAssign, ast.FunctionDef, ast.Lambda, ast.If,
         ast.IfExp)


@dataclass(frozen=True)
class AstLimits:
    """Size limits of one snippet."""

    max_lines: int = 80
    max_chars: int = 4000
    max_depth: int = 40


def _depth(node: ast.AST, level: int = 0) -> int:
    children = list(ast.iter_child_nodes(node))
    return level if not children else max(_depth(c, level + 1) for c in children)


def _reads_state(tree: ast.Module) -> bool:
    """Whether the snippet reads a name it does not bind itself (a value from the session)."""
    stored = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
              and isinstance(n.ctx, ast.Store)}
    return any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
               and n.id != "print" and n.id not in stored for n in ast.walk(tree))


def _does_work(tree: ast.Module) -> bool:
    """Whether any node computes something (an operator, a non-print call, a loop...) or
    shows a value computed earlier in the session."""
    if _reads_state(tree):
        return True
    for node in ast.walk(tree):
        if isinstance(node, _WORK):
            return True
        if isinstance(node, ast.UnaryOp) and not isinstance(node.operand, ast.Constant):
            return True
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name)
                                               and node.func.id == "print"):
            return True
    return False


def _literal_only(tree: ast.Module) -> bool:
    """Whether the snippet's only names are ``print`` (all values are literals)."""
    return all(node.id == "print" for node in ast.walk(tree) if isinstance(node, ast.Name))


def number_tokens(text: str) -> list[str]:
    """The numbers written in ``text`` as written (thousands separators removed), in order."""
    return [m.group() for m in _NUMBER.finditer(re.sub(r"(?<=\d),(?=\d{3}\b)", "", text))]


def numbers(text: str) -> list[float]:
    """The numbers written in ``text``, as floats, in order."""
    return [float(t) for t in number_tokens(text)]


def check_snippet(code: str, before: str, limits: AstLimits, index: int,
                  result_text: str | None = None) -> None:
    """Raise :class:`Rejected` (stage ``ast``) when snippet ``index`` (1-based) fails the
    filter. ``before``: the text since the previous snippet; ``result_text``: the output
    expected (simulated), used to see whether the text already states it."""
    where = f"snippet {index}"
    lines = code.count("\n") + 1
    if lines > limits.max_lines or len(code) > limits.max_chars:
        raise Rejected("ast", "too_long", f"{where}: {lines} lines, {len(code)} characters "
                       f"(limits {limits.max_lines}, {limits.max_chars})")
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError) as exc:
        raise Rejected("ast", "syntax_error", f"{where}: {exc}") from None
    except RecursionError:
        raise Rejected("ast", "too_deep", f"{where}: nesting too deep to parse") from None
    depth = _depth(tree)
    if depth > limits.max_depth:
        raise Rejected("ast", "too_deep", f"{where}: AST depth {depth} > {limits.max_depth}")
    if not _does_work(tree):
        raise Rejected("ast", "trivial", f"{where} computes nothing: {code.strip()[:80]!r}")
    if _literal_only(tree) and result_text is not None:
        stated = numbers(before)
        shown = numbers(result_text)
        if shown and all(any(_close(s, v) for v in stated) for s in shown):
            raise Rejected("ast", "restates_text", f"{where} recomputes {result_text.strip()!r}"
                           f", which the text already states: {code.strip()[:80]!r}")


def check_snippets(pieces: Sequence[Piece], limits: AstLimits) -> None:
    """The AST filter over every snippet of a plan."""
    for index, before, piece in model_turns(pieces):
        if piece is not None:
            check_snippet(piece.text, before, limits, index, piece.simulated)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _agrees(token: str, real: str) -> bool:
    """A simulated number (as written) agrees with a real one: integers exactly; decimals
    within 1e-6 relative, or the real one rounded (or cut) to the simulated decimal places."""
    if not any(c in token for c in ".eE"):  # an integer: exact (big ones too)
        if not any(c in real for c in ".eE"):
            return int(token) == int(real)
        return float(real).is_integer() and float(real) == float(token)
    simulated, value = float(token), float(real)
    if math.isclose(simulated, value, rel_tol=1e-6, abs_tol=1e-12):
        return True
    mantissa = token.lower().split("e")[0]
    decimals = len(mantissa.split(".")[1]) if "." in mantissa and "e" not in token.lower() else 0
    if decimals == 0 or not math.isfinite(value):
        return False
    scale = 10**decimals
    tol = 0.05 / scale
    return (math.isclose(round(value, decimals), simulated, abs_tol=tol)
            or math.isclose(math.trunc(value * scale) / scale, simulated, abs_tol=tol))


def outputs_agree(simulated: str, real: str) -> bool:
    """Whether a real output says what the simulated one said (numbers, then words)."""
    if " ".join(simulated.split()) == " ".join(real.split()):
        return True
    sim_numbers, real_numbers = number_tokens(simulated), number_tokens(real)
    if sim_numbers:
        pool = list(real_numbers)
        for value in sim_numbers:  # each simulated number must be matched by a real one
            match = next((r for r in pool if _agrees(value, r)), None)
            if match is None:
                return False
            pool.remove(match)
        # more real numbers than simulated ones: only when the author elided ("...")
        return not pool or "..." in simulated or "\u2026" in simulated
    sim_words = {w.lower() for w in _WORD.findall(simulated)}
    real_words = {w.lower() for w in _WORD.findall(real)}
    return bool(sim_words) and sim_words <= real_words
