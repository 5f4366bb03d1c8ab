"""`catalog resolve`: from a logical name to verified local files (and a stream URI where the format streams).

The decisions are pure (`plan_files`, `engine_args`, `engine_env`); `resolve` is the thin I/O around
them: stat the view, fetch what is missing, lay it out, record what was verified. A warm resolve
stops after the stat and never imports boto3.

Where missing bytes come from, per file, first that has them: the read-only shared cache tiers
(`resolver/tiers.py`), the mirrors in order (any store URL; a mirror that lacks a file, fails or serves
other bytes is skipped for that file), the primary store, then (with --source fallback) the Hub. Every
byte is verified against the pin whatever served it; `Resolution.sources` names the server of each file.
Before the first tier copy or download the bytes still needed are compared with the cache's free space
(`resolver/capacity.py`), after evicting old views when CATALOG_CACHE_MAX_SIZE is set (a request larger
than the limit fails before anything moves). `--offline` still takes from the shared tiers: they are local
folders, not the network.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from catalog import formats, load_plan, naming
from catalog.errors import (
    CacheWriteError,
    CatalogError,
    IntegrityError,
    MissingObjectError,
    NotCachedError,
    SnapshotOwnerError,
    StoreUnavailableError,
    UnsafePathError,
    UsageError,
)
from catalog.loading import load_tables
from catalog.lookup import Catalog
from catalog.schema import FileEntry, ModelManifest
from catalog.settings import Settings
from resolver import capacity, engines, hashing, load_safety, mounts, signatures, stream_check, tiers
from resolver.cache import Cache, cache_error
from resolver.hub import HubOptions, HubStore
from resolver.resolution import NoEngineArguments, Resolution, engine_target
from resolver.stores import Store, bind_models, open_store
from resolver.transfer import Progress, TransferConfig, Wanted, fetch
from resolver.views import Layout, ViewSpec, ViewState, changed_files

log = logging.getLogger(__name__)


class Source(str, Enum):
    STORE = "store"  # the bucket only (CI): never the Hub
    HF = "hf"  # the Hub at the pinned revision, same hash checks (a laptop without bucket credentials)
    FALLBACK = "fallback"  # the bucket, then the Hub for what the bucket could not give


@dataclass(frozen=True)
class ResolveOptions:
    layout: Layout = Layout.DIR
    materialize_weights: bool = False  # streaming formats: pull the weights too
    offline: bool = False  # cache only; fail fast naming what is missing
    source: Source = Source.STORE
    transfer: TransferConfig = field(default_factory=TransferConfig)
    hub: HubOptions = field(default_factory=HubOptions)
    # streamed weights: "listing" proves each object against sync's record (one listing + one small GET);
    # "deep" hashes each streamed object instead (for stores without sync records); "loader": the caller
    # (check-load) hashes every streamed byte against the pin itself
    verify_stream: str = stream_check.LISTING
    tiers: tuple[Path, ...] = ()  # read-only shared cache tiers, consulted first
    mirrors: tuple[
        Store, ...
    ] = ()  # stores tried in order before the primary (from_settings: the settings', else catalog.yaml's)
    max_size: int | None = None  # evict least recently resolved views before fetching, to stay under it
    # "local": a streamed format whose weights are all verified in the cache or a shared tier is answered with its
    # local folder (no byte read from the store, no proof of the streamed objects needed); "stream": the URI always
    prefer: str = "local"
    # how a streamed model's weights reach the engine: "catalog" (its verified loader), "plain" (the format's own
    # streamer) or "auto" (catalog where vLLM is installed and every tensor is pinned): CATALOG_ENGINE_LOADER
    engine_loader: str = "auto"
    settings: Settings | None = None  # the command's (signature policy); None: a library caller's defaults

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        cat: Catalog | None = None,
        *,
        mirrors: Sequence[Store] | None = None,
        **overrides: object,
    ) -> ResolveOptions:
        """The options a command's settings imply; `overrides` are the command's own (layout, ...). The mirrors are
        `mirrors` when given (the invocation opened them once), else the settings' (--mirror, CATALOG_MIRRORS), else
        `cat`'s catalog.yaml's, opened here."""
        if mirrors is None:
            urls = settings.mirrors or (cat.settings.mirrors if cat is not None else ())
            mirrors = tuple(open_store(url, settings) for url in urls)
        options = cls(
            offline=settings.offline,
            source=Source(settings.source),
            transfer=TransferConfig.from_settings(settings),
            hub=HubOptions.from_settings(settings),
            tiers=settings.shared_caches,
            mirrors=tuple(mirrors),
            max_size=settings.cache_max_size,
            prefer=settings.prefer,
            engine_loader=settings.engine_loader,
            settings=settings,
        )
        return dataclasses.replace(options, **overrides)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Fetched:
    """Where a view's bytes came from: a summary, whether the Hub gave any, and per file."""

    source: str
    from_hub: bool
    sources: dict[str, str]


