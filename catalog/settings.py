"""Settings: every knob, read once at an entry point (flags over environment over defaults), then passed down.

`ENV` (catalog/front_door.py's VARIABLES) declares every environment variable the settings read by name, and
`Settings.build` can read no other: an undeclared one raises at its first read (`ENGINE_ENV_PREFIXES`: the engine's
own, by prefix, for the derived key). `Settings.build(env, flags)` is pure; `Settings.from_process(flags)` builds
them from `os.environ`, called by the entry points: the CLI, the pytest plugin and `catalog.load()` for library
callers. Modules below them take the Settings they are given; the few that touch the process environment otherwise
are listed, each with its reason, in docs/architecture.md ("Who reads the environment"), which
tests/unit/test_architecture.py holds the code to.
The warm resolve (catalog_app/warm.py) keys its index on the call's own inputs: the flags as parsed, every
variable `ENV` declares (from the same table), and the catalog and cache folders resolved, so no setting can make a
stale answer.

Standard library only: the warm path builds a Settings before anything heavy is imported.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from catalog import envparse, front_door, locations, urls
from catalog.errors import CatalogNotFoundError, UsageError
from catalog.signing import parse_identity

MiB = 1024 * 1024
MANIFESTS_DIR = locations.MANIFESTS_DIR


ENV = front_door.VARIABLES  # every variable the settings read, declared once (catalog/front_door.py)
ENV_NAMES = frozenset(v.name for v in ENV)


class _Declared(Mapping[str, str]):
    """The environment as `Settings.build` reads it: reading a variable that catalog/front_door.py does not declare is
    an error at once, not a setting the warm answers' key misses (a stale answer)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env

    def __getitem__(self, name: str) -> str:
        return self._env[front_door.declared(name)]

    def get(self, name: str, default: Any = None) -> Any:  # the settings' usual read: delegated, not via KeyError
        return self._env.get(front_door.declared(name), default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._env)

    def __len__(self) -> int:
        return len(self._env)


ADDRESSING_STYLES = ("auto", "path", "virtual")
RETRY_MODES = ("standard", "adaptive", "legacy")
MODES = {"ci": ("store", False), "dev": ("fallback", False), "offline": ("store", True)}
SOURCES = ("store", "hf", "fallback")
PREFER = ("local", "stream")  # --prefer: a streamed model with every weight at hand comes back local, or streams
ENGINE_LOADERS = ("auto", "catalog", "plain")  # CATALOG_ENGINE_LOADER
LOG_ENTRIES = ("check", "accept-unchecked")  # CATALOG_LOG_ENTRIES: transparency-log entries checked, or not
ENGINE_ENV_PREFIXES = ("VLLM_", "TORCH")  # Settings.engine_env


@dataclass(frozen=True)
class S3Options:
    """How to reach an S3-compatible endpoint. Credentials are never here: boto3's standard chain finds them."""

    endpoint_url: str | None = None  # None: boto3's own lookup (config file, AWS defaults)
    region: str | None = None
    profile: str | None = None
    addressing_style: str = "auto"  # "path" for most S3-compatible servers
    unsigned: bool = False  # public buckets
    retry_mode: str = "standard"
    max_attempts: int = 5
    max_pool_connections: int = 32
    connect_timeout: float = 10.0
    read_timeout: float = 60.0

    def describe(self) -> str:
        return self.endpoint_url or "the default AWS endpoint"


@dataclass(frozen=True)
class OciOptions:
    """How to reach OCI registries (oci:// stores). Credentials here go only to `registry` (None: the registry of
    the --store URL); docker's config.json is read by the store itself, per host."""

    username: str | None = None
    password: str | None = field(default=None, repr=False)
    registry: str | None = None
    plain_http: tuple[str, ...] = ()  # host[:port]s asked to be reached over http:// (loopback always is)
    docker_config: Path = field(default_factory=lambda: Path.home() / ".docker")


