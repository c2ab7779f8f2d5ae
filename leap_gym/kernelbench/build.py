"""The ``cuda`` backend's real build of a KernelBench-style answer: ``load_inline`` in the worker.

The extension is built with nvcc through torch's ``load_inline`` (the answer's own flags are not
used), its functions are handed to the answer counted and guarded, and the answer is judged by the
same trials and checks as a native one. Untested on a GPU in this project's CI (no GPU there).
"""

from __future__ import annotations

from typing import Any

from leap_gym.kernelbench.answer import NATIVE_IS_CHEAPER, Extension


class ExtensionFunction:
    """A built extension's function as the answer sees it: calls counted where the answer cannot reach
    them, run under the evaluation's guards, skipped (raising) when the decoy check skips kernels."""

    def __init__(self, name: str, function: Any, counter: Any):
        self.name = name
        self.function = function
        self.counter = counter

    def __call__(self, *args: Any) -> Any:
        self.counter.counts[self.name] = self.counter.counts.get(self.name, 0) + 1
        if self.counter.noop:
            raise RuntimeError(f"extension function {self.name} skipped")
        return self.function(*args)


class ExtensionModule:
    """What ``load_inline(...)`` returns to the answer on the cuda backend: its functions, counted."""

    def __init__(self, module: Any, functions: list[str], counter: Any):
        self.functions = {f: ExtensionFunction(f, getattr(module, f), counter) for f in functions}

    def __getattr__(self, name: str) -> Any:
        functions = self.__dict__.get("functions", {})
        if name in functions:
            return functions[name]
        raise AttributeError(f"the extension has no function '{name}' (functions=[{', '.join(functions)}])")


class ExtensionCounter:
    """The launch counter of the real-build path (counts extension calls; `noop` skips them)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.noop = False
        self.inner = None

    @property
    def launches(self) -> dict[str, int]:
        return self.counts

    def total(self) -> int:
        return sum(self.counts.values())


def build_extensions(extensions: list[Extension]) -> tuple[dict[str, Any], float]:
    """Build each extension with torch's ``load_inline`` (nvcc); the modules by name and the seconds taken.

    The answer's own compiler and linker flags are not used. Builds are cached by a hash of the sources
    under ``$LEAP_GYM_CACHE/load_inline``, so a repeated answer is not rebuilt.
    """
    import hashlib
    import time

    from torch.utils.cpp_extension import load_inline

    from leap_gym.cache import cache_dir

    start = time.perf_counter()
    modules = {}
    for ext in extensions:
        digest = hashlib.sha256("\0".join([ext.name, ext.cpp_sources, ext.cuda_sources, *ext.functions])
                                .encode("utf-8", "replace")).hexdigest()[:16]
        folder = cache_dir() / "load_inline" / digest
        folder.mkdir(parents=True, exist_ok=True)
        modules[ext.name] = load_inline(name=f"kb_{ext.name}_{digest}", cpp_sources=ext.cpp_sources,
                                        cuda_sources=ext.cuda_sources, functions=ext.functions,
                                        build_directory=str(folder), verbose=False)
    return modules, time.perf_counter() - start


def run_extension_job(job: Any) -> Any:
    """Judge a load_inline answer on the cuda backend through a real build (runs in the worker).

    Untested on a GPU in this project's CI (no GPU there): marked ``gpu`` in the tests.
    """
    import time

    from leap_gym.backends.base import get_backend
    from leap_gym.evaluation import hostile, pipeline
    from leap_gym.result import COMPILE_ERROR, RUNTIME_ERROR, EvalResult

    start = time.perf_counter()
    result = EvalResult(RUNTIME_ERROR, task_id=job.task.id, backend=job.backend, answer_format="load_inline")
    backend = get_backend(job.backend)
    try:
        references = hostile.reference_phase(job, backend)
    except Exception as exc:  # the task's own code failed
        result.detail = "reference_error"
        result.message = f"the task's reference Model failed: {type(exc).__name__}: {exc}".splitlines()[0][:500]
        result.errors = [result.message]
        return pipeline.finish(result, start)
    try:
        modules, seconds = build_extensions(job.extensions)
    except Exception as exc:  # nvcc's errors
        result.status, result.detail = COMPILE_ERROR, "extension_build"
        text = str(exc)
        result.message = "the load_inline extension failed to build (nvcc): " + (text.splitlines() or [""])[0][:300]
        result.errors = [line for line in text.splitlines() if "error" in line][:20] or [text[-2000:]]
        return pipeline.finish(result, start)
    result.build_time_s = seconds
    counter = ExtensionCounter()
    environment = hostile.EnvironmentSnapshot()
    try:
        namespace: dict[str, Any] = {"__name__": "model_new"}
        for ext in job.extensions:
            namespace[f"kb_extension_{ext.name}"] = ExtensionModule(modules[ext.name], ext.functions, counter)
        exec(compile(job.python, pipeline.PYTHON_BLOCK_NAME, "exec"), namespace)
        model_new = namespace.get("ModelNew")
        if not isinstance(model_new, type):
            raise TypeError("the python block must define `class ModelNew(nn.Module)`")
        pipeline.run_trials(job, backend, counter, model_new, result, references=references, namespace=namespace,
                              counter=counter)
    except Exception as exc:
        pipeline.record_runtime_error(result, exc)
    pipeline.check_environment(environment, result)
    result.message += "; " + NATIVE_IS_CHEAPER.format(what=f"extension build ({seconds:.1f} s here; NVRTC compiles "
                                                           "a native answer in well under a second)")
    return pipeline.finish(result, start)