def mirror_stores(cat: Catalog, options: ResolveOptions) -> tuple[Store, ...]:
    """The mirrors, in order, each told where the catalog's models are (a registry addresses them by model)."""
    return tuple(bind_models(m, cat) for m in options.mirrors)


@dataclass(frozen=True)
class FilePlan:
    local: tuple[FileEntry, ...]  # materialized and verified in the cache
    streamed: tuple[FileEntry, ...]  # left in the store for the engine to stream


def plan_files(manifest: ModelManifest, materialize_weights: bool) -> FilePlan:
    """Which files become local: all of them, except the weights of a streaming format.

    Every non-weight file the manifest pins is local (configs, tokenizers, chat templates, `*.py`,
    nested folders): the full list, never a glob of names that look like configs.
    """
    if not manifest.load_format.streams_weights or materialize_weights:
        return FilePlan(manifest.files, ())
    weights = {f.path for f in manifest.weight_files}
    return FilePlan(
        tuple(f for f in manifest.files if f.path not in weights),
        tuple(f for f in manifest.files if f.path in weights),
    )


@dataclass(frozen=True)
class Cleared:
    """A command's pre-flight passed for `names` (each with the catalog model serving as its tokenizer): the signature
    gate and the capacity check ran once for all of them, before any byte moved. `relied`: the signatures and anchors
    the answers rest on (the warm index re-hashes them)."""

    names: frozenset[str]
    relied: tuple[Path, ...] = ()


def preflight(
    cat: Catalog, names: Sequence[str], options: ResolveOptions, *, anchors: signatures.Anchors | None = None
) -> Cleared:
    """The one pre-flight of a command resolving `names`: refuse, before anything is fetched or evicted, a model
    without a signature the policy requires (SignatureError), then models that cannot all fit under the size limit
    together (CacheWriteError). `anchors`: the invocation's, read once (else read here when signatures are required)."""
    relied = signatures.require(cat, names, settings=options.settings, anchors=anchors)
    capacity.check_limit(options.max_size, request_bytes(cat, names, options), _named(names))
    return Cleared(frozenset(n for name in names for n in _with_tokenizer(cat, name)), relied)


def _named(names: Sequence[str]) -> str:
    return (
        names[0]
        if len(names) == 1
        else (f"resolving {', '.join(names[:5])}" + (f" and {len(names) - 5} more" if len(names) > 5 else ""))
    )


def _with_tokenizer(cat: Catalog, name: str) -> list[str]:
    tokenizer = cat.get(name).tokenizer
    return [name] + ([tokenizer] if tokenizer and tokenizer in cat else [])


def resolve(
    cat: Catalog,
    name: str,
    *,
    cache: Cache,
    store: Store,
    options: ResolveOptions = ResolveOptions(),
    progress: Progress | None = None,
    cleared: Cleared | None = None,
) -> Resolution:
    """`name` resolved: its verified view (and stream URI where its weights stay in the store). `cleared`: the
    command's pre-flight, which covers `name` (`preflight`); without it (a library caller's one model) the pre-flight
    runs here for `name` alone."""
    manifest = cat.get(name)
    _check_paths(manifest)
    if options.layout is Layout.HF_CACHE:
        check_snapshot_owner(cat, manifest)
    if cleared is None:
        cleared = preflight(cat, [name], options)  # before any byte is fetched
    elif name not in cleared.names:
        raise ValueError(f"{name} was not in the command's pre-flight ({', '.join(sorted(cleared.names))})")
    names = _with_tokenizer(cat, name)
    blobs = [f.sha256 for n in names for f in cat.get(n).files]
    try:
        with capacity.active(cache, names, blobs):  # what a concurrent eviction must leave alone
            result = _resolve(cat, manifest, cache=cache, store=store, options=options, progress=progress)
            load_safety.after_fetch(manifest, {f: result.path / f for f in result.files}, options.tiers)
            return result
    except CatalogError:
        raise
    except OSError as exc:
        raise cache_error(cache, exc, manifest.name) from None


