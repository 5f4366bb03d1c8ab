"""Output formats of `catalog resolve`, a registry: format name -> renderer of Resolutions (pure).

The full CLI and the warm path render through the same functions, so a warm answer is exactly what
the full CLI would print now. Standard library only. A new output format is one function and one
`OUTPUTS` entry here.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable, Sequence

from resolver.resolution import Resolution, engine_args, engine_env

Renderer = Callable[[Sequence[Resolution]], str]


class OutputError(ValueError):
    """The format cannot express this answer (e.g. two models in a one-model format)."""


def _path(results: Sequence[Resolution]) -> str:
    return "\n".join(r.model for r in results)


def _json(results: Sequence[Resolution]) -> str:
    data = [r.to_json() for r in results]
    return json.dumps(data[0] if len(data) == 1 else data, indent=2)


def _vllm_args(results: Sequence[Resolution]) -> str:
    if len(results) != 1:
        raise OutputError("--format vllm-args prints one model; use --format json for several")
    return shlex.join(engine_args(results[0]))


def _env(results: Sequence[Resolution]) -> str:
    merged: dict[str, str] = {}
    for r in results:
        merged |= engine_env(r)
    if len(results) == 1:
        merged |= {"CATALOG_MODEL": results[0].model, "CATALOG_MODEL_PATH": str(results[0].path),
                   "CATALOG_SERVED_MODEL_NAME": results[0].name}
    return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in sorted(merged.items()))


def _redirect(results: Sequence[Resolution]) -> str:
    """The engine's model-redirect file (VLLM_MODEL_REDIRECT_PATH): repo id -> local folder or stream URI.

    One entry per repo id. When several resolved models pin one repo, the one whose manifest says
    `primary: true` answers for it; without one the ambiguity is refused, never decided by whichever came last.
    """
    by_repo: dict[str, list[Resolution]] = {}
    for r in results:
        by_repo.setdefault(r.hf_repo, []).append(r)
    mapping: dict[str, str] = {}
    for repo, group in by_repo.items():
        chosen = group if len(group) == 1 else [r for r in group if r.primary]
        if len(chosen) != 1:
            names = ", ".join(r.name for r in group)
            raise OutputError(f"--format redirect: {names} all pin {repo} and the redirect file maps a repo id to one "
                              "model; mark one of them `primary: true` in its manifest, or resolve them separately")
        mapping[repo] = chosen[0].model
    return json.dumps(mapping, indent=2, sort_keys=True)


OUTPUTS: dict[str, Renderer] = {
    "path": _path,
    "json": _json,
    "env": _env,
    "vllm-args": _vllm_args,
    "redirect": _redirect,
}


def render(results: Sequence[Resolution], fmt: str) -> str:
    return OUTPUTS[fmt](results) + "\n"


def write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()
