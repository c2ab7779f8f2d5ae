"""Vector environments with text observations: shared memory for `SourceText` spaces.

`gym.make_vec("KernelDebugEnv-v0", num_envs=N)` (sync or async) batches the text observations as
tuples of strings. `AsyncVectorEnv` passes observations through shared memory by default, and
Gymnasium's shared memory for `Text` stores each character as its index in the space's sample
charset, which turns every character outside it (Unicode in feedback and source comments) into
the first charset character. Importing this module registers a shared-memory layout for
`SourceText` that stores Unicode code points instead, so the default `AsyncVectorEnv` is exact:
each environment's slot is ``max_length + 1`` int32 values, the length and then the code points
(text longer than the space's `max_length` is cut).

Examples:
    >>> import gymnasium as gym
    >>> import leap_gym.integrations.vector
    >>> envs = gym.make_vec("KernelDebugEnv-v0", num_envs=2, vectorization_mode="sync", backend="compile-only",
    ...                     task_ids=["level1/relu", "level1/add"])
    >>> observations, infos = envs.reset(seed=0)
    >>> len(observations), observations[0].startswith("Task level1/")
    (2, True)
    >>> envs.close()
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium.vector.utils import shared_memory as _shm

from leap_gym.env import SourceText


@_shm.create_shared_memory.register(SourceText)
def _create_source_text_shared_memory(space: SourceText, n: int = 1, ctx: ModuleType = mp) -> Any:
    return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))


def _encode(space: SourceText, text: str) -> np.ndarray:
    codes = np.frombuffer(text[: space.max_length].encode("utf-32-le", "replace"), dtype="<u4")
    return codes.astype(np.int32)


@_shm.write_to_shared_memory.register(SourceText)
def _write_source_text_to_shared_memory(space: SourceText, index: int, value: str, shared_memory: Any) -> None:
    slot = space.max_length + 1
    destination = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)[index * slot:(index + 1) * slot]
    codes = _encode(space, value)
    destination[0] = len(codes)
    destination[1:1 + len(codes)] = codes


class SharedTextBatch(Sequence):
    """The live text observations of an `AsyncVectorEnv` slot array: each item decodes the current text.

    Gymnasium reads shared memory once, expecting a NumPy view that later writes show through;
    strings are immutable, so this sequence is that view for text. A deep copy (what
    `AsyncVectorEnv` returns with its default ``copy=True``) is a plain tuple of strings.
    """

    def __init__(self, data: np.ndarray):
        self._data = data

    def __len__(self) -> int:
        return self._data.shape[0]

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        row = self._data[index]
        return row[1:1 + int(row[0])].astype("<u4").tobytes().decode("utf-32-le", "replace")

    def __deepcopy__(self, memo: dict) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (tuple, list, SharedTextBatch)) and tuple(self) == tuple(other)

    def __repr__(self) -> str:
        return repr(tuple(self))


@_shm.read_from_shared_memory.register(SourceText)
def _read_source_text_from_shared_memory(space: SourceText, shared_memory: Any, n: int = 1) -> SharedTextBatch:
    slot = space.max_length + 1
    return SharedTextBatch(np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape((n, slot)))


__all__: list[str] = []
