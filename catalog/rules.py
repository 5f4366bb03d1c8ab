"""The lint rules: pure functions from parsed manifests to problems, and `RULES`, the one table of them.

Each rule has a short id (the `rule` field of a Problem, shown by `--format json`) and reports at the
line of the offending key. Nothing here reads files or the network. `RULES` says, per id, what it refuses
(the docs' Validation table is rendered from it) and whether its findings come from the pinned files, so that
`catalog lock`, which rewrites them, runs despite them. A test checks that every id reported anywhere is here.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from catalog import formats, naming, urls
from catalog.errors import Problem
from catalog.formats import LoadFormat
from catalog.safetensors_header import DTYPE_BITS, PREFIX
from catalog.schema import DATASET_GPU_CLASS, CatalogSettings, FileEntry, ModelManifest
from catalog.tensor_tables import TensorTables, is_safetensors_index, weight_map_sha256
from catalog.yamlsource import LineMap, Loc, format_loc

if TYPE_CHECKING:
    from catalog.loading import ManifestDoc, TablesDoc
    from catalog.signing import Finding


@dataclass(frozen=True)
class Rule:
    id: str
    refuses: str  # one line for the docs' table: what the rule refuses
    pins: bool = False  # found in the pinned files: `catalog lock` rewrites them, so it runs despite these


RULES: tuple[Rule, ...] = (
    Rule(
        "yaml",
        "syntax errors, duplicate keys, tags other than plain values (`!!python/...`), alias bombs, "
        "non-mapping documents",
    ),
    Rule(
        "schema",
        "unknown keys (with a did-you-mean), missing keys, wrong types (numbers where text belongs: quote them)",
    ),
    Rule("settings", "a catalog.yaml that is missing or does not match its schema"),
    Rule("name", "a logical name outside `[a-z0-9][a-z0-9._-]*`"),
    Rule("file-name", "a manifest not named `<name>.yaml`"),
    Rule("duplicate-name", "a name defined twice (reported on every file defining it)"),
    Rule(
        "revision-unpinned", "anything but a full lowercase 40-hex commit: branches, tags and `refs/pr/N` are refused"
    ),
    Rule("hf-repo", "a malformed repo id (also one with `--`: `org/a--b` and `org--a/b` would share a cache folder)"),
    Rule(
        "s3-prefix",
        "not `s3://bucket/key/`, bucket naming rules, not exactly one trailing `/`, `//`, `..`, outside the store",
    ),
    Rule(
        "prefix-overlap",
        "a prefix equal to, or a string prefix of, another model's (one listing would return both), "
        "reported on both files; with `--base REF`, a new revision (or repo) under the old prefix",
    ),
    Rule(
        "pin-conflict",
        "two manifests pinning different bytes (size or sha256) for one path at one hf_repo + "
        "revision, reported on both",
    ),
    Rule("manifest-folder", "a symlinked folder under `manifests/` that leads outside it"),
    Rule(
        "file-path",
        "absolute, `..`, backslash, `.git/`, control characters, the stores' reserved folders, names "
        "not in Unicode NFC, Windows device names, names ending in a space or `.`, staging-shaped "
        "names",
        pins=True,
    ),
    Rule("duplicate-path", "a path pinned twice (also case-insensitively), a file that is also a folder", pins=True),
    Rule("sha256", "a sha256 that is not 64 lowercase hex", pins=True),
    Rule("size", "a negative size", pins=True),
    Rule("unlocked", "no files pinned (names the `catalog lock` command)", pins=True),
    Rule("file-selection", "a pinned file that source.include/exclude leave out", pins=True),
    Rule(
        "shard-missing",
        "a file an index's recorded `shards` names that is not pinned (with the include/exclude that dropped it)",
        pins=True,
    ),
    Rule(
        "index-unrecorded",
        "a weights index without its `shards` recorded (names the `catalog lock` command)",
        pins=True,
    ),
    Rule("shards", "`shards` on a file that is no weights index", pins=True),
    Rule("blob-id", "a `blob_id` that is not 40 lowercase hex", pins=True),
    Rule(
        "xet-hash",
        "an `xet_hash` that is not 64 lowercase hex (huggingface_hub drops a whole cached tree listing over one)",
        pins=True,
    ),
    Rule(
        "header",
        "a safetensors `header` on another kind of file, bad hex, an unknown dtype, or 8 + length + tensor "
        "bytes other than the file's size",
        pins=True,
    ),
    Rule("weight-map", "a `weight_map` on a file that is no `*.safetensors.index.json`, or bad hex", pins=True),
    Rule(
        "tensor-table",
        "tensor tables (`<name>.tensors.json`) missing, unreadable, of another model, or other than "
        "the pinned digests say",
        pins=True,
    ),
    Rule(
        "tensor-missing",
        "a tensor an index maps to a shard that does not hold it (naming the shard that does, if any)",
        pins=True,
    ),
    Rule("tensor-duplicate", "a tensor held by two shards of one index", pins=True),
    Rule(
        "tensor-digests",
        "tensor digests (what `--load-format catalog` checks each tensor against) on some tensors "
        "of a file but not all; a `table:` whose tensors lack a digest or offset, overlap, or do not "
        "fit the file",
        pins=True,
    ),
    Rule("repo-type", "a dataset (`source.repo_type: dataset`) with a load format other than `dataset` or `auto`"),
    Rule(
        "load-format",
        "what the format's row in the formats table needs among the pinned files (a config.json, a "
        "`*.safetensors`, per-rank shards, a `*.tensors`, a `*.gguf`; a streamed format's tokenizer "
        "files, unless `tokenizer:` names another model)",
        pins=True,
    ),
    Rule(
        "loader",
        "`loader:` keys the engine sets itself (tensorizer's `deserialization_kwargs.lazy_load`, `device`, "
        "`dtype`) or a weights URI of the manifest's own (`tensorizer_uri`)",
    ),
    Rule(
        "primary",
        "several manifests of one Hub repo with no `primary: true`, or more than one (the manifest that "
        "answers for the repo id in `--format redirect` and the hf-cache layout)",
    ),
    Rule("tensor-parallel", "per-rank shards (`model-rank-N-...`) for a number of ranks other than `gpu.count`"),
    Rule(
        "load-safety",
        "pins of files that run code when loaded (pickle-based `.bin`/`.pt`/`.pth`/`.ckpt`/`.pkl`/"
        "`.pickle`/`.joblib`, `*.py`), decided from their paths, unless `allow_code:` says why; "
        "`allow_pickle: true` alone (it says that, not why)",
        pins=True,
    ),
    Rule("gpu-class", "an unknown GPU class"),
    Rule(
        "gpu-memory",
        "weights (exact tensor bytes where headers are pinned) x `gpu_memory_factor` larger than the "
        "class's memory x count",
        pins=True,
    ),
    Rule("tokenizer", "a tokenizer that is neither a catalog model nor a pinned subfolder"),
    Rule(
        "signature",
        "under `signatures: required`, a model without a signature; any signature that is unparseable, "
        "made by an untrusted key, or whose resources differ from the pins (naming the first file)",
    ),
    Rule("pin-changed", "with `--base REF`: a file's hash changed while name and revision stayed (pins are immutable)"),
    Rule(
        "mirror",
        "a catalog.yaml mirror URL that no runner could open: an unknown scheme, a bad port or `[`, credentials "
        "in the URL, unknown `?options`, a bad bucket",
    ),
    Rule(
        "profile",
        "an engine profile for a GPU class catalog.yaml does not define, or on a dataset; an argument spelled "
        "other than vLLM's `max-model-len`, or one the catalog sets itself (`model`, `load-format`, "
        "`served-model-name`, ...); more tensor x pipeline ranks than `gpu.count`; an environment variable "
        "the catalog or the store sets (HF_*, CATALOG_*, AWS_*) or one named like a secret",
    ),
    Rule(
        "baseline",
        "an expected metric on a dataset that is not a dataset manifest of the catalog, or one whose "
        "revision or files are not pinned (also when the model's own are not); the same metric on the same "
        "data twice",
    ),
)
BY_ID = {rule.id: rule for rule in RULES}
# What `catalog lock` may run despite: it rewrites the pinned files these rules judge.
LOCK_FIXES = frozenset(rule.id for rule in RULES if rule.pins)

GIB = 1024**3
# Engine arguments `catalog resolve` derives from the manifest itself (resolver/resolution.py engine_args): a profile
# setting one would contradict the pin it is derived from.
CATALOG_ENGINE_ARGS = frozenset(
    {
        "model",
        "revision",
        "served-model-name",
        "load-format",
        "tokenizer",
        "tokenizer-revision",
        "model-loader-extra-config",
        "safetensors-load-strategy",
        "download-dir",
        "trust-remote-code",
    }
)
# Environment the catalog (`--format env`: the HF cache, offline mode) or the store (the stream endpoint) sets.
CATALOG_ENV_PREFIXES = ("HF_", "HUGGINGFACE_", "TRANSFORMERS_OFFLINE", "CATALOG_", "AWS_", "S3_", "RUNAI_STREAMER_S3_")
SECRET_WORDS = frozenset({"TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIALS", "AUTH"})
_ARG_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BLOB_ID = re.compile(r"[0-9a-f]{40}")
_XET_HASH = re.compile(r"[0-9a-f]{64}")
LOCK_HINT = "run `catalog lock {name}` to pin every file's size and sha256"


class _Reporter:
    """Collects problems for one file, turning a key location into its line."""

    def __init__(self, display: str, lines: LineMap) -> None:
        self.display = display
        self.lines = lines
        self.problems: list[Problem] = []

    def __call__(self, rule: str, loc: Loc, message: str) -> None:
        assert rule in BY_ID, f"rule {rule!r} is not in RULES"
        self.problems.append(Problem(self.display, self.lines.line_of(loc), format_loc(loc), message, rule))


def check_settings(settings: CatalogSettings, display: str, lines: LineMap) -> list[Problem]:
    report = _Reporter(display, lines)
    store_problem = urls.check_store_url(settings.store) if urls.scheme_of(settings.store) == "s3" else None
    if (message := store_problem or naming.check_s3_prefix(settings.store, allow_root=True)) is not None:
        report("s3-prefix", ("store",), urls.redact(message))
    for index, mirror in enumerate(settings.mirrors):  # what every runner would otherwise fail on (catalog/urls.py)
        if (message := urls.check_store_url(mirror)) is not None:
            report("mirror", ("mirrors", index), message)
    if settings.default_gpu not in settings.gpu_classes:
        report("gpu-class", ("default_gpu",), f"{settings.default_gpu!r} is not one of gpu_classes")
    if settings.signatures == "required" and not (settings.trusted_keys or settings.trusted_roots):
        report(
            "signature",
            ("signatures",),
            "signatures are required but no trusted_keys or trusted_roots are listed: nothing could verify them",
        )
    return report.problems


def check_catalog(
    docs: Sequence[ManifestDoc], settings: CatalogSettings | None, *, complete: bool = True
) -> list[Problem]:
    """Every rule over every manifest, then the rules that compare manifests with each other. With `complete`
    False (a lookup that read some manifests only) no rule concludes from a manifest it did not read."""
    problems: list[Problem] = []
    valid = [d for d in docs if d.manifest is not None]
    names = {d.manifest.name for d in valid if d.manifest is not None}
    for doc in valid:
        report = _Reporter(doc.display, doc.lines)
        assert doc.manifest is not None
        check_manifest(doc.manifest, PurePosixPath(doc.path.name).stem, settings, names, report)
        if doc.tables is not None:
            problems.extend(check_tensor_tables(doc.manifest, doc.tables, report))
        problems.extend(report.problems)
    problems.extend(_duplicate_names(valid))
    problems.extend(_prefix_overlaps(valid))
    problems.extend(_primaries(valid, complete))
    problems.extend(_pin_conflicts(valid))
    problems.extend(_baselines(valid, complete))
    return problems


def check_manifest(
    m: ModelManifest, file_stem: str, settings: CatalogSettings | None, names: set[str], report: _Reporter
) -> None:
    if (message := naming.check_name(m.name)) is not None:
        report("name", ("name",), message)
    elif file_stem != m.name:
        report("file-name", ("name",), f"name {m.name!r} differs from the file name; rename the file to {m.name}.yaml")
    if (message := naming.check_hf_repo(m.source.hf_repo)) is not None:
        report("hf-repo", ("source", "hf_repo"), message)
    if (message := naming.check_revision(m.source.revision)) is not None:
        report("revision-unpinned", ("source", "revision"), message)
    _check_prefix(m, settings, report)
    _check_files(m, report)
    if m.allow_pickle and m.allow_code is None:
        report(
            "load-safety",
            ("allow_pickle",),
            "`allow_pickle: true` says that pickles may be pinned, not why; replace "
            "it with `allow_code: <the reason a reviewer reads>`",
        )
    _check_shards(m, report)
    _check_tensor_pins(m, report)
    _check_repo_type(m, report)
    _check_load_format(m, report)
    _check_loader(m, report)
    _check_gpu(m, settings, report)
    _check_tokenizer(m, names, report)
    _check_profiles(m, settings, report)
    _check_own_baselines(m, report)


def _check_prefix(m: ModelManifest, settings: CatalogSettings | None, report: _Reporter) -> None:
    if (message := naming.check_s3_prefix(m.s3_prefix)) is not None:
        report("s3-prefix", ("s3_prefix",), message)
    elif settings is not None and not m.s3_prefix.startswith(settings.store):
        report("s3-prefix", ("s3_prefix",), f"{m.s3_prefix!r} is outside the catalog's store {settings.store!r}")


def _check_files(m: ModelManifest, report: _Reporter) -> None:
    if not m.files:
        report(
            "unlocked",
            ("files",) if "files" in m.model_fields_set else (),
            "no files pinned; " + LOCK_HINT.format(name=m.name),
        )
        return
    seen: dict[str, int] = {}
    folded: dict[str, int] = {}
    for index, entry in enumerate(m.files):
        loc: Loc = ("files", index)
        if (message := naming.check_relative_path(entry.path)) is not None:
            report("file-path", (*loc, "path"), message)
        if entry.path in seen:
            report("duplicate-path", (*loc, "path"), f"{entry.path!r} is pinned twice (also files[{seen[entry.path]}])")
        elif entry.path.casefold() in folded:
            other = m.files[folded[entry.path.casefold()]].path
            report(
                "duplicate-path",
                (*loc, "path"),
                f"{entry.path!r} differs from {other!r} only in case; they collide on macOS and Windows",
            )
        seen.setdefault(entry.path, index)
        folded.setdefault(entry.path.casefold(), index)
        if (message := naming.check_sha256(entry.sha256)) is not None:
            report("sha256", (*loc, "sha256"), message)
        if entry.size < 0:
            report("size", (*loc, "size"), f"size {entry.size} is negative")
        if m.allow_code is None and (why := formats.executes_on_load(entry.path)) is not None:
            requires = m.load_format.spec.loader_requires
            report(
                "load-safety",
                (*loc, "path"),
                f"{entry.path!r} runs code when loaded ({why}); prefer safetensors, "
                "or say why a reviewer should accept it in `allow_code: <reason>`"
                + (f" (its loader must then run {requires})" if requires else ""),
            )
        if not _selected(entry.path, m):
            report("file-selection", (*loc, "path"), f"{entry.path!r} is not selected by source.include/exclude")
        if entry.blob_id is not None and not _BLOB_ID.fullmatch(entry.blob_id):
            report(
                "blob-id",
                (*loc, "blob_id"),
                f"{entry.blob_id!r} is not a git blob id: expected 40 lowercase hex digits",
            )
        if entry.xet_hash is not None and not _XET_HASH.fullmatch(entry.xet_hash):
            # huggingface_hub drops a whole cached tree listing over one malformed Xet hash
            report(
                "xet-hash",
                (*loc, "xet_hash"),
                f"{entry.xet_hash!r} is not a Xet hash: expected 64 lowercase hex digits",
            )
    for directory, index in _files_used_as_dirs(m):
        report("duplicate-path", ("files", index, "path"), f"{directory!r} is both a file and a folder")


def _selected(path: str, m: ModelManifest) -> bool:
    return bool(naming.select_files([path], m.source.include, m.source.exclude))


def dropped_by(path: str, include: tuple[str, ...], exclude: tuple[str, ...]) -> str | None:
    """Which of source.include/exclude leaves `path` out (None: it is selected). Shared with `catalog lock`."""
    excluding = [p for p in exclude if naming.matches_any(path, (p,))]
    if excluding:
        return f"source.exclude {', '.join(repr(p) for p in excluding)} drops it"
    if include and not naming.matches_any(path, include):
        return f"no source.include pattern ({', '.join(repr(p) for p in include)}) selects it"
    return None


def _check_shards(m: ModelManifest, report: _Reporter) -> None:
    """Every file an index's weight_map names is pinned (lock records them as the index's `shards`)."""
    pinned = {f.path for f in m.files}
    for index, entry in enumerate(m.files):
        loc: Loc = ("files", index)
        if entry.shards is None:
            if entry.is_index:
                report(
                    "index-unrecorded",
                    (*loc, "path"),
                    f"{entry.path!r} is a weights index but the files its weight_map "
                    f"names are not recorded; {LOCK_HINT.format(name=m.name)} and record them",
                )
            continue
        if not entry.is_index:
            report(
                "shards",
                (*loc, "shards"),
                f"{entry.path!r} is not a weights index (*.safetensors.index.json, "
                "*.bin.index.json); only an index lists shards",
            )
            continue
        for j, shard in enumerate(entry.shards):
            if (message := naming.check_relative_path(shard)) is not None:
                report("shards", (*loc, "shards", j), message)
            elif shard not in pinned:
                why = dropped_by(shard, m.source.include, m.source.exclude)
                report(
                    "shard-missing",
                    (*loc, "shards", j),
                    f"{entry.path!r} names {shard!r}, which is not pinned"
                    + (f": {why}" if why else "")
                    + "; a model missing a shard cannot load: widen the selection and run "
                    f"`catalog lock {m.name}`",
                )


def _check_repo_type(m: ModelManifest, report: _Reporter) -> None:
    if m.is_dataset and m.load_format not in (LoadFormat.DATASET, LoadFormat.AUTO):
        report(
            "repo-type",
            ("load_format",),
            f"a dataset (source.repo_type: dataset) has load_format dataset or auto, not {m.load_format.value}",
        )


def _files_used_as_dirs(m: ModelManifest) -> Iterator[tuple[str, int]]:
    paths = {f.path: i for i, f in enumerate(m.files)}
    for path in paths:
        for parent in PurePosixPath(path).parents:
            if str(parent) in paths:
                yield str(parent), paths[str(parent)]


def _check_load_format(m: ModelManifest, report: _Reporter) -> None:
    """What the format's row in `catalog.formats` says the pinned files must contain."""
    if not m.files:
        return
    paths = [f.path for f in m.files]
    spec = m.load_format.spec
    needs = [n for n in spec.needs if not n.met_by(paths)]
    # A streamed model's engine reads tokenizer and config locally: pinned here, or another model's.
    if spec.streams_weights and m.tokenizer is None:
        needs += [n for n in spec.streamed_needs if not n.met_by(paths)]
    if needs:
        report(
            "load-format",
            ("load_format",),
            f"load_format {m.load_format.value} needs {' and '.join(n.what for n in needs)} among the pinned files",
        )
    ranks = formats.tensor_parallel_ranks(spec, paths)
    if ranks is not None and ranks and ranks != m.gpu.count:
        report(
            "tensor-parallel",
            ("gpu",),
            f"the files hold {ranks} tensor-parallel rank(s) but gpu.count is {m.gpu.count}; "
            "the engine needs one GPU per rank",
        )


