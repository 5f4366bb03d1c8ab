"""The warm path of `catalog resolve`: the answer of an earlier identical call, given before anything heavy loads.

CI calls `catalog resolve NAME` in every job; once a model is in the cache, the answer only changes if an input
changes. After a successful resolve the full CLI records an index entry (`record`) under a key made of the call's
own inputs: the parsed request (names, layout, weights), the flags given, the environment variables the settings
are built from, and the catalog and cache folders resolved through symlinks (so `--cache DIR` and
CATALOG_CACHE=DIR share an entry, and so does any working directory when no setting names a relative path). The
entry holds the sha256 of every file the answer rests on (manifests, catalog.yaml, and the signatures and trust
anchors the full CLI verified), the markers of the views it used, and the answer already rendered in every output
format. Here the same key is computed, those files re-hashed (a few KiB), every view file stat'ed against its
marker, and the stored text printed. Anything else (another command, an unknown flag, a changed input, a setting
the full CLI warns about) goes to the full CLI, which records again.

A stream URI vouches for bytes in the store, which no stat here can see change: an answer that streams rests on
the proof the full CLI made when it recorded the entry, for at most `Settings.stream_proof_max_age` seconds
(CATALOG_STREAM_PROOF_MAX_AGE, 300); older, the full CLI proves the objects again. An answer that hands the weights
to the engine's verified loader (`--load-format catalog`) needs no such proof: the engine hashes every tensor
itself. Whether that loader is handed out by default depends on vLLM being installed: the entry keeps the path
that said so, and one stat of it must say the same. Offline, no streamed answer is recorded at all (the full CLI
makes the weights local).

Start-up is the cost here (`docs/benchmarks.md`): this module imports only os, json and time from the standard
library, the interpreter's built-in sha256, and three modules of ours written the same way (catalog/front_door.py,
catalog/locations.py, resolver/view_stamps.py); no dataclasses, pathlib, typing or logging, and hashlib only for an
input over 1 MiB.
"""

from __future__ import annotations

import json
import os
import time

from catalog import __version__, front_door, locations
from resolver import view_stamps

TYPE_CHECKING = False  # typing's import is a measurable share of a warm resolve; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path
    from typing import Any

    from catalog.settings import Settings
    from resolver.resolution import Resolution

# The interpreter's own sha256, not hashlib's: hashlib loads OpenSSL's libcrypto, about 10 ms of a 50 ms warm answer,
# to hash a few KiB here. OpenSSL is about 7x faster per byte, so a larger input (BUILTIN_SHA256_MAX, a manifest of
# thousands of files) is hashed with hashlib, as the transfers hash gigabytes. The digests are the same either way.
# CPython names the module _sha256 up to 3.11, _sha2 from 3.12; an interpreter built without them uses hashlib.
if TYPE_CHECKING:
    from hashlib import sha256 as sha256  # re-exported: warm_sync keys its entries the same way
else:
    try:
        from _sha256 import sha256
    except ImportError:
        try:
            from _sha2 import sha256
        except ImportError:
            from hashlib import sha256

BUILTIN_SHA256_MAX = 1024 * 1024  # bytes: above this, OpenSSL's speed pays for its load (5 ms of hashing a MiB here)
INDEX_VERSION = 5  # 4: proved_at; 5: keyed by the call's own inputs, answers stored rendered
INDEX_FOLDER = front_door.WARM_INDEX.name  # <cache>/warm-index/<key>.json

# What this path reads of the call, all from the front door's one table (catalog/front_door.py), which the full CLI
# declares its options from and Settings reads its variables by: which flags it answers (a call with any other goes to
# the full CLI), which variables enter the key as they are and which name the catalog and cache folders (entering it
# resolved instead), and which may name something relative to the working directory (which then enters it too).
# XDG_CACHE_HOME enters as it is: a relative one is ignored with a warning, which only the full CLI prints (it never
# records such a call).
_REQUEST = ("fmt", "layout", "materialize_weights")  # the request proper; every other flag is a setting
_DEFAULTS = {f.dest: f.default for f in front_door.RESOLVE if f.default is not None}
_CATALOG_VARIABLE, _CACHE_VARIABLE = front_door.placing(front_door.CATALOG), front_door.placing(front_door.CACHE)
CATALOG_FLAG = front_door.flag_for(front_door.GROUP, _CATALOG_VARIABLE).dest
CACHE_FLAG = front_door.flag_for(front_door.RESOLVE, _CACHE_VARIABLE).dest
KEY_VARIABLES = tuple(v.name for v in front_door.VARIABLES if v.warm == front_door.KEYED)
_PATH_FLAGS = tuple(f.dest for f in front_door.RESOLVE if f.path)
_PATH_VARIABLES = tuple(v.name for v in front_door.VARIABLES if v.path)


