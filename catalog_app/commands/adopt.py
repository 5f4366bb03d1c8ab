"""`catalog import`: what CI already has (an HF cache, a list of models), as locked manifests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import click

from catalog.errors import UsageError
from catalog.loading import load_dir
from catalog_app.context import catalog_dir, settings
from resolver.hf_import import Imported, Outcome
from resolver.hub import HubOptions


@click.command("import")
@click.argument("repos", nargs=-1)
@click.option("--from-hf-cache", "hf_cache", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="A Hugging Face cache (HF_HUB_CACHE): one locked manifest per cached snapshot (all, or REPO[@REV]...); "
                   "no Hub request.")
@click.option("--repos", "repos_file", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="A list of models, one `org/name[@revision] [--gpu CLASS]` a line: each added and locked from the Hub.")
@click.option("--gpu", "gpu_class", metavar="CLASS", help="GPU class of the new models (default: the catalog's default).")
@click.option("--load-format", help="Load format of the new models (default: detected as `catalog add` does).")
@click.option("--deep", is_flag=True, help="--from-hf-cache: re-hash LFS blobs too (else their names, checked by size, are the pins).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.pass_context
def import_command(ctx: click.Context, repos: tuple[str, ...], hf_cache: Path | None, repos_file: Path | None,
                   gpu_class: str | None, load_format: str | None, deep: bool, fmt: str) -> int:
    """Write locked manifests for models CI already has: an HF cache's snapshots, or a list of repos."""
    if (hf_cache is None) == (repos_file is None):
        raise UsageError("give --from-hf-cache DIR or --repos FILE")
    if repos and hf_cache is None:
        raise UsageError("REPO[@REV] arguments choose snapshots of --from-hf-cache; list repos in the --repos file instead")
    root = catalog_dir(ctx)
    catalog_settings = load_dir(root).settings
    if catalog_settings is None:
        raise UsageError(f"{root}/catalog.yaml is missing or invalid", hint="run `catalog validate`")
    if gpu_class is not None and gpu_class not in catalog_settings.gpu_classes:
        raise UsageError(f"unknown GPU class {gpu_class!r}", hint=f"known: {', '.join(sorted(catalog_settings.gpu_classes))}")
    if load_format is not None:
        from resolver.add import parse_load_format

        parse_load_format(load_format)
    if hf_cache is not None:
        from resolver.hf_import import import_from_cache

        done = import_from_cache(hf_cache, repos, root, catalog_settings, gpu=gpu_class, load_format=load_format, deep=deep)
    else:
        from resolver.repo_list import import_list, parse_repo_list

        assert repos_file is not None
        try:
            text = repos_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {repos_file}: {exc}") from None
        listed = parse_repo_list(text, str(repos_file), list(catalog_settings.gpu_classes))
        if load_format is not None:
            raise UsageError("--load-format applies to --from-hf-cache; a listed repo's format is detected")
        done = import_list(listed, catalog_settings, root, HubOptions.from_settings(settings(ctx)), gpu_class)
    written = [d.path for d in done if d.path is not None]
    problems = load_dir(root, written).problems if written else []
    _report(done, problems, fmt)
    return 1 if problems or any(d.outcome is Outcome.REFUSED for d in done) else 0


def _report(done: Sequence[Imported], problems: Sequence[object], fmt: str) -> None:
    if fmt == "json":
        click.echo(json.dumps({"results": [{"repo": d.label, "outcome": d.outcome.value, "name": d.name,
                                            "path": str(d.path) if d.path else None, "message": d.message} for d in done],
                               "problems": [str(p) for p in problems]}, indent=2))
        return
    for d in done:
        if d.outcome is Outcome.WRITTEN:
            click.echo(f"wrote {d.path} ({d.label}, {d.message})")
        elif d.outcome is Outcome.SKIPPED:
            click.echo(f"skipped {d.label}: {d.message}")
        else:
            click.echo(f"error: {d.label}: {d.message}", err=True)
    for problem in problems:
        click.echo(f"{problem}")
    counts = {o: sum(d.outcome is o for d in done) for o in Outcome}
    click.echo(f"{counts[Outcome.WRITTEN]} written, {counts[Outcome.SKIPPED]} skipped, {counts[Outcome.REFUSED]} refused"
               + ("; review the manifests and open a PR" if counts[Outcome.WRITTEN] else ""), err=True)


COMMANDS = (import_command,)
