"""The GPU timing protocol: CUDA events, L2 flush, all streams synchronised, adaptive trial count.

One trial of `time_gpu`:

1. the L2 cache is flushed by writing a buffer larger than it (``flush_l2``), on the current stream;
2. a start event is recorded on the current stream (so the flush is not timed);
3. `fn` runs (it may launch on any stream);
4. ``torch.cuda.synchronize()`` waits for **every** stream of the device, then the end event is
   recorded and waited for: work a kernel hides on a side stream is timed too.

Step 4 puts one host round trip (a synchronise and an event record, a few microseconds) inside
every sample; the reference is timed the same way, so a speedup compares like with like, but for
kernels of a few microseconds the ratio is pulled towards 1.

After `warmup` untimed calls, trials are added until, past `min_trials`, the relative spread is at
most `target_spread`, or `budget_s` of wall-clock is spent, or `max_trials` are taken (at least
`MIN_TRIALS_ON_BUDGET` trials are always taken, whatever the budget).

The statistics (`median`, `spread`, `should_stop`, `collect`) are pure and tested on the CPU;
`time_gpu` itself needs a GPU. **Status: the GPU path of this module has not been run** (it was
written with no GPU at hand); see ``envs_tests/gpu/``.

Spread: half the interquartile range, ``(Q3 - Q1) / 2``, quartiles by linear interpolation between
order statistics (``statistics.quantiles(method="inclusive")``). For a normal distribution it is
about 0.67 standard deviations; unlike the standard deviation it ignores the rare slow outlier
(a context switch, a clock change) that every GPU timing series has.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

#: However small the budget, a median of fewer trials than this is not reported.
MIN_TRIALS_ON_BUDGET = 3
#: Flush buffer when the device's L2 size cannot be read (bytes).
DEFAULT_FLUSH_BYTES = 256 * 1024 * 1024


@dataclass
class TimingStats:
    """The result of a timing run (milliseconds).

    Attributes:
        median_ms: median of the samples.
        spread_ms: half the interquartile range of the samples (see the module docstring).
        trials: number of timed samples.
        samples: every sample, in the order taken.
        stop_reason: ``"converged"``, ``"budget"`` or ``"max_trials"``.
    """

    median_ms: float
    spread_ms: float
    trials: int
    samples: list[float] = field(default_factory=list)
    stop_reason: str = ""

    @property
    def relative_spread(self) -> float:
        return relative_spread(self.samples)

    def as_tuple(self) -> tuple[float, float, int]:
        """``(median_ms, spread_ms, trials)``, the shape `Backend.time_ms` returns."""
        return self.median_ms, self.spread_ms, self.trials


def median(samples: list[float]) -> float:
    """The median; raises `ValueError` for no samples."""
    if not samples:
        raise ValueError("median of no samples: take at least one timing trial")
    return float(statistics.median(samples))


def spread(samples: list[float]) -> float:
    """Half the interquartile range (0 for fewer than two samples)."""
    if len(samples) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return float(q3 - q1) / 2.0


def relative_spread(samples: list[float]) -> float:
    """`spread` over `median`; infinite when the median is not positive."""
    m = median(samples)
    return spread(samples) / m if m > 0 else math.inf


def summarize(samples: list[float], stop_reason: str = "") -> TimingStats:
    """`TimingStats` of a list of samples."""
    return TimingStats(median(samples), spread(samples), len(samples), list(samples), stop_reason)


def should_stop(samples: list[float], elapsed_s: float, *, min_trials: int, max_trials: int, budget_s: float,
                target_spread: float) -> str:
    """The stopping rule: the reason to stop now, or ``""`` to take another trial.

    Args:
        samples: the samples so far.
        elapsed_s: wall-clock spent on the trials so far.
        min_trials: no convergence is declared before this many samples.
        max_trials: stop at this many samples whatever the spread.
        budget_s: stop once this much time is spent (after at least `MIN_TRIALS_ON_BUDGET` samples).
        target_spread: converged when the relative spread is at most this.
    """
    n = len(samples)
    if n >= max_trials:
        return "max_trials"
    if n >= max(min_trials, 2) and relative_spread(samples) <= target_spread:
        return "converged"
    if elapsed_s >= budget_s and n >= min(MIN_TRIALS_ON_BUDGET, max_trials):
        return "budget"
    return ""


def collect(trial: Callable[[], float], *, min_trials: int = 10, max_trials: int = 200, budget_s: float = 2.0,
            target_spread: float = 0.02, clock: Callable[[], float] = time.perf_counter) -> TimingStats:
    """Call `trial` (which returns one sample in ms) until `should_stop` says so.

    This is the device-independent loop of `time_gpu`; a CPU timer can drive it too.
    """
    if min_trials < 1 or max_trials < min_trials:
        raise ValueError(f"need 1 <= min_trials <= max_trials, got min_trials={min_trials}, max_trials={max_trials}")
    if budget_s <= 0 or target_spread < 0:
        raise ValueError(f"budget_s must be positive and target_spread non-negative, got {budget_s}, {target_spread}")
    samples: list[float] = []
    start = clock()
    while True:
        samples.append(float(trial()))
        reason = should_stop(samples, clock() - start, min_trials=min_trials, max_trials=max_trials,
                             budget_s=budget_s, target_spread=target_spread)
        if reason:
            return summarize(samples, reason)


_flush_buffers: dict[int, Any] = {}


def l2_flush_bytes(device_index: int | None = None) -> int:
    """Size of the buffer written to evict the L2 cache: twice the device's L2, at least 64 MiB."""
    try:
        from leap_gym.backends.cuda_driver import device_attribute

        l2 = device_attribute("L2_CACHE_SIZE", device_index)
    except Exception:  # no driver, or an attribute the driver lacks: a size larger than any L2 today
        return DEFAULT_FLUSH_BYTES
    return max(2 * l2, 64 * 1024 * 1024) if l2 > 0 else DEFAULT_FLUSH_BYTES