def check_snapshot_owner(cat: Catalog, manifest: ModelManifest) -> None:
    """An hf-cache snapshot (repo, revision) holds one manifest's files, the one answering for the repo id: a load by
    repo id finds exactly those (the engine's default loader reads every *.safetensors of a folder, so a per-rank
    twin's shards beside the primary's weights would load as one model). Any other manifest of that repo and
    revision is refused in this layout (UsageError), before anything is fetched or written."""
    owner = cat.repo_owner(manifest.source.hf_repo, manifest.source.revision, repo_type=manifest.source.repo_type)
    if owner is not None and owner.name == manifest.name:
        return
    where = f"{manifest.source.hf_repo}@{manifest.source.revision[:12]}"
    if owner is None:
        twins = ", ".join(
            m.name for m in cat.by_repo(manifest.source.hf_repo) if m.source.revision == manifest.source.revision
        )
        raise SnapshotOwnerError(
            f"{manifest.name}: {where} is pinned by {twins}, and in the hf-cache layout one repo id "
            "loads one manifest's files",
            hint=f"mark one of them `primary: true`, or resolve {manifest.name} with --layout dir",
        )
    raise SnapshotOwnerError(
        f"{manifest.name}: in the hf-cache layout {where} holds the files of {owner.name} (primary), "
        "the manifest a load by repo id gets",
        hint=f"resolve {manifest.name} with --layout dir (its own folder or stream URI)",
    )


def snapshot_owners(cat: Catalog, names: Sequence[str]) -> tuple[list[str], list[str]]:
    """Pure: `names` split into those the hf-cache layout can hold and those it refuses (`check_snapshot_owner`)."""
    owning: list[str] = []
    others: list[str] = []
    for name in names:
        m = cat.get(name)
        owner = cat.repo_owner(m.source.hf_repo, m.source.revision, repo_type=m.source.repo_type)
        (owning if owner is not None and owner.name == name else others).append(name)
    return owning, others


@contextlib.contextmanager
def command_in_use(cat: Catalog, cleared: Cleared, cache: Cache) -> Iterator[None]:
    """For a command resolving several models (its pre-flight `cleared` them all): mark all of them in use for the
    whole command, so resolving one never evicts another the same command resolved a moment before."""
    models = sorted(cleared.names)
    with capacity.active(cache, models, [f.sha256 for m in models for f in cat.get(m).files]):
        yield


def request_bytes(cat: Catalog, names: Sequence[str], options: ResolveOptions) -> int:
    """The bytes the views of `names` hold in the cache (each blob once; streamed weights stay remote unless the
    options bring them): what a size limit must at least allow, since none of it may be evicted by the same
    request."""
    blobs: dict[str, int] = {}
    for name in names:
        manifest = cat.get(name)
        for entry in plan_files(manifest, _local_weights(options)).local:
            blobs[entry.sha256] = entry.size
        if manifest.tokenizer and manifest.tokenizer in cat:
            other = cat.get(manifest.tokenizer)
            blobs |= {f.sha256: f.size for f in other.files if f not in other.weight_files}
    return sum(blobs.values())


