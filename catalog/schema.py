"""The manifest schema: plain, frozen pydantic values.

Pydantic checks structure and types (unknown keys, missing keys, wrong types); scalars are strict,
so a quoted number or a number where text belongs is an error instead of a silent coercion. The
domain rules (pins, prefixes, paths, formats, GPU memory) live in `rules.py`, where each problem
gets its own message and line; the patterns below are repeated into the JSON Schema for editors.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, model_validator

from catalog import formats, naming
from catalog.formats import LoadFormat

MAX_FILE_SIZE = 2**63 - 1  # what a file system offsets can address; bigger is a typo
MAX_BUDGET_SECONDS = 7 * 24 * 3600  # a ready-time budget beyond a week is a typo (milliseconds?)
DATASET_GPU_CLASS = "cpu"  # a dataset without `gpu:` needs no accelerator
RepoType = Literal["model", "dataset"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Source(_Strict):
    """Where the files come from: a Hub repo at one immutable commit."""

    hf_repo: StrictStr = Field(
        description="Hub repository id, org/name.", json_schema_extra={"pattern": naming.HF_REPO_PATTERN}
    )
    repo_type: RepoType = Field(
        "model",
        description="model (the default) or dataset: where the repo lives on the Hub "
        "and which HF cache folder (models--/datasets--) holds it.",
    )
    revision: StrictStr = Field(
        description="Full 40-hex commit; branches, tags and refs/pr/N are refused.",
        json_schema_extra={"pattern": naming.REVISION_PATTERN},
    )
    include: tuple[StrictStr, ...] = Field((), description="Glob patterns of repo files to pin (default: all).")
    exclude: tuple[StrictStr, ...] = Field((), description="Glob patterns of repo files to leave out.")


class GpuRequirement(_Strict):
    gpu_class: StrictStr | None = Field(
        None, alias="class", description="A class from catalog.yaml gpu_classes (default: the catalog's default)."
    )
    count: StrictInt = Field(1, ge=1, le=4096, description="How many GPUs of that class the model is tested on.")


class HeaderPin(_Strict):
    """A safetensors file's header, pinned by `catalog lock` from one ranged read (see catalog/safetensors_header.py)."""

    length: StrictInt = Field(ge=0, description="The JSON header's length in bytes (after the 8-byte length).")
    sha256: StrictStr = Field(
        description="sha256 of the file's first 8 + length bytes.", json_schema_extra={"pattern": "^[0-9a-f]{64}$"}
    )
    tensors: StrictInt = Field(ge=0, description="How many tensors the header names.")
    parameters: StrictInt = Field(ge=0, description="Elements over every tensor.")
    bytes_by_dtype: dict[StrictStr, StrictInt] = Field(
        description="Tensor bytes per safetensors dtype (F32, BF16, ...)."
    )
    table_sha256: StrictStr = Field(
        description="sha256 of this file's tensor table in <name>.tensors.json.",
        json_schema_extra={"pattern": "^[0-9a-f]{64}$"},
    )

    @property
    def tensor_bytes(self) -> int:
        return sum(self.bytes_by_dtype.values())


class WeightMapPin(_Strict):
    """A safetensors index's weight_map, pinned by `catalog lock`; the map itself is in <name>.tensors.json."""

    tensors: StrictInt = Field(ge=0, description="How many tensors the weight_map names.")
    sha256: StrictStr = Field(
        description="sha256 of the weight_map's table in <name>.tensors.json.",
        json_schema_extra={"pattern": "^[0-9a-f]{64}$"},
    )


class TablePin(_Strict):
    """The tensor table of a weights file without a safetensors header (a tensorizer file), pinned by `catalog lock`
    from the file's verified bytes: every tensor's dtype, shape, byte offset and sha256 live in <name>.tensors.json."""

    tensors: StrictInt = Field(ge=0, description="How many tensors the file holds.")
    table_sha256: StrictStr = Field(
        description="sha256 of this file's tensor table in <name>.tensors.json.",
        json_schema_extra={"pattern": "^[0-9a-f]{64}$"},
    )


