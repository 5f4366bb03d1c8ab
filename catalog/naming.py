"""Pure checks of names, pins, prefixes and paths, shared by the lint rules and the resolver.

Each `check_*` returns None when the value is fine, else a message that says what is wrong and how
it should look. The resolver calls the same functions on keys it reads from a bucket, so a path that
validation refuses is also never written.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from fnmatch import fnmatchcase

NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]*$"
REVISION_PATTERN = r"^[0-9a-f]{40}$"
HF_REPO_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$"
SHA256_PATTERN = r"^[0-9a-f]{64}$"

_NAME = re.compile(NAME_PATTERN)
_REVISION = re.compile(REVISION_PATTERN)
_HF_REPO = re.compile(HF_REPO_PATTERN)
_SHA256 = re.compile(SHA256_PATTERN)
# AWS bucket naming rules: 3-63 chars, lowercase letters, digits, dots and hyphens, letter/digit at both ends.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_IP_LIKE = re.compile(r"^\d+\.\d+\.\d+\.\d+$")

MAX_PATH_LENGTH = 1024
# The cache's temporary names (resolver/view_stamps.staging_name): a pinned path may never look like one, so gc
# can never take a pinned file for a dead writer's leftover.
CACHE_STAGING = re.compile(r"^\..+~catalog\.\d+-[0-9a-f]+$")

# Names the folder store keeps for itself (sidecar metadata, temp files): no pinned path may use them.
FOLDER_STORE_META = ".catalog-meta"
FOLDER_STORE_TMP = ".catalog-tmp"
RESERVED_SEGMENTS = (FOLDER_STORE_META, FOLDER_STORE_TMP)
# Windows device names: `con`, `nul.txt`, `com1.tar.gz` open the device on Windows, whatever the extension.
_WINDOWS_DEVICE = re.compile(
    r"^(con|prn|aux|nul|com[0-9\u00b9\u00b2\u00b3]|lpt[0-9\u00b9\u00b2\u00b3])(\..*)?$", re.IGNORECASE
)
# Most pinned paths are plain ASCII names ("model-00001-of-00004.safetensors", "data/train.jsonl"): no segment starts
# or ends with '.', nothing to normalize, only a device name left to rule out. They skip the checks one by one (a
# resolve checks every path twice, as a manifest entry and as a store key: 9 us a path, a sixth of the Python time of
# a cold resolve of 1,000 small files). Possessive `*+`: no backtracking, linear in the path.
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]*+(?<!\.)(?:/[A-Za-z0-9_+-][A-Za-z0-9._+-]*+(?<!\.))*+")
_DEVICE_SEGMENT = re.compile(r"(?:^|/)(?:con|prn|aux|nul|com[0-9]|lpt[0-9])(?:[./]|$)", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x1f]")
_DRIVE = re.compile(r"[A-Za-z]:")


def check_name(name: str) -> str | None:
    if not _NAME.match(name):
        return f"{name!r} is not a logical name: use lowercase letters, digits, '.', '_' and '-', starting with a letter or digit"
    return None


def check_revision(revision: str) -> str | None:
    if _REVISION.match(revision):
        return None
    if re.fullmatch(r"[0-9A-Fa-f]{40}", revision):
        return f"revision {revision!r} must be lowercase hex"
    if re.fullmatch(r"[0-9a-fA-F]{7,39}", revision):
        return f"revision {revision!r} is an abbreviated commit; pin the full 40-hex commit"
    return (
        f"revision {revision!r} is not pinned: a branch, tag or refs/pr/N can move; "
        "pin the full 40-hex commit (`catalog add` resolves it for you)"
    )


def check_hf_repo(repo: str) -> str | None:
    if not _HF_REPO.match(repo) or ".." in repo:
        return f"{repo!r} is not a Hub repo id; expected org/name"
    if "--" in repo:
        return (
            f"{repo!r} contains '--', the separator of the hf-cache layout (models--org--name): "
            "org/a--b and org--a/b would share one folder; the Hub refuses such ids too"
        )
    return None


def check_sha256(value: str) -> str | None:
    if not _SHA256.match(value):
        return f"{value!r} is not a sha256: expected 64 lowercase hex digits"
    return None


@dataclass(frozen=True)
class S3Url:
    bucket: str
    key: str  # "" for the bucket root, otherwise ends in "/" for prefixes

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def check_s3_prefix(url: str, *, allow_root: bool = False) -> str | None:
    """A bucket prefix: `s3://bucket/key/`, one trailing '/', no '//', '..', '.' or backslash segments."""
    if not url.startswith("s3://"):
        return f"{url!r} must start with s3://"
    rest = url[len("s3://") :]
    bucket, slash, key = rest.partition("/")
    if not slash:
        return f"{url!r} must end with '/' after the bucket name"
    if not _BUCKET.match(bucket) or ".." in bucket or _IP_LIKE.match(bucket):
        return f"bucket {bucket!r} breaks S3 naming rules: 3-63 lowercase letters, digits, '.' or '-'"
    if not key:
        return None if allow_root else f"{url!r} is a whole bucket; give each model its own key prefix"
    if key.startswith("/"):
        return f"{url!r} has an empty segment ('//') after the bucket"
    if not key.endswith("/"):
        return f"{url!r} must end with exactly one '/' so listings stop at the prefix boundary"
    if "//" in key:
        return f"{url!r} has an empty segment ('//')"
    if "\\" in key:
        return f"{url!r} contains a backslash"
    if any(seg in (".", "..") for seg in key[:-1].split("/")):
        return f"{url!r} contains a '.' or '..' segment"
    return None


def parse_s3_url(url: str) -> S3Url:
    """Split an already-checked `s3://bucket/key` URL."""
    bucket, _, key = url[len("s3://") :].partition("/")
    return S3Url(bucket, key)


def check_relative_path(path: str) -> str | None:
    """A path inside a model: relative POSIX, no traversal, nothing a filesystem would reinterpret."""
    if len(path) <= MAX_PATH_LENGTH and _PLAIN_PATH.fullmatch(path) and not _DEVICE_SEGMENT.search(path):
        return None
    return _check_path_in_full(path)


def _check_path_in_full(path: str) -> str | None:
    """check_relative_path's rules one by one (what its fast accept of plain names must agree with)."""
    if not path:
        return "empty path"
    if len(path) > MAX_PATH_LENGTH:
        return f"path longer than {MAX_PATH_LENGTH} characters"
    if "\\" in path:
        return f"{path!r} contains a backslash; use '/'"
    if _CONTROL.search(path):
        return f"{path!r} contains a control character"
    if path.startswith("/") or _DRIVE.match(path):
        return f"{path!r} is absolute; paths are relative to the model"
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return f"{path!r} has an empty, '.' or '..' segment; paths must stay inside the model"
    if parts[0] == ".git" or ".git" in parts:
        return f"{path!r} is inside .git/"
    for part in parts:
        if CACHE_STAGING.match(part):
            return f"{path!r} has {part!r}, the shape of the cache's own staging names (`.<name>~catalog.<pid>-<hex>`); rename it"
        if part in RESERVED_SEGMENTS:
            return f"{path!r} uses {part!r}, a folder name the stores keep for themselves"
        if _WINDOWS_DEVICE.match(part):
            return f"{path!r} has {part!r}, a Windows device name (it opens the device, not a file, on Windows)"
        if part[-1] in " .":
            return f"{path!r} has a name ending in a space or '.' ({part!r}); Windows drops it, so two paths would meet"
    if unicodedata.normalize("NFC", path) != path:
        return (
            f"{path!a} is not in Unicode NFC form; its NFC twin {unicodedata.normalize('NFC', path)!a} names the "
            "same file on macOS: pin the NFC spelling"
        )
    return None


def matches_any(path: str, patterns: tuple[str, ...]) -> bool:
    """Glob match as huggingface_hub's allow_patterns does it: `*` crosses '/', `dir/` means `dir/*`."""
    return any(fnmatchcase(path, pattern + "*" if pattern.endswith("/") else pattern) for pattern in patterns)


def select_files(paths: list[str], include: tuple[str, ...], exclude: tuple[str, ...]) -> list[str]:
    """The subset of a repo's files that a manifest pins."""
    return [p for p in paths if (not include or matches_any(p, include)) and not matches_any(p, exclude)]