def _resolve(
    cat: Catalog,
    manifest: ModelManifest,
    *,
    cache: Cache,
    store: Store,
    options: ResolveOptions,
    progress: Progress | None,
) -> Resolution:
    # A store engines cannot stream from (an OCI registry) gives local weights; so does --prefer local when they
    # are all at hand (see _local_weights for the rest).
    at_hand = _weights_at_hand(manifest, cache, options)
    plan = plan_files(manifest, _local_weights(options) or not store.engine_streamable or at_hand is not None)
    spec = ViewSpec.of(manifest, options.layout, plan.local)
    fetched = _ensure_view(cat, manifest, spec, cache, store, options, progress)
    source, from_hub, sources = fetched.source, fetched.from_hub, {**fetched.sources, **(at_hand or {})}
    if at_hand:
        source = _summary(sources)
    if plan.streamed and not from_hub:
        from_hub = _verify_streamed(cat, manifest, plan.streamed, store, options)
    if from_hub and plan.streamed:
        # The bucket failed us, so the engine cannot stream from it either: bring the weights too.
        plan = plan_files(manifest, materialize_weights=True)
        spec = ViewSpec.of(manifest, options.layout, plan.local)
        again = _ensure_view(
            cat, manifest, spec, cache, store, dataclasses.replace(options, source=Source.HF), progress
        )
        sources = {**again.sources, **{p: s for p, s in sources.items() if s != "cache"}}
    path = cache.view_dir(spec)
    tokenizer, tokenizer_marker = _tokenizer(cat, manifest, path, bool(plan.streamed), cache, store, options, progress)
    weights_uri = store.stream_uri(cat.store_key(manifest)) if plan.streamed else None
    model, loader = str(path), dict(manifest.loader)
    verified = verified_handoff(cat, manifest, cache, options) if plan.streamed else None
    if manifest.load_format.spec.engine and verified is None:  # the verified loader takes the folder as --model
        try:
            model, loader = engine_target(
                manifest.load_format, [f.path for f in manifest.files], path, weights_uri, manifest.loader
            )
        except NoEngineArguments as exc:
            raise UsageError(f"{manifest.name}: {exc}", hint="pin exactly one weights file (source.include)") from None
    return Resolution(
        verified_loader=verified,
        name=manifest.name,
        hf_repo=manifest.source.hf_repo,
        revision=manifest.source.revision,
        load_format=manifest.load_format,
        model=model,
        path=path,
        tokenizer=tokenizer,
        files=tuple(e.path for e in plan.local),
        streamed=tuple(e.path for e in plan.streamed),
        bytes=sum(e.size for e in plan.local),
        source=source,
        layout=options.layout,
        hub_cache=cache.hub if options.layout is Layout.HF_CACHE else None,
        loader=loader,
        stream_env=dict(store.stream_target().env) if plan.streamed else {},
        tensor_parallel=formats.tensor_parallel_ranks(manifest.load_format.spec, [f.path for f in manifest.files]),
        primary=manifest.primary,
        sources=sources,
        weights_uri=weights_uri,
        trust_remote_code=manifest.allow_code is not None
        and any(f.path.endswith(formats.CODE_SUFFIXES) for f in manifest.files),
        markers=(cache.marker_path(spec),) + ((tokenizer_marker,) if tokenizer_marker else ()),
        filesystem=mounts.filesystem_type(path),
    )


def verified_handoff(
    cat: Catalog, manifest: ModelManifest, cache: Cache, options: ResolveOptions
) -> dict[str, str] | None:
    """The loader config of `--load-format catalog` for a model whose weights stay in the store, or None for the
    format's own streamer: CATALOG_ENGINE_LOADER=catalog always (UsageError when a tensor has no pinned digest),
    plain never, auto where vLLM (and so the package's plugin) is installed and every tensor is pinned."""
    choice = options.engine_loader
    if choice == "plain" or (choice == "auto" and not engines.vllm_installed()):
        return None
    source = cat.sources.get(manifest.name)
    tables = load_tables(source, []).tables if source is not None else None
    if choice == "auto" and not load_plan.has_tensor_digests(manifest, tables):
        return None
    load_plan.plan(manifest, tables)  # CATALOG_ENGINE_LOADER=catalog: say why it cannot be (NotVerifiable)
    config = {"model": manifest.name, "catalog": str(cat.root.resolve()), "cache": str(cache.root)}
    store = options.settings.store if options.settings is not None else None
    if store and "://" not in store:
        store = str(Path(store).expanduser().resolve())  # a folder store: the engine may start elsewhere
    if store and "@" not in store.split("://", 1)[-1].split("/", 1)[0]:  # never a URL carrying credentials
        config["store"] = store
    return config


