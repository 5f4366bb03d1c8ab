"""A model as a CNCF ModelPack artifact: one raw layer per pinned file, its digest the pin (pure, no I/O).

    ModelManifest --build_config/build_manifest--> canonical JSON bytes (same catalog manifest, same digest)
    registry manifest bytes --parse_manifest--> path -> Layer (digest, size), plus what was ignored and why

A raw layer's digest is the sha256 of the file's bytes, i.e. the pin, so the registry deduplicates across
models and revisions for free and every byte it serves is checked against the manifest as from any store.
Layers are named by the ModelPack `org.cncf.model.filepath` annotation; an artifact pushed by `oras push`
without it names its files by `org.opencontainers.image.title`, which is read as the path too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from catalog import bounded, formats, naming
from catalog.schema import FileEntry, ModelManifest

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_ACCEPT = ", ".join((OCI_MANIFEST, DOCKER_MANIFEST, OCI_INDEX, DOCKER_LIST))

ARTIFACT_TYPE = "application/vnd.cncf.model.manifest.v1+json"
CONFIG_TYPE = "application/vnd.cncf.model.config.v1+json"
WEIGHT = "application/vnd.cncf.model.weight.v1.raw"
WEIGHT_CONFIG = "application/vnd.cncf.model.weight.config.v1.raw"  # config.json, tokenizer files, ...
DOC = "application/vnd.cncf.model.doc.v1.raw"
CODE = "application/vnd.cncf.model.code.v1.raw"
DATASET = "application/vnd.cncf.model.dataset.v1.raw"

FILEPATH = "org.cncf.model.filepath"
TITLE = "org.opencontainers.image.title"  # what `oras push` names a file by
SOURCE = "org.opencontainers.image.source"
REVISION = "org.opencontainers.image.revision"

READABLE_TAG = "latest"  # the catalog's current pin of the model; the revision tag never moves
_DOCS = ("readme", "license", "licence", "notice", "copying")


def bounded_json(data: bytes, what: str) -> Any:
    """JSON from a registry or a token server (catalog/bounded.py: size and nesting bounded); a ValueError naming
    `what` for anything that is not JSON."""
    try:
        return bounded.loads(data)
    except bounded.BadJsonError as exc:
        raise ValueError(f"{what}: {exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{what} is not JSON ({str(exc)[:80]})") from None


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical(value: Any) -> bytes:
    """Sorted keys, no spaces: the same value always makes the same bytes, hence the same digest."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def media_type(manifest: ModelManifest, entry: FileEntry) -> str:
    """The ModelPack raw media type of one file: weights, docs, code, dataset files, or config (the rest)."""
    if manifest.is_dataset:
        return DATASET
    if formats.is_weight_file(entry.path):
        return WEIGHT
    name = entry.path.rsplit("/", 1)[-1].lower()
    if name.startswith(_DOCS) or name.endswith(".md"):
        return DOC
    if name.endswith(".py"):
        return CODE
    return WEIGHT_CONFIG


def source_url(manifest: ModelManifest) -> str:
    """The Hub repo the bytes come from, as a link a person can open (whatever endpoint the catalog uses)."""
    kind = "datasets/" if manifest.is_dataset else ""
    return f"https://huggingface.co/{kind}{manifest.source.hf_repo}"


def build_config(manifest: ModelManifest) -> bytes:
    """The artifact's config (ModelPack `model.config.v1`): the name, the Hub repo and revision it was pinned at,
    and every layer's digest. No timestamps: a re-publish of the same pins is the same blob."""
    return canonical(
        {
            "descriptor": {
                "name": manifest.name,
                "revision": manifest.source.revision,
                "sourceURL": source_url(manifest),
                **({"description": manifest.description} if manifest.description else {}),
            },
            "modelfs": {"type": "layers", "diffIds": [f"sha256:{e.sha256}" for e in manifest.files]},
            "config": {"format": manifest.load_format.value},
        }
    )


def build_manifest(manifest: ModelManifest, config: bytes) -> bytes:
    """The OCI image manifest of the artifact: one raw layer per pinned file, in the manifest's order."""
    layers = [
        {
            "mediaType": media_type(manifest, e),
            "digest": f"sha256:{e.sha256}",
            "size": e.size,
            "annotations": {FILEPATH: e.path, TITLE: e.path},
        }
        for e in manifest.files
    ]  # title: where oras pull writes it
    return canonical(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": ARTIFACT_TYPE,
            "config": {"mediaType": CONFIG_TYPE, "digest": digest_of(config), "size": len(config)},
            "layers": layers,
            "annotations": {TITLE: manifest.name, SOURCE: source_url(manifest), REVISION: manifest.source.revision},
        }
    )


