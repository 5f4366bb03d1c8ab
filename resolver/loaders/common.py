"""What every loader shares: the report and result types, where a streaming loader reads from, the process
environment a load runs in, safetensors headers (read from verified bytes, compared with the pins), and exact
tensor comparison.

torch and the loader libraries are imported inside functions only (see `_need`): importing this module
stays cheap and works without the `loaders` extra.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from catalog.errors import CatalogError
from catalog.formats import LoadFormat
from catalog.loading import load_tables
from catalog.lookup import Catalog
from catalog.safetensors_header import Header, HeaderError, TensorInfo, parse
from catalog.schema import FileEntry, ModelManifest
from catalog.tensor_tables import TensorTables
from resolver.cache import Cache
from resolver.headers import read_file_header, read_store_header
from resolver.resolution import Resolution
from resolver.stores import LOCAL, Store, StreamTarget

if TYPE_CHECKING:
    import torch

MiB = 1024 * 1024

INSTALL_HINT = "install the loaders extra: pip install 'model-catalog[loaders]'"


class LoadError(CatalogError, RuntimeError):
    """A loader could not read a model's weights (the store, the endpoint or the file is at fault)."""


@dataclass
class LoadReport:
    name: str
    load_format: LoadFormat
    tensors: int = 0
    bytes: int = 0
    seconds: float = 0.0  # the load itself: resolving and the checks are not counted
    throughput_mib_s: float = 0.0
    problems: list[str] = field(default_factory=list)
    uri: str = ""  # where the weights were read from
    compared_with: str | None = None  # the safetensors model a tensorizer load was compared to
    skipped: str | None = None  # why nothing was loaded (the format has no loader): not a failure
    engine: str | None = None  # `--engine`: what the engine did with it ("vllm: generated 8 tokens")
    notes: list[str] = field(default_factory=list)  # worth saying, not a problem (a workaround the check applied)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "load_format": self.load_format.value,
            "ok": self.ok,
            "tensors": self.tensors,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 6),
            "throughput_mib_s": round(self.throughput_mib_s, 1),
            "uri": self.uri,
            "compared_with": self.compared_with,
            "skipped": self.skipped,
            "engine": self.engine,
            "problems": list(self.problems),
            "notes": list(self.notes),
        }


@dataclass
class LoadedWeights:
    """Every tensor a load produced, per pinned file (sharded files repeat names, so never merged blindly)."""

    name: str
    load_format: LoadFormat
    uri: str
    files: dict[str, dict[str, torch.Tensor]]
    seconds: float
    problems: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return sum(len(t) for t in self.files.values())

    @property
    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for ts in self.files.values() for t in ts.values())

    def merged(self) -> dict[str, torch.Tensor]:
        """All tensors by name; only meaningful when names are unique across files (not for per-rank shards)."""
        return {name: t for ts in self.files.values() for name, t in ts.items()}


# ---------------------------------------------------------------------------------------------------------
# where a streaming loader reads from, and the environment it reads it in


def stream_target(store: Store, resolution: Resolution | None = None) -> StreamTarget:
    """Where a streaming loader reads: the store's own target (what `catalog resolve --format env` hands the engine),
    or local files when `resolution` materialized the weights. `resolution` None: the store's objects themselves
    (benchmarks), whether or not a model streams."""
    if resolution is not None and not resolution.streams:
        return LOCAL  # weights materialized into the cache
    return store.stream_target()


def quiet_defaults() -> dict[str, str]:
    """Variables a load sets only where the user has not: runai logs every load at INFO (from Python and
    C++) and its DEBUG log names credentials, so its level follows the `resolver` logger (-v) but never
    goes below INFO. A RUNAI_STREAMER_LOG_LEVEL the user set still wins."""
    level = max(logging.getLogger("resolver").getEffectiveLevel(), logging.INFO)
    return {"RUNAI_STREAMER_LOG_LEVEL": logging.getLevelName(level)}


# The one place in resolver/ that touches os.environ, and it writes it: runai's C++ core and tensorizer
# (and the curl it spawns) read the endpoint, addressing and credentials from the process environment and
# take no other way in for some of them. Everything else gets its settings passed down as values.
_ENVIRON_LOCK = threading.Lock()


@contextmanager
def scoped_environ(values: Mapping[str, str], defaults: Mapping[str, str] | None = None) -> Iterator[None]:
    """Overlay `values` onto os.environ for the duration, then restore it; `defaults` (None: `quiet_defaults()`)
    are set only where the variable is unset. The lock keeps two loads in one process from seeing each
    other's settings."""
    defaults = quiet_defaults() if defaults is None else defaults
    with _ENVIRON_LOCK:
        overlay = {k: v for k, v in defaults.items() if k not in os.environ} | dict(values)
        saved = {k: os.environ.get(k) for k in overlay}
        os.environ.update(overlay)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


# ---------------------------------------------------------------------------------------------------------
# comparing tensors


