"""An OCI registry as a store: `oci://host[:port]/namespace/`, each model a ModelPack artifact.

    model <name> at revision R  ->  repository <namespace>/<name>, tags R and `latest`
    each pinned file            ->  one raw layer, digest sha256:<pin>, path in `org.cncf.model.filepath`
    hf_repo, revision, source   ->  the artifact's config (ModelPack model.config.v1) and annotations

A registry addresses artifacts by model, not by key, so the store learns the catalog's models first
(`bind_models`, done by `open_catalog_store` and `mirror_stores`): a key `<model prefix><path>` is the layer
of that path in the model's artifact at its revision tag. Reading: one manifest GET per model (its digest
checked against what the registry names it), then ranged blob GETs by digest; a layer whose digest is not the
pin is refused before a byte is fetched, and every byte fetched is hashed against the pin by the transfer as
from any store, so a registry serving other bytes under a digest is refused too. Writing (`catalog sync`):
each blob is skipped when the repository has it, mounted from another model's repository that does, else
uploaded (one PUT, or PATCH chunks of the part size); then `publish_model` pushes the manifest, which is the
sync record: the listing is the manifest's layers and each names its sha256 (`listed_sha256`), so no state
object is kept. Engines cannot stream from a registry (`engine_streamable`): resolve makes streamed formats'
weights local.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from catalog.errors import CatalogError, IntegrityError, MissingObjectError, StoreUnavailableError, UsageError
from catalog.schema import ModelManifest
from catalog.settings import Settings
from resolver import hashing
from resolver.stores.base import EmptyStream, ObjectInfo, ObjectNotFound, ObjectStream, Store, check_key
from resolver.stores.modelpack import (
    EMPTY_CONFIG,
    MANIFEST_ACCEPT,
    OCI_INDEX,
    OCI_MANIFEST,
    READABLE_TAG,
    SIGNATURE_TYPE,
    Descriptor,
    Layer,
    NotAModelManifest,
    Parsed,
    bounded_json,
    build_config,
    build_index,
    build_manifest,
    build_referrer,
    canonical,
    digest_of,
    fallback_tag,
    first_mismatch,
    layer_path,
    parse_index,
    parse_manifest,
    referrer_descriptor,
    repository_name,
)
from resolver.stores.oci_auth import (
    CredentialProgram,
    Credentials,
    credentials_for,
    host_key,
    read_docker_config,
    scope,
)
from resolver.stores.oci_client import METADATA_ATTEMPTS, RegistryClient, Reply, is_loopback
from resolver.stores.transport import Body, Response
from resolver.waits import Bounds

if TYPE_CHECKING:
    from catalog.lookup import Catalog

log = logging.getLogger(__name__)

_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")  # the distribution spec's path component
_CONTENT_RANGE = re.compile(r"bytes\s+([0-9]{1,19})-([0-9]{1,19})/([0-9]{1,19})", re.ASCII)
MANIFEST_LIMIT = 4 * 1024 * 1024  # what registries accept as a manifest
FAILURE_MEMORY = 60.0  # seconds a manifest read that failed is answered with its error without asking again


SignatureCheck = Callable[
    [ModelManifest, bytes], "str | None"
]  # a bundle's bytes -> why it does not vouch (None: it does)
REFERRER_LIMIT = 4 * 1024 * 1024  # bytes of a referrer's payload (a signature bundle, a BOM) read at most
URL_OPTIONS = {
    "plain-http": "reach the registry over http://",  # the names are catalog/urls.py's OCI_OPTIONS
    "require-signature": "refuse an artifact without a signature referrer the runner's trusted keys verify",
}
REFERRERS_TRIED = 8  # signature referrers fetched at most for one artifact (the newest of the tag schema's list)


class UnsignedArtifactError(StoreUnavailableError):
    """The registry's artifact has no signature referrer that the runner's trusted keys vouch for."""


class ManifestDigestError(CatalogError, ValueError):
    """The manifest's bytes hash to another digest than the one the registry names them by."""


class LayerMismatchError(IntegrityError):
    """The artifact names other bytes (another digest) for a pinned path: refused before any byte is fetched."""

    def __init__(self, model: str, path: str, reference: str, problem: str) -> None:
        super().__init__(model, path, "layer", "the pin", problem, "")
        self.message = (
            f"{model}/{path}: the registry's artifact {reference} does not hold the pinned file ({problem}); "
            "nothing was downloaded"
        )
        self.args = (self.message,)
        self.hint = f"run `catalog sync {model} --store ...` to publish the pinned files, or fix the manifest"


def _component_problem(name: str) -> str | None:
    return (
        None
        if all(_COMPONENT.match(part) for part in name.split("/"))
        else "a registry repository name is lower-case letters and digits, separated by single '.', '_', '__' or '-'"
    )


class _BlobStream:
    """A blob GET's body; its connection goes back to the pool when read to its end."""

    def __init__(self, response: Response, total: int) -> None:
        self._response: Response | None = response
        self.total = total
        self.etag: str | None = None  # a blob is named by its digest; the transfer checks its bytes against the pin

    def readinto(self, buffer: memoryview) -> int:
        # One socket read at most: a trickle is seen as it comes (the transfer's rate guard).
        return self._response.readinto(buffer) if self._response is not None else 0

    def close(self) -> None:
        if self._response is not None:
            self._response.close()  # after the last byte this closes nothing: the connection is back in its pool
            self._response = None


