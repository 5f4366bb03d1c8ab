"""`catalog sync`: plan, show (text, JSON, markdown), save, apply."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import click

from catalog import bounded, front_door
from catalog.errors import UsageError
from catalog.lookup import Catalog
from catalog.settings import Settings
from catalog.urls import redact
from catalog_app.context import invocation
from catalog_app.markdown import table
from catalog_app.options import declared_by
from catalog_app.progress import human_bytes, plural
from resolver.cache import Cache
from resolver.hub import HubOptions
from resolver.stores import Store
from resolver.sync import Action, ApplyReport, SourceOfBytes, SyncPlan, apply, make_plan
from resolver.sync_sources import HfCacheBytes, replicate
from resolver.transfer import TransferConfig


@click.command("sync")
@click.argument("names", nargs=-1)
@declared_by(front_door.SYNC)
@click.pass_context
def sync_command(
    ctx: click.Context,
    names: tuple[str, ...],
    dry_run: bool,
    out_path: Path | None,
    apply_path: Path | None,
    prune: bool,
    delete_orphans: bool,
    max_delete: int,
    check: bool,
    deep: bool,
    from_dir: Path | None,
    fmt: str,
    from_hf_cache: Path | None,
    allow_last_copy: tuple[str, ...],
    replicate_to: str | None,
    store: str | None,
    cache_dir: str | None,
    part_size: str | None,
    concurrency: int | None,
) -> int:
    """Make the bucket hold exactly what the manifests pin, with a plan you can read first."""
    if delete_orphans and not prune:
        raise UsageError("--delete-orphans needs --prune")
    if apply_path is not None and (names or out_path or dry_run or check):
        raise UsageError("--apply executes a saved plan as it is; give it alone")
    inv = invocation(ctx, store=store, cache_dir=cache_dir, part_size=part_size, concurrency=concurrency)
    current, cat = inv.settings, inv.catalog
    config = TransferConfig.from_settings(current)
    the_store = inv.store
    if replicate_to is not None:
        if prune or apply_path or from_dir or from_hf_cache or deep or allow_last_copy:
            raise UsageError(
                "--replicate-to copies pins from the store as they are; give it with NAMEs, --dry-run, --check, "
                "--out or --format only"
            )
        # Told where the catalog's models are, as the primary store is: a registry addresses artifacts by model.
        target = inv.open(replicate_to)
        return _replicate(
            cat,
            names,
            the_store,
            target,
            inv.cache,
            config,
            fmt,
            dry_run or check or out_path is not None,
            check,
            out_path,
        )
    if apply_path is not None:
        try:
            plan = SyncPlan.from_json(bounded.loads(bounded.read_file(apply_path, bounded.MAX_RECORD)))
        except UsageError as exc:
            raise UsageError(f"{apply_path}: {exc.message}", hint=exc.hint) from None
        except (ValueError, OSError) as exc:  # not JSON, not UTF-8, unreadable
            raise UsageError(f"{apply_path} is not a sync plan: {exc}") from None
        fresh = True
        # The bytes come from where the planner was told (a flag given now wins: the folder may have moved).
        from_dir = from_dir or _recorded(apply_path, "--from-dir", plan.from_dir)
        from_hf_cache = from_hf_cache or _recorded(apply_path, "--from-hf-cache", plan.from_hf_cache)
    else:
        for name in names:
            cat.get(name)
        plan = make_plan(
            cat, names, the_store, prune=prune, delete_orphans=delete_orphans, deep=deep, config=config, cache=inv.cache
        )
        fresh = False
    planning_requests = dict(the_store.requests)
    printed = _Printed()
    if out_path is not None:
        _save(
            dataclasses.replace(
                plan,
                from_dir=str(from_dir.resolve()) if from_dir else "",
                from_hf_cache=str(from_hf_cache.resolve()) if from_hf_cache else "",
            ),
            out_path,
        )
    if fmt == "text":
        printed.say(render_text(plan))
    if dry_run or check or out_path is not None:
        if fmt == "json":
            printed.say(json.dumps({"plan": plan.to_json(), "requests": planning_requests}, indent=2))
        elif fmt == "markdown":
            printed.say(render_markdown(plan))
        code = 1 if check and plan.drift else 0
        if not plan.drift and out_path is None:
            _record_no_change(ctx, current, cat, the_store, planning_requests, printed, code)
        return code
    hub = HubOptions.from_settings(current)
    source = (
        SourceOfBytes(cat, inv.cache, hub, from_dir, config)
        if from_hf_cache is None
        else HfCacheBytes(cat, inv.cache, hub, from_dir, config, from_hf_cache)
    )
    report = apply(
        plan,
        cat,
        the_store,
        source,
        max_delete=max_delete,
        check_fresh=fresh,
        config=config,
        allow_last_copy=allow_last_copy,
    )
    _print_report(report, fmt, plan, dict(the_store.requests), printed, from_dir=from_dir, from_hf_cache=from_hf_cache)
    if (
        not plan.drift
        and not (report.uploaded or report.verified or report.deleted or report.errors)
        and apply_path is None
    ):
        _record_no_change(ctx, current, cat, the_store, dict(the_store.requests), printed, 0)
    return 1 if report.errors else 0


class _Printed:
    """What a call printed, in order, kept for the warm path (catalog_app/warm_sync.py) to print again."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self.err: list[str] = []

    def say(self, text: str, err: bool = False) -> None:
        click.echo(text, err=err)
        (self.err if err else self.out).append(text + "\n")