def _check_loader(m: ModelManifest, report: _Reporter) -> None:
    """`loader:` keys the engine or the catalog sets itself (FormatSpec.engine_sets): given twice, the engine's
    load fails ("got multiple values for keyword argument"), or a weights URI of the manifest's own skips the pin."""
    for dotted in m.load_format.spec.engine_sets:
        *parents, key = dotted.split(".")
        level: object = m.loader
        for part in parents:
            level = level.get(part) if isinstance(level, dict) else None
        if isinstance(level, dict) and key in level:
            report(
                "loader",
                ("loader", *parents, key),
                f"{dotted} is set by the engine (or, for a weights URI, by "
                f"`catalog resolve` from the verified file) for load_format {m.load_format.value}; remove it",
            )


def _check_gpu(m: ModelManifest, settings: CatalogSettings | None, report: _Reporter) -> None:
    if settings is None:
        return
    gpu_class = m.gpu.gpu_class or settings.default_gpu
    spec = settings.gpu_classes.get(gpu_class)
    if spec is None and m.is_dataset and gpu_class == DATASET_GPU_CLASS:
        return  # a dataset needs no accelerator; the catalog need not define a cpu class for it
    if spec is None:
        known = ", ".join(sorted(settings.gpu_classes))
        report("gpu-class", ("gpu", "class"), f"unknown GPU class {gpu_class!r}; known: {known}")
        return
    capacity = spec.memory_gib * GIB * m.gpu.count
    # The weights are not all a model needs: KV cache, activations and the CUDA context want room too.
    # Pinned headers give the tensors' exact bytes; other weight files count whole.
    weights = sum(f.weight_bytes for f in m.weight_files)
    exact = all(f.header is not None for f in m.weight_files)
    needed = weights * settings.gpu_memory_factor
    if needed > capacity:
        report(
            "gpu-memory",
            ("gpu",),
            f"{'tensors' if exact else 'weights'} are {weights / GIB:.1f} GiB, x {settings.gpu_memory_factor:g} "
            f"(catalog.yaml gpu_memory_factor) = {needed / GIB:.1f} GiB, but {m.gpu.count} x {gpu_class} holds "
            f"{capacity / GIB:.1f} GiB; pick a larger class or count",
        )


