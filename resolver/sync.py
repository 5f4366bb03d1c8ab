"""`catalog sync`: make the bucket equal to the manifests, with a plan you can read, save, apply and trust.

    listing + recorded state --plan()--> SyncPlan (a value: text, JSON) --apply()--> the bucket

`plan` is pure. What sync verified and uploaded is recorded per model in the store
(`.model-catalog/state/<name>.json`: path -> size, sha256, ETag), so a no-op sync costs one listing
(per 1,000 objects) plus one small GET per model, and still notices an object replaced with
same-size content: its ETag no longer matches the record. An object with no record (put there by
another tool) is `verify`: apply downloads and hashes it before trusting it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from catalog import bounded
from catalog.derived import STORE_AREA as DERIVED_AREA
from catalog.errors import CatalogError, IntegrityError, UsageError
from catalog.lookup import Catalog
from catalog.schema import FileEntry, ModelManifest
from resolver import hashing
from resolver.cache import Cache
from resolver.hub import HubOptions, HubStore
from resolver.last_copy import refuse_last_copy_deletion
from resolver.stores import LocalStore, ObjectInfo, Store
from resolver.stream_check import STATE_PREFIX, cached_state, parse_state, read_small, remember_state, write_state
from resolver.transfer import TransferConfig, Wanted, fetch, fetch_digest, fetch_digest_etag
from resolver.upload import provenance

log = logging.getLogger(__name__)

PLAN_VERSION = 2  # 2: the plan carries the fingerprint of the manifests it was made from


class Action(str, Enum):
    OK = "ok"
    UPLOAD = "upload"  # missing
    REPLACE = "replace"  # present with the wrong size (or hash, once verified): corruption, reported loudly
    VERIFY = "verify"  # present with the right size but nothing vouches for its bytes: hash it on apply
    EXTRA = "extra"  # under a model's prefix but not in its manifest; deleted only with --prune
    ORPHAN = "orphan"  # under no manifest's prefix; deleted only with --prune --delete-orphans


DRIFT = (Action.UPLOAD, Action.REPLACE, Action.VERIFY, Action.EXTRA, Action.ORPHAN)


@dataclass(frozen=True)
class PlanItem:
    action: Action
    key: str
    size: int
    model: str = ""
    path: str = ""
    sha256: str = ""
    reason: str = ""


@dataclass(frozen=True)
class SyncPlan:
    store: str
    items: tuple[PlanItem, ...]
    fingerprint: str  # of the listing it was made from: --apply refuses if the bucket changed since
    names: tuple[str, ...] = ()  # the models it covers; () is the whole catalog (and store)
    prune: bool = False
    delete_orphans: bool = False
    requests: Mapping[str, int] = field(default_factory=dict)
    catalog: str = ""  # of the manifests it was made from: --apply refuses if the catalog changed since
    # Where the bytes to upload come from, as the planning command was told (--from-dir, --from-hf-cache: absolute
    # paths; empty: the Hub): --apply reads them from there too, never from the Hub behind the planner's back.
    from_dir: str = ""
    from_hf_cache: str = ""

    def by_action(self, action: Action) -> list[PlanItem]:
        return [i for i in self.items if i.action is action]

    @property
    def deletions(self) -> list[PlanItem]:
        return [
            i
            for i in self.items
            if (i.action is Action.EXTRA and self.prune) or (i.action is Action.ORPHAN and self.delete_orphans)
        ]

    @property
    def drift(self) -> bool:
        return any(i.action in DRIFT for i in self.items)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": PLAN_VERSION,
            "store": self.store,
            "fingerprint": self.fingerprint,
            "catalog": self.catalog,
            "names": list(self.names),
            "prune": self.prune,
            "delete_orphans": self.delete_orphans,
            "requests": dict(self.requests),
            "from_dir": self.from_dir,
            "from_hf_cache": self.from_hf_cache,
            "summary": {
                a.value: {"count": len(self.by_action(a)), "bytes": sum(i.size for i in self.by_action(a))}
                for a in Action
            },
            "items": [{**asdict(i), "action": i.action.value} for i in self.items],
        }

    @classmethod
    def from_json(cls, data: Any) -> SyncPlan:
        """A saved plan, every field type-checked: anything else is a UsageError naming what is wrong."""
        if not isinstance(data, dict) or data.get("version") != PLAN_VERSION:
            raise UsageError("not a sync plan of this version", hint=_NEW_PLAN)
        items_raw, names = data.get("items"), data.get("names", [])
        if not isinstance(items_raw, list):
            raise UsageError("not a sync plan: `items` is not a list", hint=_NEW_PLAN)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise UsageError("not a sync plan: `names` is not a list of model names", hint=_NEW_PLAN)
        for key in ("store", "fingerprint", "catalog"):
            if not isinstance(data.get(key), str):
                raise UsageError(f"not a sync plan: `{key}` is not text", hint=_NEW_PLAN)
        for key in ("prune", "delete_orphans"):
            if not isinstance(data.get(key), bool):
                raise UsageError(f"not a sync plan: `{key}` is not true or false", hint=_NEW_PLAN)
        for key in ("from_dir", "from_hf_cache"):
            if not isinstance(data.get(key, ""), str):
                raise UsageError(f"not a sync plan: `{key}` is not text", hint=_NEW_PLAN)
        items = tuple(_item_from_json(n, raw) for n, raw in enumerate(items_raw))
        return cls(
            data["store"],
            items,
            data["fingerprint"],
            tuple(names),
            data["prune"],
            data["delete_orphans"],
            catalog=data["catalog"],
            from_dir=data.get("from_dir", ""),
            from_hf_cache=data.get("from_hf_cache", ""),
        )


_NEW_PLAN = "make a new one with `catalog sync --out plan.json`"
_TEXT_FIELDS = ("key", "model", "path", "sha256", "reason")


def _item_from_json(index: int, raw: Any) -> PlanItem:
    def bad(what: str) -> UsageError:
        return UsageError(f"not a sync plan: items[{index}] {what}", hint=_NEW_PLAN)

    if not isinstance(raw, dict):
        raise bad("is not a mapping")
    unknown = set(raw) - {"action", "size", *_TEXT_FIELDS}
    if unknown:
        raise bad(f"has unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    try:
        action = Action(raw.get("action"))
    except ValueError:
        raise bad(f"has action {raw.get('action')!r}, not one of {', '.join(a.value for a in Action)}") from None
    size = raw.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise bad(f"has size {size!r}, not a whole number of bytes")
    fields = {name: raw.get(name, "") for name in _TEXT_FIELDS}
    for name, value in fields.items():
        if not isinstance(value, str):
            raise bad(f"has {name} {value!r}, not text")
    if not fields["key"]:
        raise bad("has no key")
    return PlanItem(action, size=size, **fields)


def fingerprint(listing: Iterable[ObjectInfo]) -> str:
    digest = hashlib.sha256()
    for obj in sorted(listing, key=lambda o: o.key):
        digest.update(f"{obj.key}\0{obj.size}\0{obj.etag}\n".encode())
    return digest.hexdigest()


def catalog_fingerprint(cat: Catalog) -> str:
    """Of what a plan is decided from: every manifest's name, prefix key and pinned files (path, size, sha256)."""
    pins = sorted((m.name, cat.store_key(m), sorted((e.path, e.size, e.sha256) for e in m.files)) for m in cat)
    return hashlib.sha256(json.dumps([cat.settings.store, pins]).encode()).hexdigest()


