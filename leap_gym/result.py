"""The structured outcome of evaluating one response: `EvalResult` and its parts."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

FORMAT_ERROR = "FORMAT_ERROR"
COMPILE_ERROR = "COMPILE_ERROR"
RUNTIME_ERROR = "RUNTIME_ERROR"
TIMEOUT = "TIMEOUT"
WRONG_OUTPUT = "WRONG_OUTPUT"
CORRECT = "CORRECT"
COMPILED = "COMPILED"

STATUSES = (FORMAT_ERROR, COMPILE_ERROR, RUNTIME_ERROR, TIMEOUT, WRONG_OUTPUT, CORRECT, COMPILED)

#: How far each status got, for "progress" decisions (a compiled kernel beats a format error).
STATUS_RANK = {
    FORMAT_ERROR: 0,
    COMPILE_ERROR: 1,
    COMPILED: 2,
    RUNTIME_ERROR: 2,
    TIMEOUT: 2,
    WRONG_OUTPUT: 3,
    CORRECT: 4,
}


@dataclass
class Diagnostic:
    """One compiler message, mapped to a line of the response's `cuda` block (1-based)."""

    severity: str
    message: str
    line: int | None = None
    column: int | None = None
    source_line: str | None = None


@dataclass
class KernelResources:
    """Per-kernel figures from ptxas (`-Xptxas -v`) and, on a GPU, the occupancy calculator."""

    registers: int = 0
    shared_mem_bytes: int = 0
    spill_stores_bytes: int = 0
    spill_loads_bytes: int = 0
    stack_frame_bytes: int = 0
    theoretical_occupancy: float | None = None


@dataclass
class Mismatch:
    """How a wrong output differs from the reference (the first failing output of the first failing trial)."""

    output_index: int
    shape_expected: list[int]
    shape_actual: list[int]
    dtype_expected: str
    dtype_actual: str
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    first_index: list[int] | None = None
    fraction_mismatched: float | None = None
    samples: list[tuple[list[int], float, float]] = field(default_factory=list)
    trial: int = 0
    reason: str = ""


@dataclass
class Timing:
    """Timing of a correct kernel against the reference (milliseconds)."""

    kernel_ms: float
    kernel_spread_ms: float
    reference_ms: float
    reference_spread_ms: float
    trials: int
    per_kernel_ms: dict[str, float] = field(default_factory=dict)
    bandwidth_gbps: float | None = None
    peak_bandwidth_gbps: float | None = None

    @property
    def speedup(self) -> float:
        return self.reference_ms / self.kernel_ms if self.kernel_ms > 0 else 0.0


@dataclass
class EvalResult:
    """Everything an evaluation found out, structured, so an agent never parses feedback text.

    Attributes:
        status: one of `STATUSES`.
        message: the headline of what happened, one line.
        detail: a machine-readable sub-status (e.g. ``"out_of_bounds"``, ``"input_modified"``,
            ``"kernel_not_launched"``), empty when there is nothing more specific to say.
        errors: the error texts a kernel engineer would read (compiler errors, traceback lines).
        answer_format: ``"native"``, ``"triton"`` for a Triton response, or ``"load_inline"`` for a
            KernelBench-style answer (`leap_gym.kernelbench`).
        build_time_s: seconds spent building a load_inline extension (the ``cuda`` backend's real build).
    """

    status: str
    task_id: str = ""
    backend: str = ""
    message: str = ""
    detail: str = ""
    errors: list[str] = field(default_factory=list)
    compile_log: str = ""
    diagnostics: list[Diagnostic] = field(default_factory=list)
    resources: dict[str, KernelResources] = field(default_factory=dict)
    mismatch: Mismatch | None = None
    timing: Timing | None = None
    launches: dict[str, int] = field(default_factory=dict)
    device_output: str = ""
    trials: int = 0
    wall_time_s: float = field(default=0.0, compare=False)
    answer_format: str = "native"
    build_time_s: float = 0.0

    @property
    def correct(self) -> bool:
        return self.status == CORRECT

    @property
    def compiled(self) -> bool:
        return STATUS_RANK.get(self.status, 0) >= STATUS_RANK[COMPILED]

    @property
    def speedup(self) -> float | None:
        return self.timing.speedup if self.timing is not None else None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["correct"] = self.correct
        data["speedup"] = self.speedup
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalResult:
        data = {k: v for k, v in data.items() if k in {f.name for f in dataclasses.fields(cls)}}
        data["diagnostics"] = [Diagnostic(**d) for d in data.get("diagnostics", [])]
        data["resources"] = {k: KernelResources(**v) for k, v in data.get("resources", {}).items()}
        if data.get("mismatch") is not None:
            mismatch = dict(data["mismatch"])
            mismatch["samples"] = [tuple(s) for s in mismatch.get("samples", [])]
            data["mismatch"] = Mismatch(**mismatch)
        if data.get("timing") is not None:
            data["timing"] = Timing(**data["timing"])
        return cls(**data)