def _check_tokenizer(m: ModelManifest, names: set[str], report: _Reporter) -> None:
    if m.tokenizer is None or m.tokenizer in names:
        return
    folder = m.tokenizer.rstrip("/") + "/"
    if naming.check_relative_path(m.tokenizer.rstrip("/")) is None and any(f.path.startswith(folder) for f in m.files):
        return
    report("tokenizer", ("tokenizer",), f"{m.tokenizer!r} is neither a model in the catalog nor a pinned subfolder")


def _check_profiles(m: ModelManifest, settings: CatalogSettings | None, report: _Reporter) -> None:
    """Each profile is for a known class and adds only what the engine is not already told by the pin."""
    if m.profiles and m.is_dataset:
        report("profile", ("profiles",), "a dataset has no engine, so no engine profile; remove `profiles`")
        return
    per_rank = formats.tensor_parallel_ranks(m.load_format.spec, [f.path for f in m.files])
    for gpu_class, profile in m.profiles.items():
        at: Loc = ("profiles", gpu_class)
        if settings is not None and gpu_class not in settings.gpu_classes:
            report(
                "profile",
                at,
                f"{gpu_class!r} is not a GPU class of catalog.yaml; known: {', '.join(sorted(settings.gpu_classes))}",
            )
        ranks = 1
        for name, value in profile.args.items():
            where: Loc = (*at, "args", name)
            bare = name.removeprefix("no-")
            if name.startswith("-"):
                report("profile", where, f"write {name.lstrip('-')!r}: argument names go without their dashes")
            elif not _ARG_NAME.fullmatch(name):
                report(
                    "profile",
                    where,
                    f"{name!r} is not spelled as vLLM's arguments are: lowercase words joined by "
                    f"'-' ({name.lower().replace('_', '-')!r})",
                )
            elif bare in CATALOG_ENGINE_ARGS or (bare == "tensor-parallel-size" and per_rank):
                what = {
                    "tensor-parallel-size": "the pinned files hold one shard per rank",
                    "trust-remote-code": "only where the manifest allows code: allow_code",
                }.get(bare, "the pin")
                report(
                    "profile", where, f"--{bare} is derived from the manifest by `catalog resolve` ({what}); remove it"
                )
            elif bare in ("tensor-parallel-size", "pipeline-parallel-size"):
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    report("profile", where, f"--{bare} is a whole number of ranks, not {value!r}")
                else:
                    ranks *= value
        if ranks > m.gpu.count:
            report(
                "profile",
                (*at, "args"),
                f"tensor x pipeline parallel size is {ranks} ranks but gpu.count is "
                f"{m.gpu.count}: the engine needs a device per rank; raise gpu.count or lower the sizes",
            )
        for key in profile.env:
            where = (*at, "env", key)
            if not _ENV_NAME.fullmatch(key):
                report("profile", where, f"{key!r} is not an environment variable name")
            elif key.upper().startswith(CATALOG_ENV_PREFIXES):
                report(
                    "profile",
                    where,
                    f"{key} is set by the catalog or the store (`catalog resolve --format env`), "
                    "not by a profile; remove it",
                )
            elif set(key.upper().split("_")) & SECRET_WORDS:
                report(
                    "profile",
                    where,
                    f"{key} is named like a credential; secrets never enter manifests (the engine "
                    "reads them from the job's own environment)",
                )