def check_items(plan_: SyncPlan, cat: Catalog) -> None:
    """Refuse a plan whose items do not follow from the catalog (pure; nothing done yet).

    Each key is recomputed from model + path: an upload, replace or verify must be exactly that model's pinned
    file with its pinned size and sha256; an extra must lie under its model's prefix (and no nested model's),
    an orphan under no prefix; no deletion may touch a key that any manifest pins; and no item may name sync's
    own state records (the planner never emits one). A hand-edited plan therefore cannot delete or overwrite
    another model's files, nor the records that vouch for them.
    """
    prefixes = {m.name: cat.store_key(m) for m in cat}
    pinned = {cat.store_key(m, e.path): (m.name, e) for m in cat for e in m.files}
    longest_first = sorted(prefixes.values(), key=len, reverse=True)

    def owner(key: str) -> str | None:
        return next((p for p in longest_first if key.startswith(p)), None)

    def problem(item: PlanItem) -> str | None:
        if item.key.startswith(STATE_PREFIX):  # the planner never emits sync's own records as items
            return "it is one of sync's own state records, which no plan item may name"
        if item.action is Action.ORPHAN:
            if item.key in pinned:
                return f"it is {pinned[item.key][0]}/{pinned[item.key][1].path}, a pinned file"
            if owner(item.key) is not None:
                return "it lies under a model's prefix, so it is no orphan"
            return None
        if item.model not in prefixes:
            return f"{item.model!r} is no model of the catalog"
        expected = prefixes[item.model] + item.path
        if item.key != expected:
            return f"{item.model}/{item.path} is stored under {expected}, not {item.key}"
        held = pinned.get(item.key)
        if item.action is Action.EXTRA:
            if held is not None:
                return f"it is {held[0]}/{held[1].path}, a pinned file"
            if owner(item.key) != prefixes[item.model]:
                return f"it lies under another model's prefix ({owner(item.key)})"
            return None
        if held is None or held[0] != item.model:
            return f"{item.model} pins no file {item.path!r}"
        if (held[1].size, held[1].sha256) != (item.size, item.sha256):
            return (
                f"the plan says {item.size} bytes, sha256 {item.sha256}; the manifest pins {held[1].size} bytes, "
                f"sha256 {held[1].sha256}"
            )
        return None

    acted = {id(i) for i in plan_.deletions}
    for index, item in enumerate(plan_.items):
        if item.action in (Action.UPLOAD, Action.REPLACE, Action.VERIFY) or id(item) in acted:
            if (why := problem(item)) is not None:
                raise UsageError(
                    f"plan item {index} ({item.action.value} {item.key}) does not follow from the catalog: "
                    f"{why}; nothing was done",
                    hint="make a new plan with `catalog sync --out plan.json` and apply it unedited",
                )