def _weights_at_hand(manifest: ModelManifest, cache: Cache, options: ResolveOptions) -> dict[str, str] | None:
    """--prefer local: every weight of a streamed format is verified in the cache already, or a shared tier holds it
    (then it is taken, checked as any tier file). Reads no byte from any store. None: not all at hand (it streams);
    else the weights a tier served, with the tier."""
    if options.prefer != "local" or not manifest.load_format.streams_weights:
        return None
    missing = [e for e in manifest.weight_files if not cache.verified_blob(e, manifest.name)]
    served = tiers.take_from_tiers(tiers.tiers_of(options.tiers), cache, manifest.name, missing, where=manifest.source)
    return served if all(cache.has_blob(e) for e in missing) else None


def _local_weights(options: ResolveOptions) -> bool:
    """Whether a streaming format's weights become local too. The Hub cannot be streamed from: a model fetched
    from it is fully local. Offline, nothing can prove a streamed object is still the verified one (and the
    engine could not reach it). An hf-cache snapshot is loaded by repo id, which finds only local files."""
    return (
        options.materialize_weights
        or options.source is Source.HF
        or options.offline
        or options.layout is Layout.HF_CACHE
    )


def _verify_streamed(
    cat: Catalog, manifest: ModelManifest, streamed: tuple[FileEntry, ...], store: Store, options: ResolveOptions
) -> bool:
    """Prove each streamed object is the one whose bytes were verified before its URI is handed out.
    True when it cannot be proven but --source fallback may bring the weights from the Hub instead."""
    try:
        stream_check.verify_streamed(
            store, manifest.name, cat.store_key(manifest), streamed, mode=options.verify_stream, config=options.transfer
        )
    except (StoreUnavailableError, MissingObjectError, IntegrityError) as exc:
        if options.source is not Source.FALLBACK:
            raise
        log.warning("%s; bringing the weights from the Hub at the pinned revision instead of streaming them", exc)
        return True
    return False


def _ensure_view(
    cat: Catalog,
    manifest: ModelManifest,
    spec: ViewSpec,
    cache: Cache,
    store: Store,
    options: ResolveOptions,
    progress: Progress | None,
) -> Fetched:
    """Make `spec`'s view fresh: nothing to do when its marker still holds; else re-hash what changed,
    fetch what is missing (never with --offline), lay it out, mark it. Returns `_fetch_missing`'s answer."""
    state = cache.view_state(spec)
    if state is ViewState.FRESH:
        cache.note_resolved(spec)
        return Fetched("cache", False, {e.path: "cache" for e in spec.files})
    if state is ViewState.STALE:
        _recheck_blobs(cache, spec)  # something in the view changed under us: trust no blob blindly
    # Every blob is proven before it is linked into a view (its recorded stamp, else its hash): one edited in
    # place through another view's hard link is removed here and fetched again.
    missing = [e for e in spec.files if not cache.verified_blob(e, manifest.name)]
    answer = _fetch_missing(cat, manifest, missing, cache, store, options, progress)
    _build_view(cache, spec, str(cat.root.resolve()))
    return Fetched(answer.source, answer.from_hub, {e.path: answer.sources.get(e.path, "cache") for e in spec.files})