@dataclass(frozen=True)
class Layer:
    path: str
    digest: str  # sha256:<hex>
    size: int
    media_type: str = WEIGHT

    @property
    def sha256(self) -> str | None:
        """The layer's sha256 (hex) when its digest is one, else None (another algorithm names other bytes)."""
        algorithm, _, value = self.digest.partition(":")
        return value if algorithm == "sha256" and naming.check_sha256(value) is None else None


@dataclass(frozen=True)
class Parsed:
    layers: Mapping[str, Layer]  # by path
    config_digest: str | None = None
    ignored: tuple[str, ...] = field(default_factory=tuple)  # layers without a usable path, and why


class NotAModelManifest(ValueError):
    """The bytes are not an image manifest this store can read (an index, not JSON, no layers list)."""


def parse_manifest(body: bytes) -> Parsed:
    """Pure: the layers of an OCI (or Docker v2) image manifest, by the path their annotations name.

    A layer with no path annotation, an unsafe path (absolute, `..`) or a path already named by an earlier
    layer is ignored (and said in `ignored`): no key outside the model, no ambiguity about which bytes a path means."""
    try:
        data = bounded_json(body, "the manifest")
    except ValueError as exc:
        raise NotAModelManifest(str(exc)) from None
    if not isinstance(data, dict):
        raise NotAModelManifest("not a JSON object")
    kind = data.get("mediaType")
    if kind in (OCI_INDEX, DOCKER_LIST) or "manifests" in data:
        raise NotAModelManifest("an image index (a list of manifests), not a model artifact")
    raw_layers = data.get("layers")
    if data.get("schemaVersion") != 2 or not isinstance(raw_layers, list):
        raise NotAModelManifest("not a schema-2 image manifest with a list of layers")
    config = data.get("config")
    config_digest = config.get("digest") if isinstance(config, dict) and isinstance(config.get("digest"), str) else None
    layers: dict[str, Layer] = {}
    ignored: list[str] = []
    for index, raw in enumerate(raw_layers):
        layer, why = _layer(raw)
        if layer is None:
            ignored.append(f"layer {index}: {why}")
        elif layer.path in layers:
            ignored.append(f"layer {index}: {layer.path} is named by an earlier layer too")
        else:
            layers[layer.path] = layer
    return Parsed(layers, config_digest, tuple(ignored))


def layer_path(raw: Any) -> str | None:
    """The path a raw layer (a manifest's JSON) names: its ModelPack filepath, else its oras title."""
    annotations = raw.get("annotations") if isinstance(raw, dict) else None
    if not isinstance(annotations, dict):
        return None
    path = annotations.get(FILEPATH) or annotations.get(TITLE)
    return path if isinstance(path, str) and path else None


def _layer(raw: Any) -> tuple[Layer | None, str]:
    if not isinstance(raw, dict):
        return None, "not an object"
    digest, size = raw.get("digest"), raw.get("size")
    if not isinstance(digest, str) or not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return None, "no digest or size"
    path = layer_path(raw)
    if path is None:
        return None, f"no {FILEPATH} (or {TITLE}) annotation"
    if (message := naming.check_relative_path(path)) is not None:
        return None, f"path {path!r}: {message}"
    media = raw.get("mediaType")
    return Layer(path, digest, size, media if isinstance(media, str) else WEIGHT), ""


def layer_problem(layer: Layer | None, entry: FileEntry) -> str | None:
    """Pure: why `layer` cannot be the pinned file `entry` (None: it is, by digest and size)."""
    if layer is None:
        return "no layer names this path"
    if layer.sha256 != entry.sha256:
        return f"its layer is {layer.digest}, the pin is sha256:{entry.sha256}"
    if layer.size != entry.size:
        return f"its layer says {layer.size} bytes, the pin {entry.size}"
    return None


