"""Files that run code when they are loaded: refused unless the manifest says why, and scanned when it does.

The policy is decided in review, from paths (catalog/rules.py `load-safety`: pickle-based files and `*.py` need
`allow_code: <reason>`; every command that loads the catalog refuses a manifest breaking it, so a resolve never
fetches such pins). `validate` cannot read a config's bytes, so `auto_map` is judged here, where the verified bytes
are at hand: before a resolve hands out a model (`after_fetch`), its verified config.json / tokenizer_config.json
may not name remote code unless `allow_code` says why; and every allowed pickle is scanned (picklescan, chosen by
measurement, see docs/load-safety.md), a finding refusing the model before any loader sees it.

A scan verdict is one per sha256 and scanner version. Runners take verdicts only from shared tiers, where only the
publisher job writes (`catalog publish` scans what it publishes), so N runners sharing a tier cost one scan; a
verdict is taken only when the record names that very sha256, scanner and scanner version (else the runner scans
again). A runner keeps no verdict in its own cache: whoever can write that cache (a pull request's job) could plant
one, and a scan of a pickle stream costs milliseconds (picklescan reads the pickle, not the tensor data).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from catalog import formats
from catalog.errors import CatalogError
from catalog.settings import HF_TIER
from resolver.cache import Cache
from resolver.fsutil import atomic_write

if TYPE_CHECKING:
    from catalog.schema import FileEntry, ModelManifest

log = logging.getLogger(__name__)

SCANNER = "picklescan"
VERDICTS = "scan-verdicts"  # <tier>/scan-verdicts/<aa>/<sha256>.json
CONFIGS = ("config.json", "tokenizer_config.json")  # where transformers reads auto_map
INSTALL_HINT = "install the scanner: pip install 'model-catalog[safety]'"


class LoadSafetyError(CatalogError, ValueError):
    """A model that would run code the catalog was not told to allow, or whose allowed pickle a scan flags."""

    def __init__(self, model: str, path: str, message: str, *, hint: str) -> None:
        super().__init__(message, hint=hint)
        self.model = model
        self.path = path


class Verdict(NamedTuple):
    sha256: str
    scanner: str
    version: str
    clean: bool
    findings: tuple[str, ...]

    def render(self) -> bytes:
        return json.dumps(
            {
                "sha256": self.sha256,
                "scanner": self.scanner,
                "version": self.version,
                "clean": self.clean,
                "findings": list(self.findings),
            },
            sort_keys=True,
        ).encode()


def code_pins(manifest: ModelManifest) -> list[tuple[FileEntry, str]]:
    """The pinned files that run code when loaded, with why (from their paths)."""
    return [(e, why) for e in manifest.files if (why := formats.executes_on_load(e.path)) is not None]


def auto_map_modules(config: Mapping[str, Any]) -> list[str]:
    """What a config's `auto_map` makes transformers import with trust_remote_code: `module.Class` values name
    `module.py` beside the config; `org/repo--module.Class` names code in another repo (kept as written)."""
    found: list[str] = []
    mapping = config.get("auto_map")
    if not isinstance(mapping, Mapping):
        return found
    for value in mapping.values():
        for ref in value if isinstance(value, list) else [value]:
            if isinstance(ref, str) and "." in ref:
                module = ref.rsplit(".", 1)[0]
                found.append(module if "--" in module else module.replace(".", "/") + ".py")
    return sorted(set(found))


def after_fetch(manifest: ModelManifest, local: Mapping[str, Path], tiers: Sequence[Path]) -> None:
    """Judge the verified local files (path -> where it lies) before the answer is handed out."""
    if manifest.allow_code is None:
        for name in CONFIGS:
            where = local.get(name)
            if where is None:
                continue
            try:
                config = json.loads(where.read_bytes()[: 16 * 1024 * 1024])
            except (OSError, ValueError):
                continue  # not JSON the engine could use either; the pins vouch for the bytes
            modules = auto_map_modules(config) if isinstance(config, dict) else []
            if modules:
                raise LoadSafetyError(
                    manifest.name,
                    name,
                    f"{manifest.name}: {name}'s auto_map names code the engine "
                    f"would run with --trust-remote-code ({', '.join(modules)}) and the manifest does "
                    "not allow it; refused before any loader sees it",
                    hint="add `allow_code: <reason>` to the manifest for review, or pin a model that "
                    "needs no remote code",
                )
    for entry, _ in code_pins(manifest):
        if formats.is_pickle_file(entry.path) and entry.path in local:
            verdict = verdict_for(entry.sha256, local[entry.path], tiers)
            if not verdict.clean:
                raise LoadSafetyError(
                    manifest.name,
                    entry.path,
                    f"{manifest.name}: {entry.path!r} (sha256 "
                    f"{entry.sha256}) is refused by {verdict.scanner} {verdict.version}: "
                    f"{'; '.join(verdict.findings) or 'it cannot be scanned'}; refused before any "
                    "loader sees it",
                    hint="the pinned pickle calls code it should not: do not load it; pin safetensors weights instead",
                )


def scanner_version() -> str:
    try:
        return metadata.version(SCANNER)
    except metadata.PackageNotFoundError:
        raise CatalogError(f"scanning pickle-based files needs {SCANNER}", hint=INSTALL_HINT) from None


def scan(sha256: str, path: Path) -> Verdict:
    """picklescan's verdict on one file: clean when it finds no dangerous or unknown global and no scan error."""
    version = scanner_version()
    from picklescan.scanner import SafetyLevel, scan_file_path

    result = scan_file_path(str(path))
    findings = tuple(
        sorted(
            {f"{g.module}.{g.name} ({g.safety.value})" for g in result.globals if g.safety is not SafetyLevel.Innocuous}
        )
    )
    clean = result.issues_count == 0 and not result.scan_err
    if result.scan_err and not findings:
        findings = ("the file could not be parsed as pickle data",)
    log.info(
        "scanned %s (sha256 %s) with %s %s: %s",
        path.name,
        sha256,
        SCANNER,
        version,
        "clean" if clean else "; ".join(findings),
    )
    return Verdict(sha256, SCANNER, version, clean, findings)