class OciStore(Store):
    """`oci://host[:port]/namespace/`: one repository per model, one raw layer per pinned file."""

    engine_streamable = False  # engines read files, not registries: resolve brings streamed weights local
    content_addressed = True  # each layer is named by its sha256, and the pushed manifest is sync's record

    def __init__(
        self,
        client: RegistryClient,
        namespace: str,
        url: str,
        *,
        part_size: int = 64 * 1024 * 1024,
        concurrency: int = 8,
        signature_check: SignatureCheck | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.url = url
        self.requests = client.requests
        self.blobs: Counter[str] = Counter()  # what put did per blob: present (skipped), mounted, uploaded
        self.part_size = part_size
        self.concurrency = concurrency
        self.signature_check = signature_check  # set: every model read needs a signature referrer it accepts
        self._lock = threading.Lock()
        self._prefixes: dict[str, ModelManifest] = {}  # key prefix -> the model stored there
        self._names: dict[str, tuple[str, ModelManifest]] = {}  # model name -> (key prefix, manifest)
        self._manifests: dict[tuple[str, str], Parsed | None] = {}  # (repository, tag) -> layers as last read
        self._checked: dict[str, tuple[Parsed, tuple[str, str] | None]] = {}  # model -> (artifact, its first mismatch)
        self._manifest_locks: dict[tuple[str, str], threading.Lock] = {}
        self._subjects: dict[tuple[str, str], Descriptor] = {}  # (repository, tag) -> the manifest read there
        self._signed: set[tuple[str, str]] = set()  # (model, artifact digest) whose signature referrer verified
        self._failed: dict[
            tuple[str, str], tuple[StoreUnavailableError, float]
        ] = {}  # (repository, tag) -> why its read failed, until
        self._present: set[tuple[str, str]] = set()  # (repository, digest) known to be in the registry
        self._absent: set[tuple[str, str]] = set()  # (repository, digest) a HEAD found missing (mount sources only)
        self._holders: dict[str, str] = {}  # digest -> a repository known to hold it (to mount from)
        self._digest_locks: dict[
            str, threading.Lock
        ] = {}  # one put per digest at a time: the second mounts the first's
        self._pending: dict[tuple[str, str], Layer] = {}  # (repository, path) -> the blob put for it, not yet published

    # -- the catalog -------------------------------------------------------------------------------
    def bind_models(self, models: Mapping[str, ModelManifest]) -> None:
        """Learn where each model's keys are (key prefix -> manifest). Idempotent; a re-bind replaces."""
        with self._lock:
            self._prefixes = dict(models)
            self._names = {m.name: (prefix, m) for prefix, m in models.items()}

    def _locate(self, key: str) -> tuple[ModelManifest, str] | None:
        """The model whose prefix `key` lies under, and the path inside it."""
        if not self._prefixes:
            raise UsageError(
                f"{self.url} addresses artifacts by model, and no catalog was bound to it",
                hint="open it with resolver.resolve.open_catalog_store(cat, settings) (the CLI does)",
            )
        best = max((p for p in self._prefixes if key.startswith(p)), key=len, default=None)
        if best is None or best == key:
            return None
        return self._prefixes[best], key[len(best) :]

    def repository(self, model: ModelManifest) -> str:
        name = repository_name(self.namespace, model.name)
        if (problem := _component_problem(name)) is not None:
            raise UsageError(f"model {model.name!r} cannot be stored at {self.url}: {problem}")
        return name

    def reference(self, model: ModelManifest) -> str:
        return f"{self.client.netloc}/{self.repository(model)}:{model.source.revision}"

    # -- manifests ---------------------------------------------------------------------------------
    def artifact(self, model: ModelManifest, fresh: bool = False) -> Parsed | None:
        """The model's artifact at its revision tag (None: no such tag), read once unless `fresh`."""
        repo, tag = self.repository(model), model.source.revision
        with self._lock:
            if not fresh and (repo, tag) in self._manifests:
                return self._manifests[(repo, tag)]
            single = self._manifest_locks.setdefault((repo, tag), threading.Lock())
        with single:  # the transfer's threads open a model's files at once: one GET of its manifest
            with self._lock:
                if not fresh and (repo, tag) in self._manifests:
                    return self._manifests[(repo, tag)]
                failed = self._failed.get((repo, tag))
            if failed is not None and not fresh and time.monotonic() < failed[1]:
                raise failed[0]  # a registry past its bounds once is not waited on again for each file
            try:
                return self._read_artifact(model, repo, tag)
            except StoreUnavailableError as exc:
                # Final for this store: the client has retried what was worth it (a transfer retrying each file's
                # open on top would multiply the waits by files and attempts).
                final = (
                    exc
                    if not exc.transient
                    else StoreUnavailableError(
                        f"{exc.message} (after {METADATA_ATTEMPTS} attempts)", hint=exc.hint, transient=False
                    )
                )
                with self._lock:
                    self._failed[(repo, tag)] = (final, time.monotonic() + FAILURE_MEMORY)
                raise final from None

    def _read_artifact(self, model: ModelManifest, repo: str, tag: str) -> Parsed | None:
        reply = self.client.call(
            "GetManifest",
            "GET",
            f"/v2/{repo}/manifests/{tag}",
            scopes=[scope(repo, "pull")],
            repo=repo,
            headers={"Accept": MANIFEST_ACCEPT},
            limit=MANIFEST_LIMIT,
        )
        parsed: Parsed | None = None
        if reply.status == 200:
            named = reply.header("Docker-Content-Digest")
            got = digest_of(reply.body)
            if named is not None and named.strip() != got:
                raise ManifestDigestError(
                    f"{self.reference(model)}: the manifest's bytes hash to {got}, the registry names them "
                    f"{named.strip()}; refused it",
                    hint="the registry's storage is corrupt; re-push the artifact",
                )
            try:
                parsed = parse_manifest(reply.body)
            except NotAModelManifest as exc:
                raise StoreUnavailableError(
                    f"{self.reference(model)} is not a model artifact: {exc}",
                    hint="push the model with `catalog sync` (or oras, one layer per file)",
                    transient=False,
                ) from None
            for why in parsed.ignored:
                log.debug("%s: ignored %s", self.reference(model), why)
            media = reply.header("Content-Type") or OCI_MANIFEST
            with self._lock:
                self._subjects[(repo, tag)] = Descriptor(media.split(";", 1)[0].strip(), got, len(reply.body))
        elif reply.status != 404:
            raise StoreUnavailableError(f"{self.where(repo)} answered {reply.status} for {tag}", transient=False)
        with self._lock:
            self._manifests[(repo, tag)] = parsed
        return parsed

    def where(self, repo: str) -> str:
        return f"{self.client.where}/{repo}"

    # -- the Store interface -----------------------------------------------------------------------
    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """The layers of every bound model whose keys can start with `prefix`, each artifact read afresh
        (several at a time): a layer is listed with its size and, as ETag, its digest."""
        models = sorted(
            ((p, m) for p, m in self._prefixes.items() if p.startswith(prefix) or prefix.startswith(p)),
            key=lambda pm: pm[0],
        )
        if not models and not self._prefixes:
            self._locate(prefix)  # says that no catalog was bound
        with ThreadPoolExecutor(
            max(1, min(self.concurrency, len(models) or 1)), thread_name_prefix="catalog-oci-list"
        ) as pool:
            artifacts = list(pool.map(lambda pm: self.artifact(pm[1], fresh=True), models))
        found: list[ObjectInfo] = []
        for (model_prefix, _), parsed in zip(models, artifacts, strict=True):
            if parsed is None:
                continue
            for path, layer in parsed.layers.items():
                key = model_prefix + path
                if key.startswith(prefix):
                    found.append(ObjectInfo(key, layer.size, etag=layer.digest))
        yield from sorted(found, key=lambda o: o.key)

    def listed_sha256(self, listing: Sequence[ObjectInfo]) -> dict[str, str]:
        """A listed layer's sha256 is its digest: what sync's plan compares with the pin (no state object)."""
        return {o.key: o.etag.split(":", 1)[1] for o in listing if o.etag and o.etag.startswith("sha256:")}

    def head(self, key: str) -> ObjectInfo | None:
        """The blob `key` stands for, when its repository holds it: the one put for it since the last publish,
        else the published artifact's layer."""
        located = self._locate(check_key(key))
        if located is None:
            return None
        model, path = located
        repo = self.repository(model)
        with self._lock:
            layer = self._pending.get((repo, path))
        if layer is None:
            parsed = self.artifact(model)
            layer = parsed.layers.get(path) if parsed is not None else None
        if layer is None:
            return None
        size = self._blob_size(repo, layer.digest)
        if size is None:
            return None
        sha = layer.sha256
        return ObjectInfo(key, size, etag=layer.digest, metadata={"sha256": sha} if sha else {})

    def _blob_size(self, repo: str, digest: str) -> int | None:
        """The blob's size when `repo` holds it, else None (one HEAD)."""
        reply = self.client.call(
            "HeadBlob", "HEAD", f"/v2/{repo}/blobs/{digest}", scopes=[scope(repo, "pull")], repo=repo
        )
        if reply.status != 200:
            return None
        length = self.client.size_of(reply, f"HEAD of {digest} in {repo}")
        with self._lock:
            self._present.add((repo, digest))
            self._holders.setdefault(digest, repo)
        return length or 0

    def open(self, key: str, start: int = 0, end: int | None = None) -> ObjectStream:
        located = self._locate(check_key(key))
        if located is None:
            raise ObjectNotFound(key)
        model, path = located
        parsed = self.artifact(model)
        layer = parsed.layers.get(path) if parsed is not None else None
        if parsed is None or layer is None:
            raise ObjectNotFound(key)
        mismatch = self._mismatch(model, parsed)
        if mismatch is not None:  # any file of the artifact, not only this one: every open refuses, so none downloads
            raise LayerMismatchError(model.name, mismatch[0], self.reference(model), mismatch[1])
        if self.signature_check is not None:
            self._require_signature(model)
        repo = self.repository(model)
        headers = {"Accept-Encoding": "identity"}
        if start or end is not None:
            headers["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
        response = self.client.send(
            "GetBlob",
            "GET",
            f"/v2/{repo}/blobs/{layer.digest}",
            scopes=[scope(repo, "pull")],
            repo=repo,
            headers=headers,
            follow=True,
        )
        status = response.status
        if status not in (200, 206):
            retry = response.retry_after()
            response.discard()
            if status in (404, 416):
                if status == 416:  # asked past the end: shorter than the pin
                    return EmptyStream(self._blob_size(repo, layer.digest) or 0)
                raise ObjectNotFound(key)
            self.client.check_status(status, retry, repo, "GetBlob")
            raise StoreUnavailableError(f"{self.where(repo)} answered {status} for {layer.digest}", transient=False)
        named = response.header("Docker-Content-Digest")
        if named is not None and named.strip() != layer.digest:
            response.close()
            raise IntegrityError(
                model.name,
                path,
                "blob digest",
                layer.digest,
                named.strip(),
                "the registry answered a GET of one digest with another blob",
            )
        if status == 206:
            match = _CONTENT_RANGE.fullmatch((response.header("Content-Range") or "").strip())
            if match is None or int(match.group(1)) != start:
                response.close()
                raise StoreUnavailableError(
                    f"{self.where(repo)}: a 206 answer for {layer.digest} with a Content-Range other than asked"
                )
            return _BlobStream(response, int(match.group(3)))
        length = self.client.size_of(response, f"the blob {layer.digest}") if not start else None
        if start or length is None:  # a registry that ignored the Range: not worth skipping over
            response.close()
            raise StoreUnavailableError(
                f"{self.where(repo)} ignored a ranged GET of {layer.digest} (or sent no length)"
            )
        return _BlobStream(response, length)

    def _mismatch(self, model: ModelManifest, parsed: Parsed) -> tuple[str, str] | None:
        """first_mismatch, computed once per artifact as read (a model's opens would otherwise check n files n times)."""
        with self._lock:
            checked = self._checked.get(model.name)
        if checked is not None and checked[0] is parsed:
            return checked[1]
        found = first_mismatch(parsed, model)
        with self._lock:
            self._checked[model.name] = (parsed, found)
        return found

    def put(
        self, key: str, source: Path, metadata: Mapping[str, str] | None = None, sha256: str | None = None
    ) -> ObjectInfo:
        """Make the model's repository hold `source` as a blob (skipped when it does, mounted when another model's
        repository does, else uploaded); the manifest naming it is pushed by `publish_model`."""
        located = self._locate(check_key(key))
        if located is None:
            raise UsageError(
                f"{self.url} holds only the catalog's models' files: {key!r} is under no model's prefix",
                hint="sync writes no state objects to a registry: the artifact's manifest is the record",
            )
        model, path = located
        size = source.stat().st_size
        if sha256 is None:
            size, sha256 = hashing.hash_file(source)
        digest = f"sha256:{sha256}"
        repo = self.repository(model)
        parsed = self.artifact(model)
        published = parsed.layers.get(path) if parsed is not None else None
        with self._lock:
            digest_lock = self._digest_locks.setdefault(digest, threading.Lock())
        with digest_lock:  # two models sharing a file in one sync: one upload, then a mount
            self._put_blob(repo, model, path, digest, size, source, published)
        with self._lock:
            self._pending[(repo, path)] = Layer(path, digest, size)
        return ObjectInfo(key, size, etag=digest, metadata={"sha256": sha256})

    def _put_blob(
        self, repo: str, model: ModelManifest, path: str, digest: str, size: int, source: Path, published: Layer | None
    ) -> None:
        present = self._blob_size(repo, digest)
        if present == size and published is not None and published.digest == digest and published.size == size:
            # Only a deep check that hashed other bytes asks to put what the registry already names so.
            raise StoreUnavailableError(
                f"{self.where(repo)} serves other bytes under {digest} ({model.name}/{path}); a registry keeps the first "
                "bytes stored under a digest, so uploading them again cannot repair it",
                hint="delete that blob on the registry (and garbage-collect it), then run sync again",
                transient=False,
            )
        if present != size:
            self._upload(repo, model, digest, Body(path=source, length=size))
        else:
            self._count("present")

    def _upload(self, repo: str, model: ModelManifest, digest: str, body: Body, counted: bool = True) -> None:
        """Mount the blob from a repository known to hold it, else upload it (one PUT, or PATCH chunks);
        `counted`: a pinned file's blob (in `blobs`), not the artifact's config."""
        source = self._mount_source(repo, model, digest)
        if source is not None:
            reply = self.client.call(
                "MountBlob",
                "POST",
                f"/v2/{repo}/blobs/uploads/?mount={digest}&from={source}",
                scopes=[scope(repo, "pull,push"), scope(source, "pull")],
                repo=repo,
                body=Body(data=b""),
            )
            if reply.status == 201:
                self._remember(repo, digest)
                if counted:
                    self._count("mounted")
                log.debug("mounted %s into %s from %s", digest, repo, source)
                return
        else:
            reply = self.client.call(
                "StartUpload",
                "POST",
                f"/v2/{repo}/blobs/uploads/",
                scopes=[scope(repo, "pull,push")],
                repo=repo,
                body=Body(data=b""),
            )
        location = self._location(reply, repo, 202)
        if body.size > self.part_size:
            for offset in range(0, body.size, self.part_size):
                length = min(self.part_size, body.size - offset)
                chunk = (
                    Body(data=body.data[offset : offset + length])
                    if body.data is not None
                    else Body(path=body.path, offset=offset, length=length)
                )
                reply = self.client.call(
                    "PatchBlob",
                    "PATCH",
                    location,
                    scopes=[scope(repo, "pull,push")],
                    repo=repo,
                    body=chunk,
                    headers={
                        "Content-Type": "application/octet-stream",
                        "Content-Range": f"{offset}-{offset + length - 1}",
                    },
                )
                location = self._location(reply, repo, 202)
            body = Body(data=b"")
        separator = "&" if "?" in location else "?"
        reply = self.client.call(
            "PutBlob",
            "PUT",
            f"{location}{separator}digest={urllib.parse.quote(digest)}",
            scopes=[scope(repo, "pull,push")],
            repo=repo,
            body=body,
            headers={"Content-Type": "application/octet-stream"},
        )
        if reply.status != 201:
            raise StoreUnavailableError(
                f"{self.where(repo)} answered {reply.status} to the upload of {digest}: {_registry_error(reply.body)}",
                transient=False,
            )
        named = reply.header("Docker-Content-Digest")
        if named is not None and named.strip() != digest:
            raise StoreUnavailableError(
                f"{self.where(repo)} stored the upload of {digest} as {named.strip()}", transient=False
            )
        self._remember(repo, digest)
        if counted:
            self._count("uploaded")

    def _count(self, outcome: str) -> None:
        with self._lock:
            self.blobs[outcome] += 1

    def _mount_source(self, repo: str, model: ModelManifest, digest: str) -> str | None:
        """A repository that holds `digest`: one seen holding it in this process, else the first repository of another
        model the catalog has pinning it that the registry says holds it (one HEAD each, remembered), so a file synced
        by an earlier run under another model is mounted, never uploaded again."""
        with self._lock:
            known = self._holders.get(digest)
        if known is not None and known != repo:
            return known
        sha = digest.split(":", 1)[1]
        for _, other in list(self._names.values()):
            if other.name == model.name or not any(e.sha256 == sha for e in other.files):
                continue
            try:
                candidate = self.repository(other)
            except UsageError:
                continue
            with self._lock:
                if (candidate, digest) in self._present:
                    return candidate
                if (candidate, digest) in self._absent:
                    continue
            if candidate != repo and self._blob_size(candidate, digest) is not None:
                return candidate
            with self._lock:
                self._absent.add((candidate, digest))
        return None

    def _remember(self, repo: str, digest: str) -> None:
        with self._lock:
            self._present.add((repo, digest))
            self._absent.discard((repo, digest))
            self._holders[digest] = repo

    def _location(self, reply: Reply, repo: str, expected: int) -> str:
        location = reply.header("Location")
        if reply.status != expected or not location:
            raise StoreUnavailableError(
                f"{self.where(repo)} answered {reply.status} to an upload: {_registry_error(reply.body)}",
                transient=False,
            )
        parsed = urllib.parse.urlsplit(location)
        if parsed.netloc and parsed.netloc != self.client.netloc:
            raise StoreUnavailableError(
                f"{self.where(repo)} sent an upload to another host ({parsed.netloc}); not supported", transient=False
            )
        return parsed.path + (f"?{parsed.query}" if parsed.query else "")

    def publish_model(self, name: str) -> None:
        """Push the model's manifest (revision tag, then `latest`) once every pinned blob is in its repository:
        the artifact is whole or not published at all."""
        _, model = self._names[name]
        repo = self.repository(model)
        for entry in model.files:
            digest = f"sha256:{entry.sha256}"
            with self._lock:
                known = (repo, digest) in self._present
            if not known and self._blob_size(repo, digest) is None:
                raise MissingObjectError(name, entry.path, self.where(repo))
        config = build_config(model)
        config_digest = digest_of(config)
        if self._blob_size(repo, config_digest) is None:
            self._upload(repo, model, config_digest, Body(data=config), counted=False)
        body = build_manifest(model, config)
        self._put_tags(repo, model.source.revision, body)
        with self._lock:
            self._manifests[(repo, model.source.revision)] = parse_manifest(body)
            for entry in model.files:
                self._pending.pop((repo, entry.path), None)

    def _put_tags(self, repo: str, revision: str, body: bytes) -> None:
        """The revision tag (the record), then `latest`: a registry with immutable tags may refuse to move `latest`,
        which costs the readable alias only (said), never the pin."""
        self._put_manifest(repo, revision, body)
        try:
            self._put_manifest(repo, READABLE_TAG, body)
        except StoreUnavailableError as exc:
            log.warning("%s; %s:%s is published, only the `%s` tag was not moved", exc, repo, revision, READABLE_TAG)

    def _put_manifest(self, repo: str, tag: str, body: bytes, media_type: str = OCI_MANIFEST) -> Reply:
        reply = self.client.call(
            "PutManifest",
            "PUT",
            f"/v2/{repo}/manifests/{tag}",
            scopes=[scope(repo, "pull,push")],
            repo=repo,
            body=Body(data=body),
            headers={"Content-Type": media_type},
        )
        if reply.status != 201:
            raise StoreUnavailableError(
                f"{self.where(repo)} answered {reply.status} to the manifest {tag}: {_registry_error(reply.body)}",
                transient=False,
            )
        named = reply.header("Docker-Content-Digest")
        if named is not None and named.strip() != digest_of(body):
            raise ManifestDigestError(
                f"{self.where(repo)}:{tag} stored the manifest as {named.strip()}, not {digest_of(body)}"
            )
        return reply

    # -- referrers: artifacts about a model's artifact (its signature; a BOM) ------------------------------------
    def subject(self, model: ModelManifest) -> Descriptor:
        """The model's artifact as a referrer's subject: the manifest the registry holds at its revision tag, else the
        one sync pushes there (the same pins make the same bytes: a signature pushed first finds its artifact later)."""
        repo, tag = self.repository(model), model.source.revision
        self.artifact(model)
        with self._lock:
            found = self._subjects.get((repo, tag))
        if found is not None:
            return found
        body = build_manifest(model, build_config(model))
        return Descriptor(OCI_MANIFEST, digest_of(body), len(body))

    def push_referrer(self, model: ModelManifest, artifact_type: str, payload: bytes, title: str) -> str:
        """Push `payload` (a signature bundle, a BOM) as an artifact of `artifact_type` whose subject is the model's
        artifact; returns its manifest's digest. Where the registry keeps no referrers list itself (no `OCI-Subject`
        in its answer, e.g. the distribution registry 2.8), the referrers tag schema's index (tag `sha256-<hex>` of
        the subject) gets it added, which `oras discover` and `referrers` read there."""
        repo = self.repository(model)
        subject = self.subject(model)
        for data in (payload, EMPTY_CONFIG):
            digest = digest_of(data)
            if self._blob_size(repo, digest) is None:
                self._upload(repo, model, digest, Body(data=data), counted=False)
        manifest = build_referrer(subject, artifact_type, payload, title)
        reply = self._put_manifest(repo, digest_of(manifest), manifest)
        if reply.header("OCI-Subject") is None:
            self._add_to_fallback(repo, subject.digest, referrer_descriptor(manifest))
        return digest_of(manifest)

    def _add_to_fallback(self, repo: str, subject: str, descriptor: Descriptor) -> None:
        tag = fallback_tag(subject)
        listed = self._fallback_index(repo, tag, "pull,push")
        if any(d.digest == descriptor.digest for d in listed):
            return
        self._put_manifest(repo, tag, build_index([*listed, descriptor]), OCI_INDEX)

    def _fallback_index(self, repo: str, tag: str, actions: str) -> Sequence[Descriptor]:
        reply = self.client.call(
            "GetReferrers",
            "GET",
            f"/v2/{repo}/manifests/{tag}",
            scopes=[scope(repo, actions)],
            repo=repo,
            headers={"Accept": OCI_INDEX},
            limit=MANIFEST_LIMIT,
        )
        if reply.status == 404:
            return []
        return self._index(reply, repo, tag)

    def _index(self, reply: Reply, repo: str, what: str) -> Sequence[Descriptor]:
        if reply.status != 200:
            raise StoreUnavailableError(
                f"{self.where(repo)} answered {reply.status} for the referrers of {what}", transient=False
            )
        try:
            return parse_index(reply.body)
        except ValueError as exc:
            raise StoreUnavailableError(
                f"{self.where(repo)}: the referrers of {what}: {exc}", transient=False
            ) from None

    def referrers(self, model: ModelManifest, artifact_type: str | None = None) -> Sequence[Descriptor]:
        """The artifacts about the model's artifact (of `artifact_type` when given): the registry's referrers API, else
        the tag schema's index."""
        repo = self.repository(model)
        subject = self.subject(model)
        query = f"?artifactType={urllib.parse.quote(artifact_type, safe='')}" if artifact_type else ""
        reply = self.client.call(
            "GetReferrers",
            "GET",
            f"/v2/{repo}/referrers/{subject.digest}{query}",
            scopes=[scope(repo, "pull")],
            repo=repo,
            headers={"Accept": OCI_INDEX},
            limit=MANIFEST_LIMIT,
        )
        found = (
            self._fallback_index(repo, fallback_tag(subject.digest), "pull")
            if reply.status == 404
            else self._index(reply, repo, subject.digest)
        )
        return [d for d in found if artifact_type is None or d.artifact_type == artifact_type]

    def referrer_payload(self, model: ModelManifest, referrer: Descriptor, limit: int = REFERRER_LIMIT) -> bytes:
        """The payload (first layer) of a referrer, both its manifest and its bytes checked against their digests."""
        repo = self.repository(model)
        reply = self.client.call(
            "GetManifest",
            "GET",
            f"/v2/{repo}/manifests/{referrer.digest}",
            scopes=[scope(repo, "pull")],
            repo=repo,
            headers={"Accept": OCI_MANIFEST},
            limit=MANIFEST_LIMIT,
        )
        if reply.status != 200 or digest_of(reply.body) != referrer.digest:
            raise StoreUnavailableError(
                f"{self.where(repo)}: the referrer {referrer.digest} cannot be read "
                f"({reply.status}, or other bytes than its digest)",
                transient=False,
            )
        try:
            layer = bounded_json(reply.body, "the referrer")["layers"][0]
            digest, size = str(layer["digest"]), layer["size"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise StoreUnavailableError(
                f"{self.where(repo)}: the referrer {referrer.digest} has no payload layer", transient=False
            ) from None
        if not isinstance(size, int) or not 0 <= size <= limit:
            raise StoreUnavailableError(
                f"{self.where(repo)}: the referrer {referrer.digest} names a payload of {size!r} "
                f"bytes (at most {limit} are read)",
                transient=False,
            )
        blob = self.client.call(
            "GetBlob", "GET", f"/v2/{repo}/blobs/{digest}", scopes=[scope(repo, "pull")], repo=repo, limit=limit
        )
        if blob.status != 200 or digest_of(blob.body) != digest:
            raise StoreUnavailableError(
                f"{self.where(repo)}: the payload {digest} of a referrer cannot be read "
                f"({blob.status}, or other bytes than its digest)",
                transient=False,
            )
        return blob.body

    def _require_signature(self, model: ModelManifest) -> None:
        """Refuse the model's artifact unless a signature referrer of it is one `signature_check` accepts (each
        artifact checked once; the transfer's threads wait for the first)."""
        assert self.signature_check is not None
        subject = self.subject(model)
        with self._lock:
            if (model.name, subject.digest) in self._signed:
                return
            single = self._manifest_locks.setdefault((model.name, "signature"), threading.Lock())
        with single:
            with self._lock:
                if (model.name, subject.digest) in self._signed:
                    return
            reasons: list[str] = []
            for referrer in reversed(self.referrers(model, SIGNATURE_TYPE)[-REFERRERS_TRIED:]):  # the newest first
                try:
                    problem = self.signature_check(model, self.referrer_payload(model, referrer))
                except StoreUnavailableError as exc:
                    problem = exc.message
                if problem is None:
                    with self._lock:
                        self._signed.add((model.name, subject.digest))
                    return
                reasons.append(f"{referrer.digest[:19]}: {problem}")
            raise UnsignedArtifactError(
                f"{self.reference(model)} ({subject.digest}) has no signature referrer that vouches for its pins "
                f"({'; '.join(reasons) if reasons else 'it has none'}); refused before any download",
                hint=f"sign it with this registry as --store or --mirror: `catalog sign {model.name} --private-key KEY`, "
                "or drop require-signature=1 from the oci:// URL",
                transient=False,
            )

    def delete(self, key: str) -> None:
        failed = self.delete_many([key])
        if key in failed:
            raise failed[key]

    def delete_many(self, keys: Sequence[str]) -> dict[str, CatalogError]:
        """Drop layers from their artifacts: one manifest push per model (the blobs stay until the registry's
        garbage collection)."""
        failed: dict[str, CatalogError] = {}
        by_model: dict[str, tuple[ModelManifest, set[str]]] = {}
        for key in keys:
            try:
                located = self._locate(check_key(key))
            except CatalogError as exc:
                failed[key] = exc
                continue
            if located is None:
                failed[key] = UsageError(f"{key!r} is under no model's prefix in {self.url}")
                continue
            by_model.setdefault(located[0].name, (located[0], set()))[1].add(located[1])
        for model, paths in by_model.values():
            prefix = self._names[model.name][0]
            try:
                self._drop_layers(model, paths)
            except CatalogError as exc:
                failed |= {prefix + p: exc for p in paths}
        return failed

    def _drop_layers(self, model: ModelManifest, paths: set[str]) -> None:
        repo, tag = self.repository(model), model.source.revision
        reply = self.client.call(
            "GetManifest",
            "GET",
            f"/v2/{repo}/manifests/{tag}",
            scopes=[scope(repo, "pull,push")],
            repo=repo,
            headers={"Accept": MANIFEST_ACCEPT},
            limit=MANIFEST_LIMIT,
        )
        if reply.status == 404:
            return
        try:
            data = bounded_json(reply.body, "the manifest")
            layers = data["layers"]
        except (ValueError, KeyError, TypeError):
            raise StoreUnavailableError(
                f"{self.reference(model)} is not a model artifact; nothing was dropped", transient=False
            ) from None
        body = canonical({**data, "layers": [layer for layer in layers if layer_path(layer) not in paths]})
        self._put_tags(repo, tag, body)
        with self._lock:
            self._manifests[(repo, tag)] = parse_manifest(body)

    def stream_uri(self, prefix: str) -> str:
        raise UsageError(
            f"engines cannot stream weights from a registry ({self.url})",
            hint="resolve makes them local (or pass --materialize-weights)",
        )


def _registry_error(body: bytes) -> str:
    """The registry's own error code and message (its JSON `errors`), short; never a header."""
    try:
        errors = bounded_json(body, "the error").get("errors") or []
        return "; ".join(f"{e.get('code', '')} {e.get('message', '')}".strip()[:200] for e in errors[:2]) or "no detail"
    except (ValueError, AttributeError, TypeError):
        return "no detail"


def from_url(url: str, settings: Settings, *, bounds: Bounds | None = None) -> OciStore:
    """`oci://host[:port]/namespace/[?plain-http=1]`: https, except loopback hosts, hosts in CATALOG_OCI_PLAIN_HTTP,
    and `plain-http=1` (`plain-http=0` asks https of a loopback host)."""
    rest = url.split("://", 1)[1]
    query = ""
    if "?" in rest:
        rest, query = rest.split("?", 1)
    netloc, _, path = rest.partition("/")
    if "@" in netloc:
        raise UsageError(
            "an oci:// URL carries no credentials", hint="use CATALOG_OCI_USERNAME/PASSWORD or docker's config.json"
        )
    given = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    if set(given) - set(URL_OPTIONS):
        raise UsageError(
            f"unknown oci:// URL option(s): {', '.join(sorted(set(given) - set(URL_OPTIONS)))}",
            hint="known: " + "; ".join(f"{k}=1 ({v})" for k, v in URL_OPTIONS.items()),
        )
    signed = given.get("require-signature", "0").lower()
    if signed not in ("0", "1", "true", "false", "yes", "no", ""):
        raise UsageError(f"oci:// URL option require-signature={signed[:20]!r} is neither 1 nor 0")
    parsed = urllib.parse.urlsplit(f"//{netloc}")
    try:
        host, _ = parsed.hostname, parsed.port
    except ValueError:
        host = None
    if not host:
        raise UsageError(f"bad oci:// URL {url.split('?', 1)[0]!r}", hint="use oci://host[:port]/namespace/")
    namespace = path.strip("/")
    if namespace and (problem := _component_problem(namespace)) is not None:
        raise UsageError(f"bad namespace {namespace!r} in {url.split('?', 1)[0]}: {problem}")
    netloc = netloc.lower()
    plain = settings.oci.plain_http
    wanted = given.get("plain-http", "").lower()
    plain_http = wanted in ("1", "true", "yes") or (
        wanted not in ("0", "false", "no") and (is_loopback(host) or netloc in plain or host in plain)
    )
    owner = settings.oci.registry or (
        host_key(settings.store.split("://", 1)[1]) if settings.store and settings.store.startswith("oci://") else None
    )

    def credentials() -> Credentials | CredentialProgram | None:
        return credentials_for(
            netloc,
            username=settings.oci.username,
            password=settings.oci.password,
            for_host=owner,
            docker_config=read_docker_config(settings.oci.docker_config),
        )

    client = RegistryClient(
        "http" if plain_http else "https",
        netloc,
        credentials,
        plain_http_ok=lambda where: where.lower() in plain,
        bounds=bounds or Bounds.from_settings(settings),
        pool_size=max(16, settings.concurrency or 0),
    )
    shown = f"oci://{netloc}/{namespace + '/' if namespace else ''}"
    return OciStore(
        client,
        namespace,
        shown,
        part_size=settings.part_size or 64 * 1024 * 1024,
        concurrency=settings.concurrency or 8,
        signature_check=signature_check(settings, shown) if signed in ("1", "true", "yes") else None,
    )


def signature_check(settings: Settings, url: str) -> SignatureCheck:
    """What `require-signature=1` accepts: a model-signing bundle that the runner's own trusted keys or roots
    (--trusted-key/--trusted-root, CATALOG_TRUSTED_KEYS/ROOTS) verify and that names exactly the model's pins.
    catalog.yaml's anchors are not used: a registry's requirement is the runner's, which a merged change to the
    catalog must not decide."""
    from catalog.signing import Policy

    if not (settings.trusted_keys or settings.trusted_roots):
        raise UsageError(
            f"{url} requires signatures (require-signature=1) and this runner trusts no key",
            hint="pass --trusted-key PUB_PEM (or CATALOG_TRUSTED_KEYS, --trusted-root / CATALOG_TRUSTED_ROOTS)",
        )
    policy = Policy(
        True,
        settings.trusted_keys,
        settings.trusted_roots,
        "--trusted-key/--trusted-root or CATALOG_TRUSTED_KEYS/CATALOG_TRUSTED_ROOTS",
    )
    loaded: list[Any] = []

    def check(model: ModelManifest, bundle: bytes) -> str | None:
        from catalog.signing import SignatureFormatError, first_difference, parse_bundle
        from resolver.signatures import Untrusted, load_anchors, verify_bundle

        if not loaded:
            loaded.append(load_anchors(policy))
        try:
            statement, _ = verify_bundle(parse_bundle(bundle), loaded[0])
        except (SignatureFormatError, Untrusted) as exc:
            return str(exc)
        difference = first_difference(statement, model.files)
        return None if difference is None else f"it does not match the pins: {difference.describe()}"

    return check


def referrer_stores(cat: Catalog, settings: Settings) -> list[OciStore]:
    """The oci:// stores of an invocation, its store and then its mirrors, bound to the catalog: where `catalog sign`
    pushes a signature as a referrer."""
    urls = [settings.store or cat.settings.store, *(settings.mirrors or cat.settings.mirrors)]
    stores = [from_url(url, settings) for url in dict.fromkeys(urls) if url.lower().startswith("oci://")]
    for store in stores:
        store.bind_models({cat.store_key(m): m for m in cat})
    return stores
