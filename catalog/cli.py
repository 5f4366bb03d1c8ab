"""The `catalog` command line: the one place that maps errors to exit codes and draws output.

Results go to stdout, messages to stderr. Exit codes: 0 ok, 1 problems found / drift, 2 usage,
130 interrupted. Any CatalogError becomes one `error:` line plus a `hint:` line, never a traceback.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import yaml

from catalog import report
from catalog.errors import CatalogError, UsageError
from catalog.loading import display_path, load_dir
from catalog.clikit import current_settings, human_bytes, load_catalog
from catalog.lookup import Catalog, find_catalog_dir
from catalog.schema import LoadFormat, ModelManifest, json_schema
from catalog.settings import Settings

log = logging.getLogger("catalog")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="model-catalog", prog_name="catalog")
@click.option("--catalog", "catalog_dir", metavar="DIR", help="The manifests folder (env CATALOG_DIR; default: nearest manifests/ upward).")
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-vv for debug).")
@click.pass_context
def cli(ctx: click.Context, catalog_dir: str | None, verbose: int) -> None:
    """Pinned, verified CI models: validate manifests, list and show models."""
    # Only our own loggers get more verbose: botocore's and httpx's debug logs print request headers,
    # which carry signatures and session tokens.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for name in ("catalog", "resolver"):
        logging.getLogger(name).setLevel(logging.WARNING - 10 * min(verbose, 2))
    ctx.ensure_object(dict)["settings"] = Settings.from_env(catalog_dir=catalog_dir)


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(report.FORMATS), default="text", show_default=True)
@click.option("--base", metavar="GIT_REF", help="Also refuse hash changes to manifests whose revision is unchanged since GIT_REF.")
@click.pass_context
def validate(ctx: click.Context, paths: Sequence[Path], fmt: str, base: str | None) -> int:
    """Check every manifest (or just PATHS) and report every problem at once."""
    root, selected = _validate_target(current_settings(ctx), paths)
    result = load_dir(root, selected)
    problems = list(result.problems)
    if base is not None:
        from catalog.history import manifests_at, pin_changes

        problems.extend(pin_changes(manifests_at(base, root), result.docs))
    checked = len(selected) if selected else len(result.docs)
    output = report.render(problems, fmt, checked=checked)
    if output:
        click.echo(output)
    if fmt != "json":
        click.echo(report.summary(problems, checked=checked), err=True)
    return 1 if problems else 0


def _validate_target(settings: Settings, paths: Sequence[Path]) -> tuple[Path, list[Path] | None]:
    """The catalog root and the manifests to report on (None: all). pre-commit passes file names."""
    files = [p for p in paths if not p.is_dir()]
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


@cli.command("list")
@click.option("--gpu", metavar="CLASS", help="Only models needing this GPU class.")
@click.option("--tag", metavar="TAG", help="Only models with this tag.")
@click.option("--load-format", type=click.Choice([f.value for f in LoadFormat]), help="Only models with this load format.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.pass_context
def list_models(ctx: click.Context, gpu: str | None, tag: str | None, load_format: str | None, fmt: str) -> int:
    """List the catalog's models."""
    cat = load_catalog(ctx)
    if gpu is not None and gpu not in cat.settings.gpu_classes:
        raise UsageError(f"unknown GPU class {gpu!r}", hint=f"known: {', '.join(sorted(cat.settings.gpu_classes))}")
    models = cat.filter(gpu=gpu, tag=tag, load_format=load_format)
    if fmt == "json":
        click.echo(json.dumps([_summary(cat, m) for m in models], indent=2))
        return 0
    rows = [("NAME", "FORMAT", "GPU", "SIZE", "SOURCE")]
    rows += [
        (m.name, m.load_format.value, f"{m.gpu.count}x{cat.gpu_class(m)}", human_bytes(m.total_bytes),
         f"{m.source.hf_repo}@{m.source.revision[:12]}")
        for m in models
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    click.echo(f"{len(models)} of {len(cat)} models", err=True)
    return 0


def _summary(cat: Catalog, m: ModelManifest) -> dict[str, Any]:
    return {
        "name": m.name, "hf_repo": m.source.hf_repo, "revision": m.source.revision, "s3_prefix": m.s3_prefix,
        "load_format": m.load_format.value, "gpu_class": cat.gpu_class(m), "gpu_count": m.gpu.count,
        "tags": list(m.tags), "files": len(m.files), "bytes": m.total_bytes, "weights_bytes": m.weights_bytes,
    }


@cli.command()
@click.argument("name")
@click.option("--format", "fmt", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
@click.pass_context
def show(ctx: click.Context, name: str, fmt: str) -> int:
    """Show one model's manifest."""
    cat = load_catalog(ctx)
    data = cat.get(name).model_dump(mode="json", by_alias=True)
    if fmt == "json":
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(f"# {display_path(cat.sources[name])}", err=True)
        click.echo(yaml.safe_dump(data, sort_keys=False, width=120), nl=False)
    return 0


@cli.command()
@click.option("--gpu", metavar="CLASS", help="Only this GPU class.")
@click.option("--format", "fmt", type=click.Choice(["json", "buildkite"]), default="json", show_default=True)
@click.pass_context
def matrix(ctx: click.Context, gpu: str | None, fmt: str) -> int:
    """Which models each GPU class needs, to shard jobs and pre-warm caches per hardware."""
    from catalog.matrix import buildkite_steps, gpu_matrix

    cat = load_catalog(ctx)
    if gpu is not None and gpu not in cat.settings.gpu_classes:
        raise UsageError(f"unknown GPU class {gpu!r}", hint=f"known: {', '.join(sorted(cat.settings.gpu_classes))}")
    table = gpu_matrix(cat, gpu)
    if fmt == "buildkite":
        click.echo(yaml.safe_dump(buildkite_steps(table), sort_keys=False, width=200), nl=False)
    else:
        click.echo(json.dumps(table, indent=2))
    return 0


@cli.command()
def schema() -> int:
    """Print the manifest JSON Schema (for editors: yaml-language-server, VS Code)."""
    click.echo(json.dumps(json_schema(), indent=2))
    return 0


def _register_operational_commands() -> None:
    # resolve/verify/gc live with the resolver; importing it costs no heavy library (boto3 is lazy).
    from resolver import cli as resolve_commands
    from resolver import cli_pin as pin_commands
    from resolver import cli_loaders as loader_commands
    from resolver import cli_sync as sync_commands

    resolve_commands.register(cli)
    loader_commands.register(cli)
    pin_commands.register(cli)
    sync_commands.register(cli)


_register_operational_commands()


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point: run the CLI and turn expected failures into exit codes."""
    try:
        args = list(argv) if argv is not None else sys.argv[1:]
        code = cli.main(args=args, prog_name="catalog", standalone_mode=False, obj={"argv": args})
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except CatalogError as exc:
        click.echo(f"error: {exc.message}", err=True)
        if exc.hint:
            click.echo(f"hint: {exc.hint}", err=True)
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
