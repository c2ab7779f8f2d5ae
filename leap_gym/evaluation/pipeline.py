"""The evaluation pipeline of a CUDA C++ response: response text to `EvalResult`.

`prepare_cuda` parses and statically checks (cheap, no user code runs); `run_cuda_job` compiles
with NVRTC, runs the backend and the correctness trials (`run_trials`, shared with the Numba
language), and is meant to run in a sandboxed worker (`leap_gym.evaluation.evaluator`).
"""

from __future__ import annotations

import logging
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch

from leap_gym.backends.base import Backend, KernelRuntimeError, get_backend
from leap_gym.backends.nvrtc import compile_cuda
from leap_gym.evaluation import correctness, hostile
from leap_gym.evaluation.kernels import Kernels, LaunchError, parse_kernel_signatures
from leap_gym.evaluation.parse import FormatError, ParsedResponse, parse_response
from leap_gym.evaluation.static_check import check_python_block
from leap_gym.result import (
    COMPILE_ERROR,
    COMPILED,
    CORRECT,
    FORMAT_ERROR,
    RUNTIME_ERROR,
    WRONG_OUTPUT,
    EvalResult,
    Timing,
)
from leap_gym.tasks import Task

log = logging.getLogger(__name__)

PYTHON_BLOCK_NAME = "model_new.py"


@dataclass
class EvalConfig:
    """How responses are judged.

    Attributes:
        backend: registry name (``"cpu"``, ``"cuda"``, ``"compile-only"``, ``"auto"``).
        arch: NVRTC target (``"sm_90"``); `None` takes the backend's default (the device's, on a GPU).
        trials: correctness trials, each with fresh inputs under a new seed.
        seed: seed of the first trial.
        timeout_s: wall-clock limit of one evaluation in its worker.
        workers: worker processes serving concurrent evaluations.
        shuffle_threads: run a block's threads in a random order (CPU backend) so races show.
        timing_budget_s: time spent timing a correct kernel and the reference (backends that time).
        locate_faults: after a crash, rerun in a checked build that names the faulting line.
        strict: the stricter check: tolerances and the relative-norm bound ten times tighter, and any
            cast to a lower floating precision inside forward fails (``precision_downgrade``).
        shape_check: also run at a second set of sizes where the task names its size constants
            (``shape_specialized``).
    """

    backend: str = "cpu"
    arch: str | None = None
    trials: int = 3
    seed: int = 0
    timeout_s: float = 30.0
    workers: int = 1
    shuffle_threads: bool = False
    timing_budget_s: float = 2.0
    locate_faults: bool = True
    strict: bool = False
    shape_check: bool = True


@dataclass
class EvalJob:
    """One evaluation as the worker receives it."""

    task: Task
    cuda: str
    python: str
    backend: str
    arch: str
    trials: int = 3
    seed: int = 0
    shuffle_threads: bool = False
    timing_budget_s: float = 2.0
    checked: bool = False
    allowed_ops: list[str] = field(default_factory=list)
    strict: bool = False
    shape_check: bool = True
    extensions: list[Any] = field(default_factory=list)
    real_build: bool = False


def prepare_cuda(task: Task, response: str, backend: str = "") -> ParsedResponse | EvalResult:
    """Parse and statically check a CUDA C++ response; a FORMAT_ERROR result when it is not acceptable."""
    try:
        parsed = parse_response(response, wrapper=task.wrapper)
    except FormatError as exc:
        return EvalResult(FORMAT_ERROR, task_id=task.id, message=str(exc), detail="format")
    return check_parsed(task, parsed)


def check_parsed(task: Task, parsed: ParsedResponse, answer_format: str = "native") -> ParsedResponse | EvalResult:
    """Statically check a parsed response (its Python block, its kernel signatures); a FORMAT_ERROR result when
    it is not acceptable."""
    try:
        check_python_block(parsed.python)
        parse_kernel_signatures(parsed.cuda)
    except FormatError as exc:
        return EvalResult(FORMAT_ERROR, task_id=task.id, message=str(exc), detail="format", answer_format=answer_format)
    except ValueError as exc:
        return EvalResult(FORMAT_ERROR, task_id=task.id, message=str(exc), detail="kernel_signature",
                          answer_format=answer_format)
    return parsed


