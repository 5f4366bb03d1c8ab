"""The console entry point: answer a warm resolve from the index, else run the full CLI; map every outcome
to an exit code.

    0 ok    1 problems found / drift    2 usage    3 internal error (a bug: one line, the traceback only
    with CATALOG_DEBUG=1 or -vv)    130 interrupted

Results go to stdout, messages to stderr; a CatalogError is one `error:` line plus a `hint:` line.
"""

from __future__ import annotations

import gc
import os
import sys

TYPE_CHECKING = False  # typing's import is a measurable share of a warm resolve; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Sequence

OK, PROBLEMS, USAGE, INTERNAL, INTERRUPTED = 0, 1, 2, 3, 130


def run(argv: Sequence[str], collect_after_start: bool = False) -> int:
    """The full CLI for `argv`, as an exit code; never raises (in-process callers and tests use this).
    `collect_after_start`: the console's own process, whose cyclic collector is off until the catalog is loaded
    (catalog_app/context.py `load_catalog`)."""
    import click

    from catalog.errors import CatalogError
    from catalog.urls import redact
    from catalog_app.cli import cli

    args = list(argv)
    try:
        code = cli.main(
            args=args,
            prog_name="catalog",
            standalone_mode=False,
            obj={"argv": args, "collect_after_start": collect_after_start},
        )
    except (click.exceptions.Abort, KeyboardInterrupt):
        print("interrupted", file=sys.stderr)
        return INTERRUPTED
    except click.ClickException as exc:
        exc.show()
        return USAGE if exc.exit_code == 2 else exc.exit_code
    except CatalogError as exc:
        print(f"error: {redact(exc.message)}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {redact(exc.hint)}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        return OK  # the reader went away (`| head`): nothing left to say
    except Exception as exc:  # noqa: BLE001 - the last line of defence: a bug, said in one line
        if _debug(args):
            import traceback  # only here: the warm path's start-up never pays for it

            traceback.print_exc()
        first = redact(str(exc).splitlines()[0][:300]) if str(exc) else ""
        print(f"error: internal error: {type(exc).__name__}: {first}", file=sys.stderr)
        print(
            "hint: this is a bug in model-catalog: rerun with CATALOG_DEBUG=1 (or -vv) and file an issue with "
            "the traceback",
            file=sys.stderr,
        )
        return INTERNAL
    return code if isinstance(code, int) else OK


def _debug(args: Sequence[str]) -> bool:
    """-vv (or --verbose twice) or CATALOG_DEBUG=1."""
    from catalog.errors import CatalogError
    from catalog.settings import Settings

    verbose = sum(len(a) - 1 for a in args if a.startswith("-v") and set(a[1:]) == {"v"}) + args.count("--verbose")
    try:
        return verbose >= 2 or Settings.from_process().debug
    except CatalogError:
        return verbose >= 2


def main() -> None:
    """`catalog ...`: the warm answer when the index has one, else the full CLI."""
    argv = sys.argv[1:]
    # The start-up (click, pydantic's models, our modules, a manifest of 1,000 files) makes a few hundred thousand
    # objects that live until exit, and the cyclic collector walked them again and again meanwhile: 14-18% of a cold
    # resolve's CPU before its first request. Off until the catalog is loaded, then on for the command's own work (a
    # warm answer, or a command that loads no catalog, runs without it: a short process; a cold resolve of 1,000
    # files leaves about 500 objects of cyclic garbage in all).
    gc.disable()
    from catalog_app import warm

    answer = warm.answer(argv)
    if answer is not None:
        sys.stdout.write(answer)
        sys.stdout.flush()
        return
    if "sync" in argv:
        from catalog_app import warm_sync

        said = warm_sync.answer(argv)
        if said is not None:
            sys.stdout.write(said[0])
            sys.stdout.flush()
            sys.stderr.write(said[1])
            sys.exit(said[2])
    # pydantic reads the entry points of every installed distribution, looking for plugins, when it builds its first
    # model: about 50 ms in a venv of 230 packages (an engine's CI), a seventh of a cold resolve's start-up. The CLI
    # uses no plugin; a value the user set is kept.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    code = run(argv, collect_after_start=True)
    # Skip the interpreter's final garbage collection (tens of ms after a large resolve): frozen objects are
    # left to the operating system, which reclaims the whole process anyway.
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    main()
