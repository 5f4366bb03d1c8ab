"""tensorizer: tensorizer deserializes `tensorizer_uri` (with its own per-tensor hashes on), and the whole
`.tensors` file must match its pinned size and sha256.

tensorizer's hashes only prove that each tensor matches what the same file says about it: a `.tensors`
object rewritten under its pin (other weights, serialized again) loads without complaint. So when the
weights stream from the store, the object is hashed too; when `resolve` materialized them, they were
verified on their way into the cache. The check-load entry point also compares every tensor with a
safetensors twin of the same repo and revision when the catalog has one.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from catalog.errors import CatalogError, IntegrityError
from catalog.lookup import Catalog
from catalog.schema import ModelManifest
from resolver.cache import Cache
from resolver.loaders.common import LoadedWeights, LoadError, _terse, scoped_environ, stream_target
from resolver.resolution import Resolution
from resolver.resolve import ResolveOptions
from resolver.stores import Store, StreamTarget
from resolver.transfer import TransferConfig, Wanted, fetch_digest

if TYPE_CHECKING:
    import torch

NEEDS: tuple[str, ...] = ("torch", "tensorizer")


def load(
    cat: Catalog,
    manifest: ModelManifest,
    resolution: Resolution,
    *,
    store: Store,
    cache: Cache,
    options: ResolveOptions,
) -> LoadedWeights:
    uri = resolution.loader.get("tensorizer_uri")
    if not isinstance(uri, str):
        raise LoadError(f"{manifest.name} pins no .tensors file", hint="a tensorizer model needs a *.tensors file")
    kwargs = dict(manifest.loader.get("deserialization_kwargs") or {})
    target = stream_target(store, resolution)
    started = time.perf_counter()
    tensors, problems = deserialize_tensorizer(manifest.name, uri, target, kwargs)
    seconds = time.perf_counter() - started
    path = next((f.path for f in manifest.files if uri.endswith("/" + f.path)), uri.rsplit("/", 1)[-1])
    problems += check_pin(cat, manifest, resolution, uri, store, options.transfer)
    return LoadedWeights(manifest.name, manifest.load_format, uri, {path: tensors}, seconds, problems)


def check_pin(
    cat: Catalog, manifest: ModelManifest, resolution: Resolution, uri: str, store: Store, config: TransferConfig
) -> list[str]:
    """The `.tensors` file tensorizer read has the pinned size and sha256.

    A streamed file is read a second time from the store and hashed (not counted as load time). Hashing the
    bytes as tensorizer reads them would save that read, but tensorizer may seek, skip, read lazily or with
    several readers (deserialization_kwargs decide), so a wrapping stream could not promise it saw every
    byte once, in order.
    """
    base = (resolution.weights_uri or str(resolution.path)).rstrip("/") + "/"
    entry = next((f for f in manifest.files if uri == base + f.path), None)
    if entry is None:
        return [
            f"{manifest.name}: tensorizer_uri {uri} is not a file the manifest pins under {base}, so its bytes "
            f"cannot be checked against a pin"
        ]
    if entry.path not in resolution.streamed:
        return []  # materialized by resolve: size and sha256 were verified before it entered the cache
    where = f"{manifest.name}/{entry.path}"
    try:
        got = fetch_digest(store, Wanted(manifest.name, entry, cat.store_key(manifest, entry.path)), config)
    except IntegrityError as exc:  # the object's size differs from the pin
        return [
            f"{where}: the object in the store has {exc.what} {exc.got}, the pin says {exc.expected}: the object "
            f"changed under its pin (`catalog sync` re-uploads it)"
        ]
    if got != entry.sha256:
        return [
            f"{where}: the streamed object hashes to {got}, the pin says {entry.sha256}: the object in the store "
            f"changed under its pin (`catalog sync` re-uploads it)"
        ]
    return []


def deserialize_tensorizer(
    model: str, uri: str, target: StreamTarget, kwargs: Mapping[str, Any]
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Every tensor of a .tensors file (a local path, or a URI on `target`), with tensorizer's per-tensor hashes
    checked. `kwargs` are the manifest's deserialization_kwargs, exactly as the engine would pass them."""
    from tensorizer import TensorDeserializer
    from tensorizer.serialization import HashMismatchError
    from tensorizer.stream_io import open_stream

    s3: dict[str, Any] = {}
    if target.scheme == "s3":  # tensorizer's own S3 client: the endpoint and signing as arguments
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
            try:
                with TensorDeserializer(stream, **options) as deserializer:
                    return {str(n): t for n, t in deserializer.items()}, []
            finally:  # also when the deserializer refuses its arguments: it never took the stream then
                stream.close()
    except HashMismatchError as exc:
        return {}, [f"{model}: tensorizer's hash check failed for {uri}: {_terse(exc)}"]
    except TypeError as exc:
        raise LoadError(
            f"{model}: tensorizer refused the deserialization_kwargs {dict(kwargs)}: {_terse(exc)}",
            hint="fix loader.deserialization_kwargs in the manifest",
        ) from None
    except CatalogError:
        raise
    except Exception as exc:  # noqa: BLE001 - tensorizer raises OSError/ValueError/botocore errors alike
        raise LoadError(
            f"tensorizer could not read {uri} ({target.where}): {_terse(exc)}",
            hint="check that the object exists, AWS_ENDPOINT_URL / --store and the credentials",
        ) from None
