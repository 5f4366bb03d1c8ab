"""The warm path of `catalog resolve`, in the standard library alone.

CI calls `catalog resolve NAME` in every job; once a model is in the cache, the answer only changes if
an input changes. After a successful resolve the full CLI records an index entry under a key made of
the parsed request (names, layout, weights) and the built Settings (`Settings.fingerprint`: every
declared variable and flag, paths made absolute, the catalog folder resolved through symlinks). The
entry holds the sha256 of every manifest file the answer rests on (and, when signatures were required,
of each signature and trust anchor the full CLI verified: an answer never outlives a change to one), the
markers of the views it used, and the Resolutions themselves. Here, before click, pydantic or any store is imported, the same key is
computed, the manifests re-hashed (a few KiB) and every view file stat'ed against its marker, and the
answer is rendered by the same `outputs` the full CLI uses, as the full CLI would render it now (source
"cache"). Anything else (another command, an unknown flag, a changed input) goes to the full CLI.

A stream URI vouches for bytes in the store, which no stat here can see change: an answer that streams rests
on the proof the full CLI made when it recorded the entry (`proved_at`), for at most
`Settings.stream_proof_max_age` seconds (CATALOG_STREAM_PROOF_MAX_AGE, 300); older, the full CLI proves the
objects again. Offline, no streamed answer is given from here at all (the full CLI makes the weights local).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from catalog.errors import CatalogError
from catalog.settings import Settings
from resolver.cache import Cache, note_marker_used
from resolver.views import Marker
from resolver.fsutil import atomic_write
from resolver.resolution import Resolution

INDEX_VERSION = 4  # 3: answers carry the filesystem of the folder handed out (it decides engine arguments); 4: proved_at
LAYOUTS = ("dir", "hf-cache")


@dataclass(frozen=True)
class ResolveRequest:
    """What `catalog resolve` was asked, parsed: equal requests share one warm entry."""

    names: tuple[str, ...]
    layout: str = "dir"
    materialize_weights: bool = False
    fmt: str = "path"  # not part of the key: every format renders the same Resolutions
    settings_flags: dict[str, Any] = field(default_factory=dict)  # --store, --cache, ... as given

    def key_material(self) -> dict[str, Any]:
        return {"names": list(self.names), "layout": self.layout, "materialize_weights": self.materialize_weights}


# The `resolve` flags the warm path understands (mirroring the click command's, which a test compares with these:
# kind by kind, so a new flag of `resolve` fails that test until it is answered here or listed in FULL_CLI_ONLY);
# anything else goes to the full CLI. Standard library only: click is not imported here.
FULL_CLI_ONLY = {"--all", "--verify-stream"}  # never answered warm
_VALUE_FLAGS = {"--format": "fmt", "--layout": "layout", "--source": "source", "--store": "store", "--cache": "cache_dir",
                "--part-size": "part_size", "--concurrency": "concurrency", "--prefer": "prefer"}
_BOOL_FLAGS = {"--materialize-weights": "materialize_weights", "--offline": "offline",
               "--require-signature": "require_signature"}
_MULTI_FLAGS = {"--shared-cache": "shared_caches", "--mirror": "mirrors",  # repeatable: collected in order
                "--trusted-key": "trusted_keys", "--trusted-root": "trusted_roots"}
_SETTINGS_FLAGS = {"source", "store", "cache_dir", "part_size", "concurrency", "offline", "catalog_dir", "shared_caches", "mirrors",
                   "require_signature", "trusted_keys", "trusted_roots", "prefer"}


def parse_argv(argv: Sequence[str]) -> ResolveRequest | None:
    """`[--catalog DIR] resolve NAME... [flags]` -> a request; None for anything the warm path does not answer."""
    args = list(argv)
    values: dict[str, Any] = {}
    names: list[str] = []
    if args and (args[0] == "--catalog" or args[0].startswith("--catalog=")):
        if "=" in args[0]:
            values["catalog_dir"] = args[0].split("=", 1)[1]
            args = args[1:]
        elif len(args) >= 2:
            values["catalog_dir"] = args[1]
            args = args[2:]
    if not args or args[0] != "resolve":
        return None
    rest = args[1:]
    i = 0
    while i < len(rest):
        arg = rest[i]
        flag, eq, inline = arg.partition("=")
        if flag in _MULTI_FLAGS:
            if eq:
                values.setdefault(_MULTI_FLAGS[flag], []).append(inline)
                i += 1
            elif i + 1 < len(rest):
                values.setdefault(_MULTI_FLAGS[flag], []).append(rest[i + 1])
                i += 2
            else:
                return None
            continue
        if flag in _VALUE_FLAGS:
            if eq:
                values[_VALUE_FLAGS[flag]] = inline
                i += 1
            elif i + 1 < len(rest):
                values[_VALUE_FLAGS[flag]] = rest[i + 1]
                i += 2
            else:
                return None
            continue
        if arg in _BOOL_FLAGS:
            values[_BOOL_FLAGS[arg]] = True
            i += 1
            continue
        if arg.startswith("-"):
            return None  # --all, -v, --help, or something new: the full CLI decides
        names.append(arg)
        i += 1
    if not names or values.get("layout", "dir") not in LAYOUTS:
        return None
    return ResolveRequest(
        names=tuple(names), layout=str(values.get("layout", "dir")),
        materialize_weights=bool(values.get("materialize_weights")), fmt=str(values.get("fmt", "path")),
        settings_flags={k: v for k, v in values.items() if k in _SETTINGS_FLAGS},
    )


def index_key(request: ResolveRequest, settings: Settings, catalog_dir: Path) -> str:
    material = json.dumps([INDEX_VERSION, _version(), request.key_material(), settings.fingerprint(),
                           str(catalog_dir.resolve())], sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()[:40]


def _version() -> str:
    from catalog import __version__

    return __version__


def _sha256(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def lookup(request: ResolveRequest, settings: Settings) -> list[Resolution] | None:
    """The Resolutions recorded for this request, if every input they rest on still holds."""
    cache = Cache(settings.cache_dir)
    try:
        key = index_key(request, settings, settings.find_catalog_dir())
        entry: dict[str, Any] = json.loads((cache.warm_index / f"{key}.json").read_bytes())
        if entry.get("version") != INDEX_VERSION:
            return None
        inputs = entry["inputs"]
        if not inputs or any(_sha256(path) != digest for path, digest in inputs.items()):
            return None
        if not proof_holds(entry, settings):
            return None
        markers = {Path(m): Marker.read(Path(m)) for m in entry["markers"]}
        if not markers or not all(m is not None and cache.marker_holds(m) for m in markers.values()):
            return None
        watched = entry.get("local_when") or []
        if watched and all(Path(blob).is_file() for blob in watched):
            return None  # a streamed answer whose weights are at hand by now: --prefer local answers with the folder
        for path, marker in markers.items():
            note_marker_used(path, marker)  # a warm answer is a use too (gc evicts least recently used first)
        return [Resolution.from_record(r) for r in entry["records"]]
    except (OSError, ValueError, KeyError, TypeError, CatalogError):
        return None


def proof_holds(entry: dict[str, Any], settings: Settings, now: float | None = None) -> bool:
    """Pure: an entry whose answers stream may be given only while its proof is young enough, and never offline."""
    if not any(record.get("streamed") for record in entry["records"]):
        return True
    if settings.offline:
        return False
    age = (time.time() if now is None else now) - float(entry.get("proved_at", 0.0))
    return 0 <= age <= settings.stream_proof_max_age


def record(request: ResolveRequest, settings: Settings, catalog_dir: Path, inputs: Sequence[Path],
           results: Sequence[Resolution], local_when: Sequence[Path] = (), proved_at: float | None = None) -> None:
    """Called by the full CLI after a successful resolve (begun at `proved_at`: no proof it made is older); failures
    to record are harmless. `local_when`: the cache blobs of streamed weights which, once all present, make the full
    CLI answer with a local folder instead."""
    digests = {str(p.resolve()): _sha256(str(p.resolve())) for p in inputs}
    if None in digests.values():
        return
    data = {"version": INDEX_VERSION, "request": asdict(request) | {"settings_flags": {}},
            "inputs": digests, "markers": sorted({str(m) for r in results for m in r.markers}),
            "records": [r.from_cache().record() for r in results],
            "local_when": [str(b) for b in local_when] if settings.prefer == "local" else [],
            "proved_at": time.time() if proved_at is None else proved_at}
    cache = Cache(settings.cache_dir)
    try:
        atomic_write(cache.warm_index / f"{index_key(request, settings, catalog_dir)}.json", json.dumps(data).encode())
    except OSError:
        pass


def answer(argv: Sequence[str]) -> str | None:
    """What the full CLI would print for `argv` now, if the warm index can tell; else None."""
    from catalog_app import outputs

    request = parse_argv(argv)
    if request is None:
        return None
    try:
        settings = Settings.from_process(**request.settings_flags)
    except CatalogError:
        return None  # a bad setting: the full CLI says what is wrong
    if settings.ignored or request.fmt not in outputs.OUTPUTS:
        return None  # warnings and usage errors are the full CLI's to print
    results = lookup(request, settings)
    if results is None:
        return None
    try:
        return outputs.render(results, request.fmt)
    except outputs.OutputError:
        return None