class FileEntry(_Strict):
    """One pinned file; written by `catalog lock`, never by hand."""

    path: StrictStr = Field(description="Relative POSIX path inside the model.")
    # No lower bound here: the `size` rule says what is wrong with a negative size in its own words.
    size: StrictInt = Field(description="Size in bytes.", le=MAX_FILE_SIZE, json_schema_extra={"minimum": 0})
    sha256: StrictStr = Field(
        description="Lowercase hex sha256 (the Hub's LFS oid).", json_schema_extra={"pattern": "^[0-9a-f]{64}$"}
    )
    blob_id: StrictStr | None = Field(
        None,
        description="The git blob id (sha1) the Hub lists; informational, sha256 is the pin.",
        json_schema_extra={"pattern": "^[0-9a-f]{40}$"},
    )
    xet_hash: StrictStr | None = Field(
        None,
        description="The Hub's Xet content hash, where it stores the file in Xet; informational, sha256 is the pin.",
        json_schema_extra={"pattern": "^[0-9a-f]{64}$"},
    )
    shards: tuple[StrictStr, ...] | None = Field(
        None,
        description="On an index file (*.safetensors.index.json, *.bin.index.json): every file its weight_map "
        "names, as repo paths; each must be pinned too.",
    )
    header: HeaderPin | None = Field(
        None, description="On a *.safetensors file: its header (machine-written by `catalog lock`)."
    )
    weight_map: WeightMapPin | None = Field(
        None, description="On a *.safetensors.index.json: its weight_map (machine-written by `catalog lock`)."
    )
    table: TablePin | None = Field(
        None,
        description="On a weights file without a safetensors header (*.tensors): its "
        "tensor table (machine-written by `catalog lock`).",
    )

    @property
    def is_index(self) -> bool:
        return formats.is_index_file(self.path)

    @property
    def weight_bytes(self) -> int:
        """The tensors' exact bytes when the header is pinned, else the file's size (header included)."""
        return self.header.tensor_bytes if self.header is not None else self.size


# A value of an engine argument: text or a number (`--max-model-len 64`), true (a bare flag: `--enforce-eager`), false
# (`--no-enable-prefix-caching`), or a mapping (compact JSON: `--compilation-config '{"level":0}'`).
ArgValue = StrictStr | StrictInt | StrictFloat | StrictBool | dict[StrictStr, Any]


class EngineProfile(_Strict):
    """How the model runs on one GPU class: what `resolve --format vllm-args|env|json` adds for a runner of that class,
    and how long it may take to be ready (the pytest plugin's `catalog_ready` enforces it)."""

    args: dict[StrictStr, ArgValue] = Field(
        default_factory=dict,
        description="Engine arguments by their vLLM name without the dashes (max-model-len: 64, "
        "dtype: float32, enforce-eager: true, tensor-parallel-size: 2), in order.",
    )
    env: dict[StrictStr, StrictStr] = Field(
        default_factory=dict,
        description='Environment the engine runs with (VLLM_ROCM_USE_AITER: "1"); never credentials.',
    )
    ready_budget_s: StrictFloat | None = Field(
        None,
        gt=0,
        le=MAX_BUDGET_SECONDS,
        description="Seconds from resolve to an "
        "engine ready to serve, on this class; a test over it fails naming both figures.",
    )

    def command_line(self) -> tuple[str, ...]:
        """`args` as engine arguments, in order: true is a bare flag, false its `--no-` form (vLLM's boolean flags take
        both), a mapping vLLM's dotted form (`--compilation-config.level=0`: no braces or quotes, so the arguments
        survive a plain `$(...)` splice, as resolve's loader config does), anything else its text."""
        out: list[str] = []
        for name, value in self.args.items():
            if value is True:
                out.append(f"--{name}")
            elif value is False:
                out.append(f"--no-{name}")
            elif isinstance(value, dict):
                out += _dotted(f"--{name}", value)
            else:
                out += [f"--{name}", str(value)]
        return tuple(out)


