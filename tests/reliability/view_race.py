"""Rounds of concurrent `catalog resolve` processes building one view, with `catalog gc` looping beside them.

    python tests/reliability/view_race.py --catalog DIR --store URL --cache DIR --model NAME --rounds N [--processes 6]

Run by tests/reliability/test_rel_concurrency.py (and by hand, for more rounds). Each round clears the views and
markers (the blobs stay, so every process reaches the build at about the same moment: that is where builders of one
view meet), or damages the view of the round before (a file dropped in, a pinned file rewritten: every process finds
it stale and repairs it at once). Then it forks the processes, released together: `--processes` resolves, `--readers`
resolves again and again until those end (a warm answer once the view is marked), and one `catalog gc` again and
again, each running the real CLI entry point (`catalog resolve NAME --format json`, the warm answer first, as
`catalog` does). Forking from one interpreter that imported the CLI already makes a process cost
its resolve, not Python's start-up, so a round takes a fraction of a second on two cores.

Right after each round, before the next one touches the cache, every path a process printed is checked from the
outside (each pinned file there hashes to its pin). Prints one JSON report: per round, the exit codes, the
problems found and the stderr of every process that failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: reliability.support

from reliability.support import check_view_files, parse_json_results


def main() -> None:
    parser = argparse.ArgumentParser()
    for flag in ("--catalog", "--store", "--cache", "--model"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--processes", type=int, default=6, help="resolves that start together")
    parser.add_argument("--readers", type=int, default=2, help="resolves that run again and again until those end")
    args = parser.parse_args()
    os.environ.update({"CATALOG_DIR": args.catalog, "CATALOG_STORE": args.store, "CATALOG_CACHE": args.cache})
    import catalog

    manifest = catalog.load(Path(args.catalog)).get(args.model)
    cache = Path(args.cache)
    work = Path(tempfile.mkdtemp(prefix="view-race-"))
    try:
        _warm_up(args.model)
        report = [_round(i, args, manifest, cache, work) for i in range(args.rounds)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report))


def _warm_up(model: str) -> None:
    """Resolve and gc once in this process, output discarded: every module the children need is imported here."""
    saved = os.dup(1), os.dup(2)
    sys.stdout.flush()
    sys.stderr.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        for argv in (["resolve", model, "--format", "json"], ["resolve", model, "--layout", "hf-cache"], ["gc"]):
            _cli(argv)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def _round(i: int, args: argparse.Namespace, manifest: Any, cache: Path, work: Path) -> dict[str, Any]:
    """One round: dir layout from nothing, then twice a damaged dir view, then hf-cache from nothing."""
    kind = ("dir", "damaged", "damaged", "hf-cache")[i % 4]
    argv = ["resolve", args.model, "--format", "json", *(["--layout", "hf-cache"] if kind == "hf-cache" else [])]
    if kind == "damaged":
        _damage(cache, args.model)
    else:
        for folder in ("models", "markers", "hub"):
            shutil.rmtree(cache / folder, ignore_errors=True)
    shutil.rmtree(cache / "warm-index", ignore_errors=True)
    out = work / str(i)
    out.mkdir(parents=True)
    done = out / "done"
    release = os.pipe()
    builders = [
        _fork(lambda: _resolve_once(argv, manifest), out / f"build-{n}", release) for n in range(args.processes)
    ]
    readers = [
        _fork(lambda: _resolve_until(argv, manifest, done), out / f"read-{n}", release) for n in range(args.readers)
    ]
    gc = _fork(lambda: _gc_until(done), out / "gc", release)
    os.close(release[0])
    os.close(release[1])  # end of file: every process goes at once
    codes = {f"build-{n}": _wait(pid) for n, pid in enumerate(builders)}
    done.touch()
    codes |= {f"read-{n}": _wait(pid) for n, pid in enumerate(readers)}
    codes["gc"] = _wait(gc)
    failed = {
        name: (out / f"{name}.out").read_text()[-1500:] + (out / f"{name}.err").read_text()[-1500:]
        for name, code in codes.items()
        if code != 0
    }
    resolves = sum(len((out / f"{name}.out").read_text().splitlines()) for name in codes if name != "gc")
    return {
        "round": i,
        "kind": kind,
        "failed": failed,
        "resolves": resolves,
        "gc_runs": (out / "gc.out").read_text().count("gc exit "),
    }


def _resolve_once(argv: list[str], manifest: Any) -> int:
    """`catalog resolve` once; each path it prints is checked at once (one JSON line: exit code and problems)."""
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = _cli(argv)
    problems = (
        [p for result in parse_json_results(printed.getvalue()) for p in check_view_files(result, manifest)]
        if code == 0
        else []
    )
    print(json.dumps({"code": code, "problems": problems}), flush=True)
    return code or (1 if problems else 0)


def _resolve_until(argv: list[str], manifest: Any, done: Path) -> int:
    """A reader: `catalog resolve` again and again (a warm answer once the view is marked) until the builders end."""
    code = 0
    while code == 0 and not done.exists():
        code = _resolve_once(argv, manifest)
    return code


def _gc_until(done: Path) -> int:
    code = 0
    while code == 0 and not done.exists():
        code = _cli(["gc"])
        print(f"gc exit {code}", flush=True)
    return code


def _damage(cache: Path, model: str) -> None:
    """The dir view of the round before, stale: a file no manifest pins dropped in, and config.json rewritten (a new
    file with other bytes: the blob behind the old one stays intact)."""
    for view in (cache / "models" / model).iterdir():
        if view.name.startswith("."):
            continue  # a staging folder (none should be left)
        (view / "modeling_extra.py").write_text("print('not pinned')\n")
        config = view / "config.json"
        config.unlink()
        config.write_text('{"model_type": "tampered"}')


def _fork(body: Callable[[], int], out: Path, release: tuple[int, int]) -> int:
    """A child running `body` (its exit code) with stdout and stderr in `out`.out/.err, once the pipe `release`
    reaches its end."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 3
    try:
        os.dup2(os.open(f"{out}.out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
        os.dup2(os.open(f"{out}.err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
        os.close(release[1])
        os.read(release[0], 1)
        code = body()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _cli(argv: list[str]) -> int:
    """What `catalog ARGV` does (the warm answer, else the full CLI), as an exit code."""
    from catalog_app import main

    sys.argv = ["catalog", *argv]
    try:
        main.main()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    return 0


def _wait(pid: int) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


if __name__ == "__main__":
    main()
