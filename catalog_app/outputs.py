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

from catalog.formats import LoadFormat
from resolver.resolution import NoEngineArguments, Resolution, engine_args, engine_env

# A renderer gets the answers and whether several models were asked for (several names, or --all), which decides
# the shape where one model and several differ (json: an object, or an array even when --all found one model).
Renderer = Callable[[Sequence[Resolution], bool], str]
ONE_MODEL_FORMATS = ("vllm-args",)  # refused for several named models: one engine takes one model


class OutputError(ValueError):
    """The format cannot express this answer (e.g. two models in a one-model format)."""


def _path(results: Sequence[Resolution], several: bool) -> str:
    """One line per model, in the order asked: what the engine's --model gets (the verified folder, or the stream URI)."""
    return "\n".join(r.model for r in results)


def _json(results: Sequence[Resolution], several: bool) -> str:
    """Everything resolved: name, revision, model, path, tokenizer, files, streamed, sources, engine args and env. An
    object for one named model; an array, in the order asked, for several names or --all (however many it found)."""
    data = [r.to_json() for r in results]
    return json.dumps(data if several else data[0], indent=2)


def _vllm_args(results: Sequence[Resolution], several: bool) -> str:
    """One model's engine arguments (vLLM spelling), shell-quoted: --model, --served-model-name NAME, --load-format, ..."""
    if len(results) != 1:
        raise OutputError("--format vllm-args prints one model; use --format path or json for several")
    try:
        return shlex.join(engine_args(results[0]))
    except NoEngineArguments as exc:
        raise OutputError(f"--format vllm-args: {exc}; use --format path or json") from None


def _env(results: Sequence[Resolution], several: bool) -> str:
    """`export` lines: HF_HUB_CACHE and HF_HUB_OFFLINE for the hf-cache layout, the stream endpoint, the engine profile's
    environment for this runner's GPU class, CATALOG_MODEL*."""
    merged: dict[str, str] = {}
    set_by: dict[str, str] = {}
    for r in results:
        for key, value in (r.profile.env if r.profile else {}).items():
            if set_by.setdefault(key, r.name) != r.name and merged.get(key) != value:
                raise OutputError(
                    f"--format env: the profiles of {set_by[key]} and {r.name} set {key} differently, and one "
                    "environment runs one engine; resolve them one at a time"
                )
        merged |= engine_env(r)
    if len(results) == 1:
        merged |= {
            "CATALOG_MODEL": results[0].model,
            "CATALOG_MODEL_PATH": str(results[0].path),
            "CATALOG_SERVED_MODEL_NAME": results[0].name,
        }
    return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in sorted(merged.items()))


def _redirect(results: Sequence[Resolution], several: bool) -> str:
    """The engine's model-redirect file (VLLM_MODEL_REDIRECT_PATH): repo id -> local folder or stream URI, for the
    models an engine loads (datasets are left out).

    One entry per repo id. When several resolved models pin one repo, the one whose manifest says
    `primary: true` answers for it; without one the ambiguity is refused, never decided by whichever came last.
    """
    by_repo: dict[str, list[Resolution]] = {}
    for r in results:
        if r.load_format.spec.engine:  # a dataset's repo id is no model id (and may equal one)
            by_repo.setdefault(r.hf_repo, []).append(r)
    mapping: dict[str, str] = {}
    for repo, group in by_repo.items():
        chosen = group if len(group) == 1 else [r for r in group if r.primary]
        if len(chosen) != 1:
            names = ", ".join(r.name for r in group)
            raise OutputError(
                f"--format redirect: {names} all pin {repo} and the redirect file maps a repo id to one "
                "model; mark one of them `primary: true` in its manifest, or resolve them separately"
            )
        mapping[repo] = _redirect_target(chosen[0])
    return json.dumps(mapping, indent=2, sort_keys=True)


def _redirect_target(r: Resolution) -> str:
    """A redirect carries only where the model is: the engine must find the rest by itself (it loads a local folder
    or a .gguf file, and streams an s3:// prefix with runai_streamer). A model that needs a load format, a loader
    config naming its weights, or a tensor-parallel size of its own cannot be redirected to."""
    spec = r.load_format.spec
    needs = (
        "--tensor-parallel-size"
        if r.tensor_parallel
        else "--model-loader-extra-config"
        if spec.weights_key
        else "--load-format"
        if r.streams and r.load_format is not LoadFormat.RUNAI_STREAMER
        else None
    )
    if needs is not None:
        raise OutputError(
            f"--format redirect: {r.name} ({r.load_format.value}) needs {needs}, which a redirect file "
            f"cannot carry; start the engine with `catalog resolve {r.name} --format vllm-args` instead"
        )
    # A streamed model's prefix URI, for the engine's own streamer (a redirect cannot carry `--load-format catalog`)
    return r.weights_uri if r.streams and r.weights_uri is not None else r.model


OUTPUTS: dict[str, Renderer] = {
    "path": _path,
    "json": _json,
    "env": _env,
    "vllm-args": _vllm_args,
    "redirect": _redirect,
}


# Bills of materials (catalog_app/bom.py): the resolve command renders them from facts beyond the Resolutions (every
# file's pin, the signature's verdict); they are never rendered into the warm index (their library's import would cost
# every cold resolve), so a warm call asking for one goes to the full CLI. Name -> the docs' row.
BOM_OUTPUTS: dict[str, str] = {
    "cyclonedx": "A CycloneDX 1.6 bill of materials (JSON): one machine-learning-model (data, for a dataset) component "
    "per model with its purl pkg:huggingface/org/name@commit, every file it resolved with its SHA-256, the "
    "signature's verdict; byte-identical for identical inputs (docs/bom.md).",
    "intoto": "An in-toto v1 statement: every resolved file as a subject (sha256), the resolve request and each "
    "model's repo, commit and signature verdict as its predicate (docs/bom.md).",
}
FORMATS = (*OUTPUTS, *BOM_OUTPUTS)


def render(results: Sequence[Resolution], fmt: str, *, several: bool | None = None) -> str:
    """`several`: whether several models were asked for (default: more than one answer; --all says True)."""
    return OUTPUTS[fmt](results, len(results) > 1 if several is None else several) + "\n"


def write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()