def compare_tensors(
    got: Mapping[str, torch.Tensor], want: Mapping[str, torch.Tensor], *, what: str, reference: str
) -> list[str]:
    """Exact equality, tensor by tensor: names, dtypes, shapes and every element."""
    import torch

    problems = [f"{what}: tensor {n} is missing (it is in {reference})" for n in sorted(set(want) - set(got))]
    problems += [f"{what}: tensor {n} is not in {reference}" for n in sorted(set(got) - set(want))]
    for n in sorted(set(got) & set(want)):
        a, b = got[n], want[n]
        if a.dtype != b.dtype or a.shape != b.shape:
            problems.append(
                f"{what}: tensor {n} is {a.dtype} {tuple(a.shape)} but {b.dtype} {tuple(b.shape)} in {reference}"
            )
        elif not torch.equal(a, b):
            problems.append(f"{what}: tensor {n} differs from {reference}'s")
    return problems


# ---------------------------------------------------------------------------------------------------------
# safetensors headers: the catalog's parser, read from verified bytes, compared with the pins


TensorSpec = TensorInfo  # the name loaders used before the parser moved to catalog/


def read_header(cat: Catalog, manifest: ModelManifest, entry: FileEntry, store: Store, cache: Cache) -> Header:
    """The header from the verified cached copy when there is one (no request), else from the store's object in
    at most two ranged reads (a streaming loader then proves those bytes with its hash of the whole file)."""
    try:
        if cache.has_blob(entry):
            return read_file_header(
                cache.blob_path(entry.sha256), model=manifest.name, path=entry.path, size=entry.size
            )
        return read_store_header(
            store, cat.store_key(manifest, entry.path), model=manifest.name, path=entry.path, size=entry.size
        )
    except HeaderError as exc:
        where = f"{manifest.name}/{entry.path}"
        raise _unreadable(where, exc.message.removeprefix(where + ": ")) from None


def parse_header(model: str, entry: FileEntry, raw: bytes) -> Header:
    try:
        return parse(raw, entry.size)
    except HeaderError as exc:
        raise _unreadable(f"{model}/{entry.path}", exc.message) from None


def _unreadable(where: str, what: str) -> LoadError:
    return LoadError(
        f"{where}: unreadable safetensors header: {what}",
        hint="the pinned file is not safetensors; fix the manifest's load_format or the file",
    )


def pinned_tables(cat: Catalog, manifest: ModelManifest) -> TensorTables | None:
    """The tensor tables lock wrote beside the manifest (None: none, or unreadable: `validate` says why)."""
    path = cat.sources.get(manifest.name)
    return load_tables(path, []).tables if path is not None else None


def header_problems(model: str, entry: FileEntry, header: Header, tables: TensorTables | None) -> list[str]:
    """The header of the bytes being loaded against the pinned one: every tensor's dtype and shape against the
    tensor table (when lock wrote one), then the header's own bytes against `header.sha256`. [] when nothing
    is pinned: a manifest locked before headers were pinned has nothing to compare."""
    pin = entry.header
    if pin is None:
        return []
    where = f"{model}/{entry.path}"
    rows = tables.headers.get(entry.path) if tables is not None else None
    problems: list[str] = []
    if rows is not None:
        want = {name: (dtype, shape) for name, dtype, shape in rows}
        got = {t.name: (t.dtype, t.shape) for t in header.tensors}
        problems += [
            f"{where}: tensor {n} is pinned as {want[n][0]} {list(want[n][1])} but the file has no such tensor"
            for n in sorted(want.keys() - got.keys())
        ]
        problems += [
            f"{where}: tensor {n} ({got[n][0]} {list(got[n][1])}) is in the file but not pinned"
            for n in sorted(got.keys() - want.keys())
        ]
        problems += [
            f"{where}: tensor {n} is {got[n][0]} {list(got[n][1])} in the file, pinned as {want[n][0]} {list(want[n][1])}"
            for n in sorted(want.keys() & got.keys())
            if want[n] != got[n]
        ]
    if header.sha256 != pin.sha256:
        problems.append(
            f"{where}: the header is not the pinned one (sha256 {header.sha256}, pinned {pin.sha256}"
            + (
                ""
                if problems or rows is None
                else "; every tensor's dtype and shape still match: its metadata or layout changed"
            )
            + "): the file changed under its pin (`catalog sync` re-uploads the "
            f"pinned bytes) or the pin is stale (`catalog lock --check {model}`)"
        )
    return problems


# ---------------------------------------------------------------------------------------------------------


def _terse(exc: BaseException) -> str:
    """The first line of a loader library's error, without runai's boilerplate (they are long and repetitive)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text.replace("Could not receive response from libstreamer due to: ", "").strip("b'\"")[:300]


def _need(model: str, *modules: str) -> None:
    """Import the loader's libraries now, so that a missing extra is one clear error and their import time
    (seconds for torch) is not counted as load time. Imported under `quiet_defaults()`: runai fixes its
    Python log level when first imported."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise LoadError(f"loading {model} needs {', '.join(missing)}, which is not installed", hint=INSTALL_HINT)
    with scoped_environ({}):
        for module in modules:
            importlib.import_module(module)
