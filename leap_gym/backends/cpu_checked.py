"""Locating memory errors of CPU-runtime kernels with AddressSanitizer (filled in below)."""

from __future__ import annotations


def describe_memory_error(stderr_text: str, cuda_source: str) -> str:
    return ""


def locate_memory_error(*args, **kwargs) -> str:
    return ""
