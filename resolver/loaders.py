"""`catalog check-load`: load a model the way its load format says, from where CI would, and check every tensor.

- runai_streamer / runai_streamer_sharded: runai-model-streamer reads every pinned `*.safetensors` straight
  from the stream URI that `resolve` hands the engine (s3://bucket/key/ or a local folder). Every tensor the
  file's header names must arrive once, with that dtype and shape, and the streamed bytes (header + data) must
  hash to the pinned sha256: streaming skips the resolver's download-time verification, so this is where a
  bucket object that changed under its pin shows up.
- tensorizer: tensorizer deserializes `tensorizer_uri` (with its own per-tensor hashes on). When another catalog
  model pins the same repo and revision in safetensors (tiny-llama-tensorizer and tiny-llama), every tensor must
  equal that model's exactly.
- everything else: resolve locally (every byte verified) and load every `*.safetensors` with safetensors.

torch, safetensors, runai_model_streamer and tensorizer are imported inside functions only: importing this
module (and so the CLI) stays cheap and works without the `loaders` extra.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import struct
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from catalog.errors import CatalogError, MissingObjectError
from catalog.lookup import Catalog
from catalog.schema import FileEntry, LoadFormat, ModelManifest
from resolver.cache import Cache
from resolver.resolve import Resolution, ResolveOptions, resolve, store_key
from resolver.stores import ObjectNotFound, S3Store, Store

if TYPE_CHECKING:
    import torch

MiB = 1024 * 1024
MAX_HEADER = 100 * MiB  # the reference implementation refuses larger safetensors headers too

# safetensors dtype names -> torch dtype names (str(torch.float32) == "torch.float32")
TORCH_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16", "I32": "int32",
    "U32": "uint32", "I64": "int64", "U64": "uint64", "F16": "float16", "BF16": "bfloat16", "F32": "float32",
    "F64": "float64", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu",
    "C64": "complex64",
}

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

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "load_format": self.load_format.value, "ok": self.ok, "tensors": self.tensors,
            "bytes": self.bytes, "seconds": round(self.seconds, 6), "throughput_mib_s": round(self.throughput_mib_s, 1),
            "uri": self.uri, "compared_with": self.compared_with, "problems": list(self.problems),
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


@dataclass(frozen=True)
class TensorSpec:
    dtype: str  # safetensors name: F32, BF16, ...
    shape: tuple[int, ...]
    start: int  # data_offsets, relative to the end of the header
    end: int


@dataclass(frozen=True)
class Header:
    raw: bytes  # the 8-byte length plus the JSON, exactly as in the file (the start of its sha256)
    tensors: dict[str, TensorSpec]


# ---------------------------------------------------------------------------------------------------------
# the entry points


def check_load(
    cat: Catalog, name: str, *, store: Store, cache: Cache, env: Mapping[str, str],
    options: ResolveOptions | None = None,
) -> LoadReport:
    """Load `name` per its load format and report tensors, bytes, time and every problem found."""
    loaded = load_weights(cat, name, store=store, cache=cache, env=env, options=options)
    report = LoadReport(
        name=loaded.name, load_format=loaded.load_format, tensors=loaded.count, bytes=loaded.bytes,
        seconds=loaded.seconds, problems=list(loaded.problems), uri=loaded.uri,
    )
    report.throughput_mib_s = report.bytes / MiB / report.seconds if report.seconds > 0 else 0.0
    manifest = cat.get(name)
    twin = safetensors_twin(cat, manifest) if manifest.load_format is LoadFormat.TENSORIZER else None
    if twin is not None and loaded.files:
        report.compared_with = twin.name
        reference = load_weights(cat, twin.name, store=store, cache=cache, env=env, options=options)
        report.problems += reference.problems
        report.problems += compare_tensors(loaded.merged(), reference.merged(), what=name, reference=twin.name)
    return report


def load_weights(
    cat: Catalog, name: str, *, store: Store, cache: Cache, env: Mapping[str, str],
    options: ResolveOptions | None = None,
) -> LoadedWeights:
    """Resolve `name` (configs and tokenizers local and verified) and load its weights per its load format."""
    manifest = cat.get(name)
    options = options or ResolveOptions()
    fmt = manifest.load_format
    if fmt in (LoadFormat.RUNAI_STREAMER, LoadFormat.RUNAI_STREAMER_SHARDED):
        _need(name, "torch", "runai_model_streamer")
        resolution = resolve(cat, name, cache=cache, store=store, options=options)
        return _load_runai(cat, manifest, resolution, store, cache, env)
    if fmt is LoadFormat.TENSORIZER:
        _need(name, "torch", "tensorizer")
        resolution = resolve(cat, name, cache=cache, store=store, options=options)
        return _load_tensorizer(manifest, resolution, store, env)
    _need(name, "torch", "safetensors")
    resolution = resolve(cat, name, cache=cache, store=store, options=options)
    return _load_local_safetensors(manifest, resolution)


def safetensors_twin(cat: Catalog, manifest: ModelManifest) -> ModelManifest | None:
    """Another model pinning the same repo and revision with local safetensors weights (the reference copy)."""
    for other in cat.by_repo(manifest.source.hf_repo):
        if (other.name != manifest.name and other.source.revision == manifest.source.revision
                and not other.load_format.streams_weights
                and any(f.path.endswith(".safetensors") for f in other.weight_files)):
            return other
    return None


def compare_tensors(got: Mapping[str, torch.Tensor], want: Mapping[str, torch.Tensor], *, what: str,
                    reference: str) -> list[str]:
    """Exact equality, tensor by tensor: names, dtypes, shapes and every element."""
    import torch

    problems = [f"{what}: tensor {n} is missing (it is in {reference})" for n in sorted(set(want) - set(got))]
    problems += [f"{what}: tensor {n} is not in {reference}" for n in sorted(set(got) - set(want))]
    for n in sorted(set(got) & set(want)):
        a, b = got[n], want[n]
        if a.dtype != b.dtype or a.shape != b.shape:
            problems.append(f"{what}: tensor {n} is {a.dtype} {tuple(a.shape)} but {b.dtype} {tuple(b.shape)} in {reference}")
        elif not torch.equal(a, b):
            problems.append(f"{what}: tensor {n} differs from {reference}'s")
    return problems


# ---------------------------------------------------------------------------------------------------------
# runai-model-streamer


def _load_runai(cat: Catalog, manifest: ModelManifest, resolution: Resolution, store: Store, cache: Cache,
                env: Mapping[str, str]) -> LoadedWeights:
    entries = [f for f in manifest.files if f.path.endswith(".safetensors")]
    base = resolution.model.rstrip("/") + "/"
    headers = {e.path: read_header(cat, manifest, e, store, cache) for e in entries}
    problems: list[str] = []
    files: dict[str, dict[str, torch.Tensor]] = {}
    seconds = 0.0
    target = stream_target(store, resolution, env)
    for batch in _unique_name_batches(entries, headers):
        started = time.perf_counter()
        streamed = stream_safetensors([base + e.path for e in batch], target, headers=[headers[e.path] for e in batch])
        seconds += time.perf_counter() - started
        for entry, tensors in zip(batch, streamed):
            files[entry.path] = tensors
    for entry in entries:
        problems += check_streamed(manifest.name, entry, headers[entry.path], files[entry.path])
    return LoadedWeights(manifest.name, manifest.load_format, base, files, seconds, problems)


def _unique_name_batches(entries: Sequence[FileEntry], headers: Mapping[str, Header]) -> list[list[FileEntry]]:
    """Files that can share one stream: runai yields bare tensor names, so a name must not repeat in a batch
    (per-rank shards all hold the same names: each gets its own stream)."""
    batches: list[tuple[list[FileEntry], set[str]]] = []
    for entry in entries:
        names = set(headers[entry.path].tensors)
        for batch, seen in batches:
            if not names & seen:
                batch.append(entry)
                seen |= names
                break
        else:
            batches.append(([entry], set(names)))
    return [batch for batch, _ in batches]


@dataclass(frozen=True)
class StreamTarget:
    """How a streaming loader reaches the store. `env` holds endpoint settings, never credentials: those
    come from the standard AWS variables, as they would for the engine."""

    env: Mapping[str, str]
    endpoint: str | None  # None: the loader's default (AWS), or local files
    region: str | None
    unsigned: bool
    where: str  # for messages

    @property
    def s3(self) -> bool:
        return self.where != "local files"


LOCAL = StreamTarget({}, None, None, False, "local files")


def stream_target(store: Store, resolution: Resolution | None, env: Mapping[str, str]) -> StreamTarget:
    """The settings `catalog resolve --format env` hands the engine, plus what only the store knows."""
    if not isinstance(store, S3Store) or (resolution is not None and not resolution.streams):
        return LOCAL  # a folder store, or weights materialized into the cache
    options = store.options
    # The loader sees the caller's AWS_* / RUNAI_STREAMER_* variables (credentials, profile, retries) ...
    scoped = {k: v for k, v in env.items() if k.startswith(("AWS_", "RUNAI_STREAMER_"))}
    # ... and the endpoint settings the resolver gives the engine, which win.
    scoped |= dict(resolution.stream_env) if resolution is not None and resolution.stream_env else {}
    if options.endpoint_url:
        scoped["AWS_ENDPOINT_URL"] = options.endpoint_url
    if options.addressing_style in ("path", "virtual"):
        scoped["RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING"] = "1" if options.addressing_style == "virtual" else "0"
    if options.unsigned:
        scoped["RUNAI_STREAMER_S3_UNSIGNED"] = "1"
    return StreamTarget(scoped, options.endpoint_url, options.region, options.unsigned, f"endpoint {options.describe()}")


_ENVIRON_LOCK = threading.Lock()


@contextmanager
def scoped_environ(values: Mapping[str, str]) -> Iterator[None]:
    """Set variables in os.environ for the duration, then restore them. runai's C++ core and tensorizer
    read the endpoint and credentials from the process environment; the lock keeps two loads in one
    process from seeing each other's settings."""
    with _ENVIRON_LOCK:
        saved = {k: os.environ.get(k) for k in values}
        os.environ.update(values)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def stream_safetensors(uris: Sequence[str], target: StreamTarget,
                       headers: Sequence[Header] | None = None) -> list[dict[str, torch.Tensor]]:
    """Stream safetensors files with runai-model-streamer in one session: tensors per file, in `uris` order.

    With `headers`, each tensor goes back to the file whose header names it; without, names must be unique
    and every tensor lands in the first file's dict.
    """
    from runai_model_streamer import SafetensorsStreamer
    from runai_model_streamer.s3_utils.s3_utils import S3Credentials

    owner = {n: i for i, h in enumerate(headers or []) for n in h.tensors}
    out: list[dict[str, torch.Tensor]] = [{} for _ in uris]
    credentials = S3Credentials(endpoint=target.endpoint, region_name=target.region) if target.s3 and target.endpoint else None
    try:
        with scoped_environ(target.env), SafetensorsStreamer() as streamer:
            streamer.stream_files(list(uris), s3_credentials=credentials, device="cpu")
            for tensor_name, tensor in streamer.get_tensors():
                out[owner.get(tensor_name, 0)][tensor_name] = tensor
    except CatalogError:
        raise
    except Exception as exc:  # noqa: BLE001 - runai raises bare ValueErrors ("File access error") for everything
        listing = uris[0] if len(uris) == 1 else f"{uris[0]} (and {len(uris) - 1} more)"
        raise LoadError(
            f"runai-model-streamer could not read {listing} ({target.where}): {_terse(exc)}",
            hint="check that the objects exist (`catalog resolve --materialize-weights NAME` names a missing one), "
                 "AWS_ENDPOINT_URL / --store, the addressing style and the credentials; "
                 "RUNAI_STREAMER_LOG_LEVEL=DEBUG RUNAI_STREAMER_LOG_TO_STDERR=1 shows runai's own log",
        ) from None
    return out