class ResolveRequest:
    """`catalog resolve` as it was called, parsed: the models and layout asked for, the output format, and the
    settings flags as given (`catalog_dir` from the group's --catalog among them)."""

    __slots__ = ("names", "layout", "materialize_weights", "fmt", "flags")

    def __init__(
        self,
        names: Sequence[str],
        layout: str | None = None,
        materialize_weights: bool = False,
        fmt: str | None = None,
        flags: Mapping[str, Any] | None = None,
    ) -> None:
        self.names = tuple(names)
        self.layout = str(_DEFAULTS["layout"]) if layout is None else layout
        self.materialize_weights = materialize_weights
        self.fmt = str(_DEFAULTS["fmt"]) if fmt is None else fmt
        self.flags = dict(flags or {})


def parse_argv(argv: Sequence[str]) -> ResolveRequest | None:
    """`[--catalog DIR] resolve NAME... [flags]` -> a request; None for anything the warm path does not answer."""
    parsed = front_door.parse(argv, "resolve", front_door.RESOLVE)
    if parsed is None or not parsed[0]:
        return None
    names, values = parsed
    layout, fmt = values.get("layout"), values.get("fmt")
    return ResolveRequest(
        names,
        layout=None if layout is None else str(layout),
        fmt=None if fmt is None else str(fmt),
        materialize_weights=bool(values.get("materialize_weights")),
        flags={k: v for k, v in values.items() if k not in _REQUEST},
    )


def _folder(given: str) -> str:
    return os.path.realpath(os.path.expanduser(given))


def place(request: ResolveRequest, env: Mapping[str, str]) -> tuple[str, str] | None:
    """The catalog folder and the cache folder this call uses, resolved as `Settings` finds them; None where the full
    CLI would fail to find one (it says why)."""
    catalog = request.flags.get(CATALOG_FLAG) or env.get(_CATALOG_VARIABLE) or None
    if catalog is None:
        try:
            catalog = locations.find_catalog_dir(os.getcwd())
        except OSError:
            return None
        if catalog is None:
            return None
    given_cache = request.flags.get(CACHE_FLAG)
    cache = given_cache if given_cache is not None else (env.get(_CACHE_VARIABLE) or locations.default_cache_dir(env))
    if cache is None:
        return None
    return _folder(catalog), _folder(cache)


def _names_relative(value: Any) -> bool:
    """Whether a path-valued setting (a folder, a ':'-list of folders, 'hf:DIR', a ','-list of URLs) names anything
    relative to the working directory."""
    for item in value if isinstance(value, list) else str(value).split(","):
        if "://" in item:
            continue
        for part in item.split(":"):
            part = part.strip()
            if part and part != "hf" and not part.startswith(("/", "~")):
                return True
    return False


def index_key(request: ResolveRequest, env: Mapping[str, str], catalog: str, cache: str) -> str:
    """Equal for calls that must get the same answer; any input the settings are built from changes it."""
    flags = {k: v for k, v in request.flags.items() if k not in (CATALOG_FLAG, CACHE_FLAG)}
    variables = {name: env[name] for name in KEY_VARIABLES if env.get(name)}  # empty counts as unset, as in Settings
    relative = any(_names_relative(flags[k]) for k in _PATH_FLAGS if k in flags) or any(
        _names_relative(variables[v]) for v in _PATH_VARIABLES if v in variables
    )
    material = {
        "version": [INDEX_VERSION, __version__],
        "names": list(request.names),
        "layout": request.layout,
        "materialize_weights": request.materialize_weights,
        "flags": flags,
        "env": variables,
        "catalog": catalog,
        "cache": cache,
        "cwd": os.getcwd() if relative else None,
    }
    return sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:40]