def _record_no_change(
    ctx: click.Context,
    current: Settings,
    cat: Catalog,
    store: Store,
    requests: dict[str, int],
    printed: _Printed,
    code: int,
) -> None:
    """A sync that planned no change and printed no warning: recorded for the warm path to answer next time."""
    from catalog_app import warm_sync
    from catalog_app.cli import warnings_said

    argv = ctx.find_root().ensure_object(dict).get("argv")
    if argv is None or warnings_said():
        return
    inputs = [p for p in (cat.root / "catalog.yaml", *cat.sources.values()) if p.is_file()]
    warm_sync.record(
        argv,
        current,
        [os.path.abspath(p) for p in inputs],
        store,
        requests,
        "".join(printed.out),
        "".join(printed.err),
        code,
    )


def _replicate(
    cat: Catalog,
    names: tuple[str, ...],
    origin: Store,
    target: Store,
    cache: Cache,
    config: TransferConfig,
    fmt: str,
    plan_only: bool,
    check: bool,
    out_path: Path | None,
) -> int:
    """`sync --replicate-to URL`: the plan against the second store, applied with bytes from the first."""
    for name in names:
        cat.get(name)
    if plan_only:
        plan = make_plan(cat, names, target, prune=False, delete_orphans=False, deep=False, config=config, cache=cache)
        if out_path is not None:
            _save(plan, out_path)
        click.echo(
            json.dumps({"plan": plan.to_json()}, indent=2)
            if fmt == "json"
            else render_markdown(plan)
            if fmt == "markdown"
            else render_text(plan)
        )
        return 1 if check and plan.drift else 0
    plan, report = replicate(cat, names, origin, target, cache, config)
    if fmt == "text":
        click.echo(render_text(plan))
    _print_report(
        report,
        fmt,
        plan,
        {f"{origin.url} {k}": n for k, n in origin.requests.items()}
        | {f"{target.url} {k}": n for k, n in target.requests.items()},
        _Printed(),
    )
    return 1 if report.errors else 0


def _recorded(plan_path: Path, flag: str, recorded: str) -> Path | None:
    """The source folder a saved plan names, which must still be there."""
    if not recorded:
        return None
    folder = Path(recorded)
    if not folder.is_dir():
        raise UsageError(
            f"{plan_path} was made with {flag} {folder}, which is no folder now",
            hint=f"give {flag} with the folder's new place, or make a new plan",
        )
    return folder


def _save(plan: SyncPlan, out_path: Path) -> None:
    try:
        out_path.write_text(json.dumps(plan.to_json(), indent=2))
    except OSError as exc:
        raise UsageError(
            f"cannot write the plan to {out_path}: {exc.strerror or exc}",
            hint="give --out a file in a folder that exists and is writable",
        ) from None


