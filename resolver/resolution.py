"""What `resolve` answers, and the engine arguments and environment that follow from it (pure).

Standard library only: the warm resolve renders the same values from its index without loading
pydantic or any store.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from catalog.formats import LoadFormat
from resolver.views import Layout


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

    @property
    def streams(self) -> bool:
        return bool(self.streamed)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "hf_repo": self.hf_repo, "revision": self.revision,
            "load_format": self.load_format.value, "model": self.model, "path": str(self.path),
            "tokenizer": self.tokenizer, "files": list(self.files), "streamed": list(self.streamed),
            "bytes": self.bytes, "source": self.source, "sources": dict(self.sources), "layout": self.layout.value,
            "hub_cache": str(self.hub_cache) if self.hub_cache else None,
            "engine_args": engine_args(self), "env": engine_env(self),
        }

    def record(self) -> dict[str, Any]:
        """Everything needed to rebuild this value (the warm index stores it)."""
        return {**self.to_json(), "loader": dict(self.loader), "stream_env": dict(self.stream_env),
                "tensor_parallel": self.tensor_parallel, "primary": self.primary, "markers": [str(m) for m in self.markers]}

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> Resolution:
        return cls(
            name=str(data["name"]), hf_repo=str(data["hf_repo"]), revision=str(data["revision"]),
            load_format=LoadFormat(data["load_format"]), model=str(data["model"]), path=Path(data["path"]),
            tokenizer=data["tokenizer"], files=tuple(data["files"]), streamed=tuple(data["streamed"]),
            bytes=int(data["bytes"]), source=str(data["source"]), layout=Layout(data["layout"]),
            hub_cache=Path(data["hub_cache"]) if data.get("hub_cache") else None, loader=dict(data["loader"]),
            stream_env=dict(data["stream_env"]), tensor_parallel=data.get("tensor_parallel"), primary=bool(data.get("primary")),
            markers=tuple(Path(m) for m in data.get("markers", ())), sources=dict(data.get("sources", {})),
        )

    def from_cache(self) -> Resolution:
        """The same answer as a repeat call gives it: every byte already verified in the cache."""
        return replace(self, source="cache", sources={f: "cache" for f in self.sources})


def engine_args(r: Resolution) -> list[str]:
    """The engine's command-line arguments (vLLM spelling). The served name is always the logical name: a
    cache path or storage URI never becomes the model id the engine reports in its API and metric labels."""
    if r.layout is Layout.HF_CACHE and not r.streams:
        args = ["--model", r.hf_repo, "--revision", r.revision]
    else:
        args = ["--model", r.model]
    args += ["--served-model-name", r.name, "--load-format", r.load_format.spec.engine_load_format or r.load_format.value]
    if r.tokenizer is not None:
        args += ["--tokenizer", r.tokenizer]
    if r.tensor_parallel:
        args += ["--tensor-parallel-size", str(r.tensor_parallel)]
    if r.loader:
        args += ["--model-loader-extra-config", json.dumps(dict(r.loader), sort_keys=True, separators=(",", ":"))]
    return args


def engine_env(r: Resolution) -> dict[str, str]:
    """Environment the engine needs: offline HF cache for that layout, endpoint settings when streaming."""
    env: dict[str, str] = {}
    if r.layout is Layout.HF_CACHE and r.hub_cache is not None:
        env |= {"HF_HUB_CACHE": str(r.hub_cache), "HF_HUB_OFFLINE": "1"}
    if r.streams:
        env |= dict(r.stream_env)
    return env
