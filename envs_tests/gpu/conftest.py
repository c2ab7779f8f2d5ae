"""GPU tests: every test here needs the `cuda` backend and is skipped, with the reason, without it.

``LEAP_GPU_RESULTS=<file.jsonl>`` makes tests append their measurements (speedups, timing spreads)
as JSON lines; ``envs_tests/gpu/run_gpu_checks.py`` sets it and builds its report from them.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Callable

import pytest

_lock = threading.Lock()


def cuda_availability():
    from leap_gym.backends.base import get_backend

    return get_backend("cuda").availability()


@pytest.fixture(scope="session", autouse=True)
def _require_gpu() -> None:
    available = cuda_availability()
    if not available.ok:
        pytest.skip(f"the cuda backend is unavailable here: {available.reason}")


@pytest.fixture(scope="session")
def record() -> Callable[..., None]:
    """``record(kind, **fields)``: append one measurement to ``$LEAP_GPU_RESULTS`` (no-op when unset)."""
    path = os.environ.get("LEAP_GPU_RESULTS")

    def write(kind: str, **fields: Any) -> None:
        if not path:
            return
        with _lock, open(path, "a") as f:
            f.write(json.dumps({"kind": kind, **fields}, default=str) + "\n")

    return write
