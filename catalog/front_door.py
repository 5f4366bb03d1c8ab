"""The front door in one table: every environment variable the settings read, the flags of `catalog`, `resolve` and
`sync`, and every folder of the cache. Everything else reads these tables instead of spelling the names again:

- `catalog.settings.Settings.build` reads only declared variables (reading another is an error, not a stale answer);
- the full CLI declares its group, resolve and sync options from the flag tables (catalog_app/options.py);
- the warm paths (catalog_app/warm.py, warm_sync.py), which answer before click or pydantic load, parse argv with
  `parse` over the same tables and key their answers on the variables declared here;
- resolver/cache.py names its folders from `CACHE_FOLDERS`; docs/resolve.md's cache layout is rendered from it.

To add a setting: one `Var` row (and its read in Settings.build). To add a flag to resolve or sync: one `Flag` row in
its table (and its parameter in the command); say `warm=True` only if the warm path may answer a call that gives it,
which it then keys on. Standard library only, and cheap to import: the warm path imports it (no typing, no
dataclasses; annotations are strings).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's import is a measurable share of a warm resolve; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Sequence


# -- environment variables -------------------------------------------------------------------------------------------
KEYED, CATALOG, CACHE = "keyed", "catalog", "cache"  # how a variable enters the warm key: as it is, or as that folder


class Var:
    """An environment variable the settings read. `warm`: how it enters the warm answers' key (KEYED: as it is;
    CATALOG or CACHE: it names that folder, which enters resolved through symlinks). `path`: its value may name
    something relative to the working directory, which then enters the key too."""

    __slots__ = ("name", "help", "secret", "warm", "path")

    def __init__(self, name: str, help: str, secret: bool = False, warm: str = KEYED, path: bool = False) -> None:
        self.name = name
        self.help = help
        self.secret = secret  # never shown (the warm key holds it only inside a hash)
        self.warm = warm
        self.path = path

    def __repr__(self) -> str:
        return f"Var({self.name!r})"


VARIABLES: tuple[Var, ...] = (
    Var("CATALOG_DIR", "the manifests folder (default: the nearest manifests/ upward)", warm=CATALOG),
    Var(
        "CATALOG_STORE",
        "overrides catalog.yaml's store: s3://bucket/base/, oci://host/namespace/, file:///dir/ or a folder",
        path=True,
    ),
    Var(
        "CATALOG_CACHE",
        "the cache folder (default: $XDG_CACHE_HOME/model-catalog or ~/.cache/model-catalog)",
        warm=CACHE,
    ),
    Var("XDG_CACHE_HOME", "where the default cache lives"),
    Var(
        "HOME",
        "the user's home: the default cache is ~/.cache/model-catalog when XDG_CACHE_HOME is unset or relative "
        "(an empty or relative HOME: the user database's home)",
    ),
    Var(
        "CATALOG_MODE",
        "ci (the bucket only), dev (the bucket, then the Hub) or offline (the cache only); set to ci, "
        "it also turns the pytest plugin's Hub guard on",
    ),
    Var("CATALOG_PART_SIZE", "part size of ranged GETs and multipart uploads (default: chosen from the file sizes)"),
    Var("CATALOG_CONCURRENCY", "parallel requests (default: chosen from the file sizes)"),
    Var("CATALOG_S3_ADDRESSING", "path or virtual (default: path when an endpoint is set, else auto)"),
    Var("CATALOG_S3_UNSIGNED", "1 for a public bucket: no credentials, unsigned requests"),
    Var("CATALOG_S3_READ_TIMEOUT", "seconds without a byte before a read is retried (default 60)"),
    Var("AWS_ENDPOINT_URL_S3", "the S3 endpoint (wins over AWS_ENDPOINT_URL)"),
    Var("AWS_ENDPOINT_URL", "the S3 endpoint of an S3-compatible store"),
    Var("S3_ENDPOINT_URL", "the S3 endpoint, s3cmd/tensorizer spelling (used when no AWS_ENDPOINT_URL is set)"),
    Var("S3_ACCESS_KEY_ID", "access key, s3cmd/tensorizer spelling (used when the AWS chain finds no credentials)"),
    Var("S3_SECRET_ACCESS_KEY", "secret key, s3cmd/tensorizer spelling", secret=True),
    Var("AWS_CONFIG_FILE", "the AWS config file (profiles, a profile's endpoint_url)", path=True),
    Var("AWS_SHARED_CREDENTIALS_FILE", "the AWS credentials file", path=True),
    Var("AWS_REGION", "the region"),
    Var("AWS_DEFAULT_REGION", "the region, older spelling"),
    Var("AWS_PROFILE", "the credentials/config profile"),
    Var("AWS_RETRY_MODE", "standard or adaptive"),
    Var("AWS_MAX_ATTEMPTS", "attempts per request (default 5)"),
    Var("HF_ENDPOINT", "the Hub's address (default https://huggingface.co)"),
    Var("HF_TOKEN", "the Hub token", secret=True),
    Var(
        "CATALOG_HUB_MAX_WAIT",
        "longest wait on a remote's hint (the Hub's rate-limit reset, a store's or mirror's "
        "Retry-After), in seconds (default 60); a later one fails at once, naming when to "
        "retry",
    ),
    Var(
        "CATALOG_SHARED_CACHE",
        "read-only shared cache tiers, ':'-separated folders with the cache's "
        "blobs/<aa>/<sha256> layout, consulted by sha256 before any download (--shared-cache "
        "DIR, repeatable); hf:DIR is a Hugging Face cache (HF_HUB_CACHE) read the same way",
        path=True,
    ),
    Var(
        "CATALOG_MIRRORS",
        "stores tried in order before the primary store, per file, ','-separated URLs (s3://, "
        "oci://, file://, http(s)://; --mirror URL, repeatable; default: catalog.yaml's mirrors)",
        path=True,
    ),
    Var(
        "CATALOG_CACHE_MAX_SIZE",
        "resolve evicts least recently resolved views before it fetches, to keep the cache "
        "under this size (e.g. 200GiB)",
    ),
    Var(
        "CATALOG_GPU_CLASS",
        "this machine's GPU class: what the pytest plugin skips by, whose engine profile resolve "
        "hands out (default: detected)",
    ),
    Var("CATALOG_GPU_COUNT", "this machine's GPU count with CATALOG_GPU_CLASS"),
    Var("CATALOG_DEBUG", "1: tracebacks for internal errors"),
    Var(
        "CATALOG_PREFER",
        "local (default) or stream: a streamed format whose weights are all verified in the cache or "
        "a shared tier is handed out as its local folder, or always as the stream URI",
    ),
    Var(
        "CATALOG_REQUIRE_SIGNATURE",
        "1: resolve refuses, before any download, a model without a signature that a "
        "trusted key or root vouches for (--require-signature; catalog.yaml signatures:)",
    ),
    Var(
        "CATALOG_TRUSTED_KEYS",
        "PEM public keys whose signatures are trusted (every key of each file), ':'-separated "
        "(--trusted-key, repeatable); any CATALOG_TRUSTED_* given replaces catalog.yaml's "
        "trust and requires signatures",
        path=True,
    ),
    Var(
        "CATALOG_TRUSTED_ROOTS",
        "PEM CA certificates a signing certificate must chain to, ':'-separated (--trusted-root, repeatable)",
        path=True,
    ),
    Var(
        "CATALOG_TRUSTED_IDENTITIES",
        "who may sign with a certificate, one IDENTITY|ISSUER per line "
        "(--trusted-identity, repeatable): a name the certificate carries and its OIDC "
        "issuer",
    ),
    Var(
        "CATALOG_TRUSTED_LOG_KEYS",
        "PEM public keys of transparency logs whose signed entry timestamps are checked, "
        "':'-separated (--trusted-log-key, repeatable)",
        path=True,
    ),
    Var(
        "CATALOG_LOG_ENTRIES",
        "check (default) or accept-unchecked: whether a bundle's transparency-log entries no "
        "trusted log key checks are refused",
    ),
    Var(
        "CATALOG_OCI_USERNAME",
        "user for an oci:// registry (sent only to CATALOG_OCI_REGISTRY, else the --store URL's registry)",
    ),
    Var("CATALOG_OCI_PASSWORD", "password or access token for CATALOG_OCI_USERNAME", secret=True),
    Var(
        "CATALOG_OCI_REGISTRY", "host[:port] that CATALOG_OCI_USERNAME/PASSWORD belong to (default: the --store URL's)"
    ),
    Var(
        "CATALOG_OCI_PLAIN_HTTP", "','-separated registry host[:port]s reached over plain http:// (loopback always is)"
    ),
    Var(
        "DOCKER_CONFIG",
        "the folder of docker's config.json, read for oci:// registry credentials (default ~/.docker)",
        path=True,
    ),
    Var(
        "CATALOG_STREAM_PROOF_MAX_AGE",
        "seconds a warm answer may rest on the proof that streamed objects are the "
        "verified ones (default 300); older, the full resolve proves them again",
    ),
    Var(
        "CATALOG_ENGINE_LOADER",
        "how vllm-args hand a streamed model to the engine: catalog (`--load-format catalog`: "
        "the engine's loader hashes every tensor against its pin before the model sees it), "
        "plain (the format's own streamer, which verifies nothing) or auto (default: catalog "
        "where vLLM and the plugin are installed and every tensor is pinned)",
    ),
    Var(
        "CATALOG_LOAD_RECORD",
        "a file each verified load (`--load-format catalog`) appends one JSON line to: the "
        "tensors delivered, from where, and any refused",
        path=True,
    ),
)
_BY_NAME = {v.name: v for v in VARIABLES}


def declared(name: str) -> str:
    """`name`, which must be declared above: code that names a variable by itself (not through the table) asks
    here at import, so a misspelled or undeclared one is an error at once, never a variable the warm key misses."""
    if name not in _BY_NAME:
        raise LookupError(f"{name} is not declared in catalog/front_door.py VARIABLES")
    return name


def placing(folder: str) -> str:
    """The variable naming the catalog (CATALOG) or the cache (CACHE) folder."""
    return next(v.name for v in VARIABLES if v.warm == folder)


# -- flags -----------------------------------------------------------------------------------------------------------
VALUE, MULTI, SWITCH, COUNT = "value", "multi", "switch", "count"  # takes a value, a repeatable one, none, or counts


class Flag:
    """One option of a command. `kind`: VALUE, MULTI (repeatable, collected in order), SWITCH or COUNT. `dest`: the
    parameter it fills. `var`: the variable it overrides. `warm`: the warm path answers a call that gives it (keyed on
    its value); otherwise such a call goes to the full CLI. `path`: its value may name something relative to the
    working directory. `type`: "" (text), "int", "dir" (an existing folder), "file" (an existing file) or "new-file".
    `choices`: the values click accepts, when fixed here; `choices_from`: where the code keeps them (the command
    passes them in: catalog_app/options.py). `default`: what an absent flag means."""

    __slots__ = (
        "names",
        "dest",
        "kind",
        "help",
        "var",
        "warm",
        "path",
        "metavar",
        "type",
        "choices",
        "choices_from",
        "default",
    )

    def __init__(
        self,
        names: Sequence[str],
        dest: str,
        kind: str,
        help: str = "",
        *,
        var: str = "",
        warm: bool = False,
        path: bool = False,
        metavar: str = "",
        type: str = "",
        choices: Sequence[str] = (),
        choices_from: str = "",
        default: str | int | None = None,
    ) -> None:
        self.names = tuple(names)
        self.dest = dest
        self.kind = kind
        self.help = help
        self.var = declared(var) if var else ""  # an undeclared variable fails at import
        self.warm = warm
        self.path = path
        self.metavar = metavar
        self.type = type
        self.choices = tuple(choices)
        self.choices_from = choices_from
        self.default = default

    def __repr__(self) -> str:
        return f"Flag({'/'.join(self.names)!r})"


GROUP: tuple[Flag, ...] = (
    Flag(
        ["--catalog"],
        "catalog_dir",
        VALUE,
        var="CATALOG_DIR",
        warm=True,
        metavar="DIR",
        help="The manifests folder (env CATALOG_DIR; default: nearest manifests/ upward).",
    ),
    Flag(["-v", "--verbose"], "verbose", COUNT, help="More log output on stderr (-vv for debug and tracebacks)."),
)

STORE: tuple[Flag, ...] = (  # every command that moves bytes
    Flag(
        ["--store"],
        "store",
        VALUE,
        var="CATALOG_STORE",
        warm=True,
        path=True,
        metavar="URL",
        help="Override catalog.yaml's store: s3://bucket/, file:///dir/ or a folder (env CATALOG_STORE).",
    ),
    Flag(
        ["--cache"],
        "cache_dir",
        VALUE,
        var="CATALOG_CACHE",
        warm=True,
        metavar="DIR",
        help="Cache folder (env CATALOG_CACHE; default ~/.cache/model-catalog).",
    ),
    Flag(
        ["--part-size"],
        "part_size",
        VALUE,
        var="CATALOG_PART_SIZE",
        warm=True,
        metavar="SIZE",
        help="Part size of ranged GETs and multipart uploads (env CATALOG_PART_SIZE; default: from the file sizes).",
    ),
    Flag(
        ["--concurrency"],
        "concurrency",
        VALUE,
        var="CATALOG_CONCURRENCY",
        warm=True,
        type="int",
        help="Parallel requests (env CATALOG_CONCURRENCY; default: from the file sizes).",
    ),
)

TRUST: tuple[Flag, ...] = (  # the commands that check signatures; any of them given replaces catalog.yaml's trust
    Flag(
        ["--trusted-key"],
        "trusted_keys",
        MULTI,
        var="CATALOG_TRUSTED_KEYS",
        warm=True,
        path=True,
        metavar="PUB_PEM",
        help="A PEM file of public keys whose signatures are trusted, every key in it (repeatable; env "
        "CATALOG_TRUSTED_KEYS, ':'-separated). Any --trusted-* given replaces catalog.yaml's trust and requires "
        "signatures.",
    ),
    Flag(
        ["--trusted-root"],
        "trusted_roots",
        MULTI,
        var="CATALOG_TRUSTED_ROOTS",
        warm=True,
        path=True,
        metavar="CA_PEM",
        help="A CA certificate (PEM) a signing certificate must chain to (repeatable; env CATALOG_TRUSTED_ROOTS).",
    ),
    Flag(
        ["--trusted-identity"],
        "trusted_identities",
        MULTI,
        var="CATALOG_TRUSTED_IDENTITIES",
        warm=True,
        metavar="IDENTITY|ISSUER",
        help="Who may sign with a certificate: a name it carries (subject DN, email, URI) and its OIDC issuer "
        "(repeatable; env CATALOG_TRUSTED_IDENTITIES, one per line).",
    ),
    Flag(
        ["--trusted-log-key"],
        "trusted_log_keys",
        MULTI,
        var="CATALOG_TRUSTED_LOG_KEYS",
        warm=True,
        path=True,
        metavar="PUB_PEM",
        help="A transparency log's public key (PEM): a bundle's log entries are checked with it (repeatable; env "
        "CATALOG_TRUSTED_LOG_KEYS).",
    ),
)

RESOLVE: tuple[Flag, ...] = (
    Flag(["--all"], "all_models", SWITCH, help="Every model in the catalog."),
    Flag(["--format"], "fmt", VALUE, warm=True, choices_from="catalog_app.outputs.FORMATS", default="path"),
    Flag(["--layout"], "layout", VALUE, warm=True, choices_from="resolver.views.Layout", default="dir"),
    Flag(
        ["--materialize-weights"],
        "materialize_weights",
        SWITCH,
        warm=True,
        help="Streaming formats: download the weights too.",
    ),
    Flag(["--offline"], "offline", SWITCH, warm=True, help="Use the cache only; fail fast naming what is missing."),
    Flag(
        ["--prefer"],
        "prefer",
        VALUE,
        var="CATALOG_PREFER",
        warm=True,
        choices_from="catalog.settings.PREFER",
        help="Streaming formats whose weights are all verified in the cache or a shared tier: hand out the local "
        "folder (local, the default: no byte from the store) or the stream URI anyway (stream). Env "
        "CATALOG_PREFER.",
    ),
    Flag(
        ["--source"],
        "source",
        VALUE,
        warm=True,
        choices_from="resolver.resolve.Source",
        help="Where bytes come from: store (the bucket only), hf (the Hub at the pinned revision), fallback (the "
        "bucket, then the Hub). Default from CATALOG_MODE: ci -> store, dev -> fallback, offline -> --offline.",
    ),
    Flag(
        ["--verify-stream"],
        "verify_stream",
        VALUE,
        choices=("listing", "deep"),
        default="listing",
        help="Streaming formats: how each streamed object is proven before its URI is handed out: listing (size and "
        "ETag against what `catalog sync` recorded; one listing) or deep (stream and hash each object).",
    ),
    Flag(
        ["--shared-cache"],
        "shared_caches",
        MULTI,
        var="CATALOG_SHARED_CACHE",
        warm=True,
        path=True,
        metavar="DIR",
        help="A read-only shared cache tier consulted by sha256 before any download (repeatable; env "
        "CATALOG_SHARED_CACHE, ':'-separated). Nothing is written there.",
    ),
    Flag(
        ["--mirror"],
        "mirrors",
        MULTI,
        var="CATALOG_MIRRORS",
        warm=True,
        path=True,
        metavar="URL",
        help="A store tried before the primary, per file, in order (repeatable; env CATALOG_MIRRORS, ','-separated; "
        "default catalog.yaml's mirrors): s3://bucket/[?endpoint=...&addressing=path], file://, "
        "http(s)://prefix/.",
    ),
    Flag(
        ["--require-signature"],
        "require_signature",
        SWITCH,
        var="CATALOG_REQUIRE_SIGNATURE",
        warm=True,
        help="Refuse, before any download, a model without a signature that a trusted key or root vouches for and "
        "that names exactly its pins (env CATALOG_REQUIRE_SIGNATURE=1; catalog.yaml signatures: required).",
    ),
    *TRUST,
    *STORE,
)

SYNC: tuple[Flag, ...] = (  # warm: what cannot change a plan that changes nothing (catalog_app/warm_sync.py)
    Flag(["--dry-run"], "dry_run", SWITCH, warm=True, help="Show the plan; change nothing."),
    Flag(["--out"], "out_path", VALUE, type="new-file", help="Save the plan as JSON; change nothing."),
    Flag(
        ["--apply"],
        "apply_path",
        VALUE,
        type="file",
        help="Execute exactly a saved plan; refused if the bucket changed since it was made.",
    ),
    Flag(
        ["--prune"],
        "prune",
        SWITCH,
        warm=True,
        help="Delete objects under a model's prefix that its manifest does not pin.",
    ),
    Flag(
        ["--delete-orphans"],
        "delete_orphans",
        SWITCH,
        warm=True,
        help="With --prune: also delete objects under no manifest's prefix.",
    ),
    Flag(
        ["--max-delete"],
        "max_delete",
        VALUE,
        warm=True,
        type="int",
        default=10,
        help="Abort, deleting nothing, above this many deletions.",
    ),
    Flag(["--check"], "check", SWITCH, warm=True, help="Exit 1 on any drift (for a scheduled job); change nothing."),
    Flag(["--deep"], "deep", SWITCH, help="Download and re-hash what is already in the bucket."),
    Flag(
        ["--from-dir"],
        "from_dir",
        VALUE,
        warm=True,
        path=True,
        type="dir",
        help="Upload from this folder (DIR/<name>/ when present) instead of the Hub.",
    ),
    Flag(
        ["--format"],
        "fmt",
        VALUE,
        warm=True,
        choices=("text", "json", "markdown"),
        default="text",
        help="markdown: the plan as a table for CI summaries (buildkite-agent annotate, $GITHUB_STEP_SUMMARY).",
    ),
    Flag(
        ["--from-hf-cache"],
        "from_hf_cache",
        VALUE,
        type="dir",
        help="Upload from this Hugging Face cache (HF_HUB_CACHE) first: no Hub request for what it holds.",
    ),
    Flag(
        ["--allow-last-copy-deletion"],
        "allow_last_copy",
        MULTI,
        metavar="NAME",
        help="Let --prune / --delete-orphans / --apply delete objects of NAME although its upstream is gone (catalog "
        "audit-upstream); repeat for each model.",
    ),
    Flag(
        ["--replicate-to"],
        "replicate_to",
        VALUE,
        metavar="URL",
        help="Copy the selected pins (all by default) from the store to this second store, verified; nothing is "
        "deleted.",
    ),
    *STORE,
)


def flag_for(table: Sequence[Flag], variable: str) -> Flag:
    """The flag of `table` that overrides `variable`."""
    return next(f for f in table if f.var == variable)


def parse(argv: Sequence[str], command: str, table: Sequence[Flag]) -> tuple[list[str], dict[str, object]] | None:
    """`[group flags] COMMAND [NAME...] [flags]` -> (the names, the values of the flags given by dest: a list for a
    MULTI flag, True for a SWITCH), when every flag given is one the warm path answers; None otherwise (another
    command, --help, an unknown or full-CLI-only flag, a flag missing its value). `--flag=VALUE` and `--flag VALUE`
    are the same, as click reads them."""
    args = list(argv)
    values: dict[str, object] = {}
    i = _flags(args, 0, _answered(GROUP), values)
    if i is None or i >= len(args) or args[i] != command:
        return None
    answered = _answered(table)
    names: list[str] = []
    i += 1
    while i < len(args):
        if args[i].startswith("-"):
            found = _flags(args, i, answered, values)
            if found is None:
                return None
            i = found
        else:
            names.append(args[i])
            i += 1
    return names, values


def _answered(table: Sequence[Flag]) -> dict[str, Flag]:
    """The flags of `table` the warm path answers, by every name (a COUNT flag never is: -v changes what is said)."""
    return {name: flag for flag in table if flag.warm and flag.kind != COUNT for name in flag.names}


def _flags(args: list[str], i: int, answered: dict[str, Flag], values: dict[str, object]) -> int | None:
    """Reads the flags from args[i] up to the next non-flag into `values`; the index after them, or None."""
    while i < len(args) and args[i].startswith("-"):
        name, eq, inline = args[i].partition("=")
        flag = answered.get(name)
        if flag is None:
            return None
        if flag.kind == SWITCH:
            if eq:
                return None  # click refuses a value for a switch
            values[flag.dest] = True
            i += 1
            continue
        if eq:
            value, i = inline, i + 1
        elif i + 1 < len(args):
            value, i = args[i + 1], i + 2
        else:
            return None
        if flag.kind == MULTI:
            listed = values.setdefault(flag.dest, [])
            assert isinstance(listed, list)
            listed.append(value)
        else:
            values[flag.dest] = value
    return i


# -- the cache's folders ---------------------------------------------------------------------------------------------
class Folder:
    """A folder right under the cache root: its name, the layout below it, and what it holds."""

    __slots__ = ("name", "below", "holds")

    def __init__(self, name: str, below: str, holds: str) -> None:
        self.name = name
        self.below = below
        self.holds = holds

    def __repr__(self) -> str:
        return f"Folder({self.name!r})"


BLOBS = Folder(
    "blobs", "<aa>/<sha256>", "every verified file, read-only once published, shared by every model and revision"
)
MODELS = Folder("models", "<name>/<view>/", "`--layout dir`: hard links to blobs (copies where links fail)")
HUB = Folder(
    "hub",
    "models--org--name/",
    "`--layout hf-cache`: the Hugging Face cache layout (datasets--org--name for "
    "datasets), with trees/<revision>.json and refs/main",
)
MARKERS = Folder(
    "markers",
    "<name>/<view>.json",
    "what was verified, written last and atomically: size, mtime_ns, "
    "inode, ctime_ns, sha256 per file, the identity of every folder of "
    "the view, and the catalog that made it (paths relative to the "
    "cache)",
)
BLOB_STAMPS = Folder(
    "blob-stamps", "<aa>/<sha256>", "a blob's stat when last verified or linked: re-hashed before use if it moved"
)
TMP = Folder("tmp", "<pid>-<token>.part", "downloads in flight, one temp file per download, locked by its writer")
LOCKS = Folder("locks", "<sha256>.lock", "best-effort download locks of large files, removed when their download ends")
WARM_INDEX = Folder(
    "warm-index", "<key>.json", "the warm resolve's answers and no-op syncs' (at most 1,000; a week unused and they go)"
)
SYNC_STATE = Folder("sync-state", "<name>/<tag>.json", "what sync last read of each model's state record, by its ETag")
TIER_CHECKS = Folder("tier-checks", "<sha256>.json", "shared-tier files already hashed, by file identity")
ACTIVE = Folder(
    "active", "<token>.json", "resolves in progress, each under its writer's lock: eviction leaves their views alone"
)
SIGNATURE_CHECKS = Folder(
    "signature-checks", "<aa>/<key>", "left by earlier versions (verdicts no longer kept or read); gc removes them"
)
DERIVED = Folder(
    "derived",
    "<kind>/<key>.json",
    "derived entries restored or published here, their files blobs above (docs/derived.md)",
)
CACHE_FOLDERS: tuple[Folder, ...] = (
    BLOBS,
    MODELS,
    HUB,
    MARKERS,
    BLOB_STAMPS,
    TMP,
    LOCKS,
    WARM_INDEX,
    SYNC_STATE,
    TIER_CHECKS,
    ACTIVE,
    SIGNATURE_CHECKS,
    DERIVED,
)
