"""What a job loaded, as a bill of materials: CycloneDX 1.6 (`resolve --format cyclonedx`) or an in-toto statement
(`resolve --format intoto`), and the pytest plugin's session BOM (`--catalog-bom FILE`).

Every fact is the catalog's already: a resolved model's Hub repo and commit, every file it resolved (local or
streamed) with the pinned sha256, and the signature's verdict as the resolve gate checks it (resolver/signatures.py
`verdict`). The output is byte-identical for identical inputs: no timestamp, and a serial number derived from the
content. cyclonedx-python-lib (the `bom` extra) is imported only when a BOM is asked for: the other output formats
are rendered into the warm index on every cold resolve, these are not (a warm call for them goes to the full CLI).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from catalog import __version__
from catalog.errors import CatalogError

if TYPE_CHECKING:
    from catalog.lookup import Catalog
    from catalog.settings import Settings
    from resolver.resolution import Resolution

PREDICATE_TYPE = "https://model-catalog/resolve/v1"  # the job's resolve request, and what each model resolved to
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
INSTALL_HINT = "install the bom extra: pip install 'model-catalog[bom]'"


class ModelFacts(NamedTuple):
    """One resolved model as a BOM lists it."""

    name: str
    hf_repo: str
    revision: str
    dataset: bool
    load_format: str
    files: tuple[tuple[str, str, bool], ...]  # (path, sha256, streamed), in path order
    signature: str  # the verdict, one line

    @property
    def purl(self) -> str:
        org, _, repo = self.hf_repo.partition("/")
        return f"pkg:huggingface/{org}/{repo}@{self.revision}"


def facts(cat: Catalog, results: Sequence[Resolution], settings: Settings | None) -> list[ModelFacts]:
    """The facts of each resolved model (once per name, in order): the files it resolved with their pins."""
    from resolver.signatures import verdict

    out: dict[str, ModelFacts] = {}
    for r in results:
        if r.name in out:
            continue
        manifest = cat.get(r.name)
        pins = {f.path: f.sha256 for f in manifest.files}
        streamed = set(r.streamed)
        out[r.name] = ModelFacts(
            r.name,
            r.hf_repo,
            r.revision,
            manifest.is_dataset,
            r.load_format.value,
            tuple((p, pins[p], p in streamed) for p in sorted({*r.files, *r.streamed})),
            verdict(cat, r.name, settings),
        )
    return list(out.values())


def render(fmt: str, models: Sequence[ModelFacts], request: Mapping[str, Any]) -> str:
    return (cyclonedx(models) if fmt == "cyclonedx" else intoto(models, request)) + "\n"


def _digest(models: Sequence[ModelFacts]) -> bytes:
    return hashlib.sha256(json.dumps([list(m) for m in models], sort_keys=True).encode()).digest()


def cyclonedx(models: Sequence[ModelFacts]) -> str:
    """CycloneDX 1.6 JSON: one machine-learning-model (or data) component per model, purl pkg:huggingface/org/name@commit,
    holding one file component per resolved file with its SHA-256; the verdict and load format as properties."""
    try:
        from cyclonedx.model import HashAlgorithm, HashType, Property
        from cyclonedx.model.bom import Bom
        from cyclonedx.model.component import Component, ComponentType
        from cyclonedx.output.json import JsonV1Dot6
        from packageurl import PackageURL
    except ImportError:
        raise CatalogError("--format cyclonedx needs cyclonedx-python-lib", hint=INSTALL_HINT) from None
    bom = Bom(serial_number=uuid.UUID(bytes=_digest(models)[:16], version=5))  # from the content: same in, same out
    bom.metadata.timestamp = None  # type: ignore[assignment]  # the library stamps now by default; the output omits it
    bom.metadata.tools.components.add(
        Component(type=ComponentType.APPLICATION, name="model-catalog", version=__version__)
    )
    for m in models:
        org, _, repo = m.hf_repo.partition("/")
        files = [
            Component(
                type=ComponentType.FILE,
                name=path,
                bom_ref=f"{m.name}/{path}",
                hashes=[HashType(alg=HashAlgorithm.SHA_256, content=sha256)],
                properties=[Property(name="model-catalog:streamed", value="true")] if streamed else [],
            )
            for path, sha256, streamed in m.files
        ]
        bom.components.add(
            Component(
                type=ComponentType.DATA if m.dataset else ComponentType.MACHINE_LEARNING_MODEL,
                name=m.hf_repo,
                version=m.revision,
                bom_ref=f"model-catalog:{m.name}",
                components=files,
                purl=PackageURL(type="huggingface", namespace=org, name=repo, version=m.revision),
                properties=[
                    Property(name="model-catalog:name", value=m.name),
                    Property(name="model-catalog:load_format", value=m.load_format),
                    Property(name="model-catalog:signature", value=m.signature),
                ],
            )
        )
    return str(JsonV1Dot6(bom).output_as_string(indent=2))


def intoto(models: Sequence[ModelFacts], request: Mapping[str, Any]) -> str:
    """An in-toto v1 statement: its subjects are every resolved file (`<model>/<path>`, sha256), its predicate the
    job's resolve request and what each model resolved to. Unsigned: the job signs it with what it attests with."""
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": [
            {"name": f"{m.name}/{path}", "digest": {"sha256": sha256}} for m in models for path, sha256, _ in m.files
        ],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "request": dict(request),
            "resolver": {"name": "model-catalog", "version": __version__},
            "models": [
                {
                    "name": m.name,
                    "purl": m.purl,
                    "hf_repo": m.hf_repo,
                    "revision": m.revision,
                    "repo_type": "dataset" if m.dataset else "model",
                    "load_format": m.load_format,
                    "streamed": [p for p, _, streamed in m.files if streamed],
                    "signature": m.signature,
                }
                for m in models
            ],
        },
    }
    return json.dumps(statement, indent=2, sort_keys=True)
