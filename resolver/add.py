"""`catalog add REPO`: scaffold a manifest for a Hub repo, pinned to the commit its branch points at now."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from catalog import naming
from catalog.errors import UsageError
from catalog.formats import LoadFormat
from catalog.schema import CatalogSettings
from resolver.hub import HubOptions, RemoteFile, commit_of, list_repo_files


@dataclass(frozen=True)
class Scaffold:
    name: str
    path: Path
    text: str
    revision: str


def derive_name(repo: str) -> str:
    name = re.sub(r"[^a-z0-9._-]+", "-", repo.split("/", 1)[-1].lower()).strip("-._")
    return name or "model"


def parse_load_format(text: str) -> LoadFormat:
    try:
        return LoadFormat(text)
    except ValueError:
        raise UsageError(f"unknown load format {text!r}", hint=f"known: {', '.join(f.value for f in LoadFormat)}") from None


def choose_load_format(files: list[RemoteFile], requested: str | None) -> tuple[LoadFormat, tuple[str, ...]]:
    """The load format and the exclude patterns a new manifest starts with (pure)."""
    paths = [f.path for f in files]
    if requested is not None:
        fmt = parse_load_format(requested)
    elif any(p.endswith(".safetensors") for p in paths):
        fmt = LoadFormat.SAFETENSORS
    elif any(p.endswith(".gguf") for p in paths):
        fmt = LoadFormat.GGUF
    else:
        raise UsageError("the repo has no safetensors or gguf weights",
                         hint="pass --load-format (pickle-based .bin/.pt weights also need `allow_pickle: true`)")
    if fmt.spec.default_excludes and any(p.endswith(".safetensors") for p in paths):
        return fmt, fmt.spec.default_excludes
    return fmt, ()


def scaffold(repo: str, ref: str, *, name: str | None, load_format: str | None, gpu: str | None,
             settings: CatalogSettings, catalog_dir: Path, hub: HubOptions) -> Scaffold:
    """Resolve `ref` to its commit once, list the repo, and write the manifest text (files come from lock)."""
    if (message := naming.check_hf_repo(repo)) is not None:
        raise UsageError(message)
    name = name or derive_name(repo)
    if (message := naming.check_name(name)) is not None:
        raise UsageError(message, hint="pass --name")
    if gpu is not None and gpu not in settings.gpu_classes:
        raise UsageError(f"unknown GPU class {gpu!r}", hint=f"known: {', '.join(sorted(settings.gpu_classes))}")
    if load_format is not None:
        parse_load_format(load_format)  # a typo fails before any Hub call
    path = catalog_dir / f"{name}.yaml"
    if path.exists():
        raise UsageError(f"{path} already exists", hint="pass --name, or `catalog lock` the existing manifest")
    revision = ref if naming.check_revision(ref) is None else commit_of(repo, ref, hub)
    files = list_repo_files(repo, revision, hub)
    fmt, exclude = choose_load_format(files, load_format)
    prefix = f"{settings.store}{repo}/{revision}/"
    lines = [
        f"# Added with `catalog add {repo}` ({ref} was {revision[:12]} then); pins never move: a new revision is a new pin.",
        f"name: {name}",
        "source:",
        f"  hf_repo: {repo}",
        f"  revision: {revision}",
    ]
    if exclude:
        lines.append(f"  exclude: [{', '.join(repr_pattern(p) for p in exclude)}]")
    lines += [f"s3_prefix: {prefix}", f"load_format: {fmt.value}", f"gpu: {{class: {gpu or settings.default_gpu}}}", "tags: []"]
    return Scaffold(name, path, "\n".join(lines) + "\n", revision)


def repr_pattern(pattern: str) -> str:
    return f'"{pattern}"' if pattern.startswith("*") else pattern