def plan(
    manifests: Sequence[ModelManifest],
    key_of: Mapping[str, str],  # model name -> its prefix key in the store
    listing: Sequence[ObjectInfo],
    states: Mapping[str, Mapping[str, Mapping[str, Any]]],
    *,
    whole_store: bool,
    deep_hashes: Mapping[str, str] | None = None,
    prune: bool = False,
    delete_orphans: bool = False,
    store: str = "",
    other_prefixes: Sequence[str] = (),
) -> SyncPlan:
    """Pure: what to do so the store holds exactly the manifests' files (and, if asked, nothing else).

    An object belongs to the longest prefix it starts with, among these manifests and `other_prefixes`
    (the rest of the catalog): even if validation were bypassed and one model's prefix nested inside
    another's, a sync of the outer model would never call the inner model's objects its extras.
    """
    # sync's own records and derived entries (catalog/derived.py) are under no model's prefix and never orphans
    objects = {o.key: o for o in listing if not o.key.startswith((STATE_PREFIX, DERIVED_AREA))}
    prefixes = {*key_of.values(), *other_prefixes}  # each ends in '/'

    def owner(key: str) -> str | None:
        """The longest prefix `key` starts with: its folders looked up from the deepest (one set lookup a folder,
        not one comparison a model: 2,000 models and 6,000 objects were 12 million)."""
        end = len(key)
        while (end := key.rfind("/", 0, end)) >= 0:
            if key[: end + 1] in prefixes:
                return key[: end + 1]
        return "" if "" in prefixes else None  # a model at the store's root owns what no deeper prefix does

    owned: dict[str | None, list[str]] = {}
    for key in objects:
        owned.setdefault(owner(key), []).append(key)
    items: list[PlanItem] = []
    for m in sorted(manifests, key=lambda m: m.name):
        prefix = key_of[m.name]
        state = states.get(m.name, {})
        wanted = {prefix + e.path: e for e in m.files}
        for key, entry in sorted(wanted.items()):
            items.append(_decide(m.name, key, entry, objects.get(key), state.get(entry.path), deep_hashes))
        for key in sorted(owned.get(prefix, ())):
            if key not in wanted:
                items.append(
                    PlanItem(
                        Action.EXTRA, key, objects[key].size, m.name, key[len(prefix) :], reason="not in the manifest"
                    )
                )
    if whole_store and manifests:
        for key in sorted(owned.get(None, ())):
            items.append(PlanItem(Action.ORPHAN, key, objects[key].size, reason="under no manifest's prefix"))
    return SyncPlan(store, tuple(items), fingerprint(listing), prune=prune, delete_orphans=delete_orphans)


