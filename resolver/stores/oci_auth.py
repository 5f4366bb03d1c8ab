"""Registry auth the way docker and oras do it: a 401 names a scheme; answer it with the credentials that
belong to that registry host, and to no other.

    WWW-Authenticate --parse_challenge--> Challenge (basic | bearer realm, service, scope)
    settings + docker config.json --credentials_for(host)--> Credentials | None (anonymous)

Pure, but for `read_docker_config` (one small file). Where credentials come from, first that has them:
CATALOG_OCI_USERNAME/CATALOG_OCI_PASSWORD (for the registry CATALOG_OCI_REGISTRY names, else the one the
store URL names), then `$DOCKER_CONFIG/config.json` (default ~/.docker/config.json) `auths` (`auth`,
`username`/`password`, `registrytoken`). Credential programs (`credsStore`, `credHelpers`) are not run: a
registry that needs one fails with a message saying so and what to set instead.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_PARAM = re.compile(r'\s*([A-Za-z][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*,?')
DOCKER_HUB_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "docker.io", "registry-1.docker.io")


@dataclass(frozen=True)
class Challenge:
    scheme: str  # "basic" or "bearer" (lower case); anything else is not answered
    params: Mapping[str, str] = field(default_factory=dict)

    @property
    def realm(self) -> str:
        return self.params.get("realm", "")


def parse_challenge(header: str | None) -> Challenge | None:
    """`Bearer realm="https://auth/token",service="registry",scope="repository:ns/x:pull"` -> Challenge.
    None when there is no header or no scheme."""
    if not header or not header.strip():
        return None
    scheme, _, rest = header.strip().partition(" ")
    params: dict[str, str] = {}
    position = 0
    while position < len(rest):
        match = _PARAM.match(rest, position)
        if match is None or match.end() == position:
            break
        value = match.group(2) if match.group(2) is not None else match.group(3) or ""
        params[match.group(1).lower()] = re.sub(r"\\(.)", r"\1", value)
        position = match.end()
    return Challenge(scheme.lower(), params)


@dataclass(frozen=True)
class Credentials:
    """What answers a challenge: a user and password (Basic, or to ask a token server), or a registry token
    (sent as is as a Bearer token). `origin` names where they came from, for messages; never a secret."""

    origin: str
    username: str = ""
    password: str = field(default="", repr=False)
    registry_token: str = field(default="", repr=False)

    @property
    def basic(self) -> str:
        return "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()


@dataclass(frozen=True)
class CredentialProgram:
    """The docker config names a credential program for the host (credsStore, credHelpers), which we do not run (said in messages)."""

    origin: str
    name: str


def host_key(text: str) -> str:
    """`https://host:port/v1/` or `host:port` -> `host:port` (how `auths` keys are compared)."""
    text = text.strip()
    if "://" in text:
        text = text.split("://", 1)[1]
    return text.split("/", 1)[0].lower()


def _same_registry(key: str, host: str) -> bool:
    key, host = host_key(key), host_key(host)
    if key == host:
        return True
    hub = {host_key(k) for k in DOCKER_HUB_KEYS}
    return key in hub and host in hub


def read_docker_config(folder: Path) -> tuple[dict[str, Any], str]:
    """`folder/config.json` as a dict ({} when absent or unreadable) and how messages name it."""
    path = folder / "config.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}, str(path)
    return (data if isinstance(data, dict) else {}), str(path)


def from_docker_config(config: Mapping[str, Any], origin: str, host: str) -> Credentials | CredentialProgram | None:
    """Pure: the credentials `config` (a parsed docker config.json) holds for `host`."""
    auths = config.get("auths")
    auths = auths if isinstance(auths, dict) else {}
    for key, entry in auths.items():
        if not isinstance(entry, dict) or not _same_registry(str(key), host):
            continue
        token = entry.get("registrytoken")
        if isinstance(token, str) and token:
            return Credentials(f"{origin} (auths, registrytoken)", registry_token=token)
        user, password = entry.get("username"), entry.get("password")
        if isinstance(user, str) and user and isinstance(password, str):
            return Credentials(f"{origin} (auths)", user, password)
        encoded = entry.get("auth")
        if isinstance(encoded, str) and encoded:
            try:
                user, sep, password = base64.b64decode(encoded, validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                continue  # unreadable: as if absent (never echoed: it is a secret)
            if sep and user:
                return Credentials(f"{origin} (auths)", user, password)
    programs = config.get("credHelpers")
    programs = programs if isinstance(programs, dict) else {}
    for key, name in programs.items():
        if _same_registry(str(key), host) and isinstance(name, str):
            return CredentialProgram(origin, f"docker-credential-{name}")
    store = config.get("credsStore")
    if isinstance(store, str) and store:
        return CredentialProgram(origin, f"docker-credential-{store}")
    return None


def credentials_for(
    host: str,
    *,
    username: str | None,
    password: str | None,
    for_host: str | None,
    docker_config: tuple[Mapping[str, Any], str],
) -> Credentials | CredentialProgram | None:
    """Pure: the credentials that belong to `host`: the settings' user/password when they are for this host
    (`for_host`), else the docker config's entry for it, else None (anonymous)."""
    if username and for_host is not None and host_key(for_host) == host_key(host):
        return Credentials("CATALOG_OCI_USERNAME/CATALOG_OCI_PASSWORD", username, password or "")
    return from_docker_config(docker_config[0], docker_config[1], host)


def scope(repository: str, actions: str) -> str:
    return f"repository:{repository}:{actions}"