def _flush_buffer(device_index: int) -> Any:
    import torch

    if device_index not in _flush_buffers:
        _flush_buffers[device_index] = torch.empty(l2_flush_bytes(device_index), dtype=torch.uint8,
                                                   device=f"cuda:{device_index}")
    return _flush_buffers[device_index]


def time_gpu(fn: Callable[[], Any], *, warmup: int = 3, min_trials: int = 10, max_trials: int = 200,
             budget_s: float = 2.0, target_spread: float = 0.02, flush_l2: bool = True) -> TimingStats:
    """Time `fn` on the current CUDA device with the protocol of the module docstring.

    Args:
        fn: launches the work to time (e.g. ``lambda: model(*inputs)``); its result is discarded.
        warmup: untimed calls first (compilation caches, allocator, clocks).
        min_trials: the stopping rule (see `should_stop`): at least this many trials,
        max_trials: at most this many,
        budget_s: stop once this much time is spent,
        target_spread: or once the relative spread is below this.
        flush_l2: write a buffer twice the L2 size before each trial, so no trial reads a warm cache.

    Returns:
        `TimingStats` in milliseconds.

    Raises:
        RuntimeError: from torch when `fn` faults (the caller maps it, see `leap_gym.backends.cuda`).
    """
    import torch

    device_index = torch.cuda.current_device()
    buffer = _flush_buffer(device_index) if flush_l2 else None
    for _ in range(max(0, warmup)):
        fn()
    torch.cuda.synchronize()

    def trial() -> float:
        stream = torch.cuda.current_stream()
        if buffer is not None:
            buffer.fill_(0)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record(stream)
        fn()
        torch.cuda.synchronize()  # every stream: side-stream work is inside the sample
        end.record(stream)
        end.synchronize()
        return float(start.elapsed_time(end))

    return collect(trial, min_trials=min_trials, max_trials=max_trials, budget_s=budget_s,
                   target_spread=target_spread)
