"""The optional C fast paths, loaded in one place.

Each of parsers/capture, parsers/tcp, parsers/h2, parsers/llm and parsers/tls has a ``_speedups``
extension (built by ``pip install -e .``) that computes what its Python code computes, faster. One switch
turns them all off: ``TAILTAP_PURE_PYTHON=1`` (set before the first import); a missing
extension (no compiler at install time) is the same as the switch. The test suites run
both ways and compare.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

PURE_PYTHON = bool(os.environ.get("TAILTAP_PURE_PYTHON"))


def speedups(package: str) -> ModuleType | None:
    """``package._speedups``, or None in pure-Python mode or when it was not built."""
    if PURE_PYTHON:
        return None
    try:
        return importlib.import_module(f"{package}._speedups")
    except ImportError:
        return None