def _terse(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text.replace("Could not receive response from libstreamer due to: ", "").strip("b'\"")[:300]


def check_streamed(model: str, entry: FileEntry, header: Header, tensors: Mapping[str, torch.Tensor]) -> list[str]:
    """Every tensor of the header arrived with its dtype and shape, and header + data hash to the pin."""
    where = f"{model}/{entry.path}"
    problems = [f"{where}: tensor {n} named in the header did not arrive" for n in sorted(set(header.tensors) - set(tensors))]
    problems += [f"{where}: tensor {n} arrived but is not in the header" for n in sorted(set(tensors) - set(header.tensors))]
    for n in sorted(set(header.tensors) & set(tensors)):
        spec, got = header.tensors[n], tensors[n]
        want_dtype = "torch." + TORCH_DTYPES.get(spec.dtype, spec.dtype)
        if str(got.dtype) != want_dtype or tuple(got.shape) != spec.shape:
            problems.append(f"{where}: tensor {n} arrived as {got.dtype} {tuple(got.shape)}, the header says "
                            f"{spec.dtype} {spec.shape}")
    if problems:
        return problems
    return _check_digest(where, entry, header, tensors)


def _check_digest(where: str, entry: FileEntry, header: Header, tensors: Mapping[str, torch.Tensor]) -> list[str]:
    """Rebuild the file from its header and the streamed tensors (safetensors' data section has no holes, so
    tensors in offset order are the rest of the file) and compare with the pinned size and sha256."""
    import torch

    order = sorted(header.tensors.items(), key=lambda item: (item[1].start, item[1].end))
    position = 0
    for tensor_name, spec in order:
        if spec.start != position:
            return [f"{where}: the data section has a gap or overlap at tensor {tensor_name} (offset {spec.start}, "
                    f"expected {position}): not a valid safetensors file"]
        position = spec.end
    if len(header.raw) + position != entry.size:
        return [f"{where}: header and tensors make {len(header.raw) + position} bytes, the pin says {entry.size}"]
    digest = hashlib.sha256(header.raw)
    for tensor_name, _ in order:
        flat = tensors[tensor_name].detach().reshape(-1).contiguous()
        if flat.numel():
            digest.update(flat.view(torch.uint8).numpy().data)
    got = digest.hexdigest()
    if got != entry.sha256:
        return [f"{where}: the streamed bytes hash to {got}, the pin says {entry.sha256}: the object in the store "
                f"changed under its pin (`catalog sync` re-uploads it)"]
    return []


# ---------------------------------------------------------------------------------------------------------
# safetensors headers


def read_header(cat: Catalog, manifest: ModelManifest, entry: FileEntry, store: Store, cache: Cache) -> Header:
    """The header from the verified cached copy when there is one (no request), else two ranged reads."""
    if cache.has_blob(entry):
        with open(cache.blob_path(entry.sha256), "rb") as f:
            head = f.read(8)
            length = _header_length(manifest.name, entry, head)
            return parse_header(manifest.name, entry, head + f.read(length))
    key = store_key(cat, manifest, entry.path)
    head = _read_range(store, manifest.name, entry, key, 0, 8)
    length = _header_length(manifest.name, entry, head)
    return parse_header(manifest.name, entry, head + _read_range(store, manifest.name, entry, key, 8, 8 + length))


def _header_length(model: str, entry: FileEntry, head: bytes) -> int:
    if len(head) != 8:
        raise LoadError(f"{model}/{entry.path} is shorter than a safetensors header ({len(head)} bytes)")
    (length,) = struct.unpack("<Q", head)
    if length > MAX_HEADER or 8 + length > entry.size:
        raise LoadError(f"{model}/{entry.path}: header length {length} does not fit a {entry.size}-byte file",
                        hint="the pinned file is not safetensors; fix the manifest's load_format or the file")
    return int(length)


def parse_header(model: str, entry: FileEntry, raw: bytes) -> Header:
    try:
        data = json.loads(raw[8:])
        tensors = {
            str(n): TensorSpec(str(v["dtype"]), tuple(int(d) for d in v["shape"]), int(v["data_offsets"][0]),
                               int(v["data_offsets"][1]))
            for n, v in data.items() if n != "__metadata__"
        }
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise LoadError(f"{model}/{entry.path}: unreadable safetensors header ({type(exc).__name__})",
                        hint="the pinned file is not safetensors; fix the manifest's load_format or the file") from None
    return Header(raw, tensors)


def _read_range(store: Store, model: str, entry: FileEntry, key: str, start: int, end: int) -> bytes:
    try:
        stream = store.open(key, start, end)
    except ObjectNotFound:
        raise MissingObjectError(model, entry.path, store.url) from None
    buffer = bytearray(end - start)
    view = memoryview(buffer)
    got = 0
    try:
        while got < len(buffer) and (count := stream.readinto(view[got:])):
            got += count
    finally:
        stream.close()
    return bytes(buffer[:got])


# ---------------------------------------------------------------------------------------------------------
# tensorizer


def _load_tensorizer(manifest: ModelManifest, resolution: Resolution, store: Store, env: Mapping[str, str]) -> LoadedWeights:
    uri = resolution.loader.get("tensorizer_uri")
    if not isinstance(uri, str):
        raise LoadError(f"{manifest.name} pins no .tensors file", hint="a tensorizer model needs a *.tensors file")
    kwargs = dict(manifest.loader.get("deserialization_kwargs") or {})
    target = stream_target(store, resolution, env)
    started = time.perf_counter()
    tensors, problems = deserialize_tensorizer(manifest.name, uri, target, kwargs)
    seconds = time.perf_counter() - started
    path = next((f.path for f in manifest.files if uri.endswith("/" + f.path)), uri.rsplit("/", 1)[-1])
    return LoadedWeights(manifest.name, manifest.load_format, uri, {path: tensors}, seconds, problems)


def deserialize_tensorizer(model: str, uri: str, target: StreamTarget,
                           kwargs: Mapping[str, Any]) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Every tensor of a .tensors file (local path or s3:// URI), with tensorizer's per-tensor hashes checked.
    `kwargs` are the manifest's deserialization_kwargs, exactly as the engine would pass them."""
    from tensorizer import TensorDeserializer
    from tensorizer.serialization import HashMismatchError
    from tensorizer.stream_io import open_stream

    s3: dict[str, Any] = {}
    if uri.startswith("s3://"):
        if target.endpoint:
            s3["s3_endpoint"] = target.endpoint
            # tensorizer refuses a plain-http endpoint unless told; an https one must stay https.
            s3["force_http"] = target.endpoint.startswith("http://")
        if target.region:
            s3["s3_region_name"] = target.region
        if target.unsigned:
            s3["s3_access_key_id"] = s3["s3_secret_access_key"] = ""  # tensorizer's spelling of "public bucket"
    options = {"device": "cpu", "verify_hash": True, **kwargs}
    try:
        with scoped_environ(target.env):
            stream = open_stream(uri, "rb", **s3)
            with TensorDeserializer(stream, **options) as deserializer:
                return {str(n): t for n, t in deserializer.items()}, []
    except HashMismatchError as exc:
        return {}, [f"{model}: tensorizer's hash check failed for {uri}: {_terse(exc)}"]
    except TypeError as exc:
        raise LoadError(f"{model}: tensorizer refused the deserialization_kwargs {dict(kwargs)}: {_terse(exc)}",
                        hint="fix loader.deserialization_kwargs in the manifest") from None
    except CatalogError:
        raise
    except Exception as exc:  # noqa: BLE001 - tensorizer raises OSError/ValueError/botocore errors alike
        raise LoadError(
            f"tensorizer could not read {uri} ({target.where}): {_terse(exc)}",
            hint="check that the object exists, AWS_ENDPOINT_URL / --store and the credentials",
        ) from None


# ---------------------------------------------------------------------------------------------------------
# local safetensors


def _load_local_safetensors(manifest: ModelManifest, resolution: Resolution) -> LoadedWeights:
    from safetensors.torch import load_file

    paths = [f.path for f in manifest.weight_files if f.path.endswith(".safetensors")]
    if not paths:
        raise LoadError(f"{manifest.name} ({manifest.load_format.value}) pins no *.safetensors weights to load",
                        hint="check-load loads safetensors, runai_streamer(_sharded) and tensorizer models")
    files: dict[str, dict[str, torch.Tensor]] = {}
    started = time.perf_counter()
    for path in paths:
        files[path] = load_file(str(resolution.path / path), device="cpu")
    return LoadedWeights(manifest.name, manifest.load_format, str(resolution.path), files, time.perf_counter() - started)


# ---------------------------------------------------------------------------------------------------------


def _need(model: str, *modules: str) -> None:
    """Import the loader's libraries now, so that a missing extra is one clear error and their import time
    (seconds for torch) is not counted as load time."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise LoadError(f"loading {model} needs {', '.join(missing)}, which is not installed", hint=INSTALL_HINT)
    for module in modules:
        importlib.import_module(module)


__all__ = ["Header", "LoadError", "LoadReport", "LoadedWeights", "StreamTarget", "check_load", "compare_tensors",
           "deserialize_tensorizer", "load_weights", "read_header", "safetensors_twin", "scoped_environ",
           "stream_safetensors", "stream_target"]