def _record_path(root: Path, sha256: str) -> Path:
    return root / VERDICTS / sha256[:2] / f"{sha256}.json"


def recorded(root: Path, sha256: str, version: str) -> Verdict | None:
    """A tier's verdict on `sha256`, only if the record names that sha256 and this scanner's version."""
    try:
        data = json.loads(_record_path(root, sha256).read_bytes()[: 1024 * 1024])
        verdict = Verdict(
            str(data["sha256"]),
            str(data["scanner"]),
            str(data["version"]),
            data["clean"] is True,
            tuple(str(f) for f in data["findings"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return verdict if (verdict.sha256, verdict.scanner, verdict.version) == (sha256, SCANNER, version) else None


def verdict_for(sha256: str, path: Path, tiers: Sequence[Path]) -> Verdict:
    """A tier's bound verdict when one holds it, else a scan of the verified local file (kept nowhere)."""
    version = scanner_version()
    for tier in tiers:
        if not str(tier).startswith(HF_TIER):
            found = recorded(tier, sha256, version)
            if found is not None:
                return found
    return scan(sha256, path)


def publish_verdicts(tier: Path, entries: Iterable[FileEntry]) -> int:
    """The publisher's side: scan every pickle-based blob of `entries` in the tier that has no verdict of this scanner
    version yet, and record it there (temp + rename). Returns how many were scanned."""
    scanned = 0
    for entry in entries:
        if not formats.is_pickle_file(entry.path):
            continue
        version = scanner_version()
        if recorded(tier, entry.sha256, version) is not None:
            continue
        verdict = scan(entry.sha256, Cache(tier).blob_path(entry.sha256))
        atomic_write(_record_path(tier, entry.sha256), verdict.render())
        scanned += 1
        if not verdict.clean:
            log.warning("tier %s: %s is refused by %s: %s", tier, entry.path, SCANNER, "; ".join(verdict.findings))
    return scanned
