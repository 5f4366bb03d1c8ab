"""Read a manifests directory into validated values, collecting every problem instead of stopping.

I/O is limited to reading files; turning text into problems is done by `yamlsource` (syntax, lines),
pydantic (structure, types) and `rules` (the domain), all pure.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from catalog import bounded, rules, tensor_tables, yamlsource
from catalog.errors import Problem
from catalog.schema import CatalogSettings, ModelManifest
from catalog.tensor_tables import TensorTables
from catalog.yamlsource import LineMap, Loc, format_loc

M = TypeVar("M", bound=BaseModel)

SETTINGS_FILE = "catalog.yaml"
MANIFEST_SUFFIXES = (".yaml", ".yml")
MAX_TABLES = 256 * bounded.MiB  # `<name>.tensors.json` of a checkpoint of 100,000 tensors is about 10 MB


@dataclass(frozen=True)
class TablesDoc:
    """A manifest's tensor tables (`<name>.tensors.json`): None when missing or unreadable."""

    display: str
    tables: TensorTables | None
    exists: bool


@dataclass(frozen=True)
class ManifestDoc:
    """One manifest file: where it is, what it parsed to (None when broken), and its key lines."""

    path: Path
    display: str
    manifest: ModelManifest | None
    lines: LineMap
    tables: TablesDoc | None = None  # read by `validate` only: nothing else needs the tensor names


@dataclass
class LoadResult:
    root: Path
    settings: CatalogSettings | None
    docs: list[ManifestDoc] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def display_path(path: Path) -> str:
    """How a file is named in messages: relative to the working directory when it is below it."""
    try:
        return os.path.relpath(path)
    except (ValueError, OSError):  # another drive on Windows; a working directory that was deleted
        return str(path)


def discover(root: Path, problems: list[Problem] | None = None) -> list[Path]:
    """Every manifest below `root` (subfolders allowed), sorted; hidden folders and catalog.yaml skipped.

    A symlinked subfolder is followed when it resolves inside `root` (each real folder is read once, so a
    link to a folder already seen, or a loop, adds nothing and cannot hang). One that leads outside `root`
    is never silently skipped: it is a problem (its manifests are not reviewed with the catalog), added to
    `problems` when given. Either way no manifest goes unseen, so sync never takes its objects for orphans.
    """
    found: list[Path] = []
    real_root = root.resolve()
    seen: set[Path] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        here = Path(dirpath)
        real = here.resolve()
        if real in seen:  # a second way into a folder already read (a link to it, or a loop)
            dirnames[:] = []
            continue
        seen.add(real)
        kept = []
        for name in sorted(d for d in dirnames if not d.startswith(".")):
            folder = here / name
            target = folder.resolve()
            if folder.is_symlink() and not target.is_relative_to(real_root):
                if problems is not None:
                    problems.append(
                        Problem(
                            display_path(folder),
                            0,
                            "",
                            f"a symlinked folder leading outside the catalog "
                            f"(to {target}); its manifests would not be reviewed with it: move them into "
                            f"{display_path(root)} or link each file",
                            "manifest-folder",
                        )
                    )
                continue
            if target not in seen:
                kept.append(name)
        dirnames[:] = kept
        for filename in sorted(filenames):
            if filename.endswith(MANIFEST_SUFFIXES) and not (real == real_root and filename == SETTINGS_FILE):
                found.append(here / filename)
    return found


def load_dir(root: Path, paths: Sequence[Path] | None = None, *, tables: bool = False) -> LoadResult:
    """Load catalog.yaml and the manifests (all of them, or just `paths`), then run every rule; with `tables`
    also each manifest's tensor tables and the checkpoint rules over them (`catalog validate`).

    Cross-manifest rules (unique names, prefix overlap, pin conflicts) always see the whole catalog and
    report on every file involved, so checking one changed file in pre-commit still catches a collision
    with an untouched one, whichever way the two files sort.
    """
    root = root.resolve()
    problems: list[Problem] = []
    settings = _load_settings(root / SETTINGS_FILE, problems, root)
    selected = {p.resolve() for p in paths} if paths else None
    docs = [load_manifest(path, problems, tables=tables, root=root) for path in discover(root, problems)]
    for extra in sorted(selected or ()):
        if extra not in {d.path for d in docs}:
            docs.append(load_manifest(extra, problems, tables=tables))
    problems.extend(rules.check_catalog(docs, settings))
    if selected is not None:
        shown = {display_path(p) for p in selected} | {display_path(root / SETTINGS_FILE)}
        shown |= {display_path(tensor_tables.sidecar_path(p)) for p in selected}
        problems = [p for p in problems if p.path in shown or p.rule == "manifest-folder"]  # a folder is no one file's
    return LoadResult(root, settings, docs, sorted(problems, key=_problem_order))


def load_named(root: Path, names: Sequence[str]) -> LoadResult | None:
    """Load only the manifests of `names` (and the tokenizers they name), for a fast lookup.

    Manifests are named after their file (a lint rule), so no other file needs reading. The
    per-manifest rules still run; the cross-catalog ones are `catalog validate`'s job in the PR.
    Returns None when a name has no file, so the caller can fall back to a full load (and suggest).
    """
    root = root.resolve()
    problems: list[Problem] = []
    settings = _load_settings(root / SETTINGS_FILE, problems, root)
    by_stem: dict[str, Path] = {}
    for path in discover(root, problems):
        by_stem.setdefault(path.stem, path)
    docs: dict[str, ManifestDoc] = {}
    pending = list(names)
    while pending:
        name = pending.pop()
        if name in docs:
            continue
        if name not in by_stem:
            return None
        doc = docs[name] = load_manifest(by_stem[name], problems, root=root)
        if doc.manifest is not None and doc.manifest.tokenizer in by_stem:
            pending.append(doc.manifest.tokenizer)
    problems.extend(rules.check_catalog(list(docs.values()), settings, complete=False))
    return LoadResult(root, settings, list(docs.values()), sorted(problems, key=_problem_order))