def _fetch_missing(
    cat: Catalog,
    manifest: ModelManifest,
    missing: list[FileEntry],
    cache: Cache,
    store: Store,
    options: ResolveOptions,
    progress: Progress | None,
) -> Fetched:
    """Bring `missing` into the cache from the first that has each file: the shared tiers, the mirrors in
    order, the store (or the Hub with --source hf, the store then the Hub with fallback)."""
    if not missing:
        return Fetched("cache", False, {})
    shared = tiers.tiers_of(options.tiers)
    if options.offline and not shared:
        raise _not_cached(manifest, missing, cache, shared, options)
    if options.max_size is not None:  # every new blob counts, a tier's hard link too (the cache's size counts it)
        capacity.evict_for(cache, options.max_size, sum({e.sha256: e.size for e in missing}.values()))
    capacity.check_space(
        cache,
        tiers.local_bytes(shared, cache, missing, manifest.source),
        f"{manifest.name} ({len(missing)} file(s) to copy or download)",
    )
    sources: dict[str, str] = dict(tiers.take_from_tiers(shared, cache, manifest.name, missing, manifest.source))
    still = [e for e in missing if not cache.has_blob(e)]
    if still and options.offline:
        raise _not_cached(manifest, still, cache, shared, options)
    from_hub = False
    hub = HubStore(manifest.source.hf_repo, manifest.source.revision, options.hub, manifest.source.repo_type)
    if still and options.source is Source.HF:
        got = fetch(hub, [Wanted(manifest.name, e, e.path) for e in still], cache, options.transfer, progress)
        sources |= _served(still, got, hub.url)
        return Fetched(_summary(sources), True, sources)
    still = _from_mirrors(
        cat, manifest, still, cache, mirror_stores(cat, options), options, progress, sources, store.url
    )
    try:
        if still:
            got = fetch(
                store,
                [Wanted(manifest.name, e, cat.store_key(manifest, e.path)) for e in still],
                cache,
                options.transfer,
                progress,
            )
            sources |= _served(still, got, store.url)
            still = []
    except (StoreUnavailableError, MissingObjectError) as exc:
        if options.source is not Source.FALLBACK:
            raise
        log.warning("%s; falling back to the Hub at the pinned revision", exc)
        sources |= {e.path: store.url for e in still if cache.has_blob(e)}
        still = [e for e in still if not cache.has_blob(e)]
    if still:
        got = fetch(hub, [Wanted(manifest.name, e, e.path) for e in still], cache, options.transfer, progress)
        sources |= _served(still, got, hub.url)
        from_hub = True
    return Fetched(_summary(sources), from_hub, sources)


def _not_cached(
    manifest: ModelManifest, still: Sequence[FileEntry], cache: Cache, shared: Sequence[object], options: ResolveOptions
) -> NotCachedError:
    listing = ", ".join(e.path for e in still[:5]) + (" ..." if len(still) > 5 else "")
    # Named as the user asked for it (the flag or CATALOG_MODE); a library caller's option is just "offline".
    asked = options.settings.offline_by if options.settings is not None and options.settings.offline_by else "offline"
    return NotCachedError(
        f"{asked}: {len(still)} of {manifest.name}'s files are not in the cache at {cache.root}"
        f"{' nor in the shared tiers' if shared else ''}: {listing}",
        # A plain resolve of a streamed format leaves its weights in the store: only --materialize-weights brings them.
        hint=f"run `catalog resolve {manifest.name}{' --materialize-weights' if manifest.load_format.streams_weights else ''}` "
        "once with store access, or point --cache at a warm cache"
        + ("" if shared else " (or --shared-cache at a tier)"),
    )


def _from_mirrors(
    cat: Catalog,
    manifest: ModelManifest,
    still: list[FileEntry],
    cache: Cache,
    mirrors: Sequence[Store],
    options: ResolveOptions,
    progress: Progress | None,
    sources: dict[str, str],
    primary: str,
) -> list[FileEntry]:
    """Try each mirror in order for what is still missing; a mirror that lacks a file, fails or serves other
    bytes is skipped for that file (the transfer verified them: nothing wrong was kept). Returns what is left."""
    config = dataclasses.replace(options.transfer, attempts=min(options.transfer.attempts, 2))  # a mirror is optional
    named = {primary}
    for number, mirror in enumerate(mirrors, 1):
        # The same bucket on another endpoint has the primary's URL: warnings and `sources` tell them apart.
        name = mirror.url if mirror.url not in named else f"{mirror.url} (mirror {number})"
        named.add(mirror.url)
        if not still:
            break
        try:
            fetch(
                mirror,
                [Wanted(manifest.name, e, cat.store_key(manifest, e.path)) for e in still],
                cache,
                config,
                progress,
            )
        except CacheWriteError:
            raise  # our disk, not the mirror: no other store would do better
        except (CatalogError, OSError) as exc:
            log.warning("mirror %s: %s; trying the next store for what it could not give", name, exc)
        sources |= {e.path: name for e in still if cache.has_blob(e)}
        still = [e for e in still if not cache.has_blob(e)]
    return still


