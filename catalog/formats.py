"""Load formats, described once: what each format streams, needs, counts as weights and asks of the engine.

The schema, the lint rules, `catalog add`, `resolve` and `check-load` all read this table; a new load
format is one row here (plus, if it can be load-checked, one loader module in `resolver/loaders/`).
Standard library only: the warm resolve path imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from fnmatch import fnmatchcase


class LoadFormat(str, Enum):
    """The engine's `--load-format` values that read weights from files."""

    AUTO = "auto"
    SAFETENSORS = "safetensors"
    PT = "pt"
    NPCACHE = "npcache"
    TENSORIZER = "tensorizer"
    SHARDED_STATE = "sharded_state"
    GGUF = "gguf"
    BITSANDBYTES = "bitsandbytes"
    MISTRAL = "mistral"
    FASTSAFETENSORS = "fastsafetensors"
    RUNAI_STREAMER = "runai_streamer"
    RUNAI_STREAMER_SHARDED = "runai_streamer_sharded"
    DATASET = "dataset"  # not an engine format: a dataset's files, all local, no weights

    @property
    def spec(self) -> FormatSpec:
        return FORMATS[self]

    @property
    def streams_weights(self) -> bool:
        """Formats whose weights the engine reads straight from the store."""
        return FORMATS[self].streams_weights


@dataclass(frozen=True)
class Needs:
    """One requirement on the pinned files: some path matches one of `patterns` (top-level only unless `nested`)."""

    what: str  # how a message names it: "config.json", "a *.tensors file"
    patterns: tuple[str, ...]
    nested: bool = False

    def met_by(self, paths: list[str]) -> bool:
        candidates = paths if self.nested else [p for p in paths if "/" not in p]
        return any(fnmatchcase(p, pattern) for p in candidates for pattern in self.patterns)


# Every suffix that holds weights in some format: a streamed format leaves exactly these in the store.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".tensors", ".gguf", ".ckpt")
# An index maps tensor names to the shard files holding them (`weight_map`): `<weights>.index.json`.
INDEX_SUFFIX = ".index.json"
# Pickle-based files can run code when loaded.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".joblib")
# Python modules: what a config's auto_map loads with --trust-remote-code.
CODE_SUFFIXES = (".py",)
# Repos often carry the same weights several times; CI needs one copy. `catalog add` writes these
# into a new safetensors manifest, visible and editable, rather than hiding them in code.
OTHER_WEIGHT_FORMATS = (
    "*.bin",
    "*.pt",
    "*.pth",
    "*.h5",
    "*.msgpack",
    "*.ot",
    "*.onnx",
    "*.gguf",
    "onnx/",
    "openvino/",
    "coreml/",
)

_CONFIG = Needs("config.json", ("config.json",))
_SAFETENSORS = Needs("at least one *.safetensors", ("*.safetensors",))
# What the engine reads besides the weights: without these, a streamed model cannot start offline.
_TOKENIZER = Needs(
    "tokenizer files (tokenizer.json, tokenizer_config.json, tokenizer.model or vocab.*)",
    ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.*"),
    nested=True,
)


class EngineTarget(str, Enum):
    """How the engine is told where a format's weights are."""

    MODEL = "model"  # --model: the local folder, or the stream URI when the weights stay in the store
    LOADER_URI = "loader-uri"  # --model: the local folder (configs, tokenizer); the one weights file's URI goes in
    #                            --model-loader-extra-config under FormatSpec.weights_key (vLLM's tensorizer loader)
    FILE = "file"  # --model: the one weights file itself, local (vLLM loads a GGUF checkpoint by its file path)


@dataclass(frozen=True)
class FormatSpec:
    """What one load format means for the catalog."""

    streams_weights: bool = False  # the engine streams weights from the store; only the rest is local
    needs: tuple[Needs, ...] = ()  # what the pinned files must contain (the `load-format` lint rule)
    streamed_needs: tuple[Needs, ...] = ()  # also required when weights stream: what the engine reads locally
    weight_patterns: tuple[str, ...] = ("*.safetensors",)  # the files that are this format's weights
    default_excludes: tuple[str, ...] = ()  # what `catalog add` excludes for this format
    loader: str | None = None  # the check-load loader (resolver/loaders/<loader>.py), None: cannot be load-checked
    tensor_parallel_files: str | None = None  # files per tensor-parallel rank (their count must match gpu.count)
    engine: bool = True  # False: no engine loads it (a dataset): no engine arguments exist for it
    engine_target: EngineTarget = EngineTarget.MODEL
    weights_key: str | None = None  # EngineTarget.LOADER_URI: the extra-config key naming the weights file
    # Loader keys the engine (or the catalog) sets itself: a manifest that sets them too breaks the load
    # ("got multiple values for keyword argument") or bypasses the pin (a weights URI of its own). Dotted paths.
    engine_sets: tuple[str, ...] = ()
    # the engine reads local safetensors through the loader that takes --safetensors-load-strategy (vLLM's default
    # loader for auto/safetensors/mistral; not fastsafetensors, the streamers or sharded_state)
    load_strategy: bool = False
    # What the loading side must run for this format to be loaded safely (a requirement, said in the docs' table and
    # in the load-safety rule's message: the catalog cannot see the engine's environment)
    loader_requires: str | None = None

    def weight_files(self, paths: list[str]) -> list[str]:
        return [p for p in paths if any(fnmatchcase(p, pattern) for pattern in self.weight_patterns)]


