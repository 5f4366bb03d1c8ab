"""The warm path of `catalog resolve`, in the standard library alone.

CI calls `catalog resolve NAME` in every job; once a model is in the cache, the answer only changes if
an input changes. After a successful resolve the full CLI records a small index entry: the command
line and the environment that shape it, the sha256 of every manifest file it read, the markers of
the views it used, and what it printed. Here, before click, pydantic or any store is imported, that
entry is checked (manifests re-hashed: a few KiB; every view file stat'ed against its marker, as
the full warm path does) and, if all still holds, the same output is printed. Anything else
(another command, -v, an unknown flag, a changed manifest or file) goes to the full CLI.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from catalog.settings import default_cache_dir

INDEX_VERSION = 1
# Flags of `resolve` whose effect is fully captured by the recorded inputs.
VALUE_FLAGS = {"--format", "--layout", "--source", "--store", "--cache", "--part-size", "--concurrency"}
BOOL_FLAGS = {"--materialize-weights", "--offline"}
ENV_PREFIXES = ("CATALOG_", "AWS_ENDPOINT_URL", "AWS_PROFILE", "HF_ENDPOINT", "RUNAI_")


def index_key(argv: Sequence[str], env: Mapping[str, str], cwd: str) -> str | None:
    """The index entry's name for this invocation, or None when it is not a plain warm-able resolve."""
    args = list(argv)
    if args[:1] == ["--catalog"] and len(args) >= 2:
        args = args[2:]
    if not args or args[0] != "resolve":
        return None
    rest = args[1:]
    i = 0
    names = 0
    while i < len(rest):
        arg = rest[i]
        if arg in VALUE_FLAGS:
            i += 2
            continue
        if arg in BOOL_FLAGS:
            i += 1
            continue
        if arg.startswith("-"):
            return None  # --all, -v, --help, or something new: the full CLI decides
        names += 1
        i += 1
    if names == 0:
        return None
    shaping = {k: v for k, v in sorted(env.items()) if k.startswith(ENV_PREFIXES)}
    material = json.dumps([INDEX_VERSION, list(argv), shaping, cwd])
    return hashlib.sha256(material.encode()).hexdigest()[:40]


def cache_root(argv: Sequence[str], env: Mapping[str, str]) -> Path:
    args = list(argv)
    if "--cache" in args and args.index("--cache") + 1 < len(args):
        return Path(args[args.index("--cache") + 1]).expanduser().resolve()
    value = env.get("CATALOG_CACHE")
    return (Path(value) if value else default_cache_dir(env)).expanduser().resolve()


def index_path(root: Path, key: str) -> Path:
    return root / "warm-index" / f"{key}.json"


def _sha256(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _marker_holds(marker_path: str) -> bool:
    try:
        marker: dict[str, Any] = json.loads(Path(marker_path).read_bytes())
        root = Path(marker["path"])
        for rel, (size, mtime_ns, inode, _sha) in marker["files"].items():
            st = os.stat(root / rel)
            if (st.st_size, st.st_mtime_ns, st.st_ino) != (size, mtime_ns, inode):
                return False
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return True


def warm_answer(argv: Sequence[str], env: Mapping[str, str], cwd: str) -> str | None:
    """What the full CLI printed for this same invocation, if every input it depended on still holds."""
    key = index_key(argv, env, cwd)
    if key is None:
        return None
    try:
        entry: dict[str, Any] = json.loads(index_path(cache_root(argv, env), key).read_bytes())
    except (OSError, ValueError):
        return None
    if entry.get("version") != INDEX_VERSION:
        return None
    inputs = entry.get("inputs", {})
    if not inputs or any(_sha256(path) != digest for path, digest in inputs.items()):
        return None
    markers = entry.get("markers", [])
    if not markers or not all(_marker_holds(m) for m in markers):
        return None
    stdout = entry.get("stdout")
    return stdout if isinstance(stdout, str) else None


def record(argv: Sequence[str], env: Mapping[str, str], cwd: str, inputs: Sequence[Path], markers: Sequence[Path], stdout: str) -> None:
    """Called by the full CLI after a successful resolve; failures to record are harmless."""
    key = index_key(argv, env, cwd)
    if key is None:
        return
    digests = {str(p): _sha256(str(p)) for p in inputs}
    if None in digests.values():
        return
    data = json.dumps({"version": INDEX_VERSION, "inputs": digests, "markers": [str(m) for m in markers], "stdout": stdout})
    path = index_path(cache_root(argv, env), key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{os.getpid()}")
        temp.write_text(data)
        os.replace(temp, path)
    except OSError:
        pass


def main() -> None:
    """Console entry point: answer a warm resolve from the index, else run the full CLI."""
    argv = sys.argv[1:]
    answer = warm_answer(argv, os.environ, os.getcwd())
    if answer is not None:
        sys.stdout.write(answer)
        sys.stdout.flush()
        return
    from catalog.cli import main as full_cli

    full_cli(argv)