def _served(entries: Sequence[FileEntry], fetched: set[str], url: str) -> dict[str, str]:
    """Per file, who gave its bytes: `url` for what this fetch downloaded, the cache for what another process brought
    while this one waited for it."""
    return {e.path: url if e.sha256 in fetched else "cache" for e in entries}


def _summary(sources: dict[str, str]) -> str:
    """One `source` for the whole answer: the one server, or every server in the order first used."""
    return ", ".join(dict.fromkeys(sources.values())) or "cache"


def _build_view(cache: Cache, spec: ViewSpec, catalog: str = "") -> None:
    try:
        cache.build_view(spec, catalog)
    except CacheWriteError:
        raise
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise cache_error(cache, exc, spec.name) from None
        raise CacheWriteError(
            f"cannot lay out {spec.name} in the cache at {cache.root}: {exc.strerror or exc}",
            hint="free disk space or point --cache / CATALOG_CACHE at a larger disk",
        ) from None


def _check_paths(manifest: ModelManifest) -> None:
    """Refuse a manifest whose paths could escape the cache before any byte is fetched or written."""
    for entry in manifest.files:
        if (message := naming.check_relative_path(entry.path)) is not None:
            raise UnsafePathError(f"refusing {manifest.name}/{entry.path!r}: {message}")
        if (message := naming.check_sha256(entry.sha256)) is not None:
            raise UnsafePathError(f"refusing {manifest.name}/{entry.path}: {message}")


def _tokenizer(
    cat: Catalog,
    manifest: ModelManifest,
    path: Path,
    streams: bool,
    cache: Cache,
    store: Store,
    options: ResolveOptions,
    progress: Progress | None,
) -> tuple[str | None, Path | None]:
    """An explicit tokenizer (another model's files, or a subfolder), else the local dir when weights stream (`streams`);
    with the marker of the tokenizer's own view when it is another model."""
    if manifest.tokenizer is not None:
        if manifest.tokenizer in cat:
            other = cat.get(manifest.tokenizer)
            # Only the tokenizer's non-weight files are needed, whatever its format.
            local = tuple(f for f in other.files if f not in other.weight_files)
            spec = ViewSpec.of(other, Layout.DIR, local)
            _ensure_view(cat, other, spec, cache, store, options, progress)
            return str(cache.view_dir(spec)), cache.marker_path(spec)
        return str(path / manifest.tokenizer.rstrip("/")), None
    if streams:  # the engine's --model is the store: it must be told where the local tokenizer is
        return str(path), None
    return None, None


def _recheck_blobs(cache: Cache, spec: ViewSpec) -> None:
    """Re-hash the blobs behind the changed files of a stale view (view files are hard links to blobs);
    a blob that no longer matches is removed and refetched. Unchanged files are not re-read."""
    marker = cache.read_marker(spec)
    stamps = cache.current_stamps(spec)
    changed = (
        list(spec.files)
        if marker is None
        else changed_files(spec, marker, stamps, cache.records_for(spec, marker, stamps))
    )
    for entry in changed:
        blob = cache.blob_path(entry.sha256)
        if not blob.exists():
            continue
        size, digest = hashing.hash_file(blob)
        if (size, digest) != (entry.size, entry.sha256):
            log.warning("cached blob for %s/%s was modified (sha256 %s); removing it", spec.name, entry.path, digest)
            blob.unlink(missing_ok=True)
        else:
            cache.record_blob(entry.sha256)
    if extras := cache.extra_files(spec):
        log.warning(
            "%s: the view at %s held files no manifest pins (%s); rebuilding it",
            spec.name,
            cache.view_dir(spec),
            ", ".join(extras[:5]) + (" ..." if len(extras) > 5 else ""),
        )
    # The view itself stays until the rebuild replaces it in one step (Cache.build_view): removing it here would
    # take it from a concurrent resolve that has just rebuilt it and handed it out.