def _print_report(
    report: ApplyReport,
    fmt: str,
    plan: SyncPlan,
    requests: dict[str, int],
    printed: _Printed,
    *,
    from_dir: Path | None = None,
    from_hf_cache: Path | None = None,
) -> None:
    say = printed.say
    if fmt == "json":
        say(
            json.dumps(
                {
                    "plan": plan.to_json(),
                    "uploaded": [i.key for i in report.uploaded],
                    "verified": [i.key for i in report.verified],
                    "deleted": [i.key for i in report.deleted],
                    "bytes_uploaded": report.bytes,
                    "errors": [
                        {"key": i.key, "model": i.model, "path": i.path, "error": str(e)} for i, e in report.errors
                    ],
                    "requests": requests,
                    "requests_total": sum(requests.values()),
                },
                indent=2,
            )
        )
    else:
        say(
            f"uploaded {len(report.uploaded)} ({human_bytes(report.bytes)}), verified {len(report.verified)}, "
            f"deleted {len(report.deleted)}, {plural(len(report.errors), 'error')}; {plural(sum(requests.values()), 'request')}",
            err=True,
        )
    for _item, error in report.errors:
        say(f"error: {redact(str(error))}", err=True)
    for hint in _hints(report, from_dir, from_hf_cache):
        say(f"hint: {redact(hint)}", err=True)


def _hints(report: ApplyReport, from_dir: Path | None, from_hf_cache: Path | None) -> list[str]:
    """What to do about the failures, each said once (not once per file): the errors' own hints, and where the bytes
    can come from instead when the Hub failed to give them."""
    hints = list(dict.fromkeys(e.hint for _, e in report.errors if e.hint))
    # A failure of the Hub as a source names it by its URL, hf://repo@revision (resolver/hub.py's HubStore).
    if any("hf://" in e.message for _, e in report.errors):
        lacking = (
            "the files --from-dir / --from-hf-cache lacked came from the Hub"
            if from_dir or from_hf_cache
            else "without --from-dir the files come from the Hub at each pin's revision"
        )
        hints.append(
            f"{lacking}; to upload from a folder holding them instead: catalog sync --from-dir DIR "
            "(DIR/<name>/ per model), or --from-hf-cache DIR for a Hugging Face cache"
        )
    return hints


def render_text(plan_: SyncPlan) -> str:
    """Like a terraform plan: counts and bytes per action, then each change."""
    lines = []
    for item in plan_.items:
        if item.action is Action.OK:
            continue
        where = f"{item.model}/{item.path}" if item.model else item.key
        mark = {
            "upload": "+",
            "replace": "!",
            "verify": "?",
            "extra": "-" if plan_.prune else "~",
            "orphan": "-" if plan_.delete_orphans else "~",
        }[item.action.value]
        lines.append(
            f"  {mark} {item.action.value:<8} {where}  ({human_bytes(item.size)}){'  ' + item.reason if item.reason else ''}"
        )
    summary = ", ".join(
        f"{len(plan_.by_action(a))} {a.value} ({human_bytes(sum(i.size for i in plan_.by_action(a)))})"
        for a in Action
        if plan_.by_action(a)
    )
    lines.append(f"Plan for {plan_.store}: {summary or 'no files'}")
    if not plan_.drift:
        lines.append("No changes: the store matches the manifests.")
    kept = [i for i in plan_.items if i.action in (Action.EXTRA, Action.ORPHAN) and i not in plan_.deletions]
    if kept:
        lines.append(
            f"  {len(kept)} extra/orphan object(s) kept: pass --prune (and --delete-orphans for orphans) to delete them"
        )
    return "\n".join(lines)


def render_markdown(plan_: SyncPlan) -> str:
    """The plan as a CI summary: a count per action, then a row per change."""
    counts = table(
        ("action", "objects", "bytes"),
        [
            (a.value, len(plan_.by_action(a)), human_bytes(sum(i.size for i in plan_.by_action(a))))
            for a in Action
            if plan_.by_action(a)
        ],
    )
    changes = [
        (i.action.value, f"{i.model}/{i.path}" if i.model else i.key, human_bytes(i.size), i.reason)
        for i in plan_.items
        if i.action is not Action.OK
    ]
    verdict = (
        "**drift**: the store differs from the manifests"
        if plan_.drift
        else "**no drift**: the store matches the manifests"
    )
    parts = [f"### catalog sync: {plan_.store}", "", verdict, "", counts]
    if changes:
        parts += ["", table(("action", "object", "size", "why"), changes)]
    return "\n".join(parts)


COMMANDS = (sync_command,)