# What vLLM's dotted-argument parser reads as a number with a unit ("80g"): such a string is written as JSON.
_SIZE_LIKE = re.compile(r"[0-9.]+\s*[a-zA-Z]{1,3}")


def _dotted(flag: str, mapping: dict[str, Any]) -> list[str]:
    """`--flag.key=value` per key, nested keys joined by dots; a value vLLM would read as something else (a string
    that parses as JSON or looks like a size) as a JSON string, numbers, booleans and lists as JSON."""
    out: list[str] = []
    for key, value in mapping.items():
        if isinstance(value, dict):
            out += _dotted(f"{flag}.{key}", value)
            continue
        text = json.dumps(value, separators=(",", ":"))
        if isinstance(value, str) and value and value.strip() == value and not _SIZE_LIKE.fullmatch(value):
            try:
                json.loads(value)
            except ValueError:
                text = value
        out.append(f"{flag}.{key}={text}")
    return out


class Baseline(_Strict):
    """An expected metric, measured on a pinned dataset: `catalog_baseline` in the pytest plugin asserts it."""

    metric: StrictStr = Field(description="The metric's name (accuracy, exact_match, spearman, ...).")
    dataset: StrictStr = Field(
        description="The logical name of the dataset manifest it is measured on (pinned like "
        "the model, so neither side moves under the figure)."
    )
    split: StrictStr | None = Field(None, description="The dataset's split or subset, when it has several.")
    value: StrictFloat = Field(description="The expected value.")
    tolerance: StrictFloat = Field(ge=0, description="How far a measurement may be from `value` and pass.")


class ModelManifest(_Strict):
    """One CI model, pinned."""

    name: StrictStr = Field(
        description="Logical name, unique in the catalog.", json_schema_extra={"pattern": naming.NAME_PATTERN}
    )
    description: StrictStr = ""
    source: Source
    s3_prefix: StrictStr = Field(description="s3://bucket/key/ ending in exactly one '/'.")
    load_format: LoadFormat
    loader: dict[str, Any] = Field(
        default_factory=dict, description="Options passed through to the engine's loader (model_loader_extra_config)."
    )
    gpu: GpuRequirement = Field(default_factory=lambda: GpuRequirement())
    tags: tuple[StrictStr, ...] = ()
    tokenizer: StrictStr | None = Field(None, description="Another model's logical name, or a subfolder of this one.")
    allow_pickle: StrictBool = Field(
        False,
        description="Superseded by allow_code (which says why): still read, never "
        "enough alone for files that run code.",
    )
    allow_code: StrictStr | None = Field(
        None,
        min_length=1,
        description="Why this model may pin files that run code when loaded (pickle-based weights, "
        "*.py, remote code its config's auto_map names): a reason a reviewer reads. Also what lets `--format vllm-args` "
        "pass --trust-remote-code, for a model that pins *.py files.",
    )
    primary: StrictBool = Field(
        False,
        description="When several manifests pin one Hub repo, this one answers for the repo id "
        "in repo-id outputs (resolve --format redirect).",
    )
    profiles: dict[StrictStr, EngineProfile] = Field(
        default_factory=dict,
        description="Per GPU class (a key of catalog.yaml gpu_classes): the engine arguments and "
        "environment the model runs with there, and its ready-time budget.",
    )
    baselines: tuple[Baseline, ...] = Field(
        (), description="Expected metrics, each measured on a dataset of the catalog."
    )
    files: tuple[FileEntry, ...] = Field((), description="Every pinned file; machine-written by `catalog lock`.")

    @model_validator(mode="before")
    @classmethod
    def _dataset_gpu(cls, data: Any) -> Any:
        """A dataset needs no accelerator unless its manifest says so: `gpu` defaults to the cpu class."""
        if (
            isinstance(data, dict)
            and "gpu" not in data
            and isinstance(data.get("source"), dict)
            and data["source"].get("repo_type") == "dataset"
        ):
            return {**data, "gpu": {"class": DATASET_GPU_CLASS}}
        return data

    @property
    def is_dataset(self) -> bool:
        return self.source.repo_type == "dataset"

    @property
    def weight_files(self) -> tuple[FileEntry, ...]:
        """Files holding weights of any format (a streamed model leaves exactly these in the store)."""
        return tuple(f for f in self.files if formats.is_weight_file(f.path))

    @property
    def weights_bytes(self) -> int:
        return sum(f.size for f in self.weight_files)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def file(self, path: str) -> FileEntry | None:
        return next((f for f in self.files if f.path == path), None)


