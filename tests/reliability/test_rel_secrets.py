"""Secrets never show: credentials set to unique markers, then every kind of command (successful and
failing resolves, every output format, sync, Hub requests refused with 401/403, -vv debug logging).
No marker, signature or presigned-URL query string may appear in any stdout/stderr, nor in any file
the commands wrote (the cache, the sync state, the warm-path index, $HOME).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from servers import SECRET_KEY

from catalog.lookup import Catalog
from resolver.stores import open_store
from resolver.upload import upload_from_dir

from .support import BUNDLED, cli_env, free_port, run_catalog

LEAK_PATTERNS = (
    "X-Amz-Signature",
    "X-Amz-Credential",
    "X-Amz-Security-Token",
    "Signature=",
    "AWSAccessKeyId=",
    "Authorization:",
    "'Authorization'",
    "Bearer ",
)


@pytest.fixture
def markers() -> dict[str, str]:
    """The S3 server has a real identity: the secret marker is its own secret (which must never show either), and
    a session token it does not know makes it refuse a request, so that marker goes only where a refusal is
    expected (see TOKEN_ONLY)."""
    tag = uuid.uuid4().hex
    return {
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_SESSION_TOKEN": f"sessiontoken{tag}",
        "HF_TOKEN": f"hf_marker{tag}",
    }


TOKEN_ONLY = "AWS_SESSION_TOKEN"


def scan_files(root: Path, needles: list[str]) -> list[str]:
    """Every written file, whatever its size, read in chunks that overlap by the longest needle."""
    found = []
    overlap = max(len(n) for n in needles)
    for path in root.rglob("*"):
        if not path.is_file() or path.is_symlink():
            continue
        tail = b""
        with open(path, "rb") as f:
            while chunk := f.read(8 * 1024 * 1024):
                window = tail + chunk
                found += [f"{path.relative_to(root)} holds {n!r}" for n in needles if n.encode() in window]
                tail = window[-overlap:]
    return sorted(set(found))


def test_no_secret_in_any_output_or_written_file(
    bundled: Catalog,
    sources: dict[str, Path],
    s3_server,
    bucket: str,
    hub,
    tmp_path: Path,
    markers: dict[str, str],  # type: ignore[no-untyped-def]
) -> None:
    url = f"s3://{bucket}/"
    for name in ("tiny-llama", "tiny-qwen2"):
        upload_from_dir(bundled, name, sources[name], open_store(url))
    home = tmp_path / "home"
    base = {
        "CATALOG_DIR": str(BUNDLED),
        "CATALOG_STORE": url,
        "CATALOG_CACHE": str(tmp_path / "cache"),
        "HOME": str(home),
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(home / "hf"),
        **{k: v for k, v in markers.items() if k != TOKEN_ONLY},
    }
    token = {TOKEN_ONLY: markers[TOKEN_ONLY]}
    dead = f"http://127.0.0.1:{free_port()}"
    commands: list[tuple[str, list[str], dict[str, str], set[int]]] = [
        ("resolve json", ["resolve", "tiny-llama", "--format", "json"], {}, {0}),
        ("resolve env", ["resolve", "tiny-qwen2", "--format", "env"], {}, {0}),
        ("resolve vllm-args", ["resolve", "tiny-qwen2", "--format", "vllm-args"], {}, {0}),
        ("resolve warm -vv", ["-vv", "resolve", "tiny-llama"], {}, {0}),
        (
            "resolve cold -vv",
            ["-vv", "resolve", "tiny-llama", "--format", "json", "--cache", str(tmp_path / "cold")],
            {},
            {0},
        ),
        (
            "resolve dead endpoint -vv",
            ["-vv", "resolve", "tiny-llama", "--cache", str(tmp_path / "dead")],
            {"AWS_ENDPOINT_URL": dead, "AWS_MAX_ATTEMPTS": "1", **token},
            {1},
        ),
        (
            "resolve with a session token the server refuses -vv",
            ["-vv", "resolve", "tiny-llama", "--cache", str(tmp_path / "token")],
            {"AWS_MAX_ATTEMPTS": "1", **token},
            {1},
        ),
        ("verify -vv", ["-vv", "verify", "--deep"], {}, {0}),
        ("sync json -vv", ["-vv", "sync", "tiny-llama", "--format", "json"], {}, {0}),
        ("sync dry-run json", ["sync", "--dry-run", "--format", "json"], {}, {0}),
        ("sync check -vv", ["-vv", "sync", "--check", "--format", "json"], {}, {0, 1}),
    ]
    outputs = []
    for label, args, extra, codes in commands:
        done = run_catalog(args, cli_env({**base, **extra}))
        assert done.returncode in codes, f"{label}: exit {done.returncode}\n{done.stderr[-2000:]}"
        outputs.append((label, done.stdout + done.stderr))

    # The Hub refusing the token: resolve from the Hub, sync (bytes from the Hub), lock (the Hub's listing).
    hub.fail(401, times=1000)
    for label, args, codes in [
        (
            "resolve --source hf (401) -vv",
            ["-vv", "resolve", "tiny-llama-sharded", "--source", "hf", "--cache", str(tmp_path / "hf")],
            {1},
        ),
        ("sync from the Hub (401) -vv", ["-vv", "sync", "tiny-llama-tensorizer", "--format", "json"], {1}),
        ("lock --check (401) -vv", ["-vv", "lock", "tiny-llama", "--check"], {1, 2}),
    ]:
        done = run_catalog(args, cli_env(base))
        assert done.returncode in codes, f"{label}: exit {done.returncode}\n{done.stderr[-2000:]}"
        assert "Traceback" not in done.stderr, f"{label}\n{done.stderr[-2000:]}"
        outputs.append((label, done.stdout + done.stderr))
    hub.faults.clear()
    hub.fail(403, times=1000)
    done = run_catalog(
        ["-vv", "resolve", "tiny-llama-sharded", "--source", "hf", "--cache", str(tmp_path / "hf403")], cli_env(base)
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    outputs.append(("resolve --source hf (403) -vv", done.stdout + done.stderr))
    assert hub.hub_requests() > 0

    leaks = [
        f"{label}: {needle!r}"
        for label, text in outputs
        for needle in [*markers.values(), *LEAK_PATTERNS]
        if needle in text
    ]
    assert leaks == [], "secrets in command output:\n" + "\n".join(leaks)
    written = scan_files(tmp_path, [*markers.values(), *LEAK_PATTERNS])
    assert written == [], "secrets written to disk:\n" + "\n".join(written)


def test_the_leak_check_sees_a_marker_that_is_printed(tmp_path: Path, markers: dict[str, str]) -> None:
    """The scan above can fail: an error message that echoes the endpoint shows the marker planted in it."""
    planted = f"http://127.0.0.1:{free_port()}/{markers['AWS_SECRET_ACCESS_KEY']}"
    done = run_catalog(
        ["sync", "tiny-llama", "--dry-run", "--cache", str(tmp_path / "cache")],
        cli_env(
            {
                "CATALOG_DIR": str(BUNDLED),
                "CATALOG_STORE": "s3://some-bucket/",
                "AWS_ENDPOINT_URL": planted,
                "AWS_MAX_ATTEMPTS": "1",
                "HOME": str(tmp_path / "home"),
            }
        ),
    )
    assert done.returncode == 1
    assert markers["AWS_SECRET_ACCESS_KEY"] in done.stdout + done.stderr