def _check_own_baselines(m: ModelManifest, report: _Reporter) -> None:
    """A baseline pins a figure to this model's bytes: they must be pinned, and each figure said once."""
    seen: dict[tuple[str, str, str | None], int] = {}
    for index, baseline in enumerate(m.baselines):
        key = (baseline.metric, baseline.dataset, baseline.split)
        if key in seen:
            split = f" ({baseline.split})" if baseline.split else ""
            report(
                "baseline",
                ("baselines", index),
                f"{baseline.metric} on {baseline.dataset}{split} is also baselines[{seen[key]}]; keep one",
            )
        seen.setdefault(key, index)
    if m.baselines and (naming.check_revision(m.source.revision) is not None or not m.files):
        report(
            "baseline",
            ("baselines",),
            f"{m.name} is not pinned (a full commit and its files), so a baseline of it "
            f"moves with whatever its repo holds; {LOCK_HINT.format(name=m.name)} at a commit",
        )


def _baselines(docs: Sequence[ManifestDoc], complete: bool = True) -> Iterator[Problem]:
    """Each baseline's dataset is a pinned dataset manifest of the catalog: a figure measured on data nobody pinned
    moves when the data does. With `complete` False (a lookup that read some manifests) an unread name is skipped."""
    by_name = {d.manifest.name: d for d in docs if d.manifest is not None}
    datasets = sorted(n for n, d in by_name.items() if d.manifest is not None and d.manifest.is_dataset)
    for doc in docs:
        assert doc.manifest is not None
        for index, baseline in enumerate(doc.manifest.baselines):
            loc: Loc = ("baselines", index, "dataset")
            other = by_name.get(baseline.dataset)
            data = other.manifest if other is not None else None
            if other is None or data is None:
                if not complete:
                    continue
                close = difflib.get_close_matches(baseline.dataset, datasets, n=1)
                why = (
                    f"{baseline.dataset!r} is not a manifest in the catalog"
                    + (f" (did you mean {close[0]!r}?)" if close else "")
                    + ": a baseline on unpinned data moves when the data does; pin the dataset (a manifest with "
                    "`source.repo_type: dataset`, then `catalog lock`)"
                )
            elif not data.is_dataset:
                why = f"{baseline.dataset!r} ({other.display}) is a model, not a dataset"
            elif naming.check_revision(data.source.revision) is not None or not data.files:
                why = (
                    f"the dataset {baseline.dataset!r} ({_at(other, ('source', 'revision'))}) is not pinned (a full "
                    f"commit and its files): {LOCK_HINT.format(name=baseline.dataset)} at a commit"
                )
            else:
                continue
            yield Problem(doc.display, doc.lines.line_of(loc), format_loc(loc), why, "baseline")


