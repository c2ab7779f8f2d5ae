"""Kernel languages: which pipeline prepares and runs a response, CUDA C++, Triton or Numba.

A language is a `KernelLanguage`: whether it claims a response (and the job made from it), how it
parses and checks the response, and how it runs the job in a worker. `prepare` and `run_job` ask
each of `LANGUAGES` in order; the first that claims the response handles it. A new kernel language
is one more entry in `LANGUAGES`, ahead of ``cuda``, which claims every response.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from leap_gym.evaluation.parse import ParsedResponse, python_only_block
from leap_gym.evaluation.pipeline import EvalJob, check_parsed, prepare_cuda, run_cuda_job
from leap_gym.integrations import numba_kernels, triton_check
from leap_gym.kernelbench import answer as kernelbench
from leap_gym.result import EvalResult
from leap_gym.tasks import Task


@dataclass(frozen=True)
class KernelLanguage:
    """One way of writing the kernels of a response.

    Attributes:
        name: short name (``"cuda"``, ``"triton"``, ``"numba"``).
        claims_response: whether a response's text is written in this language.
        claims_job: whether a prepared `EvalJob` is one of this language's.
        prepare: parse and statically check a response for a backend: the parsed response, or a FORMAT_ERROR result.
        run_job: compile, run and check a job (inside a sandboxed worker).
    """

    name: str
    claims_response: Callable[[str], bool]
    claims_job: Callable[[Any], bool]
    prepare: Callable[[Task, str, str], ParsedResponse | EvalResult]
    run_job: Callable[[Any], EvalResult]


def _always(_: Any) -> bool:
    return True


def _is_load_inline_response(response: str) -> bool:
    found = python_only_block(response)
    return found is not None and kernelbench.is_load_inline_answer(found[0])


def _prepare_load_inline(task: Task, response: str, backend: str) -> ParsedResponse | EvalResult:
    answer = kernelbench.prepare_answer(task.id, response, backend)
    if isinstance(answer, EvalResult):
        return answer
    return check_parsed(task, answer, answer_format="load_inline")


def _run_load_inline_job(job: EvalJob) -> EvalResult:
    if job.real_build:  # the cuda backend: nvcc builds the extension
        from leap_gym.kernelbench.build import run_extension_job

        return run_extension_job(job)
    result = run_cuda_job(job)
    result.answer_format = "load_inline"
    result.message += ("; judged in KernelBench's load_inline format, its host functions translated exactly to the "
                       "native format (on the cuda backend this format costs an nvcc extension build, which the "
                       "native format's NVRTC compile skips)")
    return result


def _prepare_numba(task: Task, response: str, backend: str) -> ParsedResponse | EvalResult:
    return numba_kernels.prepare_numba(task, response)


def _prepare_triton(task: Task, response: str, backend: str) -> ParsedResponse | EvalResult:
    return triton_check.prepare_triton(task, response)


def _run_triton_job(job: EvalJob) -> EvalResult:
    from leap_gym.integrations.triton_kernels import run_triton_job

    return run_triton_job(job)


LANGUAGES: tuple[KernelLanguage, ...] = (
    KernelLanguage("triton", triton_check.is_triton_response, triton_check.is_triton_job, _prepare_triton,
                   _run_triton_job),
    KernelLanguage("numba", numba_kernels.is_numba_response, numba_kernels.is_numba_job, _prepare_numba,
                   numba_kernels.run_numba_job),
    KernelLanguage("load_inline", _is_load_inline_response, lambda job: bool(job.extensions), _prepare_load_inline,
                   _run_load_inline_job),
    KernelLanguage("cuda", _always, _always, prepare_cuda, run_cuda_job),
)


def language_of_response(response: str) -> KernelLanguage:
    """The first of `LANGUAGES` that claims `response`."""
    return next(lang for lang in LANGUAGES if lang.claims_response(response))


def prepare(task: Task, response: str, backend: str = "") -> ParsedResponse | EvalResult:
    """Parse and statically check a response for `backend`; a FORMAT_ERROR result when it is not acceptable."""
    return language_of_response(response).prepare(task, response, backend)


def run_job(job: EvalJob) -> EvalResult:
    """Compile, load, run and check one response (runs inside a worker process).

    The reference runs first, before any code of the response (its kernel module, its python block)
    does; see `leap_gym.evaluation.correctness` for the order and the checks.
    """
    return next(lang for lang in LANGUAGES if lang.claims_job(job)).run_job(job)
