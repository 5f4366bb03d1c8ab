"""Which engine integrations this environment has: whether `--load-format catalog` can be handed out by default.

The package registers its vLLM loader (catalog_app/vllm_plugin.py) through an entry point, so wherever vLLM is
importable beside it, the loader is installed. Asked once per process, by a path lookup (vLLM is not imported);
the warm path re-checks the same path with one stat, so an engine installed or removed later is never answered
from a stale entry.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sysconfig


@functools.cache
def vllm_probe() -> tuple[str, bool]:
    """(a path whose existence says whether vLLM is installed here, whether it is)."""
    spec = importlib.util.find_spec("vllm")
    if spec is not None and spec.origin:
        return spec.origin, True
    return os.path.join(sysconfig.get_paths()["purelib"], "vllm", "__init__.py"), False


def vllm_installed() -> bool:
    return vllm_probe()[1]