@dataclass(frozen=True)
class Settings:
    """Everything a command needs to know about where things are and how to move them."""

    catalog_dir: Path | None = None  # None: the nearest manifests/ upward from the working directory
    store: str | None = None  # overrides catalog.yaml's store
    cache_dir: Path = field(default_factory=lambda: Path.home() / ".cache" / "model-catalog")
    source: str = "store"  # store | hf | fallback
    mode: str | None = None  # CATALOG_MODE as set (None: unset, which acts as ci); the pytest plugin's Hub guard asks
    offline: bool = False
    offline_by: str = ""  # what made it offline, as messages name it: "--offline" or "CATALOG_MODE=offline"
    part_size: int | None = None  # None: chosen from the file sizes
    concurrency: int | None = None
    s3: S3Options = field(default_factory=S3Options)
    hub_endpoint: str = "https://huggingface.co"
    hub_token: str | None = field(default=None, repr=False)
    # Tried after the AWS credential chain, before ~/.s3cfg: the s3cmd spelling tensorizer users have set.
    s3_keys: tuple[str, str] | None = field(default=None, repr=False)
    aws_files: tuple[str, str] = ("", "")  # AWS_CONFIG_FILE, AWS_SHARED_CREDENTIALS_FILE: boto3 reads them itself
    hub_max_wait: int = 60  # seconds of a Hub rate-limit reset (429) worth waiting out; longer fails at once
    gpu_class: str | None = None
    gpu_count: int = 1
    shared_caches: tuple[Path, ...] = ()  # read-only cache tiers, in order
    mirrors: tuple[str, ...] = ()  # store URLs tried before the primary; empty: catalog.yaml's mirrors
    cache_max_size: int | None = None  # resolve evicts to stay under it
    prefer: str = "local"  # local | stream: what a streamed format's answer is when its weights are all at hand
    require_signature: bool = False  # on top of catalog.yaml's `signatures:`
    trusted_keys: tuple[Path, ...] = ()  # given: they and trusted_roots replace catalog.yaml's anchors
    trusted_roots: tuple[Path, ...] = ()
    trusted_identities: tuple[tuple[str, str], ...] = ()  # (identity, issuer)
    trusted_log_keys: tuple[Path, ...] = ()
    log_entries: str | None = None  # check | accept-unchecked; None: catalog.yaml's
    stream_proof_max_age: int = 300  # seconds a warm answer with a stream URI may rest on its proof
    engine_loader: str = "auto"  # auto | catalog | plain: `--load-format catalog` for streamed models, or not
    load_record: Path | None = None  # where verified loads append what they delivered
    debug: bool = False
    ignored: tuple[str, ...] = ()  # set variables we do not use, with why (shown as warnings)
    oci: OciOptions = field(default_factory=OciOptions)
    # The engine's own variables (VLLM_*, TORCH*), as they are: what a derived artifact's key reads (catalog/derived.py
    # picks those that can change one). Not the catalog's settings, so not in ENV; never shown (an engine's API key).
    engine_env: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, env: Mapping[str, str], **flags: Any) -> Settings:
        """Flags (None: not given) over the environment over defaults. Pure; raises UsageError for bad values."""
        engine_env = {
            k: v for k, v in env.items() if k.startswith(ENGINE_ENV_PREFIXES)
        }  # not settings: read as they are
        env = _Declared(env)

        def pick(flag: str, var: str) -> Any:
            value = flags.get(flag)
            return value if value is not None else (env.get(var) or None)

        catalog = pick("catalog_dir", "CATALOG_DIR")
        cache = pick("cache_dir", "CATALOG_CACHE")
        mode = env.get("CATALOG_MODE") or "ci"
        if mode not in MODES:
            raise UsageError(f"CATALOG_MODE={mode!r} is not one of {', '.join(MODES)}")
        source, offline = MODES[mode]
        offline_by = f"CATALOG_MODE={mode}" if offline else ""
        if flags.get("source") is not None:  # the flag wins over the mode, whose --offline goes with it
            source = str(flags["source"])
            offline, offline_by = False, ""
            if source not in SOURCES:
                raise UsageError(f"--source {source!r} is not one of {', '.join(SOURCES)}")
        if flags.get("offline"):
            offline, offline_by = True, "--offline"
        part = pick("part_size", "CATALOG_PART_SIZE")
        concurrency = pick("concurrency", "CATALOG_CONCURRENCY")
        part_size = parse_size(str(part), "--part-size / CATALOG_PART_SIZE") if part is not None else None
        workers = (
            _whole(concurrency, "--concurrency / CATALOG_CONCURRENCY", minimum=1, maximum=1024)
            if concurrency is not None
            else None
        )
        if part_size is not None and part_size < MiB:
            raise UsageError("--part-size / CATALOG_PART_SIZE must be at least 1MiB")
        s3, ignored = _s3_options(env)
        cache_dir = Path(cache).expanduser() if cache else default_cache_dir(env)
        if not cache and (env.get("XDG_CACHE_HOME") or "") and not os.path.isabs(env["XDG_CACHE_HOME"]):
            ignored += ("XDG_CACHE_HOME (not an absolute path: the XDG spec says to ignore it)",)
        tiers = flags.get("shared_caches") or split_tiers(env.get("CATALOG_SHARED_CACHE") or "")
        mirrors = flags.get("mirrors") or [u for u in (env.get("CATALOG_MIRRORS") or "").split(",") if u.strip()]
        max_size = env.get("CATALOG_CACHE_MAX_SIZE") or None
        prefer = str(pick("prefer", "CATALOG_PREFER") or "local").strip().lower()
        if prefer not in PREFER:
            raise UsageError(f"--prefer / CATALOG_PREFER {prefer!r} is not one of {', '.join(PREFER)}")
        engine_loader = str(pick("engine_loader", "CATALOG_ENGINE_LOADER") or "auto").strip().lower()
        if engine_loader not in ENGINE_LOADERS:
            raise UsageError(f"CATALOG_ENGINE_LOADER {engine_loader!r} is not one of {', '.join(ENGINE_LOADERS)}")
        record = env.get("CATALOG_LOAD_RECORD") or None
        keys = flags.get("trusted_keys") or [p for p in (env.get("CATALOG_TRUSTED_KEYS") or "").split(":") if p.strip()]
        roots = flags.get("trusted_roots") or [
            p for p in (env.get("CATALOG_TRUSTED_ROOTS") or "").split(":") if p.strip()
        ]
        log_keys = flags.get("trusted_log_keys") or [
            p for p in (env.get("CATALOG_TRUSTED_LOG_KEYS") or "").split(":") if p.strip()
        ]
        identities = [(i, "--trusted-identity") for i in flags.get("trusted_identities") or ()] or [
            (i, "CATALOG_TRUSTED_IDENTITIES")
            for i in (env.get("CATALOG_TRUSTED_IDENTITIES") or "").splitlines()
            if i.strip()
        ]
        log_entries = (env.get("CATALOG_LOG_ENTRIES") or "").strip().lower() or None
        if log_entries not in (None, *LOG_ENTRIES):
            raise UsageError(f"CATALOG_LOG_ENTRIES={log_entries!r} is not one of {', '.join(LOG_ENTRIES)}")
        return cls(
            catalog_dir=Path(catalog).expanduser() if catalog else None,
            store=pick("store", "CATALOG_STORE"),
            cache_dir=cache_dir,
            source=source,
            mode=env.get("CATALOG_MODE") or None,
            offline=offline,
            offline_by=offline_by,
            part_size=part_size,
            concurrency=workers,
            s3=s3,
            hub_endpoint=(env.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/"),
            hub_token=env.get("HF_TOKEN") or None,
            s3_keys=(env["S3_ACCESS_KEY_ID"], env["S3_SECRET_ACCESS_KEY"])
            if env.get("S3_ACCESS_KEY_ID") and env.get("S3_SECRET_ACCESS_KEY")
            else None,
            aws_files=(env.get("AWS_CONFIG_FILE", ""), env.get("AWS_SHARED_CREDENTIALS_FILE", "")),
            hub_max_wait=_whole(
                env.get("CATALOG_HUB_MAX_WAIT") or "60", "CATALOG_HUB_MAX_WAIT", maximum=envparse.MAX_SECONDS
            ),
            gpu_class=(env.get("CATALOG_GPU_CLASS") or "").strip().lower() or None,
            gpu_count=_whole(env.get("CATALOG_GPU_COUNT") or "1", "CATALOG_GPU_COUNT", minimum=1, maximum=4096),
            shared_caches=tuple(tier_path(str(t)) for t in tiers),
            mirrors=tuple(str(u).strip() for u in mirrors),
            cache_max_size=parse_size(max_size, "CATALOG_CACHE_MAX_SIZE") if max_size is not None else None,
            prefer=prefer,
            engine_loader=engine_loader,
            load_record=Path(record).expanduser() if record else None,
            stream_proof_max_age=_whole(
                env.get("CATALOG_STREAM_PROOF_MAX_AGE") or "300",
                "CATALOG_STREAM_PROOF_MAX_AGE",
                maximum=envparse.MAX_SECONDS,
            ),
            debug=envparse.flag(env.get("CATALOG_DEBUG", ""), "CATALOG_DEBUG"),
            require_signature=bool(flags.get("require_signature")) or _switch(env, "CATALOG_REQUIRE_SIGNATURE"),
            trusted_keys=tuple(Path(str(k).strip()).expanduser() for k in keys),
            trusted_roots=tuple(Path(str(r).strip()).expanduser() for r in roots),
            trusted_identities=tuple(
                (found.identity, found.issuer) for found in (parse_identity(str(i), what) for i, what in identities)
            ),
            trusted_log_keys=tuple(Path(str(k).strip()).expanduser() for k in log_keys),
            log_entries=log_entries,
            ignored=ignored,
            oci=_oci_options(env),
            engine_env=engine_env,
        )

    @classmethod
    def from_process(cls, **flags: Any) -> Settings:
        """The entry points' call: this process's environment plus the given flags."""
        return cls.build(os.environ, **flags)

    def with_flags(self, **flags: Any) -> Settings:
        """These settings with a command's own flags on top (None: not given)."""
        given = {k: v for k, v in flags.items() if v is not None}
        if "cache_dir" in given:
            given["cache_dir"] = Path(given["cache_dir"]).expanduser()
        for name in (
            "shared_caches",
            "mirrors",
            "trusted_keys",
            "trusted_roots",
            "trusted_identities",
            "trusted_log_keys",
        ):  # a repeatable flag not given: ()
            if name in given and not given[name]:
                del given[name]
        for name in ("trusted_keys", "trusted_roots", "trusted_log_keys"):
            if name in given:
                given[name] = tuple(Path(p).expanduser() for p in given[name])
        if "trusted_identities" in given:
            given["trusted_identities"] = tuple(
                (found.identity, found.issuer)
                for found in (parse_identity(str(i), "--trusted-identity") for i in given["trusted_identities"])
            )
        if "shared_caches" in given:
            given["shared_caches"] = tuple(tier_path(str(t)) for t in given["shared_caches"])
        if "mirrors" in given:
            given["mirrors"] = tuple(given["mirrors"])
        return replace(self, **given)

    def find_catalog_dir(self, cwd: Path | None = None) -> Path:
        """--catalog / CATALOG_DIR, else the nearest manifests/ upward from `cwd`."""
        return self.catalog_dir if self.catalog_dir is not None else find_catalog_dir(cwd)


def _s3_options(env: Mapping[str, str]) -> tuple[S3Options, tuple[str, ...]]:
    ignored: list[str] = []
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None
    if endpoint is None and env.get("S3_ENDPOINT_URL"):
        endpoint = env["S3_ENDPOINT_URL"]  # s3cmd's and tensorizer's spelling
    elif env.get("S3_ENDPOINT_URL") and env["S3_ENDPOINT_URL"] != endpoint:
        ignored.append("S3_ENDPOINT_URL (AWS_ENDPOINT_URL wins)")
    if (
        endpoint is not None
        and (problem := urls.check_endpoint(endpoint, "the S3 endpoint (AWS_ENDPOINT_URL)")) is not None
    ):
        raise UsageError(
            problem, hint="AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL / S3_ENDPOINT_URL: http(s)://host[:port]"
        )
    style = (env.get("CATALOG_S3_ADDRESSING") or ("path" if endpoint else "auto")).lower()
    if style not in ADDRESSING_STYLES:
        raise UsageError(f"CATALOG_S3_ADDRESSING={style!r} is not one of {', '.join(ADDRESSING_STYLES)}")
    retry = (env.get("AWS_RETRY_MODE") or "standard").lower()
    if retry not in RETRY_MODES:
        raise UsageError(f"AWS_RETRY_MODE={retry!r} is not one of {', '.join(RETRY_MODES)}")
    return S3Options(
        endpoint_url=endpoint,
        region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
        profile=env.get("AWS_PROFILE") or None,
        addressing_style=style,
        unsigned=envparse.flag(env.get("CATALOG_S3_UNSIGNED", ""), "CATALOG_S3_UNSIGNED"),
        retry_mode=retry,
        max_attempts=_whole(env.get("AWS_MAX_ATTEMPTS") or "5", "AWS_MAX_ATTEMPTS", minimum=1, maximum=100),
        read_timeout=_whole(
            env.get("CATALOG_S3_READ_TIMEOUT") or "60",
            "CATALOG_S3_READ_TIMEOUT",
            minimum=1,
            maximum=envparse.MAX_SECONDS,
        ),
    ), tuple(ignored)


def _switch(env: Mapping[str, str], name: str) -> bool:
    """A yes/no variable; anything else is a usage error (a typo must not switch a security check off)."""
    return envparse.flag(env.get(name) or "", name)


HF_TIER = "hf:"  # a shared cache entry that is a Hugging Face cache folder (HF_HUB_CACHE), not a catalog tier


def split_tiers(text: str) -> list[str]:
    """CATALOG_SHARED_CACHE's ':'-separated entries; `hf:DIR` is one entry, not two."""
    parts = text.split(":")
    out: list[str] = []
    while parts:
        part = parts.pop(0)
        if part.strip() == HF_TIER[:-1] and parts:
            part = HF_TIER + parts.pop(0)
        if part.strip() and part.strip() != HF_TIER:
            out.append(part)
    return out


def tier_path(text: str) -> Path:
    """A tier entry as a Path, `~` expanded; an hf: entry keeps its prefix."""
    text = text.strip()
    if text.startswith(HF_TIER):
        return Path(HF_TIER + str(Path(text[len(HF_TIER) :].strip()).expanduser()))
    return Path(text).expanduser()


def _oci_options(env: Mapping[str, str]) -> OciOptions:
    plain = tuple(h.strip().lower() for h in (env.get("CATALOG_OCI_PLAIN_HTTP") or "").split(",") if h.strip())
    docker = env.get("DOCKER_CONFIG")
    return OciOptions(
        username=env.get("CATALOG_OCI_USERNAME") or None,
        password=env.get("CATALOG_OCI_PASSWORD") or None,
        registry=(env.get("CATALOG_OCI_REGISTRY") or "").strip().lower() or None,
        plain_http=plain,
        **({"docker_config": Path(docker).expanduser()} if docker else {}),
    )


def _whole(value: Any, name: str, minimum: int = 0, maximum: int = envparse.MAX_COUNT) -> int:
    return envparse.whole(value, name, minimum, maximum)


def parse_size(text: str, what: str = "size") -> int:
    """'64MiB', '8M', '1GiB', '1048576' -> bytes (binary units); see catalog/envparse.py."""
    return envparse.size(text, what)


def default_cache_dir(env: Mapping[str, str]) -> Path:
    """$XDG_CACHE_HOME/model-catalog, else ~/.cache/model-catalog (the user's cache dir); see catalog/locations.py."""
    found = locations.default_cache_dir(env)
    if found is None:
        raise UsageError(
            "HOME is empty or not an absolute path, so there is no default cache folder",
            hint="set HOME, or point --cache / CATALOG_CACHE at a folder",
        )
    return Path(found)


def find_catalog_dir(start: Path | None = None) -> Path:
    """The nearest `manifests/` holding a catalog.yaml, from `start` (default: cwd) upward."""
    try:
        here = str(start or Path.cwd())
    except FileNotFoundError:
        raise CatalogNotFoundError(
            "the working directory no longer exists", hint="cd somewhere else, or pass --catalog DIR"
        ) from None
    found = locations.find_catalog_dir(here)
    if found is None:
        raise CatalogNotFoundError(
            f"no {MANIFESTS_DIR}/catalog.yaml found in {os.path.realpath(here)} or any folder above it",
            hint="pass --catalog DIR or set CATALOG_DIR",
        )
    return Path(found)