def _at(doc: ManifestDoc, loc: Loc) -> str:
    return f"{doc.display}:{doc.lines.line_of(loc)}"


def _duplicate_names(docs: Sequence[ManifestDoc]) -> Iterator[Problem]:
    """A name defined twice is reported on every file that defines it, so a changed file always sees it."""
    by_name: dict[str, list[ManifestDoc]] = {}
    for doc in docs:
        assert doc.manifest is not None
        by_name.setdefault(doc.manifest.name, []).append(doc)
    for name, group in by_name.items():
        for doc in group if len(group) > 1 else ():
            others = ", ".join(_at(o, ("name",)) for o in group if o is not doc)
            yield Problem(
                doc.display,
                doc.lines.line_of(("name",)),
                "name",
                f"{name!r} is also defined at {others}",
                "duplicate-name",
            )


def _prefix_overlaps(docs: Sequence[ManifestDoc]) -> Iterator[Problem]:
    """No prefix may be a string prefix of another: one listing would return both models' objects.

    Sorted, every prefix that starts another comes right before a run of the prefixes it starts. Each
    overlap is reported on both files, so checking either one alone (pre-commit) still fails.
    """
    entries = sorted(
        ((d.manifest.s3_prefix, d) for d in docs if d.manifest is not None), key=lambda e: (e[0], e[1].display)
    )
    for i, (prefix, doc) in enumerate(entries):
        for other_prefix, other in entries[i + 1 :]:
            if not other_prefix.startswith(prefix):
                break
            assert other.manifest is not None and doc.manifest is not None
            same = other_prefix == prefix
            yield _overlap(other, "the same prefix as" if same else "inside the prefix of", doc)
            yield _overlap(doc, "the same prefix as" if same else "a string prefix of the prefix of", other)


