"""Pins whose upstream is gone are the last copy: the audit's record in the bucket, and the guard on deletions.

`catalog audit-upstream` records what it learned in the store, next to sync's per-model state:
`.model-catalog/state/upstream/audit.json` = {"version", "audited_at", "pins": {name: {hf_repo, repo_type,
revision, prefix, upstream, detail, checked_at, gone_since}}}. Entries are merged, never dropped: a model
whose manifest was removed keeps its entry, so its objects (orphans now) stay protected. An `unreachable`
answer never replaces what an earlier audit learned.

`refuse_last_copy_deletion` is what `sync` calls before it deletes anything (prune, orphans, a saved or
hand-edited plan): every key under the prefix of a pin whose upstream is not proven `ok` (gone, gated without a
proven grant, moved, unreachable) is refused unless its model is named in `--allow-last-copy-deletion`. Reading
the record costs one small GET, only when a plan deletes something; a record that cannot be read refuses the
deletions rather than guessing. Version 1 records called a gated repo `ok` when any token was set, its grant
unchecked: read now, such an entry is `gated`.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from catalog import bounded
from catalog.errors import UsageError
from resolver.stores import ObjectNotFound, Store
from resolver.stream_check import STATE_PREFIX, read_small
from resolver.upstream import GONE, PinAudit, Upstream

log = logging.getLogger(__name__)

RECORD_KEY = f"{STATE_PREFIX}upstream/audit.json"  # model names hold no '/': no model's state object is here
RECORD_VERSION = 2  # 2: `ok` for a gated repo means its grant was proven (resolver/upstream.py)
_UNCHECKED_GRANT = "whether this token was granted access was not checked"  # how version 1 said it


@dataclass(frozen=True)
class PinRecord:
    name: str
    hf_repo: str
    repo_type: str
    revision: str
    prefix: str  # the model's prefix key in the store when it was audited
    upstream: str  # an Upstream value
    detail: str
    checked_at: str
    gone_since: str | None = None  # when an audit first found it gone (kept while it stays gone)

    @property
    def pin(self) -> tuple[str, str, str]:
        return self.hf_repo, self.repo_type, self.revision

    @property
    def gone(self) -> bool:
        return self.upstream in {u.value for u in GONE}

    @property
    def recoverable(self) -> bool:
        """The Hub was shown to serve the pin (`ok`): the only verdict under which its objects are not a last copy."""
        return self.upstream == Upstream.OK.value


def record_of(result: PinAudit, at: str) -> PinRecord:
    s = result.source
    return PinRecord(
        result.name,
        s.hf_repo,
        s.repo_type,
        s.revision,
        result.prefix,
        result.finding.upstream.value,
        result.finding.detail,
        at,
        at if result.finding.upstream in GONE else None,
    )


def merge(old: Mapping[str, PinRecord], new: Iterable[PinRecord]) -> dict[str, PinRecord]:
    """Pure: the record after an audit. Unreachable keeps what was known; gone keeps its first date; a new pin
    under an old name (re-pinned) starts afresh, and the old pin, unless it was `ok`, stays as `name@<commit[:12]>`:
    its objects (orphans now, under the old prefix) are still the last copy."""
    out = dict(old)
    for rec in new:
        before = out.get(rec.name)
        same_pin = before is not None and before.pin == rec.pin
        if rec.upstream == Upstream.UNREACHABLE.value and before is not None and same_pin:
            continue
        if rec.gone and before is not None and same_pin and before.gone and before.gone_since:
            rec = replace(rec, gone_since=before.gone_since)
        if before is not None and not same_pin and not before.recoverable:
            superseded = f"{before.name}@{before.revision[:12]}"
            out[superseded] = replace(before, name=superseded)
        out[rec.name] = rec
    return out


def to_bytes(records: Mapping[str, PinRecord], audited_at: str) -> bytes:
    pins = {name: {k: v for k, v in asdict(rec).items() if k != "name"} for name, rec in sorted(records.items())}
    return json.dumps(
        {"version": RECORD_VERSION, "audited_at": audited_at, "pins": pins}, indent=1, sort_keys=True
    ).encode()


def from_bytes(data: bytes) -> dict[str, PinRecord]:
    """The record's pins; UsageError when it is not a record of this version (the guard must not guess)."""
    try:
        parsed = bounded.loads(data)
        if (
            not isinstance(parsed, dict)
            or parsed.get("version") not in (1, RECORD_VERSION)
            or not isinstance(parsed.get("pins"), dict)
        ):
            raise ValueError("not an upstream record of this version")
        records = {name: PinRecord(name=name, **fields) for name, fields in parsed["pins"].items()}
        if parsed["version"] == 1:  # an `ok` there may be a gated repo whose grant nobody checked: unproven
            records = {
                n: replace(r, upstream=Upstream.GATED.value, detail=f"{r.detail} (recorded unproven)")
                if r.upstream == Upstream.OK.value and _UNCHECKED_GRANT in str(r.detail)
                else r
                for n, r in records.items()
            }
        for rec in records.values():
            fields_ = asdict(rec)
            gone_since = fields_.pop("gone_since")
            if not all(isinstance(v, str) for v in fields_.values()) or not isinstance(gone_since, (str, type(None))):
                raise ValueError(f"{rec.name}: a field is not text")
        return records
    except (ValueError, TypeError) as exc:
        raise UsageError(
            f"the upstream record {RECORD_KEY} in the store is unreadable ({exc})",
            hint="run `catalog audit-upstream` to write it again",
        ) from None


