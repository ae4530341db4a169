"""Grading-bounds benchmark: answer extraction on adversarial responses, and ``grade`` against
its timeout.

Run: ``.venv/bin/python benchmarks/grading_bounds.py`` (``--quick`` for smaller inputs).

* extraction time in the calling process, per response shape and size: it must grow linearly
  (doubling the size about doubles the time); the old extractor was quadratic on unclosed
  ``\\boxed{`` (128 KiB took about a minute);
* ``grade(gold, response, timeout=T)`` wall time for the same responses: extraction of a long
  response runs in a grading worker under ``T``, so no result takes much longer than ``T``
  (plus a worker restart when one is killed).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import print_table  # noqa: E402

from agentmath.grading import extract_answer, get_pool, grade  # noqa: E402

SHAPES: dict[str, Callable[[int], str]] = {
    "unclosed \\boxed{": lambda n: "\\boxed{" * (n // 7) + " \\boxed{5}",
    "'. ' inside one box": lambda n: "\\boxed{" + ". " * (n // 2) + "} \\boxed{5}",
    "nested $$ in a box": lambda n: "\\boxed{" + "$$" * (n // 4) + "5" + "$$" * (n // 4) + "}",
    "'#### 5' + spaces": lambda n: "#### 5" + " " * n + "x",
    "'Answer:' lines": lambda n: "Answer:\n" * (n // 8) + "Answer: 5",
}


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(quick: bool) -> None:
    sizes = (128 << 10, 512 << 10) if quick else (128 << 10, 512 << 10, 1 << 20, 4 << 20)
    timeout = 2.0
    get_pool().warm_up()  # worker start-up is not what is measured
    rows = []
    for name, make in SHAPES.items():
        for size in sizes:
            text = make(size)
            extract_s = timed(lambda text=text: extract_answer(text))
            graded = timed(lambda text=text: grade("5", text, timeout=timeout))
            rows.append((name, f"{size >> 10} KiB", f"{extract_s * 1000:.0f} ms",
                         f"{graded * 1000:.0f} ms (timeout {timeout:g} s)"))
    print_table("agentmath grading bounds", ("response", "size", "extract_answer (in process)",
                                             "grade (extraction in a worker)"), rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller inputs (smoke run)")
    main(parser.parse_args().quick)