def _overlap(doc: ManifestDoc, what: str, other: ManifestDoc) -> Problem:
    assert doc.manifest is not None and other.manifest is not None
    return Problem(
        doc.display,
        doc.lines.line_of(("s3_prefix",)),
        "s3_prefix",
        f"{doc.manifest.s3_prefix!r} is {what} {other.manifest.name!r} "
        f"({_at(other, ('s3_prefix',))}); give each model its own prefix",
        "prefix-overlap",
    )


def _primaries(docs: Sequence[ManifestDoc], complete: bool = True) -> Iterator[Problem]:
    """Exactly one `primary: true` among the models pinning one Hub repo, when several do: a repo id must name one
    model in repo-id outputs (redirect files, hf-cache snapshots). Reported on every manifest of the repo."""
    by_repo: dict[str, list[ManifestDoc]] = {}
    for doc in docs:
        assert doc.manifest is not None
        if not doc.manifest.is_dataset:
            by_repo.setdefault(doc.manifest.source.hf_repo.casefold(), []).append(doc)
    for repo, group in by_repo.items():
        primaries = [d for d in group if d.manifest is not None and d.manifest.primary]
        for doc in primaries if len(primaries) > 1 else ():
            others = ", ".join(_at(o, ("primary",)) for o in primaries if o is not doc)
            yield Problem(
                doc.display,
                doc.lines.line_of(("primary",)),
                "primary",
                f"{repo} also has a primary manifest at {others}; keep `primary: true` on one",
                "primary",
            )
        for doc in group if complete and len(group) > 1 and not primaries else ():  # the primary may be unread
            others = ", ".join(o.display for o in group if o is not doc)
            yield Problem(
                doc.display,
                doc.lines.line_of(("source", "hf_repo")),
                "source.hf_repo",
                f"{repo} is also pinned by {others} and none is `primary: true`; mark the one that answers "
                "for the repo id in --format redirect and the hf-cache layout",
                "primary",
            )


def _pin_conflicts(docs: Sequence[ManifestDoc]) -> Iterator[Problem]:
    """One path at one hf_repo+revision is one set of bytes: two manifests may not pin it differently.

    Reported on every file whose pin disagrees with another's, at that file's `files[i].path`.
    """
    pins: dict[tuple[str, str, str], list[tuple[ManifestDoc, int]]] = {}
    for doc in docs:
        m = doc.manifest
        assert m is not None
        for index, entry in enumerate(m.files):
            pins.setdefault((m.source.hf_repo.casefold(), m.source.revision, entry.path), []).append((doc, index))
    for (_, revision, path), group in pins.items():
        for doc, index in group:
            m = doc.manifest
            assert m is not None
            mine = m.files[index]
            clashes = []
            for other, other_index in group:
                assert other.manifest is not None
                theirs = other.manifest.files[other_index]
                if other is not doc and (theirs.size, theirs.sha256) != (mine.size, mine.sha256):
                    clashes.append(
                        f"sha256 {theirs.sha256}, {theirs.size} bytes in {_at(other, ('files', other_index, 'path'))}"
                    )
            if clashes:
                loc: Loc = ("files", index, "path")
                yield Problem(
                    doc.display,
                    doc.lines.line_of(loc),
                    format_loc(loc),
                    f"{path!r} at {m.source.hf_repo}@{revision[:12]} is pinned here as sha256 {mine.sha256}, "
                    f"{mine.size} bytes but as {'; '.join(clashes)}; one revision has one set of bytes: "
                    "re-run `catalog lock` on the stale manifest",
                    "pin-conflict",
                )