def first_mismatch(parsed: Parsed, model: ModelManifest) -> tuple[str, str] | None:
    """Pure: the first pinned path (in path order) whose layer names other bytes, with why; None when every layer the
    artifact holds for a pinned path is that file. Paths the artifact lacks are not mismatches (they are missing)."""
    for entry in sorted(model.files, key=lambda e: e.path):
        layer = parsed.layers.get(entry.path)
        if layer is not None and (problem := layer_problem(layer, entry)) is not None:
            return entry.path, problem
    return None


def repository_name(namespace: str, model: str) -> str:
    return f"{namespace}/{model}" if namespace else model


def pins(manifests: Iterable[ModelManifest]) -> dict[str, list[str]]:
    """sha256 -> the models pinning it, in the given order: where a blob can be mounted from."""
    found: dict[str, list[str]] = {}
    for m in manifests:
        for e in m.files:
            holders = found.setdefault(e.sha256, [])
            if m.name not in holders:
                holders.append(m.name)
    return found


# -- referrers (OCI 1.1): artifacts about an artifact, e.g. its signature --------------------------------------------
EMPTY_TYPE = "application/vnd.oci.empty.v1+json"  # the config of an artifact that has none
EMPTY_CONFIG = b"{}"
SIGNATURE_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"  # a model-signing bundle (what cosign names it too)


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int
    artifact_type: str | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        value: dict[str, Any] = {"mediaType": self.media_type, "digest": self.digest, "size": self.size}
        if self.artifact_type is not None:
            value["artifactType"] = self.artifact_type
        if self.annotations:
            value["annotations"] = dict(self.annotations)
        return value


def build_referrer(subject: Descriptor, artifact_type: str, payload: bytes, title: str) -> bytes:
    """The image manifest of an artifact about `subject`: one layer holding `payload` (named `title`, where `oras
    pull` writes it), the empty config, `subject` pointing at the model's artifact. No timestamp: the same payload
    about the same artifact is the same manifest."""
    return canonical(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": artifact_type,
            "config": {"mediaType": EMPTY_TYPE, "digest": digest_of(EMPTY_CONFIG), "size": len(EMPTY_CONFIG)},
            "layers": [
                {
                    "mediaType": artifact_type,
                    "digest": digest_of(payload),
                    "size": len(payload),
                    "annotations": {TITLE: title},
                }
            ],
            "subject": {"mediaType": subject.media_type, "digest": subject.digest, "size": subject.size},
        }
    )


def fallback_tag(digest: str) -> str:
    """The referrers tag schema's tag for registries without the referrers API: `<alg>-<hex>`."""
    algorithm, _, value = digest.partition(":")
    return f"{algorithm}-{value}"


def referrer_descriptor(manifest: bytes) -> Descriptor:
    """The descriptor an index lists for a referrer manifest built by `build_referrer`."""
    data = bounded_json(manifest, "the referrer")
    return Descriptor(
        OCI_MANIFEST, digest_of(manifest), len(manifest), data.get("artifactType"), dict(data.get("annotations") or {})
    )


def parse_index(body: bytes) -> list[Descriptor]:
    """Pure: the manifests an image index lists (a referrers answer or a fallback tag's index); entries that are not
    descriptors are skipped. ValueError for bytes that are not an index."""
    data = bounded_json(body, "the referrers index")
    manifests = data.get("manifests") if isinstance(data, dict) else None
    if not isinstance(manifests, list):
        raise ValueError("the referrers index has no list of manifests")
    found = []
    for raw in manifests:
        if not isinstance(raw, dict):
            continue
        digest, size, media = raw.get("digest"), raw.get("size"), raw.get("mediaType")
        if not isinstance(digest, str) or not isinstance(size, int) or isinstance(size, bool) or size < 0:
            continue
        artifact = raw.get("artifactType")
        notes = raw.get("annotations")
        found.append(
            Descriptor(
                media if isinstance(media, str) else OCI_MANIFEST,
                digest,
                size,
                artifact if isinstance(artifact, str) else None,
                {str(k): str(v) for k, v in notes.items()} if isinstance(notes, dict) else {},
            )
        )
    return found


def build_index(descriptors: Iterable[Descriptor]) -> bytes:
    """The fallback tag's image index listing `descriptors` (each digest once, in the given order)."""
    seen: dict[str, Descriptor] = {}
    for d in descriptors:
        seen.setdefault(d.digest, d)
    return canonical({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [d.as_json() for d in seen.values()]})
