"""`catalog import` (what CI already has: an HF cache, a list of models) and `catalog audit-upstream` (what the Hub
still has)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from catalog.errors import UsageError
from catalog.loading import load_dir
from catalog_app.context import invocation
from catalog_app.markdown import table
from catalog_app.progress import plural
from resolver.hf_import import Imported, Outcome
from resolver.hub import HubOptions

if TYPE_CHECKING:
    from resolver.upstream import PinAudit


@click.command("import")
@click.argument("repos", nargs=-1)
@click.option(
    "--from-hf-cache",
    "hf_cache",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    help="A Hugging Face cache (HF_HUB_CACHE): one locked manifest per cached snapshot (all, or REPO[@REV]...); "
    "no Hub request.",
)
@click.option(
    "--repos",
    "repos_file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="A list of models, one `org/name[@revision] [--gpu CLASS]` a line: each added and locked from the Hub.",
)
@click.option(
    "--model-list",
    "model_list",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="A YAML model list with per-model flags (`models:` entries with `model` or `hf_repo`, `revision`, `gpu`, "
    "`env`, `base_flags`/`flags`): each pinned with an engine profile of its class, from --from-hf-cache "
    "where the cache holds it (no Hub request), else from the Hub.",
)
@click.option(
    "--gpu", "gpu_class", metavar="CLASS", help="GPU class of the new models (default: the catalog's default)."
)
@click.option("--load-format", help="Load format of the new models (default: detected as `catalog add` does).")
@click.option(
    "--deep",
    is_flag=True,
    help="--from-hf-cache: re-hash LFS blobs too (else their names, checked by size, are the pins), "
    "pinning each tensor's digest on the way as a lock from a folder does.",
)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.pass_context
def import_command(
    ctx: click.Context,
    repos: tuple[str, ...],
    hf_cache: Path | None,
    repos_file: Path | None,
    model_list: Path | None,
    gpu_class: str | None,
    load_format: str | None,
    deep: bool,
    fmt: str,
) -> int:
    """Write locked manifests for models CI already has: an HF cache's snapshots, a list of repos, or a model list
    with per-model flags (engine profiles)."""
    if model_list is not None and (repos_file is not None or repos):
        raise UsageError(
            "--model-list names its models itself; give it alone (with --from-hf-cache DIR where they are cached)"
        )
    if model_list is None and (hf_cache is None) == (repos_file is None):
        raise UsageError("give --from-hf-cache DIR, --repos FILE or --model-list FILE")
    if repos and hf_cache is None:
        raise UsageError(
            "REPO[@REV] arguments choose snapshots of --from-hf-cache; list repos in the --repos file instead"
        )
    inv = invocation(ctx)
    root = inv.settings.find_catalog_dir()
    catalog_settings = load_dir(root).settings
    if catalog_settings is None:
        raise UsageError(f"{root}/catalog.yaml is missing or invalid", hint="run `catalog validate`")
    if gpu_class is not None and gpu_class not in catalog_settings.gpu_classes:
        raise UsageError(
            f"unknown GPU class {gpu_class!r}", hint=f"known: {', '.join(sorted(catalog_settings.gpu_classes))}"
        )
    if load_format is not None:
        from resolver.add import parse_load_format

        parse_load_format(load_format)
    if model_list is not None:
        from resolver.repo_list import import_model_list, parse_model_list

        if load_format is not None:
            raise UsageError("--load-format applies to --from-hf-cache alone; a listed model's format is detected")
        models = parse_model_list(_read(model_list), str(model_list), list(catalog_settings.gpu_classes))
        done = import_model_list(
            models, catalog_settings, root, HubOptions.from_settings(inv.settings), gpu_class, hf_cache
        )
    elif hf_cache is not None:
        from resolver.hf_import import import_from_cache

        done = import_from_cache(
            hf_cache, repos, root, catalog_settings, gpu=gpu_class, load_format=load_format, deep=deep
        )
    else:
        from resolver.repo_list import import_list, parse_repo_list

        assert repos_file is not None
        listed = parse_repo_list(_read(repos_file), str(repos_file), list(catalog_settings.gpu_classes))
        if load_format is not None:
            raise UsageError("--load-format applies to --from-hf-cache; a listed repo's format is detected")
        done = import_list(listed, catalog_settings, root, HubOptions.from_settings(inv.settings), gpu_class)
    written = [d.path for d in done if d.path is not None]
    problems = load_dir(root, written).problems if written else []
    _report(done, problems, fmt)
    return 1 if problems or any(d.outcome is Outcome.REFUSED for d in done) else 0


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None


def _report(done: Sequence[Imported], problems: Sequence[object], fmt: str) -> None:
    if fmt == "json":
        click.echo(
            json.dumps(
                {
                    "results": [
                        {
                            "repo": d.label,
                            "outcome": d.outcome.value,
                            "name": d.name,
                            "path": str(d.path) if d.path else None,
                            "message": d.message,
                        }
                        for d in done
                    ],
                    "problems": [str(p) for p in problems],
                },
                indent=2,
            )
        )
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
    click.echo(
        f"{counts[Outcome.WRITTEN]} written, {counts[Outcome.SKIPPED]} skipped, {counts[Outcome.REFUSED]} refused"
        + ("; review the manifests and open a PR" if counts[Outcome.WRITTEN] else ""),
        err=True,
    )


@click.command("audit-upstream")
@click.argument("names", nargs=-1)
@click.option(
    "--all", "all_models", is_flag=True, help="Every model in the catalog (the default when no NAME is given)."
)
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True)
@click.option(
    "--store", metavar="URL", help="Where the result is recorded (default: catalog.yaml's store; env CATALOG_STORE)."
)
@click.option(
    "--no-record", is_flag=True, help="Do not record the result in the store (a check without store credentials)."
)
@click.option("--recorded", is_flag=True, help="Print what the store's record says (the last audits); no Hub request.")
@click.pass_context
def audit_upstream_command(
    ctx: click.Context,
    names: tuple[str, ...],
    all_models: bool,
    fmt: str,
    store: str | None,
    no_record: bool,
    recorded: bool,
) -> int:
    """Ask the Hub whether each pin (a repo at a commit, however many manifests share it) is still there, one
    request per pin; exit 1 when any is not `ok`."""
    from resolver import last_copy
    from resolver.upstream import audit, probe_file

    if names and all_models:
        raise UsageError("name models or pass --all, not both")
    inv = invocation(ctx, store=store)
    current, cat = inv.settings, inv.catalog
    if recorded:  # names of models removed from the catalog still have their entry
        records = last_copy.read_record(inv.store)
        shown = [records[n] for n in names if n in records] if names else sorted(records.values(), key=lambda r: r.name)
        _render(
            [(r.name, r.hf_repo, r.revision, r.upstream, r.detail, r.gone_since or "") for r in shown],
            fmt,
            lambda rows: {"pins": [last_copy.as_json(r) for r in shown]},
        )
        return 0
    selected = [cat.get(n) for n in names] if names else list(cat)
    results = audit(
        [(m.name, m.source, cat.store_key(m), probe_file(m)) for m in selected], HubOptions.from_settings(current)
    )
    at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    gone_since: dict[str, str] = {}
    if not no_record:
        the_store = inv.store
        merged = last_copy.merge(last_copy.read_record(the_store), [last_copy.record_of(r, at) for r in results])
        last_copy.write_record(the_store, merged, at)
        gone_since = {n: r.gone_since for n, r in merged.items() if r.gone and r.gone_since}
    rows = [
        (
            r.name,
            r.source.hf_repo,
            r.source.revision,
            r.finding.upstream.value,
            r.finding.detail,
            gone_since.get(r.name, ""),
        )
        for r in results
    ]
    _render(
        rows,
        fmt,
        lambda rows: {
            "audited_at": at,
            "ok": all(r.ok for r in results),
            "recorded": not no_record,
            "pins": [
                {"name": n, "hf_repo": repo, "revision": rev, "upstream": u, "detail": d, "gone_since": g or None}
                for n, repo, rev, u, d, g in rows
            ],
        },
    )
    bad = [r for r in results if not r.ok]
    if bad and fmt != "json":
        # Several manifests may pin one repo at one commit (a format's variants): models and pins are counted apart.
        click.echo(
            f"{plural(len(bad), 'model')} of {len(results)} ({plural(len(_pins(bad)), 'pin')} of "
            f"{len(_pins(results))}) not ok upstream: "
            + ", ".join(f"{r.name} ({r.finding.upstream.value})" for r in bad),
            err=True,
        )
    return 1 if bad else 0


def _pins(results: Sequence[PinAudit]) -> set[tuple[str, str, str]]:
    """The distinct pins (repo type, repo id as the Hub compares it, commit) the results are about."""
    return {(r.source.repo_type, r.source.hf_repo.casefold(), r.source.revision) for r in results}


Row = tuple[str, str, str, str, str, str]


def _render(rows: list[Row], fmt: str, as_json: Callable[[list[Row]], Any]) -> None:
    if fmt == "json":
        click.echo(json.dumps(as_json(rows), indent=2))
    elif fmt == "markdown":
        click.echo(
            table(
                ("model", "upstream", "pin", "since", "detail"),
                [(n, f"**{u}**" if u != "ok" else u, f"{repo}@{rev[:12]}", g, d) for n, repo, rev, u, d, g in rows],
            )
        )
    else:
        width = max((len(r[0]) for r in rows), default=0)
        for n, repo, rev, u, d, g in rows:
            click.echo(f"{n:<{width}}  {u:<13}  {repo}@{rev[:12]}  {d}" + (f" (since {g})" if g else ""))


COMMANDS = (import_command, audit_upstream_command)