# -- tensor pins: the headers and weight maps `catalog lock` records ------------------------------------------
def _check_tensor_pins(m: ModelManifest, report: _Reporter) -> None:
    """What a manifest alone can say about its pinned headers: they sit on the right files and add up to them."""
    for index, entry in enumerate(m.files):
        loc: Loc = ("files", index)
        if entry.header is not None:
            h = entry.header
            if not entry.path.endswith(".safetensors"):
                report(
                    "header",
                    (*loc, "header"),
                    f"{entry.path!r} is not a *.safetensors file; only safetensors headers are pinned",
                )
                continue
            for key in ("sha256", "table_sha256"):
                if (message := naming.check_sha256(getattr(h, key))) is not None:
                    report("header", (*loc, "header", key), message)
            unknown = sorted(d for d in h.bytes_by_dtype if d not in DTYPE_BITS)
            if unknown:
                report(
                    "header",
                    (*loc, "header", "bytes_by_dtype"),
                    f"{', '.join(map(repr, unknown))}: not a safetensors dtype (known: {', '.join(DTYPE_BITS)})",
                )
            made = PREFIX + h.length + h.tensor_bytes
            if made != entry.size:
                report(
                    "header",
                    (*loc, "header"),
                    f"8 + length {h.length} + tensor bytes {h.tensor_bytes} make {made} bytes "
                    f"but the file has {entry.size}: the header is not this file's; "
                    f"run `catalog lock {m.name}`",
                )
        if entry.table is not None:
            if entry.header is not None or entry.weight_map is not None:
                report(
                    "tensor-table",
                    (*loc, "table"),
                    f"{entry.path!r} pins a `table:` beside a header or weight_map; "
                    "`table:` is for weights without a safetensors header",
                )
            elif (message := naming.check_sha256(entry.table.table_sha256)) is not None:
                report("tensor-table", (*loc, "table", "table_sha256"), message)
        if entry.weight_map is not None:
            if not is_safetensors_index(entry.path):
                report(
                    "weight-map",
                    (*loc, "weight_map"),
                    f"{entry.path!r} is not a *.safetensors.index.json; only a safetensors index pins its weight_map",
                )
            elif (message := naming.check_sha256(entry.weight_map.sha256)) is not None:
                report("weight-map", (*loc, "weight_map", "sha256"), message)


def check_tensor_tables(m: ModelManifest, doc: TablesDoc, report: _Reporter) -> list[Problem]:
    """The sidecar against the manifest's pins, then the checkpoints it describes (no network, no store).

    Problems in the sidecar are reported at its own lines; a sidecar that is missing, at the manifest's.
    """
    out: list[Problem] = []
    pinned = [
        (i, e) for i, e in enumerate(m.files) if e.header is not None or e.weight_map is not None or e.table is not None
    ]
    relock = f"run `catalog lock {m.name}`"
    if doc.tables is None:
        if pinned and not doc.exists:
            i, entry = pinned[0]
            report(
                "tensor-table",
                ("files", i, _section(entry, TensorTables(m.name))[0]),
                f"the tensor tables these pins name are missing: no {doc.display}; {relock}",
            )
        return out  # an unreadable sidecar was reported when it was read
    tables = doc.tables

    def at(path: str, tensor: str | None, message: str, rule: str) -> None:
        out.append(Problem(doc.display, tables.line_of(path, tensor), path, message, rule))

    if not pinned:
        out.append(
            Problem(
                doc.display,
                1,
                "",
                f"no file of {m.name} pins a header, table or weight_map; remove this file or {relock}",
                "tensor-table",
            )
        )
        return out
    if tables.model != m.name:
        out.append(
            Problem(
                doc.display,
                1,
                "model",
                f"the tables are {tables.model!r}'s, not {m.name!r}'s; {relock}",
                "tensor-table",
            )
        )
    good: set[str] = set()
    for i, entry in pinned:
        field, digest, have = _section(entry, tables)
        if have is None:
            report("tensor-table", ("files", i, field), f"{doc.display} has no table for {entry.path!r}; {relock}")
        elif have != digest:
            at(
                entry.path,
                None,
                f"the table differs from the one pinned in {report.display}:"
                f"{report.lines.line_of(('files', i, field))} (edited, or stale); {relock}",
                "tensor-table",
            )
        else:
            good.add(entry.path)
    with_pins = {e.path for _, e in pinned}
    for path in sorted((set(tables.headers) | set(tables.weight_maps)) - with_pins):
        at(
            path,
            None,
            f"{path!r} is not a file of {m.name} with a pinned header, table or weight_map; {relock}",
            "tensor-table",
        )
    out += _checkpoint_problems(m, tables, good, doc.display)
    out += _digest_problems(m, tables, good, doc.display)
    return out


def _section(entry: FileEntry, tables: TensorTables) -> tuple[str, str, str | None]:
    """(the pin's key, the pinned digest, the digest of the sidecar's section or None when it has none)."""
    if entry.header is not None:
        return "header", entry.header.table_sha256, tables.section_sha256(entry.path)
    if entry.table is not None:
        return "table", entry.table.table_sha256, tables.section_sha256(entry.path)
    assert entry.weight_map is not None
    mapping = tables.weight_maps.get(entry.path)
    return "weight_map", entry.weight_map.sha256, None if mapping is None else weight_map_sha256(mapping)


