"""The project's cache root, shared by both packages: ``$LEAP_GYM_CACHE``, else ``~/.cache/leap_gym``.

NVRTC's CUBINs, the CPU runtime's builds, `load_inline` builds and the agent's warm-ups live in folders
under it.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The environment variable that moves the cache (a sandbox worker gets it from its pool).
CACHE_ENV = "LEAP_GYM_CACHE"


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "leap_gym"


def cache_dir(*parts: str) -> Path:
    """The cache root, or the folder `parts` below it (not created)."""
    base = os.environ.get(CACHE_ENV)
    return (Path(base) if base else default_cache_dir()).joinpath(*parts)
