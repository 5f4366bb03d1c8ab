"""What `resolve` answers, and the engine arguments and environment that follow from it (pure).

Standard library only: the warm resolve renders the same values from its index without loading
pydantic or any store.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from catalog.formats import EngineTarget, LoadFormat
from resolver import mounts
from resolver.profiles import Profile, merge_args
from resolver.views import Layout

# what vLLM's dotted-argument parser reads as a number with a unit (its human_readable_int): "80g", "1.5k"
_SIZE_LIKE = re.compile(r"[0-9.]+\s*[a-zA-Z]{1,3}")


class NoEngineArguments(ValueError):
    """The answer is not something an engine loads (a dataset)."""


@dataclass(frozen=True)
class Resolution:
    """What CI needs to load one model. `model` is what the engine's --model gets."""

    name: str
    hf_repo: str
    revision: str
    load_format: LoadFormat
    model: str
    path: Path  # the local folder holding every local file (config, tokenizer, weights unless streamed)
    tokenizer: str | None
    files: tuple[str, ...]
    streamed: tuple[str, ...]
    bytes: int
    source: str  # "cache" when nothing was fetched, else where the bytes came from
    layout: Layout
    hub_cache: Path | None  # HF_HUB_CACHE for the hf-cache layout
    loader: Mapping[str, Any]
    stream_env: Mapping[str, str]  # what a streaming engine needs to reach the store (never credentials)
    tensor_parallel: int | None = None  # ranks of a per-rank sharded format
    primary: bool = False  # answers for its repo id when several resolved models pin one repo
    markers: tuple[Path, ...] = ()  # the verified-view markers this answer rests on
    sources: Mapping[str, str] = field(default_factory=dict)  # file -> where its bytes came from (cache, a store)
    weights_uri: str | None = None  # the store prefix the engine streams the weights from (None: they are local)
    filesystem: str | None = None  # the type of the filesystem holding `path` (resolver/mounts.py), None: unknown
    trust_remote_code: bool = False  # the manifest allows code (allow_code) and pins *.py files for the engine to run
    # `--load-format catalog`: the loader config the engine's verified loader gets (the logical name and where the
    # catalog, store and cache are); None: the format's own loader reads the weights (local, or streamed unverified)
    verified_loader: Mapping[str, str] | None = None
    profile: Profile | None = None  # the manifest's engine profile for the runner's GPU class (resolver/profiles.py)

    @property
    def streams(self) -> bool:
        return bool(self.streamed)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "hf_repo": self.hf_repo,
            "revision": self.revision,
            "load_format": self.load_format.value,
            "model": self.model,
            "path": str(self.path),
            "tokenizer": self.tokenizer,
            "files": list(self.files),
            "streamed": list(self.streamed),
            "bytes": self.bytes,
            "source": self.source,
            "sources": dict(self.sources),
            "layout": self.layout.value,
            "hub_cache": str(self.hub_cache) if self.hub_cache else None,
            "weights_uri": self.weights_uri,
            "filesystem": self.filesystem,
            "engine_loader": "catalog" if self.verified_loader is not None else "plain",
            "profile": self.profile.to_json() if self.profile else None,
            "engine_args": engine_args(self) if self.load_format.spec.engine else None,
            "env": engine_env(self),
        }

    def from_cache(self) -> Resolution:
        """The same answer as a repeat call gives it: every byte already verified in the cache."""
        return replace(self, source="cache", sources=dict.fromkeys(self.sources, "cache"))


def engine_target(
    load_format: LoadFormat, paths: Sequence[str], folder: Path, weights_uri: str | None, loader: Mapping[str, Any]
) -> tuple[str, dict[str, Any]]:
    """Pure: what the engine's --model gets, and its loader extra config, per the format's EngineTarget.
    `folder` holds the local files, `weights_uri` is the store prefix when the weights stream from it."""
    spec, config = load_format.spec, dict(loader)
    where = weights_uri.rstrip("/") if weights_uri is not None else str(folder)
    if spec.engine_target is EngineTarget.MODEL:
        return (weights_uri if weights_uri is not None else str(folder)), config
    weights = spec.weight_files(list(paths))
    if len(weights) != 1:
        raise NoEngineArguments(
            f"load_format {load_format.value} hands the engine one weights file, and "
            f"{len(weights)} are pinned ({', '.join(weights[:3]) or 'none'})"
        )
    if spec.engine_target is EngineTarget.FILE:
        return str(folder / weights[0]), config
    assert spec.weights_key is not None
    config[spec.weights_key] = f"{where}/{weights[0]}"
    return str(folder), config