def _checkpoint_problems(m: ModelManifest, tables: TensorTables, good: set[str], display: str) -> list[Problem]:
    """Every tensor an index's weight_map names is in the shard it maps to, and no tensor is in two of its shards."""
    out: list[Problem] = []
    names = {path: {row[0] for row in rows} for path, rows in tables.headers.items() if path in good}
    for entry in m.files:
        if entry.weight_map is None or entry.path not in good:
            continue
        mapping = tables.weight_maps[entry.path]
        shards = sorted(p for p in set(mapping.values()) | set(entry.shards or ()) if p in names)
        for tensor, shard in mapping.items():
            if shard not in names or tensor in names[shard]:
                continue
            holders = [s for s in shards if tensor in names[s]]
            why = (
                f"{', '.join(map(repr, holders))} does: the index and the shards disagree, and a loader that reads "
                "the shard the index names finds nothing"
                if holders
                else "nor does any other shard: the checkpoint lacks it, and an engine reports it missing or leaves the "
                "weight uninitialized"
            )
            out.append(
                Problem(
                    display,
                    tables.line_of(entry.path, tensor),
                    entry.path,
                    f"weight_map maps tensor {tensor!r} to {shard!r}, which does not hold it; {why}; fix the "
                    "checkpoint upstream or pin another revision",
                    "tensor-missing",
                )
            )
        first: dict[str, str] = {}
        for shard in shards:
            for tensor in sorted(names[shard]):
                if tensor in first:
                    out.append(
                        Problem(
                            display,
                            tables.line_of(shard, tensor),
                            shard,
                            f"tensor {tensor!r} is in {first[tensor]!r} ({display}:{tables.line_of(first[tensor], tensor)}) "
                            f"and in {shard!r}, both shards of {entry.path!r}: which copy loads is up to the "
                            "engine; fix the checkpoint upstream or pin another revision",
                            "tensor-duplicate",
                        )
                    )
                else:
                    first[tensor] = shard
    return out


def _digest_problems(m: ModelManifest, tables: TensorTables, good: set[str], display: str) -> list[Problem]:
    """Tensor digests cover every tensor of a file or none; a `table:` (no safetensors header to say where each
    tensor's bytes are) pins a digest and an offset for every tensor, in file order, each span inside the file."""
    out: list[Problem] = []
    for entry in m.files:
        if entry.path not in good or entry.weight_map is not None:
            continue
        rows, digests = tables.headers[entry.path], tables.digests.get(entry.path, {})
        lacking = [row[0] for row in rows if row[0] not in digests]
        if lacking and (digests or entry.table is not None):
            out.append(
                Problem(
                    display,
                    tables.line_of(entry.path, lacking[0]),
                    entry.path,
                    f"tensor {lacking[0]!r} has no digest while {len(rows) - len(lacking)} other(s) of the file do: "
                    f"a loader could not check every tensor; run `catalog lock {m.name}` again",
                    "tensor-digests",
                )
            )
        if entry.table is not None:
            out += _span_problems(m.name, entry, rows, tables, display)
    return out


def _span_problems(
    model: str, entry: FileEntry, rows: tuple[tuple[str, str, tuple[int, ...]], ...], tables: TensorTables, display: str
) -> list[Problem]:
    """A `table:` file's tensors, by their offsets and sizes: in file order, not overlapping, inside the file."""
    assert entry.table is not None
    out: list[Problem] = []
    offsets = tables.offsets.get(entry.path, {})
    end = 0
    if entry.table.tensors != len(rows):
        out.append(
            Problem(
                display,
                tables.line_of(entry.path),
                entry.path,
                f"the table holds {len(rows)} tensors but "
                f"the manifest pins {entry.table.tensors}; run `catalog lock {model}` again",
                "tensor-digests",
            )
        )
    for name, dtype, shape in rows:
        where = tables.line_of(entry.path, name)
        if name not in offsets or dtype not in DTYPE_BITS:
            what = "no offset" if name not in offsets else f"an unknown dtype {dtype!r}"
            out.append(
                Problem(
                    display,
                    where,
                    entry.path,
                    f"tensor {name!r} has {what}; run `catalog lock {model}` again",
                    "tensor-digests",
                )
            )
            return out
        elements = 1
        for dim in shape:
            elements *= dim
        start, size = offsets[name], elements * DTYPE_BITS[dtype] // 8
        if start < end or start + size > entry.size:
            why = (
                f"starts at {start}, inside the tensor before it (which ends at {end})"
                if start < end
                else f"ends at {start + size}, past the file's {entry.size} bytes"
            )
            out.append(
                Problem(
                    display,
                    where,
                    entry.path,
                    f"tensor {name!r} {why}: the table is not this file's; run `catalog lock {model}` again",
                    "tensor-digests",
                )
            )
            return out
        end = start + size
    return out


def signature_problem(doc: ManifestDoc, finding: Finding) -> Problem:
    """The `signature` rule's problem for one manifest: at the differing pin's line (a file signed but no longer
    pinned: the `files` key), else at the name. The verification itself is resolver/signatures.py's."""
    report = _Reporter(doc.display, doc.lines)
    difference = finding.difference
    if difference is not None:
        loc: Loc = ("files", difference.file_index, "path") if difference.file_index is not None else ("files",)
    elif finding.field and doc.manifest is not None and finding.field[0] in doc.manifest.model_fields_set:
        loc = finding.field  # a field edited after signing (its nearest key that is there; one removed since: the name)
    else:
        loc = ("name",)
    report("signature", loc, finding.message)
    return report.problems[0]
