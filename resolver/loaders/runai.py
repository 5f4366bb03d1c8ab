"""runai_streamer / runai_streamer_sharded: runai-model-streamer reads every pinned `*.safetensors` straight
from the stream URI that `resolve` hands the engine (s3://bucket/key/ or a local folder).

Every tensor the file's header names must arrive once, with that dtype and shape, and the streamed bytes
(header + data) must hash to the pinned sha256: streaming skips the resolver's download-time verification,
so this is where a bucket object that changed under its pin shows up.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from catalog.errors import CatalogError
from catalog.lookup import Catalog
from catalog.safetensors_header import TORCH_DTYPES, Header
from catalog.schema import FileEntry, ModelManifest
from resolver.cache import Cache
from resolver.loaders.common import (
    LoadedWeights,
    LoadError,
    _terse,
    header_problems,
    pinned_tables,
    read_header,
    scoped_environ,
    stream_target,
)
from resolver.resolution import Resolution
from resolver.resolve import ResolveOptions
from resolver.stores import Store, StreamTarget

if TYPE_CHECKING:
    import torch

NEEDS: tuple[str, ...] = ("torch", "runai_model_streamer")


def load(
    cat: Catalog,
    manifest: ModelManifest,
    resolution: Resolution,
    *,
    store: Store,
    cache: Cache,
    options: ResolveOptions,
) -> LoadedWeights:
    entries = [f for f in manifest.files if f.path.endswith(".safetensors")]
    base = resolution.model.rstrip("/") + "/"
    headers = {e.path: read_header(cat, manifest, e, store, cache) for e in entries}
    tables = pinned_tables(cat, manifest)
    problems = [p for e in entries for p in header_problems(manifest.name, e, headers[e.path], tables)]
    files: dict[str, dict[str, torch.Tensor]] = {}
    seconds = 0.0
    target = stream_target(store, resolution)
    for batch in _unique_name_batches(entries, headers):
        started = time.perf_counter()
        streamed = stream_safetensors([base + e.path for e in batch], target, headers=[headers[e.path] for e in batch])
        seconds += time.perf_counter() - started
        for entry, tensors in zip(batch, streamed, strict=True):
            files[entry.path] = tensors
    for entry in entries:
        problems += check_streamed(manifest.name, entry, headers[entry.path], files[entry.path])
    return LoadedWeights(manifest.name, manifest.load_format, base, files, seconds, problems)


def _unique_name_batches(entries: Sequence[FileEntry], headers: Mapping[str, Header]) -> list[list[FileEntry]]:
    """Files that can share one stream: runai yields bare tensor names, so a name must not repeat in a batch
    (per-rank shards all hold the same names: each gets its own stream)."""
    batches: list[tuple[list[FileEntry], set[str]]] = []
    for entry in entries:
        names = set(headers[entry.path].by_name())
        for batch, seen in batches:
            if not names & seen:
                batch.append(entry)
                seen |= names
                break
        else:
            batches.append(([entry], set(names)))
    return [batch for batch, _ in batches]


def stream_safetensors(
    uris: Sequence[str], target: StreamTarget, headers: Sequence[Header] | None = None
) -> list[dict[str, torch.Tensor]]:
    """Stream safetensors files with runai-model-streamer in one session: tensors per file, in `uris` order.

    With `headers`, each tensor goes back to the file whose header names it; without, names must be unique
    and every tensor lands in the first file's dict.
    """
    from runai_model_streamer import SafetensorsStreamer
    from runai_model_streamer.s3_utils.s3_utils import S3Credentials

    owner = {n: i for i, h in enumerate(headers or []) for n in h.by_name()}
    out: list[dict[str, torch.Tensor]] = [{} for _ in uris]
    credentials = (
        S3Credentials(endpoint=target.endpoint, region_name=target.region)
        if target.scheme == "s3" and target.endpoint
        else None
    )
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


def check_streamed(model: str, entry: FileEntry, header: Header, tensors: Mapping[str, torch.Tensor]) -> list[str]:
    """Every tensor of the header arrived with its dtype and shape, and header + data hash to the pin."""
    where = f"{model}/{entry.path}"
    specs = header.by_name()
    problems = [f"{where}: tensor {n} named in the header did not arrive" for n in sorted(set(specs) - set(tensors))]
    problems += [f"{where}: tensor {n} arrived but is not in the header" for n in sorted(set(tensors) - set(specs))]
    for n in sorted(set(specs) & set(tensors)):
        spec, got = specs[n], tensors[n]
        want_dtype = "torch." + TORCH_DTYPES.get(spec.dtype, spec.dtype)
        if str(got.dtype) != want_dtype or tuple(got.shape) != spec.shape:
            problems.append(
                f"{where}: tensor {n} arrived as {got.dtype} {tuple(got.shape)}, the header says "
                f"{spec.dtype} {spec.shape}"
            )
    if problems:
        return problems
    return _check_digest(where, entry, header, tensors)


def _check_digest(where: str, entry: FileEntry, header: Header, tensors: Mapping[str, torch.Tensor]) -> list[str]:
    """Rebuild the file from its header and the streamed tensors (safetensors' data section has no holes, so
    tensors in offset order are the rest of the file) and compare with the pinned size and sha256."""
    import torch

    # The parser proved the tensors tile the data section in this order, so they are the rest of the file.
    if len(header.raw) + header.data_bytes != entry.size:
        return [
            f"{where}: header and tensors make {len(header.raw) + header.data_bytes} bytes, the pin says {entry.size}"
        ]
    digest = hashlib.sha256(header.raw)
    for spec in header.tensors:
        flat = tensors[spec.name].detach().reshape(-1).contiguous()
        if flat.numel():
            digest.update(flat.view(torch.uint8).numpy().data)
    got = digest.hexdigest()
    if got != entry.sha256:
        return [
            f"{where}: the streamed bytes hash to {got}, the pin says {entry.sha256}: the object in the store "
            f"changed under its pin (`catalog sync` re-uploads it)"
        ]
    return []
