"""`catalog validate --base REF`: pins are immutable, so compare against the manifests at a git ref.

`pin_changes` is pure; `manifests_at` is the thin git I/O around it (one `git cat-file --batch`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import ValidationError

from catalog import yamlsource
from catalog.errors import Problem, UsageError
from catalog.loading import ManifestDoc
from catalog.schema import ModelManifest


def pin_changes(base: Mapping[str, ModelManifest], docs: Sequence[ManifestDoc]) -> list[Problem]:
    """A manifest whose name and revision are unchanged must keep every file's size and sha256.

    A new pin (revision or repo) may change anything but its prefix must move too: older branches still
    resolve and sync the old pin from the old prefix, so sharing it would overwrite their objects.
    """
    problems = []
    for doc in docs:
        m = doc.manifest
        if m is None or m.name not in base:
            continue
        old = base[m.name]
        if old.source.revision != m.source.revision or old.source.hf_repo != m.source.hf_repo:
            if m.s3_prefix.startswith(old.s3_prefix) or old.s3_prefix.startswith(m.s3_prefix):
                what = "keeps" if m.s3_prefix == old.s3_prefix else "overlaps"
                problems.append(
                    Problem(
                        doc.display,
                        doc.lines.line_of(("s3_prefix",)),
                        "s3_prefix",
                        f"the new pin {m.source.hf_repo}@{m.source.revision[:12]} {what} the prefix {old.s3_prefix!r} of the "
                        f"old pin {old.source.hf_repo}@{old.source.revision[:12]}; sync would overwrite objects older branches "
                        "still use: give the new revision its own prefix (e.g. ending in /<revision>/)",
                        "prefix-overlap",
                    )
                )
            continue  # a new pin: anything else may change
        for index, entry in enumerate(m.files):
            before = old.file(entry.path)
            if before is not None and (before.sha256, before.size) != (entry.sha256, entry.size):
                problems.append(
                    Problem(
                        doc.display,
                        doc.lines.line_of(("files", index, "sha256")),
                        f"files[{index}].sha256",
                        f"{entry.path!r} changed at the same revision {m.source.revision[:12]} "
                        f"(was sha256 {before.sha256}, {before.size} bytes); pins are immutable: "
                        "pin a new revision instead",
                        "pin-changed",
                    )
                )
    return problems


def _git(args: list[str], cwd: Path, stdin: bytes | None = None) -> bytes:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, input=stdin, capture_output=True, check=False)
    except FileNotFoundError:
        raise UsageError("--base needs git, which is not installed") from None
    if done.returncode != 0:
        raise UsageError(f"git {' '.join(args[:2])} failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def manifests_at(ref: str, catalog_dir: Path) -> dict[str, ModelManifest]:
    """The parseable manifests under `catalog_dir` as of git `ref` (broken ones at the base are skipped)."""
    try:
        top = Path(_git(["rev-parse", "--show-toplevel"], catalog_dir).decode().strip())
    except UsageError as exc:
        if "needs git" in exc.message:
            raise
        raise UsageError(
            f"--base {ref}: {catalog_dir} is not inside a git repository",
            hint="run validate --base in a git checkout of the catalog, or drop --base",
        ) from None
    rel = catalog_dir.resolve().relative_to(top.resolve()).as_posix()
    try:
        _git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], top)
    except UsageError:
        raise UsageError(f"--base {ref!r} is not a commit in this repository") from None
    names = _git(["ls-tree", "-r", "--name-only", ref, "--", rel], top).decode().splitlines()
    paths = [n for n in names if n.endswith((".yaml", ".yml")) and Path(n).name != "catalog.yaml"]
    if not paths:
        return {}
    out = _git(["cat-file", "--batch"], top, "".join(f"{ref}:{p}\n" for p in paths).encode())
    result: dict[str, ModelManifest] = {}
    pos = 0
    for _ in paths:
        header_end = out.index(b"\n", pos)
        size = int(out[pos:header_end].split()[2])
        text = out[header_end + 1 : header_end + 1 + size].decode("utf-8", errors="replace")
        pos = header_end + 1 + size + 1
        try:
            manifest = ModelManifest.model_validate(yamlsource.parse(text).data)
        except (yamlsource.YamlProblem, ValidationError):
            continue
        result[manifest.name] = manifest
    return result