def sha256_of(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if len(data) > BUILTIN_SHA256_MAX:
        import hashlib

        return hashlib.sha256(data).hexdigest()
    return sha256(data).hexdigest()


def lookup(entry: Mapping[str, Any], fmt: str, now: float) -> str | None:
    """The stored answer in `fmt`, if every input it rests on still holds."""
    if entry.get("version") != INDEX_VERSION:
        return None
    text = entry["outputs"].get(fmt)
    inputs = entry["inputs"]
    if text is None or not inputs or any(sha256_of(path) != digest for path, digest in inputs.items()):
        return None
    if not proof_holds(entry, now):
        return None
    probe = entry.get("engine_probe")
    if probe is not None and os.path.exists(probe[0]) is not probe[1]:
        return None  # vLLM (and so the verified loader) was installed or removed since
    markers: dict[str, dict[str, Any]] = {}
    for path in entry["markers"]:
        try:
            with open(path, "rb") as f:
                markers[path] = json.loads(f.read())
        except (OSError, ValueError):
            return None
    if not markers or not all(_marker_holds(entry["cache"], m) for m in markers.values()):
        return None
    watched = entry["local_when"]
    if watched and all(os.path.isfile(blob) for blob in watched):
        return None  # a streamed answer whose weights are at hand by now: --prefer local answers with the folder
    for path, marker in markers.items():  # a warm answer is a use too (gc evicts least recently used first)
        view_stamps.note_used(path, marker, view_stamps.RESOLVED_AT_EVERY, now)
    return str(text)


def _marker_holds(cache: str, marker: Mapping[str, Any]) -> bool:
    return marker.get("version") == view_stamps.MARKER_VERSION and view_stamps.view_holds(
        cache, marker["path"], marker["files"], marker.get("dirs", {})
    )


def proof_holds(entry: Mapping[str, Any], now: float) -> bool:
    """Pure: an answer that streams may be given only while the proof behind it is young enough."""
    valid_until = entry["valid_until"]
    return valid_until is None or float(entry["proved_at"]) <= now <= float(valid_until)


def answer(argv: Sequence[str], env: Mapping[str, str] = os.environ) -> str | None:
    """What the full CLI would print for `argv` now, if the warm index can tell; else None."""
    request = parse_argv(argv)
    if request is None:
        return None
    where = place(request, env)
    if where is None:
        return None
    try:
        key = index_key(request, env, *where)  # may ask for the working directory, which may be gone
        with open(os.path.join(where[1], INDEX_FOLDER, f"{key}.json"), "rb") as f:
            entry = json.loads(f.read())
        return lookup(entry, request.fmt, time.time())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def record(
    argv: Sequence[str],
    settings: Settings,
    inputs: Sequence[Path],
    results: Sequence[Resolution],
    local_when: Sequence[Path] = (),
    proved_at: float | None = None,
    env: Mapping[str, str] = os.environ,
) -> None:
    """Called by the full CLI after a successful resolve of `argv` (begun at `proved_at`: no proof it made is older);
    failures to record are harmless. `local_when`: the cache blobs of streamed weights which, once all present, make
    the full CLI answer with a local folder instead."""
    from catalog_app import outputs
    from resolver import engines

    request = parse_argv(argv)
    if request is None or settings.ignored:
        return  # a call the warm path never answers, or one whose warnings only the full CLI prints
    where = place(request, env)
    streams = any(r.streams for r in results)
    unproved = any(r.streams and r.verified_loader is None for r in results)  # a URI handed to an unverifying loader
    if where is None or (streams and settings.offline):
        return
    answers = [r.from_cache() for r in results]
    rendered: dict[str, str] = {}
    for fmt in outputs.OUTPUTS:
        if fmt in outputs.ONE_MODEL_FORMATS and len(request.names) > 1:
            continue  # the full CLI refuses these before resolving
        try:
            rendered[fmt] = outputs.render(answers, fmt)
        except outputs.OutputError:
            continue
    began = time.time() if proved_at is None else proved_at
    try:
        digests: dict[str, str] = {}
        for path in inputs:
            # As the full CLI opened it, joined to the working directory but not normalized: `LINK/../ci.pub` read
            # through LINK's target now and at every lookup (abspath would drop `LINK/..` and watch another file), and
            # not resolved either, so a symlink retargeted later is read anew.
            where_read = os.path.join(os.getcwd(), path)
            digest = sha256_of(where_read)
            if digest is None:
                return
            digests[where_read] = digest
        entry = {
            "version": INDEX_VERSION,
            "inputs": digests,
            "cache": where[1],
            "outputs": rendered,
            "markers": sorted({str(m) for r in results for m in r.markers}),
            "local_when": [str(b) for b in local_when] if settings.prefer == "local" else [],
            "proved_at": began,
            "valid_until": began + settings.stream_proof_max_age if unproved else None,
            "engine_probe": list(engines.vllm_probe()) if streams and settings.engine_loader == "auto" else None,
        }
        folder = os.path.join(where[1], INDEX_FOLDER)
        os.makedirs(folder, exist_ok=True)
        view_stamps.replace_atomically(
            os.path.join(folder, f"{index_key(request, env, *where)}.json"), json.dumps(entry).encode()
        )
    except OSError:
        pass