def _decide(
    name: str,
    key: str,
    entry: FileEntry,
    obj: ObjectInfo | None,
    record: Mapping[str, Any] | None,
    deep_hashes: Mapping[str, str] | None,
) -> PlanItem:
    def item(action: Action, reason: str = "") -> PlanItem:
        return PlanItem(action, key, entry.size, name, entry.path, entry.sha256, reason)

    if obj is None:
        return item(Action.UPLOAD, "missing")
    if obj.size != entry.size:
        return item(Action.REPLACE, f"{obj.size} bytes in the store, the manifest pins {entry.size}")
    if deep_hashes is not None and key in deep_hashes:
        got = deep_hashes[key]
        return (
            item(Action.OK)
            if got == entry.sha256
            else item(Action.REPLACE, f"sha256 {got} in the store, the manifest pins {entry.sha256}")
        )
    if record is not None and record.get("sha256") == entry.sha256 and record.get("etag") == obj.etag and obj.etag:
        return item(Action.OK)
    if record is not None and record.get("sha256") == entry.sha256:
        return item(Action.VERIFY, f"rewritten since sync verified it (ETag {record.get('etag')} -> {obj.etag})")
    return item(Action.VERIFY, "no record of sync having verified it")


# -- I/O ----------------------------------------------------------------------------------------------
@dataclass
class SyncScope:
    """Which models, and where their prefixes (and every other catalog model's) are in the store."""

    manifests: list[ModelManifest]
    key_of: dict[str, str]
    whole_store: bool  # every manifest of the catalog: orphans can be told
    all_prefixes: list[str]


def scope_of(cat: Catalog, names: Sequence[str]) -> SyncScope:
    manifests = [cat.get(n) for n in names] if names else list(cat)
    return SyncScope(
        manifests,
        {m.name: cat.store_key(m) for m in manifests},
        whole_store=not names,
        all_prefixes=[cat.store_key(m) for m in cat],
    )


def list_scope(store: Store, scope: SyncScope) -> list[ObjectInfo]:
    if scope.whole_store:
        return list(store.list(""))
    return [o for prefix in sorted(scope.key_of.values()) for o in store.list(prefix)]


def read_states(
    store: Store, scope: SyncScope, listing: Sequence[ObjectInfo], cache: Cache | None = None
) -> dict[str, dict[str, Any]]:
    """Each model's recorded state: from the local cache when the listing shows the same ETag, else one
    small GET (so a no-op sync on a runner that synced before costs just the listing)."""
    present = {o.key: o for o in listing}
    if not scope.whole_store:
        present |= {o.key: o for o in store.list(STATE_PREFIX)}
    states: dict[str, dict[str, Any]] = {}
    for m in scope.manifests:
        key = f"{STATE_PREFIX}{m.name}.json"
        obj = present.get(key)
        if obj is None:
            continue
        local = cached_state(cache, store, m.name, obj.etag)
        data = (
            bounded.read_file(local, bounded.MAX_RECORD)
            if local is not None and local.is_file()
            else read_small(store, key)
        )
        if local is not None and not local.is_file():
            remember_state(local, data)
        states[m.name] = parse_state(data)
    return states


