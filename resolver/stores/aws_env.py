"""The first link of the AWS credential chain, the environment, read the way botocore reads it but without
importing boto3.

Why: boto3's import, session and credential chain cost about 0.4 s of CPU in every process (most of a no-op
sync, a tenth of a cold resolve of 1,000 small files; the profiles are in docs/benchmarks.md), and CI runners
mostly hand credentials over in these variables. The rule is botocore's own: AWS_ACCESS_KEY_ID with
AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN, or its old name AWS_SECURITY_TOKEN) win over every other source
unless a profile is named. Whatever else could apply goes through boto3 as before: a named profile, expiring
environment credentials (AWS_CREDENTIAL_EXPIRATION: botocore refreshes them), half a key pair (botocore says
what is missing), and, for https, a CA bundle the AWS config file may name.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class EnvironmentKeys:
    access_key_id: str
    secret_access_key: str = field(repr=False)
    token: str | None = field(default=None, repr=False)


def environment_keys(environ: Mapping[str, str] = os.environ) -> EnvironmentKeys | None:
    """The key pair the environment hands botocore, when that is all botocore would use (None: ask boto3)."""
    key_id, secret = environ.get("AWS_ACCESS_KEY_ID") or "", environ.get("AWS_SECRET_ACCESS_KEY") or ""
    if not key_id or not secret or environ.get("AWS_CREDENTIAL_EXPIRATION"):
        return None
    return EnvironmentKeys(
        key_id, secret, environ.get("AWS_SESSION_TOKEN") or environ.get("AWS_SECURITY_TOKEN") or None
    )


def ca_bundle_known(environ: Mapping[str, str] = os.environ) -> tuple[bool, str | None]:
    """(known, path): the CA bundle botocore would verify TLS with, when it can be told without boto3: AWS_CA_BUNDLE,
    or none at all when there is no AWS config file to name one. (False, None): ask boto3."""
    if environ.get("AWS_CA_BUNDLE"):
        return True, environ["AWS_CA_BUNDLE"]
    if os.path.exists(os.path.expanduser(environ.get("AWS_CONFIG_FILE") or "~/.aws/config")):  # as botocore finds it
        return False, None
    return True, None
