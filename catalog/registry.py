"""A bridge for engine test registries: which catalog model to use for an architecture or a Hub repo.

An engine's model registry maps architectures (LlamaForCausalLM) to example repos. A manifest declares the
architectures it can stand in for with `arch:` tags, so the question needs no config.json and no network:

    tags: [decoder, tiny, arch:LlamaForCausalLM]

    catalog.example_model("LlamaForCausalLM")                # -> the tiny-llama manifest
    catalog.model_for_repo("sentence-transformers/all-MiniLM-L6-v2")
"""

from __future__ import annotations

import difflib

from catalog.entry import load
from catalog.errors import CatalogError
from catalog.formats import LoadFormat
from catalog.lookup import Catalog
from catalog.schema import ModelManifest

ARCH_TAG = "arch:"


class NoCatalogModelError(CatalogError, LookupError):
    """No manifest (or more than one) answers a registry question; the hint says which manifest to add."""


def architectures(model: ModelManifest) -> tuple[str, ...]:
    """The architectures a manifest declares through its `arch:` tags."""
    return tuple(tag[len(ARCH_TAG) :] for tag in model.tags if tag.startswith(ARCH_TAG))


def example_model(architecture: str, cat: Catalog | None = None) -> ModelManifest:
    """The first model by name whose tags declare `arch:<architecture>` (exact, case-sensitive like the
    engine's registry keys)."""
    cat = cat if cat is not None else load()
    matches = [m for m in cat.filter() if architecture in architectures(m)]
    if matches:
        return matches[0]
    declared = sorted({a for m in cat for a in architectures(m)})
    close = difflib.get_close_matches(architecture, declared, n=1, cutoff=0.8)
    raise NoCatalogModelError(
        f"no catalog model for architecture {architecture}" + (f" (did you mean {close[0]}?)" if close else ""),
        hint=f"add a manifest with tags: [{ARCH_TAG}{architecture}] (catalog add ORG/REPO)",
    )


def model_for_repo(
    repo_id: str, cat: Catalog | None = None, *, load_format: LoadFormat | str | None = None
) -> ModelManifest:
    """The model answering for the Hub repo `repo_id` (case-insensitive): the one pinning it, else the one marked
    `primary: true` (as in redirect files and hf-cache snapshots); `load_format` picks another among several
    (tiny-llama's repo is pinned as safetensors, per-rank shards and tensorizer)."""
    cat = cat if cat is not None else load()
    fmt = LoadFormat(load_format) if load_format is not None else None
    pinned = cat.by_repo(repo_id)
    matches = [m for m in pinned if fmt is None or m.load_format is fmt]
    if len(matches) == 1:
        return matches[0]
    if fmt is None and (owner := cat.repo_owner(repo_id)) is not None:
        return owner
    if matches:
        formats = ", ".join(f"{m.name} ({m.load_format.value})" for m in matches)
        raise NoCatalogModelError(
            f"{repo_id} is pinned by {len(matches)} catalog models: {formats}",
            hint="pass load_format=... to choose one, or ask by logical name with catalog.load().get(NAME)",
        )
    if pinned:  # pinned, but not in the asked-for format
        assert fmt is not None
        formats = ", ".join(f"{m.name} ({m.load_format.value})" for m in pinned)
        raise NoCatalogModelError(
            f"no catalog model pins {repo_id} as {fmt.value}; it is pinned as {formats}",
            hint=f"add a manifest for {repo_id} with load_format: {fmt.value}",
        )
    repos = sorted({m.source.hf_repo for m in cat})
    close = difflib.get_close_matches(repo_id, repos, n=1, cutoff=0.8)
    raise NoCatalogModelError(
        f"no catalog model pins {repo_id}" + (f" (did you mean {close[0]}?)" if close else ""),
        hint=f"add a manifest for it (catalog add {repo_id})",
    )


__all__ = ["ARCH_TAG", "NoCatalogModelError", "architectures", "example_model", "model_for_repo"]