def make_plan(
    cat: Catalog,
    names: Sequence[str],
    store: Store,
    *,
    prune: bool,
    delete_orphans: bool,
    deep: bool,
    config: TransferConfig,
    cache: Cache | None = None,
) -> SyncPlan:
    scope = scope_of(cat, names)
    listing = list_scope(store, scope)
    states = read_states(store, scope, listing, cache)
    # A content-addressed store (oci://): its listing names each object's sha256.
    deep_hashes: dict[str, str] | None = dict(store.listed_sha256(listing)) or None
    if deep:
        objects = {o.key: o for o in listing}
        deep_hashes = deep_hashes or {}
        for m in scope.manifests:
            for e in m.files:
                key = scope.key_of[m.name] + e.path
                if key in objects and objects[key].size == e.size:
                    deep_hashes[key] = fetch_digest(store, Wanted(m.name, e, key), config)
    result = plan(
        scope.manifests,
        scope.key_of,
        listing,
        states,
        whole_store=scope.whole_store,
        deep_hashes=deep_hashes,
        prune=prune,
        delete_orphans=delete_orphans,
        store=store.url,
        other_prefixes=scope.all_prefixes,
    )
    return dataclasses.replace(
        result, names=tuple(names), requests=dict(store.requests), catalog=catalog_fingerprint(cat)
    )


@dataclass
class ApplyReport:
    uploaded: list[PlanItem] = field(default_factory=list)
    verified: list[PlanItem] = field(default_factory=list)
    deleted: list[PlanItem] = field(default_factory=list)
    errors: list[tuple[PlanItem, CatalogError]] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(i.size for i in self.uploaded)


class SourceOfBytes:
    """Where verified bytes for uploads come from: a folder (`--from-dir`), else the Hub at the pin.

    Either way they land as verified blobs in the local cache first, and uploads read those blobs:
    nothing reaches the bucket that was not hashed against the manifest.
    """

    def __init__(
        self, cat: Catalog, cache: Cache, hub: HubOptions, from_dir: Path | None, config: TransferConfig
    ) -> None:
        self.cat = cat
        self.cache = cache
        self.hub = hub
        self.from_dir = from_dir
        self.config = config

    def folder_for(self, name: str) -> Path | None:
        if self.from_dir is None:
            return None
        per_model = self.from_dir / name
        return per_model if per_model.is_dir() else self.from_dir

    @contextlib.contextmanager
    def verified_copy(self, item: PlanItem) -> Iterator[Path]:
        """A private copy of the item's bytes, hashed while copied and equal to the pin: what an upload sends.

        The bytes are read once into a temp file only this process writes, so a file corrupted in place (or changed
        while it is read) can never reach the bucket, single PUT or multipart. A file of --from-dir that the cache
        lacks is copied straight from the folder, and the copy becomes the cache's blob once it is uploaded (one read
        and one write of its bytes, where bringing it into the cache first and copying the blob took two of each);
        any other comes from the cache's verified blob. A cached blob that does not match is deleted and fetched
        again (verified on its way in); the copy is then retried.
        """
        direct: Path | None = None
        for attempt in (1, 2):
            entry = FileEntry(path=item.path, size=item.size, sha256=item.sha256)
            direct = self.folder_file(item) if attempt == 1 and not self.cache.has_blob(entry) else None
            source = direct or self.blob(item)
            fd, temp = self.cache.new_temp()
            try:
                size, sha256 = hashing.copy_hashing(source, fd)
            except BaseException:
                temp.unlink(missing_ok=True)
                raise
            if (size, sha256) == (item.size, item.sha256):
                break
            temp.unlink(missing_ok=True)
            if direct is not None:  # the folder's file is not the pinned one: said as the transfer from it said it
                what, want, got = (
                    ("size", str(item.size), str(size)) if size != item.size else ("sha256", item.sha256, sha256)
                )
                raise IntegrityError(
                    item.model, item.path, what, want, got, f"the file in {direct.parent} differs; nothing was uploaded"
                )
            if attempt == 2:
                raise IntegrityError(
                    item.model,
                    item.path,
                    "sha256",
                    item.sha256,
                    sha256,
                    "the bytes fetched again differ from the pin too; nothing was uploaded",
                )
            log.warning(
                "%s/%s: the cached blob is corrupt (%d bytes, sha256 %s; the pin is %d bytes, sha256 %s): "
                "deleted it and fetching it again; nothing corrupt was uploaded",
                item.model,
                item.path,
                size,
                sha256,
                item.size,
                item.sha256,
            )
            source.unlink(missing_ok=True)
        uploaded = False
        try:
            yield temp
            uploaded = True
        finally:
            if uploaded and direct is not None:
                self.cache.publish_blob(temp, item.sha256)  # verified above: the cache keeps what was uploaded
            else:
                temp.unlink(missing_ok=True)

    def folder_file(self, item: PlanItem) -> Path | None:
        """The item's file in --from-dir, when there is one."""
        folder = self.folder_for(item.model)
        path = folder / item.path if folder is not None else None
        return path if path is not None and path.is_file() else None

    def blob(self, item: PlanItem) -> Path:
        manifest = self.cat.get(item.model)
        entry = FileEntry(path=item.path, size=item.size, sha256=item.sha256)
        if not self.cache.has_blob(entry):
            folder = self.folder_for(item.model)
            if folder is not None and self.folder_file(item) is not None:
                # The folder read like a store: the same hashing transfer brings the file into the cache.
                fetch(LocalStore(folder), [Wanted(item.model, entry, item.path)], self.cache, self.config)
            else:
                hub = HubStore(manifest.source.hf_repo, manifest.source.revision, self.hub, manifest.source.repo_type)
                fetch(hub, [Wanted(item.model, entry, item.path)], self.cache, self.config)
        return self.cache.blob_path(entry.sha256)


