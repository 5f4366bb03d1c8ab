"""The declarative commands: validate, list, show, schema, matrix (no store, no network)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import yaml

from catalog.errors import Problem, UsageError
from catalog.formats import LoadFormat
from catalog.loading import LoadResult, display_path, load_dir
from catalog.lookup import Catalog
from catalog.schema import ModelManifest, json_schema
from catalog.settings import Settings, find_catalog_dir
from catalog.signing import SUFFIX as SIGNATURE_SUFFIX
from catalog.tensor_tables import SUFFIX, Inventory, inventory
from catalog_app import report
from catalog_app.context import invocation
from catalog_app.markdown import table
from catalog_app.progress import human_bytes


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(report.FORMATS), default="text", show_default=True)
@click.option(
    "--base", metavar="GIT_REF", help="Also refuse hash changes to manifests whose revision is unchanged since GIT_REF."
)
@click.pass_context
def validate(ctx: click.Context, paths: Sequence[Path], fmt: str, base: str | None) -> int:
    """Check every manifest (or just PATHS) and report every problem at once."""
    current = invocation(ctx).settings
    root, selected = _validate_target(current, paths)
    result = load_dir(root, selected, tables=True)
    problems = list(result.problems)
    if base is not None:
        from catalog.history import manifests_at, pin_changes

        problems.extend(pin_changes(manifests_at(base, root), result.docs))
    problems.extend(_signature_problems(result, selected, current))
    checked = len(selected) if selected else len(result.docs)
    output = report.render(problems, fmt, checked=checked)
    if output:
        click.echo(output)
    if fmt != "json":
        click.echo(report.summary(problems, checked=checked), err=True)
    return 1 if problems else 0


def _signature_problems(result: LoadResult, selected: Sequence[Path] | None, current: Settings) -> list[Problem]:
    """The `signature` rule (resolver/signatures.py): loads the signature code only when there is a signature to check."""
    from catalog.signing import policy_of, signature_path

    if result.settings is None:
        return []
    policy = policy_of(result.settings, result.root, current)
    chosen = {p.resolve() for p in selected} if selected else None
    docs = [d for d in result.docs if chosen is None or d.path.resolve() in chosen]
    if not policy.required and not any(signature_path(d.path).exists() for d in docs):
        return []
    if not policy.anchors and result.settings.signatures == "required":
        return []  # the settings rule already says so, at catalog.yaml's `signatures:` line
    from resolver.signatures import problems

    return problems(docs, result.root / "catalog.yaml", policy)


def _validate_target(settings: Settings, paths: Sequence[Path]) -> tuple[Path, list[Path] | None]:
    """The catalog root and the manifests to report on (None: all). pre-commit passes file names."""
    files = [manifest_of(p) for p in paths if not p.is_dir()]
    dirs = [p for p in paths if p.is_dir()]
    if len(dirs) > 1 or (dirs and files):
        raise UsageError("pass either one catalog folder or manifest files, not both")
    if dirs:
        return dirs[0], None
    for path in files:
        if not path.exists():
            raise UsageError(f"{path}: no such file")
    if settings.catalog_dir is not None:
        root = settings.catalog_dir
    elif files:
        root = find_catalog_dir(files[0].resolve().parent)
    else:
        root = find_catalog_dir()
    if not files or any(p.name == "catalog.yaml" and p.resolve().parent == root.resolve() for p in files):
        return root, None  # the settings changed: every manifest may be affected
    return root, files


def manifest_of(path: Path) -> Path:
    """A manifest's sidecar stands for the manifest (pre-commit passes a changed `<name>.tensors.json`, the tensor
    tables, or `<name>.sig`, the signature)."""
    for suffix in (SUFFIX, SIGNATURE_SUFFIX):
        if path.name.endswith(suffix):
            base = path.name[: -len(suffix)]
            yml = path.with_name(base + ".yml")
            return yml if yml.exists() else path.with_name(base + ".yaml")
    return path


@click.command("list")
@click.option("--gpu", metavar="CLASS", help="Only models needing this GPU class.")
@click.option("--tag", metavar="TAG", help="Only models with this tag.")
@click.option(
    "--load-format", type=click.Choice([f.value for f in LoadFormat]), help="Only models with this load format."
)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.pass_context
def list_models(ctx: click.Context, gpu: str | None, tag: str | None, load_format: str | None, fmt: str) -> int:
    """List the catalog's models."""
    cat = invocation(ctx).catalog
    models = cat.filter(gpu=gpu, tag=tag, load_format=load_format)
    if fmt == "json":
        click.echo(json.dumps([_summary(cat, m) for m in models], indent=2))
        return 0
    rows = [("NAME", "FORMAT", "GPU", "SIZE", "SOURCE")]
    rows += [
        (
            m.name,
            m.load_format.value,
            f"{m.gpu.count}x{cat.gpu_class(m)}",
            human_bytes(m.total_bytes),
            f"{m.source.hf_repo}@{m.source.revision[:12]}",
        )
        for m in models
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1])
    click.echo(f"{len(models)} of {len(cat)} models", err=True)
    return 0


