"""Store, mirror and endpoint URLs: checked strictly before anything connects, and never shown with credentials.

- `redact(text)` hides what a URL may carry that is secret: `user:password@`, and query parameters named like
  credentials (`token=`, `secret=`, `X-Amz-Signature=`, `password=`, `access_key=` ...). Every message the CLI
  prints, and every log line, goes through it.
- `check_endpoint` and `check_store_url` say what is wrong with a URL (one line, redacted) or None. The stores
  open URLs with the same checks and `catalog validate` runs them over catalog.yaml's `store` and `mirrors`,
  so a URL that validates is a URL the runners can open: no bad port, no unclosed `[`, no credentials, no
  unknown option.

Pure, standard library only.
"""

from __future__ import annotations

import re
from urllib.parse import SplitResult, parse_qs, urlsplit

from catalog import naming

S3_OPTIONS = ("endpoint", "addressing", "unsigned", "profile")  # s3://bucket/base/?endpoint=...&...
ADDRESSING = ("auto", "path", "virtual")
SCHEMES = ("s3", "file", "http", "https", "oci")
OCI_OPTIONS = ("plain-http", "require-signature")  # oci://host[:port]/namespace/?plain-http=1&require-signature=1
HIDDEN = "***"
FORMS = {  # each scheme's URL as written, for hints
    "s3": "s3://bucket/[base/][?endpoint=http(s)://host:port&addressing=path|virtual|auto&unsigned=1&profile=NAME]; "
    "credentials come from the AWS chain or a profile, never the URL",
    "oci": "oci://host[:port]/namespace/[?plain-http=1]; credentials come from CATALOG_OCI_USERNAME/PASSWORD or "
    "docker's config.json",
    "http": "http(s)://host[:port]/base/, read with unsigned GETs",
    "https": "http(s)://host[:port]/base/, read with unsigned GETs",
}

_USERINFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)[^/\s@?#'\"]*@", re.IGNORECASE)
_SECRET_PARAM = re.compile(
    r"(?P<name>[?&;](?:[^=&\s'\"]*(?:token|secret|passw|pwd|signature|credential|access[_-]?key|api[_-]?key|auth)"
    r"[^=&\s'\"]*)=)[^&\s'\"#]*",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """`text` with every URL's userinfo and credential-like query values replaced by ***."""
    text = _USERINFO.sub(lambda m: f"{m.group('scheme')}{HIDDEN}@", text)
    return _SECRET_PARAM.sub(lambda m: f"{m.group('name')}{HIDDEN}", text)


def shown(url: str) -> str:
    """A URL as a message names it: redacted, and cut before its query or fragment, whose values may be anything a
    user pasted there (a refused option's value is never echoed either)."""
    base = re.split(r"[?#]", url, maxsplit=1)[0]
    return redact(base) + ("?..." if len(base) < len(url) else "")


def split(url: str) -> tuple[SplitResult | None, str | None]:
    """urlsplit, with the port read (a bad one raises there): (parts, None) or (None, what is wrong)."""
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError as exc:  # "Port out of range 0-65535", "Invalid IPv6 URL", "Port could not be cast ..."
        return None, f"{shown(url)!r} is no URL: {exc}"
    return parts, None


def check_endpoint(url: str, what: str = "endpoint") -> str | None:
    """An S3 endpoint: http(s)://host[:port][/path], no credentials, query or fragment."""
    parts, problem = split(url)
    if parts is None:
        return f"{what} {problem}"
    named = shown(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{what} {named!r} is not http(s)://host[:port]"
    if parts.username is not None or parts.password is not None:
        return f"{what} {named!r} carries credentials: they belong in the AWS credential chain, never in a URL"
    if parts.query or parts.fragment:
        return f"{what} {named!r} has a query or fragment (not shown: it may hold a secret); an endpoint takes neither"
    return None


def scheme_of(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else "file"


def check_store_url(url: str) -> str | None:
    """What is wrong with a store or mirror URL (redacted), or None."""
    scheme = scheme_of(url)
    named = shown(url)
    if scheme not in SCHEMES:
        return (
            f"{named!r}: unknown scheme {scheme}://; known: {', '.join(s + '://' for s in SCHEMES)}, or a folder path"
        )
    if scheme in ("http", "https"):
        parts, problem = split(url)
        if parts is None:
            return problem
        if not parts.hostname:
            return f"{named!r} has no host: use {scheme}://host[:port]/base/"
        if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
            return f"{named!r}: an HTTP mirror takes no credentials, query or fragment (it is read with unsigned GETs)"
        return None
    if scheme == "file":
        return None
    if scheme == "oci":
        parts, problem = split(url)
        if parts is None:
            return problem
        if parts.username is not None or parts.password is not None:
            return (
                f"{named!r} carries credentials: they belong in CATALOG_OCI_USERNAME/PASSWORD or docker's config.json"
            )
        if not parts.hostname:
            return f"{named!r} has no registry: use oci://host[:port]/namespace/"
        unknown = sorted(set(parse_qs(parts.query, keep_blank_values=True)) - set(OCI_OPTIONS))
        return (
            f"unknown oci:// URL option(s) {_option_names(unknown)}; known: {', '.join(OCI_OPTIONS)}"
            if unknown
            else None
        )
    base, _, query = url.partition("?")
    if "@" in base.split("/", 3)[2]:
        return (
            f"{named!r} carries credentials: they belong in the AWS credential chain (or ?profile=NAME), never in a URL"
        )
    problem = s3_query_problem(query) if query else None
    if problem is not None:
        return problem
    prefix = base if base.endswith("/") else base + "/"
    message = naming.check_s3_prefix(prefix, allow_root=True)
    return None if message is None else redact(message)


def s3_query(query: str) -> dict[str, str]:
    """The options of an s3:// URL's query (the last value of each)."""
    return {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}


def s3_query_problem(query: str) -> str | None:
    given = s3_query(query)
    unknown = sorted(set(given) - set(S3_OPTIONS))
    if unknown:
        return f"unknown s3:// URL option(s) {_option_names(unknown)}; known: {', '.join(S3_OPTIONS)}"
    if "endpoint" in given and (problem := check_endpoint(given["endpoint"])) is not None:
        return problem
    # The values refused below are not echoed: whatever was pasted there (a secret, by mistake) stays out of logs.
    if "addressing" in given and given["addressing"] not in ADDRESSING:
        return f"addressing= is not one of {', '.join(ADDRESSING)}"
    if "unsigned" in given and given["unsigned"].lower() not in ("1", "true", "yes", "0", "false", "no"):
        return "unsigned= is neither 1 nor 0"
    if "profile" in given and not re.fullmatch(r"[A-Za-z0-9_.+-]{1,64}", given["profile"]):
        return "profile= names an AWS profile: letters, digits, '_', '.', '+', '-'"
    return None


def _option_names(names: list[str]) -> str:
    """Unknown option names, each shown only when it looks like one (`?SECRET` alone parses as a name)."""
    return ", ".join(n if re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,29}", n) else "(a name not shown)" for n in names)


def same_endpoint(a: str | None, b: str | None) -> bool:
    """Two endpoint URLs name the same server (scheme, host and port; case and a default port aside)."""
    if a is None or b is None:
        return a is b
    pa, _ = split(a)
    pb, _ = split(b)
    if pa is None or pb is None:
        return False
    default = {"http": 80, "https": 443}
    return (pa.scheme.lower(), (pa.hostname or "").lower(), pa.port or default.get(pa.scheme.lower())) == (
        pb.scheme.lower(),
        (pb.hostname or "").lower(),
        pb.port or default.get(pb.scheme.lower()),
    )