def apply(
    plan_: SyncPlan,
    cat: Catalog,
    store: Store,
    source: SourceOfBytes,
    *,
    max_delete: int,
    check_fresh: bool,
    config: TransferConfig,
    allow_last_copy: Sequence[str] = (),
) -> ApplyReport:
    """Execute exactly `plan_`. Deletions beyond `max_delete`, or of a pin whose upstream is gone and that
    `allow_last_copy` does not name (resolver/last_copy.py), abort before anything is done."""
    deletions = plan_.deletions
    if deletions and len(deletions) > max_delete:
        raise UsageError(
            f"the plan deletes {len(deletions)} objects, more than --max-delete {max_delete}; nothing was deleted",
            hint="review the plan, then raise --max-delete if it is right",
        )
    if deletions and not len(cat):
        raise UsageError("refusing to delete with an empty catalog")
    if check_fresh:
        if plan_.store != store.url:
            raise UsageError(f"the plan is for {plan_.store}, not {store.url}; nothing was done")
        if plan_.catalog != catalog_fingerprint(cat):
            raise UsageError(
                "the catalog changed since the plan was made (a manifest added, removed or re-pinned); nothing was done",
                hint="make a new plan (catalog sync --out plan.json) and review it",
            )
        listing = list_scope(store, scope_of(cat, plan_.names))
        if fingerprint(listing) != plan_.fingerprint:
            raise UsageError(
                "the bucket changed since the plan was made; nothing was done",
                hint="make a new plan (catalog sync --out plan.json) and review it",
            )
        listed, acted = {o.key for o in listing}, {id(i) for i in deletions}
        for index, item in enumerate(plan_.items):  # an edited key naming a folder, or nothing: never "deleted"
            if id(item) in acted and item.key not in listed:
                raise UsageError(
                    f"plan item {index} ({item.action.value} {item.key}) names no object in the store; "
                    "nothing was done",
                    hint="make a new plan with `catalog sync --out plan.json` and apply it unedited",
                )
    check_items(plan_, cat)
    refuse_last_copy_deletion(store, [i.key for i in deletions], allow_last_copy)
    report = ApplyReport()
    recorded: dict[str, dict[str, dict[str, Any]]] = {}
    work = [i for i in plan_.items if i.action in (Action.UPLOAD, Action.REPLACE, Action.VERIFY)]
    small = [i for i in work if i.size <= config.part_size]
    large = [i for i in work if i.size > config.part_size]
    # Small files move in parallel (each a streamed single PUT); large ones one at a time, each already
    # parallel in parts, so memory stays near concurrency x part size. Outcomes are gathered in plan order.
    with ThreadPoolExecutor(max(1, config.concurrency), thread_name_prefix="catalog-sync") as pool:
        outcomes = dict(zip(small, pool.map(lambda i: _carry_out(i, cat, store, source, config), small), strict=True))
    outcomes |= {i: _carry_out(i, cat, store, source, config) for i in large}
    outcomes_in_order = [outcomes[i] for i in work]
    for item, (uploaded, info, error) in zip(work, outcomes_in_order, strict=True):
        if error is not None:
            report.errors.append((item, error))
            continue
        recorded.setdefault(item.model, {})[item.path] = _record(item, info)
        (report.uploaded if uploaded else report.verified).append(item)
    # Batched where the store can (S3: 1,000 keys a request); a key that fails is reported, the rest deleted.
    failed = store.delete_many([i.key for i in deletions]) if deletions else {}
    for item in deletions:
        if item.key in failed:
            report.errors.append((item, failed[item.key]))
        else:
            report.deleted.append(item)
    broken = {i.model for i, _ in report.errors}
    for name, files in recorded.items():
        if not store.content_addressed:
            write_state(store, name, files, source.cache)
        elif (
            name not in broken
        ):  # oci://: the model's manifest, pushed after its blobs, is the record; never a partial one
            store.publish_model(name)
    return report