def _problem_order(problem: Problem) -> tuple[str, int, str]:
    return (problem.path, problem.line, problem.field)


def load_manifest(
    path: Path, problems: list[Problem], *, tables: bool = False, root: Path | None = None
) -> ManifestDoc:
    """One manifest (and with `tables` its tensor tables). Read only when it is a regular file inside `root` (the
    catalog folder; by default the manifest's own folder) once its symlinks are resolved (`catalog.bounded`)."""
    display = display_path(path)
    located = _parse_file(path, display, problems, root or path.parent)
    if located is None:
        return ManifestDoc(path, display, None, LineMap())
    manifest = _validate(ModelManifest, located, display, problems)
    sidecar = load_tables(path, problems, root) if tables and manifest is not None else None
    return ManifestDoc(path, display, manifest, located.lines, sidecar)


def load_tables(manifest_path: Path, problems: list[Problem], root: Path | None = None) -> TablesDoc:
    """The tensor tables beside a manifest; a file that cannot be read is a `tensor-table` problem."""
    path = tensor_tables.sidecar_path(manifest_path)
    display = display_path(path)
    try:
        text = bounded.read_text(path, MAX_TABLES, root=root or manifest_path.parent)
    except FileNotFoundError:
        return TablesDoc(display, None, False)
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(
            Problem(display, 0, "", f"cannot read: {getattr(exc, 'strerror', None) or exc}", "tensor-table")
        )
        return TablesDoc(display, None, True)
    try:
        return TablesDoc(display, tensor_tables.parse(text), True)
    except tensor_tables.TableError as exc:
        problems.append(
            Problem(
                display,
                exc.line,
                "",
                f"{exc.message}; run `catalog lock {manifest_path.stem}` to write it again",
                "tensor-table",
            )
        )
        return TablesDoc(display, None, True)


def _load_settings(path: Path, problems: list[Problem], root: Path) -> CatalogSettings | None:
    display = display_path(path)
    if not path.exists():
        problems.append(
            Problem(
                display, 0, "", "missing: every catalog needs a catalog.yaml with `store` and `gpu_classes`", "settings"
            )
        )
        return None
    located = _parse_file(path, display, problems, root)
    if located is None:
        return None
    settings = _validate(CatalogSettings, located, display, problems)
    if settings is not None:
        problems.extend(rules.check_settings(settings, display, located.lines))
    return settings


def _parse_file(path: Path, display: str, problems: list[Problem], root: Path) -> yamlsource.Located | None:
    try:
        raw = bounded.read_file(path, yamlsource.MAX_BYTES, root=root)
    except OSError as exc:
        problems.append(Problem(display, 0, "", f"cannot read: {exc.strerror or exc}", "yaml"))
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        problems.append(Problem(display, line, "", f"not UTF-8 text ({exc.reason} at byte {exc.start})", "yaml"))
        return None
    return _parse_text(text, display, problems)


def manifest_of_text(text: str, path: Path, problems: list[Problem]) -> ManifestDoc:
    """A manifest not yet written (what `catalog add` is about to write at `path`), checked as a file would be."""
    display = display_path(path)
    located = _parse_text(text, display, problems)
    if located is None:
        return ManifestDoc(path, display, None, LineMap())
    return ManifestDoc(path, display, _validate(ModelManifest, located, display, problems), located.lines)


def _parse_text(text: str, display: str, problems: list[Problem]) -> yamlsource.Located | None:
    try:
        located = yamlsource.parse(text)
    except yamlsource.YamlProblem as exc:
        problems.append(Problem(display, exc.line, format_loc(exc.loc), exc.message, "yaml"))
        return None
    if not isinstance(located.data, dict):
        kind = "empty" if located.data is None else f"a {type(located.data).__name__}"
        problems.append(Problem(display, 1, "", f"a manifest is a mapping of keys, this document is {kind}", "yaml"))
        return None
    return located


def _validate(model: type[M], located: yamlsource.Located, display: str, problems: list[Problem]) -> M | None:
    try:
        return model.model_validate(located.data)
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            loc = tuple(error["loc"])
            problems.append(
                Problem(display, located.lines.line_of(loc), format_loc(loc), _explain(model, error), "schema")
            )
        return None


def _explain(model: type[BaseModel], error: Any) -> str:
    kind, loc = error["type"], tuple(error["loc"])
    if kind == "missing":
        return "required key is missing"
    if kind == "extra_forbidden":
        allowed = _allowed_keys(model, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        suffix = f"; did you mean {close[0]!r}?" if close else f"; allowed: {', '.join(allowed)}"
        return f"unknown key{suffix}"
    if kind == "string_type" and isinstance(error.get("input"), (int, float, bool)):
        kind = type(error["input"]).__name__
        return f"expected text but YAML read {error['input']!r} as {'an' if kind[0] in 'aeiou' else 'a'} {kind}; quote the value"
    return str(error["msg"])


def _allowed_keys(model: type[BaseModel], loc: Loc) -> list[str]:
    """The keys allowed at `loc`, walking nested models (list indices skipped)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or not (isinstance(current, type) and issubclass(current, BaseModel)):
            continue
        info = next((f for n, f in current.model_fields.items() if (f.alias or n) == part), None)
        if info is None:
            return []
        annotation = info.annotation
        args = getattr(annotation, "__args__", ())
        current = next((a for a in (annotation, *args) if isinstance(a, type) and issubclass(a, BaseModel)), None)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or n for n, f in current.model_fields.items()]
    return []
