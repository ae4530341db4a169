"""Self-correction turns: a snippet with a realistic mistake, its real error, then the fix.

AgentMath adds such turns so that the model learns to read an error and recover. Here a
mistake is made by editing a correct snippet of the trajectory in a way models really do get
wrong, chosen so that Python raises before the faulty cell changes any state:

- ``typo``: the first use of a name defined by an earlier snippet is misspelt (NameError);
- ``missing_import``: an import the snippet needs is left out (NameError at its first use).

The faulty version runs in the session right before the correct one (see
:func:`agentmath.synth.execute.execute`), so the error message in the record is the sandbox's
own. The choice of trajectories (a ``rate``) and of the mistake is seeded by the task id, so a
resumed run plans the same corrections.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import hashlib
import keyword
import random
from collections.abc import Sequence
from dataclasses import dataclass

from agentmath.sandbox.result import ExecResult
from agentmath.synth.pieces import Piece

_REACTIONS = {
    "typo": ("The cell failed: I misspelt `{orig}` as `{bad}`. I fix the name and run it "
             "again.\n",
             "{error_type}: `{bad}` is a typo for `{orig}`. Corrected:\n",
             "That is a typo, `{bad}` instead of `{orig}`; running the cell with the right "
             "name.\n"),
    "missing_import": ("The cell failed because I forgot the import ({line}). I add it and "
                       "run the cell again.\n",
                       "{error_type}: I used `{orig}` without importing it. Adding `{line}`:\n"),
}


@dataclass(frozen=True)
class Correction:
    """A faulty version of one snippet, the error it must raise, and how the model reacts."""

    kind: str  # "typo" or "missing_import"
    faulty: str
    error_type: str
    orig: str  # the name that was misspelt, or the imported name that is missing
    bad: str = ""  # the misspelling (typo) or "" (missing_import)
    line: str = ""  # the import line left out (missing_import)
    variant: int = 0

    def accepts(self, result: ExecResult) -> bool:
        """Whether ``result`` is the planned failure (and nothing worse)."""
        return (not result.ok and result.error_type == self.error_type
                and not result.timed_out and not result.crashed and not result.state_lost)

    def reaction(self, result: ExecResult) -> str:
        """The model's text after reading the error: what went wrong and that it fixes it."""
        options = _REACTIONS[self.kind]
        return options[self.variant % len(options)].format(
            orig=self.orig, bad=self.bad, line=self.line, error_type=result.error_type)


def _parse(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError):
        return None


def _defined(tree: ast.Module) -> set[str]:
    """Names a snippet binds at module level (assignments, imports, defs)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _misspell(name: str, taken: set[str], rng: random.Random) -> str | None:
    """A plausible misspelling of ``name`` (a dropped or swapped letter) that names nothing."""
    options = [name[:i] + name[i + 1:] for i in range(1, len(name))]
    options += [name[:i] + name[i + 1] + name[i] + name[i + 2:] for i in range(1, len(name) - 1)
                if name[i] != name[i + 1]]
    rng.shuffle(options)
    for bad in options:
        if (bad.isidentifier() and not keyword.iskeyword(bad) and bad not in taken
                and not hasattr(builtins, bad)):
            return bad
    return None


def _replace(code: str, node: ast.expr, text: str) -> str:
    lines = code.splitlines(keepends=True)
    line = lines[node.lineno - 1]
    lines[node.lineno - 1] = line[: node.col_offset] + text + line[node.end_col_offset:]
    return "".join(lines)


def _typo(code: str, tree: ast.Module, earlier: set[str], taken: set[str],
          rng: random.Random) -> Correction | None:
    """Misspell the first load of a name that an earlier snippet defined."""
    first = tree.body[0] if tree.body else None
    if first is None:
        return None
    loads = [n for n in ast.walk(first) if isinstance(n, ast.Name)
             and isinstance(n.ctx, ast.Load) and n.id in earlier and len(n.id) >= 2]
    if not loads:
        return None
    node = min(loads, key=lambda n: (n.lineno, n.col_offset))
    bad = _misspell(node.id, taken, rng)
    if bad is None:
        return None
    return Correction("typo", _replace(code, node, bad), "NameError", node.id, bad=bad)


def _missing_import(code: str, tree: ast.Module, earlier: set[str]) -> Correction | None:
    """Leave out the snippet's first import (a one-line ``import x``/``from x import y``)."""
    for stmt in tree.body:
        if not isinstance(stmt, ast.Import | ast.ImportFrom) or stmt.lineno != stmt.end_lineno:
            continue
        names = {(a.asname or a.name).split(".")[0] for a in stmt.names}
        if names & earlier or "*" in names:
            return None  # already bound in the session: leaving it out changes nothing
        lines = code.splitlines(keepends=True)
        line = lines[stmt.lineno - 1]
        faulty = "".join(lines[: stmt.lineno - 1] + lines[stmt.lineno:])
        if not faulty.strip():
            return None
        return Correction("missing_import", faulty, "NameError", sorted(names)[0],
                          line=line.strip())
    return None


def plan_corrections(pieces: Sequence[Piece], task_id: str, *, rate: float,
                     seed: int = 0) -> dict[int, Correction]:
    """At most one correction, for a ``rate`` fraction of tasks (chosen by a hash of the id):
    ``{snippet index: correction}``; empty when the task is not chosen or no snippet lends
    itself to a realistic mistake."""
    digest = hashlib.sha256(f"{seed}:{task_id}".encode()).digest()
    if rate <= 0 or int.from_bytes(digest[:8], "big") / 2**64 >= rate:
        return {}
    rng = random.Random(digest)
    codes = [p.text for p in pieces if p.kind == "code"]
    trees = [_parse(c) for c in codes]
    taken = set().union(*(_defined(t) for t in trees if t is not None))
    candidates: list[tuple[int, Correction]] = []
    earlier: set[str] = set()
    for i, (code, tree) in enumerate(zip(codes, trees, strict=True)):
        if tree is None:
            continue
        for fix in (_missing_import(code, tree, earlier), _typo(code, tree, earlier, taken, rng)):
            if fix is not None:
                candidates.append((i, fix))
        earlier |= _defined(tree)
    if not candidates:
        return {}
    index, fix = rng.choice(candidates)
    return {index: dataclasses.replace(fix, variant=rng.randrange(len(_REACTIONS[fix.kind])))}