def _carry_out(
    item: PlanItem, cat: Catalog, store: Store, source: SourceOfBytes, config: TransferConfig
) -> tuple[bool, ObjectInfo | None, CatalogError | None]:
    """One upload/replace/verify item: (whether bytes were uploaded, the object now there, the error if any)."""
    try:
        if item.action is Action.VERIFY:
            entry = FileEntry(path=item.path, size=item.size, sha256=item.sha256)
            # The ETag recorded is the one of the GET whose bytes were hashed: an object replaced after that GET
            # keeps a record that no longer matches it, so it is verified again (never recorded as verified).
            got, etag = fetch_digest_etag(store, Wanted(item.model, entry, item.key), config)
            if got == item.sha256:
                return False, ObjectInfo(item.key, item.size, etag=etag), None
            log.warning(
                "%s/%s: sha256 %s in the store, the manifest pins %s: replacing it",
                item.model,
                item.path,
                got,
                item.sha256,
            )
        return True, _upload(item, cat, store, source), None
    except CatalogError as exc:
        return False, None, exc


def _record(item: PlanItem, info: ObjectInfo | None) -> dict[str, Any]:
    return {"size": item.size, "sha256": item.sha256, "etag": info.etag if info else None}


def _upload(item: PlanItem, cat: Catalog, store: Store, source: SourceOfBytes) -> ObjectInfo:
    manifest = cat.get(item.model)
    entry = FileEntry(path=item.path, size=item.size, sha256=item.sha256)
    with source.verified_copy(item) as copy:  # the bytes sent are the bytes just hashed against the pin
        put = store.put(item.key, copy, provenance(manifest, entry), sha256=item.sha256)
    info = store.head(item.key)
    if (
        info is None
        or info.size != item.size
        or info.metadata.get("sha256") != item.sha256
        or (put.etag and info.etag and put.etag != info.etag)
    ):
        got = (
            "nothing" if info is None else f"{info.size} bytes, sha256 {info.metadata.get('sha256')}, ETag {info.etag}"
        )
        raise IntegrityError(
            item.model,
            item.path,
            "object",
            f"{item.size} bytes, sha256 {item.sha256}, ETag {put.etag}",
            got,
            "the store did not keep what was uploaded (or it was replaced at once)",
        )
    return dataclasses.replace(info, etag=put.etag or info.etag)  # the ETag of the bytes this sync sent
