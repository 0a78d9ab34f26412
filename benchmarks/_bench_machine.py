"""How fast this machine runs plain Python right now, printed beside a benchmark's figures.

A shared 2-core VM runs the same code up to three times slower on some days than on others, and
every figure moves with it. The time of one fixed loop, taken in the same run, says which kind of
day a table comes from: about 0.5 s on the machine the README's figures were first taken on.
"""

from __future__ import annotations

import time

__all__ = ["machine_line"]


_LOOP = compile("total = 0\nfor i in range(10_000_000):\n    total += i\n", "<machine>", "exec")
"""At module level, as `python -c` runs it (globals, not a function's locals: about twice as slow)."""


def _loop_seconds() -> float:
    start = time.perf_counter()
    exec(_LOOP, {})
    return time.perf_counter() - start


def machine_line() -> str:
    """One line: the best of three runs of a 10M-iteration `total += i` loop."""
    best = min(_loop_seconds() for _ in range(3))
    return f"machine: a 10M-iteration Python loop takes {best:.2f} s here (about 0.5 s on a fast day)"