def engine_args(r: Resolution) -> list[str]:
    """The engine's command-line arguments (vLLM spelling). The served name is always the logical name: a
    cache path or storage URI never becomes the model id the engine reports in its API and metric labels.
    NoEngineArguments for what no engine loads (a dataset)."""
    if not r.load_format.spec.engine:
        raise NoEngineArguments(
            f"{r.name} is a {r.load_format.value}: no engine loads it, so it has no engine arguments"
        )
    if r.layout is Layout.HF_CACHE and not r.streams:
        args = ["--model", r.hf_repo, "--revision", r.revision]
    else:
        args = ["--model", r.model]  # under the verified loader: the local folder (config, tokenizer)
    # The verified loader reads the weights itself, by pinned span, each tensor hashed before the model sees it.
    load_format = r.load_format.value if r.verified_loader is None else VERIFIED_LOAD_FORMAT
    args += ["--served-model-name", r.name, "--load-format", load_format]
    if r.tokenizer is not None:
        args += ["--tokenizer", r.tokenizer]
    if r.trust_remote_code:  # never for a model whose manifest does not say why (allow_code)
        args.append("--trust-remote-code")
    if r.tensor_parallel:
        args += ["--tensor-parallel-size", str(r.tensor_parallel)]
    args += loader_config_args(r.loader if r.verified_loader is None else r.verified_loader)
    if prefetch(r):
        args += ["--safetensors-load-strategy", "prefetch"]
    return merge_args(args, r.profile.args) if r.profile else args


VERIFIED_LOAD_FORMAT = "catalog"  # the load format the package's vLLM plugin registers (catalog_app/vllm_plugin.py)
LOADER_CONFIG = "--model-loader-extra-config"


def loader_config_args(config: Mapping[str, Any]) -> list[str]:
    """A loader config as one `--model-loader-extra-config.KEY=VALUE` per key (vLLM's dotted form, nested keys
    joined by dots): no JSON braces or quotes, so the arguments survive both `eval` and a plain `$(...)` splice
    (word splitting keeps no shell quotes). A value vLLM would read as something else (a string that parses as JSON
    or a size like "1k") is written as a JSON string."""
    args: list[str] = []
    for key, value in sorted(config.items()):
        if isinstance(value, Mapping):
            args += [arg.replace(LOADER_CONFIG, f"{LOADER_CONFIG}.{key}", 1) for arg in loader_config_args(value)]
        else:
            args.append(f"{LOADER_CONFIG}.{key}={_dotted_value(value)}")
    return args


def _dotted_value(value: object) -> str:
    if isinstance(value, str):
        try:
            json.loads(value)
        except ValueError:
            if not _SIZE_LIKE.fullmatch(value) and value.strip() == value and value:
                return value
        return json.dumps(value)
    return json.dumps(value, separators=(",", ":"))


def prefetch(r: Resolution) -> bool:
    """Local safetensors on a filesystem the engine would read slowly and not prefetch from by itself. Not with
    vLLM's multi-thread loader, which refuses any strategy but the default."""
    return (
        not r.streams
        and r.load_format.spec.load_strategy
        and mounts.needs_prefetch(r.filesystem)
        and not r.loader.get("enable_multithread_load")
    )


def engine_env(r: Resolution) -> dict[str, str]:
    """Environment the engine needs: offline HF cache for that layout, endpoint settings when streaming."""
    env: dict[str, str] = {}
    if r.layout is Layout.HF_CACHE and r.hub_cache is not None:
        env |= {"HF_HUB_CACHE": str(r.hub_cache), "HF_HUB_OFFLINE": "1"}
    if r.streams:
        env |= dict(r.stream_env)
    if r.profile:
        env |= dict(r.profile.env)
    return env
