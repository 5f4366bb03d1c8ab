"""`catalog add REPO`: scaffold a manifest for a Hub repo, pinned to the commit its branch points at now."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from catalog import naming
from catalog.errors import Problem, UsageError
from catalog.formats import LoadFormat
from catalog.loading import ManifestDoc, discover, load_manifest
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
    refuse_collisions(repo, revision, fmt, prefix, _existing(catalog_dir))
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


def _existing(catalog_dir: Path) -> list[ManifestDoc]:
    """The catalog's parseable manifests (broken ones are `catalog validate`'s to report)."""
    ignored: list[Problem] = []
    docs = [load_manifest(path, ignored) for path in discover(catalog_dir)]
    return [d for d in docs if d.manifest is not None]


def refuse_collisions(repo: str, revision: str, fmt: LoadFormat, prefix: str, docs: list[ManifestDoc]) -> None:
    """Refuse, before anything is written, a pin the catalog already has or a prefix another model uses (pure).

    The derived prefix names the full revision, so two tags at two commits get two prefixes; the same
    commit again (another tag, another --name) is the existing manifest's pin and prefix.
    """
    for doc in docs:
        m = doc.manifest
        assert m is not None
        if m.source.hf_repo.casefold() == repo.casefold() and m.source.revision == revision and m.load_format == fmt:
            raise UsageError(f"{repo}@{revision[:12]} is already pinned as {m.name!r} ({doc.display}) with load_format {fmt.value}",
                             hint=f"use {m.name!r}, or pass --revision for another commit")
        if prefix.startswith(m.s3_prefix) or m.s3_prefix.startswith(prefix):
            what = "the same prefix as" if prefix == m.s3_prefix else (
                "inside the prefix of" if prefix.startswith(m.s3_prefix) else "a string prefix of the prefix of")
            raise UsageError(f"the derived prefix {prefix!r} is {what} {m.name!r} "
                             f"({doc.display}:{doc.lines.line_of(('s3_prefix',))}); nothing was written",
                             hint="give each model its own prefix: fix that manifest's s3_prefix, or pin another revision")
