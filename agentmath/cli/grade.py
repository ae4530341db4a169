"""``agentmath grade``: grade JSONL ``{"gold": ..., "response": ...}`` lines from stdin.

Register it with :func:`register` (``register(app)`` adds the ``grade`` command), or add
:func:`grade` yourself: ``app.command("grade")(grade)``.

Contract (one output line per input record, in input order):

* each non-blank input line is one record; blank lines are not records and are skipped;
* a good line prints the input object plus ``extracted``, ``correct``, ``timed_out`` and
  ``error`` (``correct`` is null when the gold answer cannot be parsed; ``error`` says so);
* a malformed line (not JSON, not an object, ``gold``/``response`` missing or of the wrong
  type, not UTF-8) is NOT dropped: it prints an error record (``line``, ``error``, and the input
  fields when there are any, with ``correct: null``), its message goes to stderr naming the line
  number and field, processing continues, and the command exits 2 at the end.

Exit codes: 0 all lines graded; 2 some line was malformed; 1 the verifier could not start.
"""

from __future__ import annotations

import json
import sys
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, cast

import typer

from agentmath.errors import GradingError
from agentmath.grading import ALL_STRATEGIES, BOXED_ONLY, DEFAULT_STRATEGIES, configure_pool
from agentmath.grading import grade as grade_response

Outcome = tuple[dict[str, Any], str | None]  # (output record, error message or None)


def _input_lines() -> Iterator[tuple[int, str | None]]:
    """Yield ``(line number, text)`` for every stdin line; text is None if it is not UTF-8."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text-only stdin (some test harnesses)
        for lineno, line in enumerate(sys.stdin, start=1):
            yield lineno, line
        return
    for lineno, raw in enumerate(stream, start=1):
        try:
            yield lineno, raw.decode("utf-8")
        except UnicodeDecodeError:
            yield lineno, None


def _gold_text(gold: Any) -> str | None:
    """The gold answer as text: strings as they are, numbers written plainly (27.0 -> "27")."""
    if isinstance(gold, str):
        return gold
    if isinstance(gold, bool) or not isinstance(gold, int | float):
        return None
    if isinstance(gold, float) and gold.is_integer():
        return str(int(gold))
    return str(gold)


_JSON_TYPES = {type(None): "null", bool: "boolean", int: "number", float: "number",
               str: "string", list: "array", dict: "object"}  # fmt: skip


def _json_type(value: Any) -> str:
    """The JSON name of a decoded value's type, for error messages."""
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _validate(lineno: int, text: str | None) -> tuple[dict[str, Any], str | None]:
    """Parse one line; return the object (empty if none) and an error naming line and field."""
    if text is None:
        return {}, f"line {lineno}: not valid UTF-8"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return {}, f"line {lineno}: not valid JSON ({exc.msg} at column {exc.colno})"
    if not isinstance(data, dict):
        return {}, f"line {lineno}: expected a JSON object, got {_json_type(data)}"
    for field in ("gold", "response"):
        if field not in data:
            return data, f"line {lineno}: field {field!r} is missing"
    if _gold_text(data["gold"]) is None:
        kind = _json_type(data["gold"])
        return data, f"line {lineno}: field 'gold' must be a string or a number, got {kind}"
    if data["response"] is not None and not isinstance(data["response"], str):
        kind = _json_type(data["response"])
        return data, f"line {lineno}: field 'response' must be a string or null, got {kind}"
    return data, None


def _grade_line(
    lineno: int, text: str | None, timeout: float, strategies: Sequence[str]
) -> Outcome:
    """Grade one input line into its output record (an error record if it is malformed)."""
    data, error = _validate(lineno, text)
    if error is not None:
        record = {**data, "line": lineno, "extracted": None, "correct": None,
                  "timed_out": False, "error": error}  # fmt: skip
        return record, error
    gold = cast(str, _gold_text(data["gold"]))  # _validate checked that it is text
    result = grade_response(gold, data["response"], timeout=timeout, strategies=strategies)
    record = {**data, "extracted": result.extracted, "correct": result.correct,
              "timed_out": result.timed_out, "error": result.error}  # fmt: skip
    return record, None


def _emit(outcome: Outcome, counts: dict[str, int]) -> None:
    """Print one record on stdout (flushed, for streaming readers) and any error on stderr."""
    record, error = outcome
    sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
    sys.stdout.flush()
    if error is not None:
        typer.echo(f"Error: {error}", err=True)
        counts["malformed"] += 1
    elif record["correct"] is True:
        counts["correct"] += 1
    elif record["correct"] is None:
        counts["ungradable"] += 1
    else:
        counts["wrong"] += 1


def _run(timeout: float, strategies: Sequence[str], workers: int) -> dict[str, int]:
    """Grade stdin concurrently (``workers`` at a time) and print results in input order."""
    counts = {"correct": 0, "wrong": 0, "ungradable": 0, "malformed": 0}
    pending: deque[Future[Outcome]] = deque()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="grade") as pool:
        for lineno, text in _input_lines():
            if text is not None and not text.strip():
                continue  # blank lines are not records
            pending.append(pool.submit(_grade_line, lineno, text, timeout, strategies))
            while len(pending) > 4 * workers:
                _emit(pending.popleft().result(), counts)
        while pending:
            _emit(pending.popleft().result(), counts)
    return counts


def grade(
    timeout: float = typer.Option(
        10.0, "--timeout", "-t", min=0.1, max=3600, metavar="SECONDS",
        help="Hard wall-clock limit per answer check; an overrun grades false, timed_out true."),
    fallback: bool = typer.Option(
        True, "--fallback/--no-fallback", metavar="",
        help="If there is no \\boxed{}, also accept '<answer>X</answer>', 'The answer is X', "
             "'Answer: X', '#### X'."),
    last_number: bool = typer.Option(
        False, "--last-number", metavar="",
        help="As a last resort take the last number in the response (implies --fallback)."),
    workers: int = typer.Option(
        2, "--workers", "-w", min=1, max=64, metavar="N",
        help="Verifier processes (and lines in flight)."),
) -> None:
    """Grade model responses: JSONL `{"gold": ..., "response": ...}` on stdin, JSONL out.

    Each output line is the input object plus `extracted` (the final answer found in the
    response: last `\\boxed{}` first), `correct` (true/false; null if the gold answer cannot be
    parsed), `timed_out` and `error`. A malformed line yields an error record (with `line` and
    `error`) and a message on stderr; the other lines are still graded, then the exit code is 2.

    Example: `echo '{"gold": "1/2", "response": "so \\boxed{0.5}"}' | agentmath grade`
    """
    strategies = BOXED_ONLY
    if last_number:
        strategies = ALL_STRATEGIES
    elif fallback:
        strategies = DEFAULT_STRATEGIES
    configure_pool(workers=workers)
    try:
        counts = _run(timeout, strategies, workers)
    except GradingError as exc:
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(1) from exc
    summary = ", ".join(f"{n} {name}" for name, n in counts.items())
    typer.echo(f"graded {sum(counts.values())} lines: {summary}", err=True)
    if counts["malformed"]:
        raise typer.Exit(2)


def register(app: typer.Typer, name: str = "grade") -> None:
    """Add the ``grade`` command to ``app`` (the lead's ``agentmath.cli.main`` calls this)."""
    from agentmath.cli._common import Command

    app.command(name, cls=Command)(grade)
