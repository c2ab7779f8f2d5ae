"""The `compile-only` backend: stop after NVRTC; the final status is COMPILED."""

from __future__ import annotations

from leap_gym.backends.base import Backend


class CompileOnlyBackend(Backend):
    name = "compile-only"
    device = "cpu"
    runs_kernels = False
    size_preset = "cpu"
