"""Settings: every knob, read once at an entry point (flags over environment over defaults), then passed down.

`ENV` declares every environment variable the settings read by name (`ENGINE_ENV_PREFIXES`: the engine's own,
by prefix, for the derived key). `Settings.build(env, flags)` is pure;
`Settings.from_process(flags)` builds them from `os.environ`, called by the entry points: the CLI, the pytest plugin
and `catalog.load()` for library callers. Modules below them take the Settings they are given; the few that touch the
process environment otherwise are listed, each with its reason, in tests/unit/test_architecture.py, which checks it.
The warm resolve (catalog_app/warm.py) keys its index on the call's own inputs: the flags as parsed, every
variable `ENV` declares, and the catalog and cache folders resolved, so an undeclared variable cannot make a
stale answer.

Standard library only: the warm path builds a Settings before anything heavy is imported.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from catalog import envparse, locations, urls
from catalog.errors import CatalogNotFoundError, UsageError
from catalog.signing import parse_identity

MiB = 1024 * 1024
MANIFESTS_DIR = locations.MANIFESTS_DIR


@dataclass(frozen=True)
class EnvVar:
    name: str
    help: str
    secret: bool = False  # never shown (the warm key holds it only inside a hash)


ENV: tuple[EnvVar, ...] = (
    EnvVar("CATALOG_DIR", "the manifests folder (default: the nearest manifests/ upward)"),
    EnvVar("CATALOG_STORE", "overrides catalog.yaml's store: s3://bucket/base/, oci://host/namespace/, file:///dir/ or a folder"),
    EnvVar("CATALOG_CACHE", "the cache folder (default: $XDG_CACHE_HOME/model-catalog or ~/.cache/model-catalog)"),
    EnvVar("XDG_CACHE_HOME", "where the default cache lives"),
    EnvVar("CATALOG_MODE", "ci (the bucket only), dev (the bucket, then the Hub) or offline (the cache only); set to ci, it "
                       "also turns the pytest plugin's Hub guard on"),
    EnvVar("CATALOG_PART_SIZE", "part size of ranged GETs and multipart uploads (default: chosen from the file sizes)"),
    EnvVar("CATALOG_CONCURRENCY", "parallel requests (default: chosen from the file sizes)"),
    EnvVar("CATALOG_S3_ADDRESSING", "path or virtual (default: path when an endpoint is set, else auto)"),
    EnvVar("CATALOG_S3_UNSIGNED", "1 for a public bucket: no credentials, unsigned requests"),
    EnvVar("CATALOG_S3_READ_TIMEOUT", "seconds without a byte before a read is retried (default 60)"),
    EnvVar("AWS_ENDPOINT_URL_S3", "the S3 endpoint (wins over AWS_ENDPOINT_URL)"),
    EnvVar("AWS_ENDPOINT_URL", "the S3 endpoint of an S3-compatible store"),
    EnvVar("S3_ENDPOINT_URL", "the S3 endpoint, s3cmd/tensorizer spelling (used when no AWS_ENDPOINT_URL is set)"),
    EnvVar("S3_ACCESS_KEY_ID", "access key, s3cmd/tensorizer spelling (used when the AWS chain finds no credentials)"),
    EnvVar("S3_SECRET_ACCESS_KEY", "secret key, s3cmd/tensorizer spelling", secret=True),
    EnvVar("AWS_CONFIG_FILE", "the AWS config file (profiles, a profile's endpoint_url)"),
    EnvVar("AWS_SHARED_CREDENTIALS_FILE", "the AWS credentials file"),
    EnvVar("AWS_REGION", "the region"),
    EnvVar("AWS_DEFAULT_REGION", "the region, older spelling"),
    EnvVar("AWS_PROFILE", "the credentials/config profile"),
    EnvVar("AWS_RETRY_MODE", "standard or adaptive"),
    EnvVar("AWS_MAX_ATTEMPTS", "attempts per request (default 5)"),
    EnvVar("HF_ENDPOINT", "the Hub's address (default https://huggingface.co)"),
    EnvVar("HF_TOKEN", "the Hub token", secret=True),
    EnvVar("CATALOG_HUB_MAX_WAIT", "longest wait on a remote's hint (the Hub's rate-limit reset, a store's or mirror's "
                                   "Retry-After), in seconds (default 60); a later one fails at once, naming when to retry"),
    EnvVar("CATALOG_SHARED_CACHE", "read-only shared cache tiers, ':'-separated folders with the cache's blobs/<aa>/<sha256> "
                                   "layout, consulted by sha256 before any download (--shared-cache DIR, repeatable); "
                                   "hf:DIR is a Hugging Face cache (HF_HUB_CACHE) read the same way"),
    EnvVar("CATALOG_MIRRORS", "stores tried in order before the primary store, per file, ','-separated URLs "
                              "(s3://, oci://, file://, http(s)://; --mirror URL, repeatable; default: catalog.yaml's mirrors)"),
    EnvVar("CATALOG_CACHE_MAX_SIZE", "resolve evicts least recently resolved views before it fetches, to keep the cache "
                                     "under this size (e.g. 200GiB)"),
    EnvVar("CATALOG_GPU_CLASS", "this machine's GPU class: what the pytest plugin skips by, whose engine profile resolve "
                            "hands out (default: detected)"),
    EnvVar("CATALOG_GPU_COUNT", "this machine's GPU count with CATALOG_GPU_CLASS"),
    EnvVar("CATALOG_DEBUG", "1: tracebacks for internal errors"),
    EnvVar("CATALOG_PREFER", "local (default) or stream: a streamed format whose weights are all verified in the cache or "
                             "a shared tier is handed out as its local folder, or always as the stream URI"),
    EnvVar("CATALOG_REQUIRE_SIGNATURE", "1: resolve refuses, before any download, a model without a signature that a "
                                        "trusted key or root vouches for (--require-signature; catalog.yaml signatures:)"),
    EnvVar("CATALOG_TRUSTED_KEYS", "PEM public keys whose signatures are trusted (every key of each file), ':'-separated "
                                   "(--trusted-key, repeatable); any CATALOG_TRUSTED_* given replaces catalog.yaml's trust "
                                   "and requires signatures"),
    EnvVar("CATALOG_TRUSTED_ROOTS", "PEM CA certificates a signing certificate must chain to, ':'-separated "
                                    "(--trusted-root, repeatable)"),
    EnvVar("CATALOG_TRUSTED_IDENTITIES", "who may sign with a certificate, one IDENTITY|ISSUER per line (--trusted-identity, "
                                         "repeatable): a name the certificate carries and its OIDC issuer"),
    EnvVar("CATALOG_TRUSTED_LOG_KEYS", "PEM public keys of transparency logs whose signed entry timestamps are checked, "
                                       "':'-separated (--trusted-log-key, repeatable)"),
    EnvVar("CATALOG_LOG_ENTRIES", "check (default) or accept-unchecked: whether a bundle's transparency-log entries no "
                                  "trusted log key checks are refused"),
    EnvVar("CATALOG_OCI_USERNAME", "user for an oci:// registry (sent only to CATALOG_OCI_REGISTRY, else the --store URL's registry)"),
    EnvVar("CATALOG_OCI_PASSWORD", "password or access token for CATALOG_OCI_USERNAME", secret=True),
    EnvVar("CATALOG_OCI_REGISTRY", "host[:port] that CATALOG_OCI_USERNAME/PASSWORD belong to (default: the --store URL's)"),
    EnvVar("CATALOG_OCI_PLAIN_HTTP", "','-separated registry host[:port]s reached over plain http:// (loopback always is)"),
    EnvVar("DOCKER_CONFIG", "the folder of docker's config.json, read for oci:// registry credentials (default ~/.docker)"),
    EnvVar("CATALOG_STREAM_PROOF_MAX_AGE", "seconds a warm answer may rest on the proof that streamed objects are the "
                                           "verified ones (default 300); older, the full resolve proves them again"),
    EnvVar("CATALOG_ENGINE_LOADER", "how vllm-args hand a streamed model to the engine: catalog (`--load-format catalog`: "
                                    "the engine's loader hashes every tensor against its pin before the model sees it), "
                                    "plain (the format's own streamer, which verifies nothing) or auto (default: catalog "
                                    "where vLLM and the plugin are installed and every tensor is pinned)"),
    EnvVar("CATALOG_LOAD_RECORD", "a file each verified load (`--load-format catalog`) appends one JSON line to: the "
                                  "tensors delivered, from where, and any refused"),
)
ENV_NAMES = frozenset(v.name for v in ENV)

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
        workers = _whole(concurrency, "--concurrency / CATALOG_CONCURRENCY", minimum=1, maximum=1024) if concurrency is not None else None
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
        roots = flags.get("trusted_roots") or [p for p in (env.get("CATALOG_TRUSTED_ROOTS") or "").split(":") if p.strip()]
        log_keys = flags.get("trusted_log_keys") or [p for p in (env.get("CATALOG_TRUSTED_LOG_KEYS") or "").split(":")
                                                     if p.strip()]
        identities = [(i, "--trusted-identity") for i in flags.get("trusted_identities") or ()] or \
            [(i, "CATALOG_TRUSTED_IDENTITIES") for i in (env.get("CATALOG_TRUSTED_IDENTITIES") or "").splitlines() if i.strip()]
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
            if env.get("S3_ACCESS_KEY_ID") and env.get("S3_SECRET_ACCESS_KEY") else None,
            aws_files=(env.get("AWS_CONFIG_FILE", ""), env.get("AWS_SHARED_CREDENTIALS_FILE", "")),
            hub_max_wait=_whole(env.get("CATALOG_HUB_MAX_WAIT") or "60", "CATALOG_HUB_MAX_WAIT", maximum=envparse.MAX_SECONDS),
            gpu_class=(env.get("CATALOG_GPU_CLASS") or "").strip().lower() or None,
            gpu_count=_whole(env.get("CATALOG_GPU_COUNT") or "1", "CATALOG_GPU_COUNT", minimum=1, maximum=4096),
            shared_caches=tuple(tier_path(str(t)) for t in tiers),
            mirrors=tuple(str(u).strip() for u in mirrors),
            cache_max_size=parse_size(max_size, "CATALOG_CACHE_MAX_SIZE") if max_size is not None else None,
            prefer=prefer,
            engine_loader=engine_loader,
            load_record=Path(record).expanduser() if record else None,
            stream_proof_max_age=_whole(env.get("CATALOG_STREAM_PROOF_MAX_AGE") or "300", "CATALOG_STREAM_PROOF_MAX_AGE",
                                        maximum=envparse.MAX_SECONDS),
            debug=envparse.flag(env.get("CATALOG_DEBUG", ""), "CATALOG_DEBUG"),
            require_signature=bool(flags.get("require_signature")) or _switch(env, "CATALOG_REQUIRE_SIGNATURE"),
            trusted_keys=tuple(Path(str(k).strip()).expanduser() for k in keys),
            trusted_roots=tuple(Path(str(r).strip()).expanduser() for r in roots),
            trusted_identities=tuple((found.identity, found.issuer) for found in
                                     (parse_identity(str(i), what) for i, what in identities)),
            trusted_log_keys=tuple(Path(str(k).strip()).expanduser() for k in log_keys),
            log_entries=log_entries,
            ignored=ignored,
            oci=_oci_options(env),
            engine_env={k: v for k, v in env.items() if k.startswith(ENGINE_ENV_PREFIXES)},
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
        for name in ("shared_caches", "mirrors", "trusted_keys", "trusted_roots", "trusted_identities",
                     "trusted_log_keys"):  # a repeatable flag not given: ()
            if name in given and not given[name]:
                del given[name]
        for name in ("trusted_keys", "trusted_roots", "trusted_log_keys"):
            if name in given:
                given[name] = tuple(Path(p).expanduser() for p in given[name])
        if "trusted_identities" in given:
            given["trusted_identities"] = tuple((found.identity, found.issuer) for found in
                                                (parse_identity(str(i), "--trusted-identity")
                                                 for i in given["trusted_identities"]))
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
    if endpoint is not None and (problem := urls.check_endpoint(endpoint, "the S3 endpoint (AWS_ENDPOINT_URL)")) is not None:
        raise UsageError(problem, hint="AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL / S3_ENDPOINT_URL: http(s)://host[:port]")
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
        read_timeout=_whole(env.get("CATALOG_S3_READ_TIMEOUT") or "60", "CATALOG_S3_READ_TIMEOUT", minimum=1,
                            maximum=envparse.MAX_SECONDS),
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
        return Path(HF_TIER + str(Path(text[len(HF_TIER):].strip()).expanduser()))
    return Path(text).expanduser()


def _oci_options(env: Mapping[str, str]) -> OciOptions:
    plain = tuple(h.strip().lower() for h in (env.get("CATALOG_OCI_PLAIN_HTTP") or "").split(",") if h.strip())
    docker = env.get("DOCKER_CONFIG")
    return OciOptions(username=env.get("CATALOG_OCI_USERNAME") or None, password=env.get("CATALOG_OCI_PASSWORD") or None,
                      registry=(env.get("CATALOG_OCI_REGISTRY") or "").strip().lower() or None, plain_http=plain,
                      **({"docker_config": Path(docker).expanduser()} if docker else {}))


def _whole(value: Any, name: str, minimum: int = 0, maximum: int = envparse.MAX_COUNT) -> int:
    return envparse.whole(value, name, minimum, maximum)


def parse_size(text: str, what: str = "size") -> int:
    """'64MiB', '8M', '1GiB', '1048576' -> bytes (binary units); see catalog/envparse.py."""
    return envparse.size(text, what)


def default_cache_dir(env: Mapping[str, str]) -> Path:
    """$XDG_CACHE_HOME/model-catalog, else ~/.cache/model-catalog (the user's cache dir); see catalog/locations.py."""
    found = locations.default_cache_dir(env)
    if found is None:
        raise UsageError("HOME is empty or not an absolute path, so there is no default cache folder",
                         hint="set HOME, or point --cache / CATALOG_CACHE at a folder")
    return Path(found)


def find_catalog_dir(start: Path | None = None) -> Path:
    """The nearest `manifests/` holding a catalog.yaml, from `start` (default: cwd) upward."""
    try:
        here = str(start or Path.cwd())
    except FileNotFoundError:
        raise CatalogNotFoundError("the working directory no longer exists", hint="cd somewhere else, or pass --catalog DIR") from None
    found = locations.find_catalog_dir(here)
    if found is None:
        raise CatalogNotFoundError(
            f"no {MANIFESTS_DIR}/catalog.yaml found in {os.path.realpath(here)} or any folder above it",
            hint="pass --catalog DIR or set CATALOG_DIR",
        )
    return Path(found)