def user_traceback(exc: BaseException) -> list[str]:
    """The traceback lines inside the response's Python block, then the error itself."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == PYTHON_BLOCK_NAME]
    lines = [f'  line {f.lineno}, in {f.name}: {(f.line or "").strip()}' for f in frames]
    return [*lines, f"{type(exc).__name__}: {exc}"]


def _load_python_block(job: EvalJob, kernels: Any) -> tuple[type, dict[str, Any]]:
    """Run the python block (the response's code) with `kernels` injected: `ModelNew` and the namespace."""
    namespace: dict[str, Any] = {"__name__": "model_new", "kernels": kernels}
    exec(compile(job.python, PYTHON_BLOCK_NAME, "exec"), namespace)
    model_new = namespace.get("ModelNew")
    if not isinstance(model_new, type) or not issubclass(model_new, torch.nn.Module):
        raise TypeError("the python block must define `class ModelNew(nn.Module)`")
    return model_new, namespace



def reference_outputs(job: EvalJob, backend: Backend, result: EvalResult) -> Any | None:
    """The task's reference outputs (`hostile.reference_phase`), or `None` with `result` saying that the task's own
    code failed: not the response's fault."""
    try:
        return hostile.reference_phase(job, backend)
    except Exception as exc:
        result.status, result.detail = RUNTIME_ERROR, "reference_error"
        result.message = f"the task's reference Model failed: {type(exc).__name__}: {exc}".splitlines()[0][:500]
        result.errors = [result.message]
        return None


def run_cuda_job(job: EvalJob) -> EvalResult:
    """Compile, load, run and check one response (runs inside a worker process).

    The reference runs first, before any code of the response (its kernel module, its python block)
    does; see `leap_gym.evaluation.correctness` for the order and the checks.
    """
    start = time.perf_counter()
    result = EvalResult(COMPILED, task_id=job.task.id, backend=job.backend)
    compiled = compile_cuda(job.cuda, job.arch)
    result.compile_log = compiled.log
    result.diagnostics = compiled.diagnostics
    result.resources = compiled.resources
    if not compiled.ok:
        first = compiled.errors[0] if compiled.errors else None
        where = f" (line {first.line})" if first and first.line else ""
        result.status, result.detail = COMPILE_ERROR, "include_rule" if compiled.include_refused else "nvrtc"
        what = "refused #include" if compiled.include_refused else "NVRTC error"
        result.message = f"{what}{where}: {first.message if first else 'compilation failed'}"
        result.errors = [f"line {d.line}: {d.message}" if d.line else d.message for d in compiled.errors]
        return finish(result, start)
    backend = get_backend(job.backend)
    if not backend.runs_kernels:
        result.message = f"compiled for {job.arch}; the {backend.name} backend does not run kernels"
        return finish(result, start)
    signatures = parse_kernel_signatures(job.cuda)
    references = reference_outputs(job, backend, result)
    if references is None:
        return finish(result, start)
    environment = hostile.EnvironmentSnapshot()
    launcher = None
    try:
        launcher = backend.load(job.cuda, compiled.cubin, signatures, job.arch, checked=job.checked)
        if job.shuffle_threads and hasattr(launcher, "shuffle"):
            launcher.shuffle = True
        counter = hostile.CountingLauncher(launcher)
        kernels = Kernels(signatures, counter)
        model_new_cls, namespace = _load_python_block(job, kernels)
        run_trials(job, backend, kernels, model_new_cls, result, references=references, namespace=namespace,
                    counter=counter)
    except Exception as exc:
        record_runtime_error(result, exc)
    finally:
        if launcher is not None and hasattr(launcher, "drain_output"):
            result.device_output = launcher.drain_output()
        if hasattr(backend, "check_health"):  # a fault that surfaced through torch poisons the context too
            backend.check_health()
    check_environment(environment, result)
    return finish(result, start)


def record_runtime_error(result: EvalResult, exc: BaseException) -> None:
    """A RUNTIME_ERROR for what the response's kernels or Python raised, with its detail and own lines."""
    result.status = RUNTIME_ERROR
    if isinstance(exc, KernelRuntimeError):
        result.detail, result.message, result.errors = exc.detail, str(exc), [str(exc)]
        return
    if isinstance(exc, correctness.TorchOpError):
        result.detail, result.message = "torch_op_in_forward", str(exc)
    elif isinstance(exc, LaunchError):
        result.detail, result.message = "launch", str(exc)
    else:
        result.detail, result.message = "python_exception", _exception_headline(exc)
    result.errors = user_traceback(exc)


def _exception_headline(exc: BaseException) -> str:
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:  # an exception whose str() fails
        text = type(exc).__name__
    return (text.splitlines() or [type(exc).__name__])[0][:500]


def check_environment(environment: hostile.EnvironmentSnapshot, result: EvalResult) -> None:
    """Whatever the verdict, a response that swapped torch or harness attributes fails, and its worker goes."""
    changed = environment.tampered()
    if changed is None:
        return
    from leap_gym.sandbox import request_replacement

    request_replacement()
    result.status, result.detail, result.mismatch, result.timing = WRONG_OUTPUT, "environment_tampered", None, None
    result.message = (f"the python block changed `{changed}`: a response may not modify torch, builtins or the "
                      "evaluation harness")
    result.errors = [result.message]


def finish(result: EvalResult, start: float) -> EvalResult:
    result.wall_time_s = time.perf_counter() - start
    return result


@dataclass
class _Run:
    """One call of `ModelNew.forward`: its inputs (after the call), output, launches and casts."""

    trial: int
    inputs: list[Any]
    output: Any
    launched: int
    downcasts: list[str]


def _call(model_new: torch.nn.Module, case: hostile.Case, trial: int, backend: Backend, launch_total: Any,
          allowed: set[str], poison: int, read_guard: bool) -> _Run:
    """One guarded call of forward on fresh copies of `case`'s inputs, all streams synchronised after it."""
    inputs = correctness.fresh_copy(case.inputs)
    before = launch_total()
    guard = correctness.ForwardGuard(allowed, poison=poison, read_guard=read_guard)
    with torch.no_grad():
        with guard:
            output = model_new(*inputs)
    backend.synchronize()  # every stream: work hidden on a side stream is finished before anything is read
    return _Run(trial, inputs, output, launch_total() - before, list(guard.downcasts))


def _fail(result: EvalResult, verdict: correctness.Verdict) -> None:
    result.status, result.detail, result.message = WRONG_OUTPUT, verdict.detail, verdict.message
    result.mismatch = verdict.mismatch


def _structural_problem(run: _Run, case: hostile.Case, model_new: torch.nn.Module, earlier: list[_Run],
                        state: hostile.StateSnapshot, roots: dict[str, Any], skip: tuple[Any, ...],
                        device: str) -> correctness.Verdict | None:
    """The checks of one call that need no reference values: launches, output kind, aliasing, inputs, state."""
    if run.launched == 0:
        return correctness.Verdict("kernel_not_launched", "ModelNew.forward launched no kernel; the output must be "
                                   "computed by your CUDA kernels")
    fake = correctness.fake_output(case.expected_outputs(), run.output, device)
    if fake is not None:
        return correctness.Verdict("fake_output", fake)
    changed = correctness.inputs_modified(case.inputs, run.inputs)
    if changed is not None:
        return correctness.Verdict("input_modified", f"input {changed} was modified in place; kernels must leave "
                                   "their inputs unchanged")
    owned = [(f"input {i}", x) for i, x in enumerate(run.inputs)]
    owned += [(f"parameter '{n}'", p) for n, p in model_new.named_parameters()]
    owned += [(f"buffer '{n}'", b) for n, b in model_new.named_buffers()]
    hit = correctness.aliased_with(run.output, owned)
    if hit is not None:
        return correctness.Verdict("output_aliases_input", f"output {hit[0]} shares memory with {hit[1]}; allocate "
                                   "each output (torch.empty) and write it with a kernel")
    previous = correctness.aliased_with(run.output, [("an earlier call", t) for r in earlier
                                                     for t in correctness.flatten(r.output)])
    if previous is not None:
        return correctness.Verdict("stateful_forward", f"output {previous[0]} is the buffer forward returned on an "
                                   "earlier call: allocate a new output on every call (no results kept between calls)")
    path = hostile.StateSnapshot(roots, skip).changed_since(state)
    if path is not None:
        return correctness.Verdict("stateful_forward", f"forward changed `{path}`: forward must not keep state "
                                   "between calls (caches of results, counters, module-level variables)")
    return None


def run_trials(job: EvalJob, backend: Backend, kernels: Any, model_new_cls: type, result: EvalResult,
                references: tuple[hostile.Reference, hostile.Reference | None] | None = None,
                namespace: dict[str, Any] | None = None, counter: hostile.CountingLauncher | None = None) -> None:
    """Run `ModelNew` against the reference on every trial and apply every check; sets `result`.

    Args:
        kernels: the launch handle (`Kernels`, or the Numba registry), read for ``launches``.
        references: from `hostile.reference_phase`, computed before the response's code ran; computed here
            when not given (the Numba path, whose block runs before this).
        namespace: the python block's module namespace (its module-level state is checked).
        counter: the launch counter under `kernels`; without it launches are read from
            ``kernels.launches`` and the decoy check (kernels skipped) is not made.
    """
    task = job.task
    device = backend.device
    strict = job.strict
    allowed = set(job.allowed_ops) | set(task.allowed_torch_ops)
    main, shape = references if references is not None else hostile.reference_phase(job, backend)
    launch_counts = counter.counts if counter is not None else kernels.launches
    def launch_total() -> int:
        return sum(launch_counts.values())

    read_guard = counter is not None  # the Numba path converts tensors (numpy) inside its launches
    torch.manual_seed(job.seed)
    model_new = model_new_cls(*main.init_inputs).to(device)
    _share_parameters(main.model, model_new)
    roots = {"self": model_new, **hostile.public_namespace(namespace or {})}
    skip = (kernels, counter)
    state = hostile.StateSnapshot(roots, skip)

    # Trial 0 twice (two poison patterns: uninitialised memory shows), then the other trials.
    plan = [(0, correctness.POISON_A), (0, correctness.POISON_B)]
    plan += [(t, correctness.POISON_A) for t in range(1, job.trials)]
    runs: list[_Run] = []
    for trial, poison in plan:
        case = main.cases[trial]
        run = _call(model_new, case, trial, backend, launch_total, allowed, poison, read_guard)
        result.trials = trial + 1
        result.launches = dict(launch_counts)
        verdict = _structural_problem(run, case, model_new, runs, state, roots, skip, device)
        if verdict is None and counter is not None and _launches_edited(kernels, counter):
            verdict = correctness.Verdict("stateful_forward", "forward changed kernels.launches: the launch counts "
                                          "are the evaluation's (and are counted where forward cannot reach)")
        if verdict is not None:
            return _fail(result, verdict)
        runs.append(run)
    first, again, rest = runs[0], runs[1], runs[2:]
    atol, rtol = task.atol, task.rtol

    differ = correctness.outputs_differ(first.output, again.output, atol, rtol)
    if differ is not None:
        differ.reason = f"two runs on the same inputs differ: {differ.reason}"
        against_reference = correctness.compare_outputs(main.cases[first.trial].expected_outputs(), first.output,
                                                        atol, rtol, first.trial)
        return _fail(result, correctness.Verdict(
            "nondeterministic_output", f"{differ.reason} (the output depends on uninitialised memory or a race: "
            "write every output element, synchronise threads that share data)", against_reference or differ))
    by_trial = [first, *rest]
    if len(by_trial) > 1 and all(correctness.bitwise_equal(first.output, r.output) for r in rest):
        expected = [c.expected_outputs() for c in main.cases]
        if not all(correctness.bitwise_equal(expected[0], e) for e in expected[1:]):
            return _fail(result, correctness.Verdict(
                "input_independent_output", f"the output is identical on {len(by_trial)} different input sets while "
                "the reference's differs: it does not depend on the inputs"))
    for run in by_trial:
        verdict = correctness.judge_values(main.cases[run.trial].expected_outputs(), run.output, atol, rtol,
                                           run.trial, run.downcasts, strict)
        if verdict is not None:
            return _fail(result, verdict)

    if shape is not None:
        verdict = _shape_check(job, backend, model_new_cls, shape, launch_total, allowed, read_guard, strict)
        if verdict is not None:
            return _fail(result, verdict)
    if counter is not None:
        verdict = _decoy_check(model_new, main.cases[0], job, backend, counter, allowed, launch_total)
        if verdict is not None:
            return _fail(result, verdict)

    result.status, result.message = CORRECT, f"output matches the reference on {job.trials} input sets"
    if shape is not None:
        result.message += " and at a second set of sizes"
    if backend.reports_speedup:
        inputs = correctness.fresh_copy(main.cases[-1].inputs)
        before = launch_total()
        with torch.no_grad():
            kernel_ms, kernel_spread, n = backend.time_ms(lambda: model_new(*inputs), job.timing_budget_s)
            ref_ms, ref_spread, _ = backend.time_ms(lambda: main.model(*inputs), job.timing_budget_s)
        result.launches = dict(launch_counts)
        if launch_total() - before < n or hostile.StateSnapshot(roots, skip).changed_since(state) is not None:
            return _fail(result, correctness.Verdict(
                "timing_tampered", "forward behaved differently while timed (fewer kernel launches, or state "
                "changed): it must do the same work on every call"))
        result.timing = Timing(kernel_ms, kernel_spread, ref_ms, ref_spread, n)
        # per-kernel time, occupancy and bandwidth where a GPU can tell
        if hasattr(backend, "profile") and getattr(counter, "inner", None) is not None:
            from leap_gym.backends.cuda import achieved_bandwidth_gbps, apply_profile, tensor_bytes

            with torch.no_grad():
                outputs: list[Any] = []
                report = backend.profile(counter.inner, lambda: outputs.append(model_new(*inputs)))
            report.bandwidth_gbps = achieved_bandwidth_gbps(tensor_bytes(inputs, outputs), report.total_ms)
            apply_profile(result, report)


def _launches_edited(kernels: Any, counter: hostile.CountingLauncher) -> bool:
    seen = getattr(kernels, "launches", None)
    if not isinstance(seen, dict):
        return True
    names = set(seen) | set(counter.counts)
    return any(seen.get(n, 0) != counter.counts.get(n, 0) for n in names)


def _shape_check(job: EvalJob, backend: Backend, model_new_cls: type, shape: hostile.Reference, launch_total: Any,
                 allowed: set[str], read_guard: bool, strict: bool) -> correctness.Verdict | None:
    """Run a fresh `ModelNew` at the second set of sizes; any failure there is ``shape_specialized``."""
    sizes = ", ".join(f"{k}={v}" for k, v in sorted(shape.task.overrides.items()))
    case = shape.cases[0]
    try:
        torch.manual_seed(job.seed)
        model_new = model_new_cls(*shape.init_inputs).to(backend.device)
        _share_parameters(shape.model, model_new)
        run = _call(model_new, case, 0, backend, launch_total, allowed, correctness.POISON_A, read_guard)
    except KernelRuntimeError as exc:  # a fault is reported as one, with the sizes that showed it
        raise KernelRuntimeError(f"{exc}\n  (at a second set of sizes: {sizes})", exc.detail) from exc
    except Exception as exc:  # a launch error, a torch operator: only at these sizes
        return correctness.Verdict("shape_specialized", f"correct at the task's sizes, but at other sizes ({sizes}) "
                                   f"forward failed: {_exception_headline(exc)}; derive sizes, grids and bounds from "
                                   "the inputs' shapes")
    verdict = correctness.judge_values(case.expected_outputs(), run.output, job.task.atol, job.task.rtol, 0,
                                       run.downcasts, strict)
    if verdict is None and run.launched == 0:
        verdict = correctness.Verdict("kernel_not_launched", "no kernel launched")
    if verdict is None:
        return None
    return correctness.Verdict("shape_specialized", f"correct at the task's sizes, but wrong at other sizes ({sizes}): "
                               f"{verdict.message}; derive sizes, grids and bounds from the inputs' shapes, not "
                               "from constants", verdict.mismatch)


def _decoy_check(model_new: torch.nn.Module, case: hostile.Case, job: EvalJob, backend: Backend,
                 counter: hostile.CountingLauncher, allowed: set[str], launch_total: Any) -> correctness.Verdict | None:
    """Run forward once more with every kernel launch skipped: a right output then did not come from them."""
    counter.noop = True
    try:
        run = _call(model_new, case, 0, backend, launch_total, allowed, correctness.POISON_A, True)
    except Exception:  # forward needs its kernels' results: as it should
        return None
    finally:
        counter.noop = False
    if correctness.compare_outputs(case.expected_outputs(), run.output, job.task.atol, job.task.rtol) is not None:
        return None
    return correctness.Verdict("output_not_from_kernel", "the output is right even when your kernels are skipped: "
                               "forward computes it without them (PyTorch copies or views, Python values); the CUDA "
                               "kernels must compute the output")


def _share_parameters(model: torch.nn.Module, model_new: torch.nn.Module) -> None:
    """Give `ModelNew` the reference's values for every parameter and buffer of the same name and shape."""
    theirs = model.state_dict()
    mine = model_new.state_dict()
    shared = {k: v for k, v in theirs.items() if k in mine and mine[k].shape == v.shape and mine[k].dtype == v.dtype}
    if shared:
        model_new.load_state_dict(shared, strict=False)
