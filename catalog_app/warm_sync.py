"""The warm path of a `catalog sync` that changes nothing: the answer of an earlier identical call, given after the
same listings of the store and before anything heavy loads.

A scheduled `catalog sync --check`, or a sync on every merge, mostly finds nothing to do, and the full CLI then
spends most of its time starting up (pydantic, every manifest parsed and checked, the planner) to print the same
lines again. A sync's plan is a pure function of the manifests, the store's listings (the sync states it reads are
named by their ETags there) and the flags (resolver/sync.py, `plan`). So after a run that planned no change and
made no request but its listings, the full CLI records (`record`), under a key made of the call as typed, the
variables the settings are read from, the working directory and the catalog and cache folders: the sha256 of
catalog.yaml and of every manifest, the identity of every folder of the catalog (a manifest added or removed
changes one), how it reached the store and a digest of each listing, and what it printed. Here the same key is
computed, the files re-hashed and the folders stat'ed, the same listings made again through the same data plane
(obstore, signed with the environment's keys: resolver/stores/aws_env.py), and the recorded lines printed only
when every listing is the same. Anything else goes to the full CLI, which records again.

Only S3 stores listed through that data plane, with the environment's keys or unsigned and with the system's CA
roots, are answered here; the flags answered are those that cannot change a plan that changes nothing.
"""

from __future__ import annotations

import json
import os

from catalog import __version__, front_door
from catalog_app import warm
from resolver import view_stamps

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from catalog.settings import Settings
    from resolver.stores.base import Store

ENTRY_VERSION = 1
# The longest the warm path waits on the store, connecting or between bytes: a store that stalls sends the call to the
# full CLI, which retries and says what it waits for (resolver/waits.py), instead of a silent wait of the full timeouts.
LIST_WAIT_SECONDS = 5.0
# The flags (by dest) naming the folders the entry depends on: the catalog's and the cache's, which enter the key
# resolved (warm.place), and the existing folders the full CLI requires (--from-dir), which must still be there.
_SOURCE_DIRS = tuple(f.dest for f in front_door.SYNC if f.warm and f.type == "dir")
_FOLDERS = (warm.CATALOG_FLAG, warm.CACHE_FLAG, *_SOURCE_DIRS)


def parse_argv(argv: Sequence[str]) -> dict[str, str] | None:
    """`[--catalog DIR] sync [NAME...] [flags]` -> the folders it names (see _FOLDERS), by dest; None for
    a call answered only by the full CLI (a flag the front door's SYNC table does not mark warm: --deep, --out,
    --apply, --replicate-to, -v, anything new)."""
    parsed = front_door.parse(argv, "sync", front_door.SYNC)
    if parsed is None:
        return None
    return {dest: str(value) for dest, value in parsed[1].items() if dest in _FOLDERS}


def _entry_path(argv: Sequence[str], places: Mapping[str, str], env: Mapping[str, str]) -> tuple[str, str] | None:
    """The entry's file and the catalog folder, as the settings find them (None: the full CLI would fail to find one)."""
    where = warm.place(warm.ResolveRequest(["sync"], flags=places), env)
    if where is None:
        return None
    variables = {name: env[name] for name in warm.KEY_VARIABLES if env.get(name)}
    material = {
        "version": [ENTRY_VERSION, __version__],
        "argv": list(argv),
        "env": variables,
        "catalog": where[0],
        "cache": where[1],
        "cwd": os.getcwd(),
    }
    key = warm.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:40]
    return os.path.join(where[1], warm.INDEX_FOLDER, f"sync-{key}.json"), where[0]


def folder_identities(root: str) -> dict[str, list[int]]:
    """Every folder under the catalog root (symlinked ones followed once): a file added, removed or renamed in one
    moves its mtime and ctime."""
    seen: set[str] = set()
    found: dict[str, list[int]] = {}
    for here, dirs, _ in os.walk(root, followlinks=True):
        real = os.path.realpath(here)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        st = os.stat(here)
        found[here] = [st.st_mtime_ns, st.st_ctime_ns]
    return found


def answer(argv: Sequence[str], env: Mapping[str, str] = os.environ) -> tuple[str, str, int] | None:
    """(stdout, stderr, exit code) of the full CLI for `argv` now, if a recorded no-op sync still holds; else None."""
    places = parse_argv(argv)
    if places is None:
        return None
    try:
        found = _entry_path(argv, places, env)
        if found is None or any(not os.path.isdir(places[d]) for d in _SOURCE_DIRS if d in places):
            return None
        with open(found[0], "rb") as f:
            entry = json.loads(f.read())
        if entry["version"] != ENTRY_VERSION or any(warm.sha256_of(p) != d for p, d in entry["inputs"].items()):
            return None
        if folder_identities(entry["catalog"]) != entry["folders"]:
            return None
        from resolver.stores import aws_env  # the stores' package, without the catalog's loader (pydantic) or boto3
        from resolver.stores.s3_gets import DataPlane, listing_digest, static_credentials

        access = dict(entry["access"])
        unsigned = access.pop("unsigned")
        for timeout in ("connect_timeout", "read_timeout"):
            access[timeout] = min(float(access[timeout]), LIST_WAIT_SECONDS)
        keys = None if unsigned else aws_env.environment_keys(env)
        if keys is None and not unsigned:
            return None  # the full CLI finds credentials elsewhere (boto3): it is the one to list
        plane = DataPlane(credentials=static_credentials(keys) if keys is not None else None, **access)
        for prefix, digest in entry["listed"]:
            listed = plane.list(prefix)
            if listed is None or listing_digest(listed[0]) != digest:
                return None
        return str(entry["stdout"]), str(entry["stderr"]), int(entry["code"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def record(
    argv: Sequence[str],
    settings: Settings,
    inputs: Sequence[str],
    store: Store,
    requests: Mapping[str, int],
    stdout: str,
    stderr: str,
    code: int,
    env: Mapping[str, str] = os.environ,
) -> None:
    """Called by the full CLI after a sync of `argv` that planned and made no change and printed no warning;
    recorded only when another process can make its listings again the same way. Failures to record are harmless."""
    listings = store.warm_listings()
    places = parse_argv(argv)
    if places is None or settings.ignored or listings is None or set(requests) != {"ListObjectsV2"}:
        return
    access, listed = listings
    try:
        found = _entry_path(argv, places, env)
        if found is None:
            return
        path, catalog = found
        digests: dict[str, str] = {}
        for input_path in inputs:
            digest = warm.sha256_of(input_path)
            if digest is None:
                return
            digests[input_path] = digest
        entry = {
            "version": ENTRY_VERSION,
            "inputs": digests,
            "catalog": catalog,
            "folders": folder_identities(catalog),
            "access": access,
            "listed": listed,
            "stdout": stdout,
            "stderr": stderr,
            "code": code,
        }
        os.makedirs(os.path.dirname(path), exist_ok=True)
        view_stamps.replace_atomically(path, json.dumps(entry).encode())
    except OSError:
        pass
