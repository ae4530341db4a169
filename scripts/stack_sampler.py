"""Sample every thread's Python stack while running a script; write collapsed stacks.

    python scripts/stack_sampler.py OUT.txt [--hz 100] -- script.py ARGS...

A fallback for py-spy where ptrace is not permitted (containers): a daemon thread reads
``sys._current_frames()`` ``hz`` times a second and counts each thread's stack, written on
exit in py-spy's ``--format raw`` shape ("thread (id): name;frame (file:line);... count").
It samples only when the GIL is free, so threads in C code are seen between their calls."""

from __future__ import annotations

import collections
import runpy
import sys
import threading
import time


def main() -> None:
    out, rest = sys.argv[1], sys.argv[2:]
    hz = 100.0
    if rest[:1] == ["--hz"]:
        hz, rest = float(rest[1]), rest[2:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    counts: collections.Counter[str] = collections.Counter()
    stop = threading.Event()

    def sample() -> None:
        me = threading.get_ident()  # the sampler itself is left out
        while not stop.wait(1 / hz):
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                frames = []
                while frame is not None:
                    code = frame.f_code
                    frames.append(f"{code.co_name} ({code.co_filename}:{frame.f_lineno})")
                    frame = frame.f_back
                counts[";".join([f"thread ({ident}): {names.get(ident, '?')}",
                                 *reversed(frames)])] += 1

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    sys.argv = rest
    started = time.monotonic()
    try:
        runpy.run_path(rest[0], run_name="__main__")
    finally:
        stop.set()
        sampler.join()
        with open(out, "w") as fh:
            for stack, n in counts.items():
                fh.write(f"{stack} {n}\n")
        print(f"stack_sampler: {sum(counts.values())} samples in "
              f"{time.monotonic() - started:.0f} s -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