FORMATS: dict[LoadFormat, FormatSpec] = {
    LoadFormat.AUTO: FormatSpec(
        default_excludes=OTHER_WEIGHT_FORMATS,
        loader="safetensors",
        weight_patterns=("*.safetensors", "*.bin", "*.pt", "*.pth"),
        load_strategy=True,
    ),
    LoadFormat.SAFETENSORS: FormatSpec(
        needs=(_CONFIG, _SAFETENSORS), default_excludes=OTHER_WEIGHT_FORMATS, loader="safetensors", load_strategy=True
    ),
    LoadFormat.FASTSAFETENSORS: FormatSpec(
        needs=(_CONFIG, _SAFETENSORS), default_excludes=OTHER_WEIGHT_FORMATS, loader="safetensors"
    ),
    LoadFormat.PT: FormatSpec(
        weight_patterns=("*.bin", "*.pt", "*.pth"),
        loader_requires="torch>=2.10 (weights_only loads: CVE-2026-24747 ran code through them before)",
    ),
    LoadFormat.NPCACHE: FormatSpec(weight_patterns=("*.bin", "*.pt", "*.pth", "*.npy")),
    LoadFormat.BITSANDBYTES: FormatSpec(loader="safetensors", weight_patterns=("*.safetensors", "*.bin")),
    LoadFormat.MISTRAL: FormatSpec(loader="safetensors", load_strategy=True),
    LoadFormat.SHARDED_STATE: FormatSpec(loader="safetensors", weight_patterns=("*.safetensors",)),
    LoadFormat.GGUF: FormatSpec(
        needs=(Needs("a *.gguf file", ("*.gguf",), nested=True),),
        weight_patterns=("*.gguf",),
        engine_target=EngineTarget.FILE,
    ),
    LoadFormat.RUNAI_STREAMER: FormatSpec(
        streams_weights=True,
        needs=(_CONFIG, _SAFETENSORS),
        streamed_needs=(_TOKENIZER,),
        default_excludes=OTHER_WEIGHT_FORMATS,
        loader="runai",
    ),
    LoadFormat.RUNAI_STREAMER_SHARDED: FormatSpec(
        streams_weights=True,
        needs=(Needs("model-rank-*-part-*.safetensors shards", ("model-rank-*-part-*.safetensors",)),),
        streamed_needs=(_TOKENIZER,),
        loader="runai",
        tensor_parallel_files="model-rank-{rank}-part-*.safetensors",
    ),
    LoadFormat.TENSORIZER: FormatSpec(
        streams_weights=True,
        needs=(Needs("a *.tensors file", ("*.tensors",)),),
        streamed_needs=(_TOKENIZER,),
        weight_patterns=("*.tensors",),
        loader="tensorizer",
        engine_target=EngineTarget.LOADER_URI,
        weights_key="tensorizer_uri",
        # vLLM passes lazy_load, device and dtype to TensorDeserializer itself; the catalog points tensorizer_uri
        # at the verified file.
        engine_sets=(
            "tensorizer_uri",
            "deserialization_kwargs.lazy_load",
            "deserialization_kwargs.device",
            "deserialization_kwargs.dtype",
        ),
    ),
    LoadFormat.DATASET: FormatSpec(weight_patterns=(), engine=False),
}


def is_weight_file(path: str) -> bool:
    """Weights of any format (a streamed format leaves these in the store, whatever its own weights are)."""
    return path.endswith(WEIGHT_SUFFIXES)


def is_index_file(path: str) -> bool:
    """A sharded-weights index (`model.safetensors.index.json`, `pytorch_model.bin.index.json`, a diffusers
    subfolder's `unet/diffusion_pytorch_model.safetensors.index.json`): its weight_map names shard files."""
    return path.endswith(INDEX_SUFFIX) and path[: -len(INDEX_SUFFIX)].endswith(WEIGHT_SUFFIXES)


def is_pickle_file(path: str) -> bool:
    return path.endswith(PICKLE_SUFFIXES)


def executes_on_load(path: str) -> str | None:
    """Why loading this file can run code (decided from its name alone), or None."""
    if path.endswith(PICKLE_SUFFIXES):
        return "pickle-based: unpickling can call any function"
    if path.endswith(CODE_SUFFIXES):
        return "Python code: run by --trust-remote-code when a config's auto_map names it"
    return None


def tensor_parallel_ranks(spec: FormatSpec, paths: list[str]) -> int | None:
    """How many tensor-parallel ranks the pinned files hold (None: the format is not split per rank)."""
    if spec.tensor_parallel_files is None:
        return None
    ranks = 0
    while any(fnmatchcase(p, spec.tensor_parallel_files.format(rank=ranks)) for p in paths if "/" not in p):
        ranks += 1
    return ranks
