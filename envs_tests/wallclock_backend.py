"""A backend defined outside `leap_gym`, for `test_backend_registry.py`: registered by path in the test process and
imported by name in the sandbox workers (pytest puts this folder on ``sys.path``, and workers get that ``sys.path``).

It is the `cpu` backend plus timing by the wall clock, so a result it produced carries a `Timing`, which a result of
the plain `cpu` backend (``reports_speedup = False``) never does: the mark that the worker really used this class.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from leap_gym.backends.cpu import CpuBackend
from leap_gym.backends.timing import summarize


class WallClockCpuBackend(CpuBackend):
    """The CUDA-on-CPU runtime, timed with ``time.perf_counter`` (5 to 50 trials within the budget)."""

    reports_speedup = True

    def time_ms(self, fn: Callable[[], Any], budget_s: float) -> tuple[float, float, int]:
        samples: list[float] = []
        deadline = time.perf_counter() + budget_s
        while len(samples) < 5 or (len(samples) < 50 and time.perf_counter() < deadline):
            start = time.perf_counter()
            fn()
            self.synchronize()
            samples.append((time.perf_counter() - start) * 1e3)
        return summarize(samples).as_tuple()