class TrustedIdentity(_Strict):
    """Who may sign with a certificate (catalog/signing.py Identity)."""

    identity: StrictStr = Field(
        min_length=1,
        description="A name the signing certificate must carry: its subject DN "
        "(RFC 4514, e.g. CN=ci,O=Org) or one of its alternative names (email, URI, DNS).",
    )
    issuer: StrictStr = Field(
        min_length=1,
        description="The certificate's OIDC issuer extension (Sigstore keyless: "
        "e.g. https://token.actions.githubusercontent.com); for a certificate without one, its "
        "issuer DN (RFC 4514).",
    )


class GpuClass(_Strict):
    memory_gib: float = Field(gt=0, le=1e6, description="Memory per device in GiB (host RAM for `cpu`).")
    description: StrictStr = ""


class CatalogSettings(_Strict):
    """manifests/catalog.yaml: what holds for every model."""

    store: StrictStr = Field(description="The bucket every s3_prefix lives in, e.g. s3://vllm-ci-model-weights/.")
    default_gpu: StrictStr = "l4"
    gpu_classes: dict[StrictStr, GpuClass]
    gpu_memory_factor: float = Field(
        1.2,
        ge=1.0,
        le=100.0,
        description="GPU memory a model needs per byte of weights: "
        "weights x this must fit the class's memory x count (KV cache, activations, CUDA context).",
    )
    mirrors: tuple[StrictStr, ...] = Field(
        default=(),
        description="Store URLs (s3://, oci://, file://, http(s)://) tried in order "
        "before `store`, per file; every byte is verified (CATALOG_MIRRORS / --mirror override).",
    )
    signatures: Literal["required", "optional"] = Field(
        "optional",
        description="required: every model needs a <name>.sig (OpenSSF model-signing) that a trusted key or "
        "root vouches for, checked by validate and before resolve fetches a byte; optional: "
        "validate checks the signatures present.",
    )
    trusted_keys: tuple[StrictStr, ...] = Field(
        (),
        description="PEM public keys (EC P-256/P-384) whose signatures are "
        "trusted, by path relative to this folder (--trusted-key replaces them).",
    )
    trusted_roots: tuple[StrictStr, ...] = Field(
        (),
        description="PEM CA certificates: a signature whose certificate chains "
        "to one is trusted, by path relative to this folder (--trusted-root replaces them).",
    )
    trusted_identities: tuple[TrustedIdentity, ...] = Field(
        (),
        description="Who may sign with a certificate: a certificate-signed model is refused unless its certificate "
        "names one of these identities with its issuer (--trusted-identity replaces them).",
    )
    trusted_log_keys: tuple[StrictStr, ...] = Field(
        (),
        description="PEM public keys of transparency logs (Rekor): a bundle's log entry must carry a signed entry "
        "timestamp one of them made (--trusted-log-key replaces them).",
    )
    log_entries: Literal["check", "accept-unchecked"] = Field(
        "check",
        description="check: a bundle carrying log entries is refused unless a trusted log key checks them; "
        "accept-unchecked: accepted without (the signing time is then not proven).",
    )


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a model manifest, for editors (yaml-language-server) and other tools."""
    schema = ModelManifest.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "model-catalog manifest"
    return schema
