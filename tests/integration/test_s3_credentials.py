"""Credentials and endpoints as the seed's users have them: s3cmd's spelling (S3_ACCESS_KEY_ID,
S3_SECRET_ACCESS_KEY, S3_ENDPOINT_URL, ~/.s3cfg) after the AWS chain, and an AWS profile's own endpoint_url
handed to engines exactly as the resolver used it.

The S3 server has one real identity (tests/servers.py): each source must carry exactly that key and secret
to succeed, and the same source with a wrong secret (or the two swapped) must fail, so a test proves the
right credentials were read from the right place, not merely that some were found."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from servers import ACCESS_KEY, SECRET_KEY

from catalog.lookup import Catalog
from resolver.stores import open_store
from resolver.upload import upload_from_dir

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def filled(bundled: Catalog, sources: dict[str, Path], s3_server, bucket: str) -> str:  # type: ignore[no-untyped-def]
    for name in ("tiny-llama", "tiny-qwen2"):
        upload_from_dir(bundled, name, sources[name], open_store(f"s3://{bucket}/"))
    return bucket


def bare_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No AWS variable at all, and a HOME without ~/.aws: only what the test sets."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {
        **env,
        "HOME": str(home),
        "AWS_EC2_METADATA_DISABLED": "true",
        "CATALOG_DIR": str(ROOT / "manifests"),
        "CATALOG_CACHE": str(tmp_path / "cache"),
        **extra,
    }


def catalog(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "catalog", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_s3cmd_variables_are_honoured_after_the_aws_chain(filled: str, s3_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = bare_env(
        tmp_path,
        S3_ENDPOINT_URL=s3_server.url,
        S3_ACCESS_KEY_ID=ACCESS_KEY,
        S3_SECRET_ACCESS_KEY=SECRET_KEY,
        CATALOG_STORE=f"s3://{filled}/",
    )
    done = catalog(env, "resolve", "tiny-llama")
    assert done.returncode == 0, done.stderr
    assert SECRET_KEY not in done.stdout + done.stderr
    wrong = catalog(
        {**env, "S3_SECRET_ACCESS_KEY": "not-the-secret", "CATALOG_CACHE": str(tmp_path / "cache2")},
        "resolve",
        "tiny-llama",
    )
    assert wrong.returncode == 1 and "not-the-secret" not in wrong.stdout + wrong.stderr, wrong.stderr


@pytest.mark.parametrize(
    ("access", "secret", "works"),
    [(ACCESS_KEY, SECRET_KEY, True), (SECRET_KEY, ACCESS_KEY, False), (ACCESS_KEY, "wrong-secret", False)],
)
def test_an_s3cfg_file_is_honoured_with_its_own_keys(
    filled: str,
    s3_server,
    tmp_path: Path,
    access: str,
    secret: str,  # type: ignore[no-untyped-def]
    works: bool,
) -> None:
    env = bare_env(tmp_path, S3_ENDPOINT_URL=s3_server.url, CATALOG_STORE=f"s3://{filled}/", AWS_MAX_ATTEMPTS="1")
    (Path(env["HOME"]) / ".s3cfg").write_text(f"[default]\naccess_key = {access}\nsecret_key = {secret}\n")
    done = catalog(env, "resolve", "tiny-llama")
    assert (done.returncode == 0) is works, done.stderr
    if not works:
        assert done.stderr.startswith("error: ") and secret not in done.stderr


def test_no_credentials_anywhere_names_the_chain_tried_at_once(filled: str, s3_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = bare_env(tmp_path, S3_ENDPOINT_URL=s3_server.url, CATALOG_STORE=f"s3://{filled}/")
    done = catalog(env, "resolve", "tiny-llama")
    assert done.returncode == 1
    first = done.stderr.strip().splitlines()
    errors = [line for line in first if line.startswith("error:")]
    assert len(errors) == 1 and "no credentials" in errors[0], done.stderr
    assert "S3_ACCESS_KEY_ID" in errors[0] and "~/.s3cfg" in errors[0] and "AWS_PROFILE" in errors[0]
    assert "giving up" not in done.stderr  # a missing credential is not retried like a network error


def test_a_profiles_endpoint_reaches_the_engine_env(filled: str, s3_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "aws-config"
    config.write_text(f"[profile ci]\nregion = us-east-1\nendpoint_url = {s3_server.url}\n")
    credentials = tmp_path / "aws-credentials"
    credentials.write_text(f"[ci]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n")
    env = bare_env(
        tmp_path,
        AWS_CONFIG_FILE=str(config),
        AWS_SHARED_CREDENTIALS_FILE=str(credentials),
        AWS_PROFILE="ci",
        CATALOG_STORE=f"s3://{filled}/",
    )
    done = catalog(env, "resolve", "tiny-qwen2", "--format", "env")
    assert done.returncode == 0, done.stderr
    assert f"export AWS_ENDPOINT_URL={s3_server.url}" in done.stdout  # exactly the endpoint the resolver used
    assert "export RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING=0" in done.stdout
    assert SECRET_KEY not in done.stdout + done.stderr


def test_a_typo_in_the_profile_is_a_usage_error_not_a_retried_network_error(filled: str, tmp_path: Path) -> None:
    env = bare_env(tmp_path, AWS_PROFILE="no-such-profile", CATALOG_STORE=f"s3://{filled}/")
    done = catalog(env, "resolve", "tiny-llama")
    assert done.returncode == 2 and done.stderr.startswith("error: AWS_PROFILE='no-such-profile'"), done.stderr


# -- the environment's keys, without boto3 (resolver/stores/aws_env.py) --------------------------------------
BOTO_PROBE = (
    "import sys; from catalog_app.main import run; code = run(sys.argv[1:]); "
    "print('boto3 imported' if 'boto3' in sys.modules else 'boto3 not imported', file=sys.stderr); sys.exit(code)"
)


def probe(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The full CLI in a process that says at its end whether boto3 was imported."""
    return subprocess.run(
        [sys.executable, "-c", BOTO_PROBE, *args], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.mark.parametrize(
    ("access", "secret", "works"),
    [(ACCESS_KEY, SECRET_KEY, True), (SECRET_KEY, ACCESS_KEY, False), (ACCESS_KEY, "wrong-secret", False)],
)
def test_the_environments_keys_sign_without_boto3(
    filled: str,
    s3_server,
    tmp_path: Path,
    access: str,
    secret: str,  # type: ignore[no-untyped-def]
    works: bool,
) -> None:
    env = bare_env(
        tmp_path,
        AWS_ENDPOINT_URL=s3_server.url,
        AWS_ACCESS_KEY_ID=access,
        AWS_SECRET_ACCESS_KEY=secret,
        CATALOG_STORE=f"s3://{filled}/",
        AWS_MAX_ATTEMPTS="1",
    )
    done = probe(env, "resolve", "tiny-llama")
    assert (done.returncode == 0) is works, done.stderr
    if works:
        assert done.stderr.strip().endswith("boto3 not imported"), done.stderr
        sync = probe(env, "sync", "tiny-llama", "tiny-qwen2")  # a no-op: one listing, through obstore too
        assert sync.returncode == 0 and sync.stderr.strip().endswith("boto3 not imported"), sync.stderr
        assert "No changes" in sync.stdout
    else:
        assert done.stderr.startswith("error: ") and secret not in done.stderr
        assert "refused" in done.stderr.splitlines()[0] and "403" in done.stderr.splitlines()[0], done.stderr


def test_a_named_profile_wins_over_the_environments_keys_as_in_botocore(filled: str, s3_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    credentials = tmp_path / "aws-credentials"
    credentials.write_text(f"[ci]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n")
    (tmp_path / "aws-config").write_text("[profile ci]\nregion = us-east-1\n")
    env = bare_env(
        tmp_path,
        AWS_ENDPOINT_URL=s3_server.url,
        AWS_ACCESS_KEY_ID=ACCESS_KEY,
        AWS_SECRET_ACCESS_KEY="wrong-secret",
        AWS_SHARED_CREDENTIALS_FILE=str(credentials),
        AWS_CONFIG_FILE=str(tmp_path / "aws-config"),
        AWS_PROFILE="ci",
        CATALOG_STORE=f"s3://{filled}/",
        AWS_MAX_ATTEMPTS="1",
    )
    done = probe(env, "resolve", "tiny-llama")
    assert done.returncode == 0, done.stderr  # the profile's keys signed: the environment's wrong secret was not used
    assert done.stderr.strip().endswith("boto3 imported")


def test_expiring_environment_keys_go_through_botocore(filled: str, s3_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = bare_env(
        tmp_path,
        AWS_ENDPOINT_URL=s3_server.url,
        AWS_ACCESS_KEY_ID=ACCESS_KEY,
        AWS_SECRET_ACCESS_KEY=SECRET_KEY,
        AWS_CREDENTIAL_EXPIRATION="2999-01-01T00:00:00Z",
        CATALOG_STORE=f"s3://{filled}/",
    )
    done = probe(env, "resolve", "tiny-llama")
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().endswith("boto3 imported")  # botocore refreshes such keys; we never would