def _summary(cat: Catalog, m: ModelManifest) -> dict[str, Any]:
    return {
        "name": m.name,
        "hf_repo": m.source.hf_repo,
        "revision": m.source.revision,
        "s3_prefix": m.s3_prefix,
        "load_format": m.load_format.value,
        "gpu_class": cat.gpu_class(m),
        "gpu_count": m.gpu.count,
        "tags": list(m.tags),
        "files": len(m.files),
        "bytes": m.total_bytes,
        "weights_bytes": m.weights_bytes,
    }


@click.command()
@click.argument("name")
@click.option("--format", "fmt", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
@click.pass_context
def show(ctx: click.Context, name: str, fmt: str) -> int:
    """Show one model's manifest and its tensor inventory (from the pinned safetensors headers)."""
    cat = invocation(ctx).catalog
    model = cat.get(name)
    data = model.model_dump(mode="json", by_alias=True)
    found = inventory(model.files)
    if fmt == "json":
        click.echo(json.dumps({**data, "tensors": found.to_json()}, indent=2))
    else:
        click.echo(f"# {display_path(cat.sources[name])}", err=True)
        shown = model.model_dump(mode="json", by_alias=True, exclude_none=True)  # as a manifest reads: no empty keys
        click.echo(yaml.safe_dump(shown, sort_keys=False, width=120), nl=False)
        click.echo(
            "".join(f"# {line}\n" for line in inventory_lines(name, found)), nl=False
        )  # comments: still the manifest
    return 0


def inventory_lines(name: str, found: Inventory) -> list[str]:
    lines = [
        f"tensors: {found.tensors:,} in {found.files} safetensors file(s), {found.parameters:,} parameters, "
        f"{human_bytes(sum(found.bytes_by_dtype.values()))}"
    ]
    lines += [f"  {dtype}: {count:,} bytes ({human_bytes(count)})" for dtype, count in found.bytes_by_dtype.items()]
    if found.unpinned:
        lines.append(f"{len(found.unpinned)} safetensors file(s) without a pinned header: run `catalog lock {name}`")
    return lines


@click.command()
@click.option("--gpu", metavar="CLASS", help="Only this GPU class.")
@click.option(
    "--format", "fmt", type=click.Choice(["json", "buildkite", "markdown"]), default="json", show_default=True
)
@click.pass_context
def matrix(ctx: click.Context, gpu: str | None, fmt: str) -> int:
    """Which models each GPU class needs, to shard jobs and pre-warm caches per hardware."""
    from catalog.matrix import buildkite_steps, gpu_matrix

    cat = invocation(ctx).catalog
    if gpu is not None and gpu not in cat.settings.gpu_classes:
        raise UsageError(f"unknown GPU class {gpu!r}", hint=f"known: {', '.join(sorted(cat.settings.gpu_classes))}")
    by_class = gpu_matrix(cat, gpu)
    if fmt == "buildkite":
        click.echo(yaml.safe_dump(buildkite_steps(by_class), sort_keys=False, width=200), nl=False)
    elif fmt == "markdown":
        rows = [
            (c, m["name"], m["gpu_count"], m["load_format"], human_bytes(m["bytes"]))
            for c, ms in by_class.items()
            for m in ms
        ]
        click.echo(table(("GPU class", "model", "GPUs", "load format", "size"), rows))
    else:
        click.echo(json.dumps(by_class, indent=2))
    return 0


@click.command()
def schema() -> int:
    """Print the manifest JSON Schema (for editors: yaml-language-server, VS Code)."""
    click.echo(json.dumps(json_schema(), indent=2))
    return 0


COMMANDS = (validate, list_models, show, matrix, schema)
