"""`catalog add REPO`: scaffold a manifest for a Hub repo, pinned to the commit its branch points at now."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from catalog import naming
from catalog.errors import InvalidCatalogError, Problem, UsageError
from catalog.formats import LoadFormat
from catalog.loading import ManifestDoc, discover, load_manifest, manifest_of_text
from catalog.schema import CatalogSettings
from catalog.tensor_tables import sidecar_path
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
        raise UsageError(
            f"unknown load format {text!r}", hint=f"known: {', '.join(f.value for f in LoadFormat)}"
        ) from None


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
        raise UsageError(
            "the repo has no safetensors or gguf weights",
            hint="pass --load-format (pickle-based .bin/.pt weights also need `allow_code: <reason>`)",
        )
    if fmt.spec.default_excludes and any(p.endswith(".safetensors") for p in paths):
        return fmt, fmt.spec.default_excludes
    return fmt, ()


def scaffold(
    repo: str,
    ref: str,
    *,
    name: str | None,
    load_format: str | None,
    gpu: str | None,
    settings: CatalogSettings,
    catalog_dir: Path,
    hub: HubOptions,
    from_dir: Path | None = None,
) -> Scaffold:
    """Resolve `ref` to its commit once, list the repo (or the folder `from_dir`, with no Hub request: `ref` must
    then be the full commit the folder holds), and write the manifest text (files come from lock)."""
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
    if from_dir is not None:
        if naming.check_revision(ref) is not None:
            raise UsageError(
                f"--from-dir needs --revision with the full 40-hex commit the folder holds, not {ref!r}",
                hint="a folder has no branches; pin the commit its files were taken from",
            )
        if not from_dir.is_dir():
            raise UsageError(f"--from-dir {from_dir}: no such folder")
    revision = ref if naming.check_revision(ref) is None else commit_of(repo, ref, hub)
    files = _folder_files(from_dir) if from_dir is not None else list_repo_files(repo, revision, hub)
    fmt, exclude = choose_load_format(files, load_format)
    prefix = derive_prefix(settings, repo, revision)
    refuse_collisions(repo, revision, fmt, prefix, _existing(catalog_dir))
    comment = (
        f"# Added with `catalog add {repo} --from-dir` (files pinned from a folder at {revision[:12]}); pins never move."
        if from_dir is not None
        else f"# Added with `catalog add {repo}` ({ref} was {revision[:12]} then); pins never move: a new revision is a new pin."
    )
    text = manifest_head(comment, name, repo, revision, exclude, prefix, fmt, gpu or settings.default_gpu)
    return Scaffold(name, path, text, revision)


def add_model(
    repo: str,
    ref: str,
    *,
    name: str | None,
    load_format: str | None,
    gpu: str | None,
    settings: CatalogSettings,
    catalog_dir: Path,
    hub: HubOptions,
    from_dir: Path | None = None,
) -> Scaffold:
    """`catalog add`: scaffold and lock from the Hub (or the folder `from_dir`) in memory, then write the tensor tables
    and the manifest, each with temp + rename: a step that fails, however it fails, leaves nothing behind."""
    from resolver.lock import atomic_text_write, lock_manifest, replace_files_block, write_tables

    new = scaffold(
        repo,
        ref,
        name=name,
        load_format=load_format,
        gpu=gpu,
        settings=settings,
        catalog_dir=catalog_dir,
        hub=hub,
        from_dir=from_dir,
    )
    problems: list[Problem] = []
    doc = manifest_of_text(new.text, new.path, problems)
    if doc.manifest is None:
        raise InvalidCatalogError(problems)
    locked = lock_manifest(doc.manifest, new.path, from_dir=from_dir, hub=hub, write=False)
    text = replace_files_block(new.text, locked.new)
    write_tables(new.path, locked.tables)  # first: a manifest never names tables that are not there
    try:
        atomic_text_write(new.path, text)
    except BaseException:
        sidecar_path(new.path).unlink(missing_ok=True)
        raise
    return dataclasses.replace(new, text=text)


def _folder_files(folder: Path) -> list[RemoteFile]:
    """A folder's files as the Hub would list them (paths and sizes: all the load-format choice needs)."""
    return [
        RemoteFile(p.relative_to(folder).as_posix(), p.stat().st_size, None, "")
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    ]


def derive_prefix(settings: CatalogSettings, repo: str, revision: str, repo_type: str = "model") -> str:
    """The store prefix of a new pin: the repo id and the full commit (a dataset's under datasets/)."""
    return f"{settings.store}{'datasets/' if repo_type == 'dataset' else ''}{repo}/{revision}/"


def manifest_head(
    comment: str,
    name: str,
    repo: str,
    revision: str,
    exclude: tuple[str, ...],
    prefix: str,
    fmt: LoadFormat,
    gpu: str | None,
    *,
    repo_type: str = "model",
    primary: bool = False,
) -> str:
    """A new manifest's text up to its files block (pure): what `add` and `import` write. `gpu` None: no gpu key
    (a dataset's default)."""
    # Quoted where YAML would read another type: a commit of 40 decimal digits is an integer to YAML.
    lines = [comment, f"name: {_scalar(name)}", "source:", f"  hf_repo: {_scalar(repo)}"]
    if repo_type != "model":
        lines.append(f"  repo_type: {repo_type}")
    lines.append(f"  revision: {_scalar(revision)}")
    if exclude:
        lines.append(f"  exclude: [{', '.join(repr_pattern(p) for p in exclude)}]")
    lines += [f"s3_prefix: {_scalar(prefix)}", f"load_format: {fmt.value}"]
    if primary:
        lines.append("primary: true")
    if gpu is not None:
        lines.append(f"gpu: {{class: {gpu}}}")
    lines.append("tags: []")
    return "\n".join(lines) + "\n"


def _scalar(value: str) -> str:
    """`value` as written, or JSON-quoted where YAML would read it as anything else (digits only: an int)."""
    try:
        same = yaml.safe_load(value) == value
    except yaml.YAMLError:
        same = False
    return value if same else json.dumps(value)


def repr_pattern(pattern: str) -> str:
    return f'"{pattern}"' if pattern.startswith("*") else pattern


def _existing(catalog_dir: Path) -> list[ManifestDoc]:
    """The catalog's parseable manifests (broken ones are `catalog validate`'s to report)."""
    ignored: list[Problem] = []
    docs = [load_manifest(path, ignored, root=catalog_dir) for path in discover(catalog_dir)]
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
            raise UsageError(
                f"{repo}@{revision[:12]} is already pinned as {m.name!r} ({doc.display}) with load_format {fmt.value}",
                hint=f"use {m.name!r}, or pass --revision for another commit",
            )
        if prefix.startswith(m.s3_prefix) or m.s3_prefix.startswith(prefix):
            what = (
                "the same prefix as"
                if prefix == m.s3_prefix
                else ("inside the prefix of" if prefix.startswith(m.s3_prefix) else "a string prefix of the prefix of")
            )
            raise UsageError(
                f"the derived prefix {prefix!r} is {what} {m.name!r} "
                f"({doc.display}:{doc.lines.line_of(('s3_prefix',))}); nothing was written",
                hint="give each model its own prefix: fix that manifest's s3_prefix, or pin another revision",
            )