def read_record(store: Store) -> dict[str, PinRecord]:
    """{} when no audit ever ran against this store."""
    try:
        return from_bytes(read_small(store, RECORD_KEY))
    except ObjectNotFound:
        return {}


def write_record(store: Store, records: Mapping[str, PinRecord], audited_at: str) -> None:
    _put(store, to_bytes(records, audited_at))


def _put(store: Store, data: bytes) -> None:
    with tempfile.NamedTemporaryFile("wb", suffix=".json", delete=False) as f:
        f.write(data)
        path = Path(f.name)
    try:
        store.put(RECORD_KEY, path, {"kind": "model-catalog-upstream-audit"})
    finally:
        path.unlink(missing_ok=True)


def copy_record(origin: Store, target: Store) -> bool:
    """Give a replica the primary's record as it is, so a sync against the replica protects the same pins."""
    try:
        data = read_small(origin, RECORD_KEY)
    except ObjectNotFound:
        return False
    from_bytes(data)  # never spread a record the guard could not read
    _put(target, data)
    return True


def last_copies(keys: Sequence[str], records: Mapping[str, PinRecord], allowed: Iterable[str]) -> dict[str, list[str]]:
    """Pure: model name -> the keys among `keys` under its prefix, for each pin whose upstream is not proven `ok` and
    that `allowed` does not name. A key under several such prefixes (nested by mistake) counts for each."""
    permitted = set(allowed)
    unproven = [
        (rec.prefix, rec.name)
        for rec in records.values()
        if not rec.recoverable and rec.name not in permitted and rec.prefix
    ]
    out: dict[str, list[str]] = {}
    for key in keys:
        for prefix, name in unproven:
            if key.startswith(prefix):
                out.setdefault(name, []).append(key)
    return out


class LastCopyError(UsageError):
    """A deletion would remove objects of a pin whose upstream is gone; nothing was deleted."""

    def __init__(self, held: Mapping[str, Sequence[str]], records: Mapping[str, PinRecord]) -> None:
        parts = []
        for name, keys in sorted(held.items()):
            rec = records[name]
            parts.append(
                f"{len(keys)} object(s) of {name} ({rec.hf_repo}@{rec.revision[:12]}: {rec.upstream} upstream "
                f"since {rec.gone_since or rec.checked_at}, e.g. {keys[0]})"
            )
        names = " ".join(f"--allow-last-copy-deletion {n}" for n in sorted(held))
        super().__init__(
            f"the plan deletes the last copy of what the Hub no longer serves (or is not proven to serve): "
            f"{'; '.join(parts)}; nothing was deleted",
            hint=f"keep them (drop --prune / --delete-orphans), copy them first (catalog sync --replicate-to URL "
            f"{' '.join(sorted(held))}), or pass {names}",
        )
        self.held = {k: list(v) for k, v in held.items()}


def refuse_last_copy_deletion(store: Store, keys: Sequence[str], allowed: Iterable[str]) -> None:
    """Raise LastCopyError when any of `keys` is the last copy of a gone pin that `allowed` does not name."""
    if not keys:
        return
    records = read_record(store)
    if not records:
        log.warning(
            "no upstream audit is recorded in %s: nothing tells which deletions would remove a last copy "
            "(run `catalog audit-upstream` on a schedule)",
            store.url,
        )
    held = last_copies(keys, records, allowed)
    if held:
        raise LastCopyError(held, records)


def as_json(rec: PinRecord) -> dict[str, Any]:
    return asdict(rec)
