"""Files that run code on load, end to end: a manifest pinning them without `allow_code` is refused by validate and by
resolve (before any download: the catalog does not load); an allowed pickle is scanned before the answer is handed
out, and a pickle whose reduce calls os.system (made here) is refused before any loader sees it; a tier's scan
verdict, written once by the publisher and bound to the sha256 and scanner version, spares the runners reading the
tier their scans; a config's auto_map needs `allow_code`; `--format vllm-args` passes --trust-remote-code only for a
model that says so."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import files_yaml, manifest_text, write_catalog

import catalog as catalog_api
from resolver.stores import open_store
from resolver.upload import upload_from_dir


class _System:
    """Unpickling this runs os.system(COMMAND): a known-malicious payload, made here, never loaded here."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (self.command,)


def _clean_pickle() -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save({"w": torch.zeros(2, 2)}, buffer)
    return buffer.getvalue()


def _setup(tmp_path: Path, files: dict[str, bytes], extra: str = "", fmt: str = "pt") -> dict[str, str]:
    """One model `m` pinning `files`, uploaded to a folder store; the environment of a runner using it."""
    source = tmp_path / "source"
    source.mkdir(parents=True)
    for name, data in files.items():
        (source / name).write_bytes(data)
    pins = files_yaml(*((name, len(data), hashlib.sha256(data).hexdigest()) for name, data in sorted(files.items())))
    folder = write_catalog(tmp_path, {"m.yaml": manifest_text("m", fmt=fmt, files=pins, extra=REASON)})
    upload_from_dir(catalog_api.load(folder), "m", source, open_store(str(tmp_path / "store")))  # (a loadable catalog)
    (folder / "m.yaml").write_text(manifest_text("m", fmt=fmt, files=pins, extra=extra))
    base = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
    return {
        **base,
        "HOME": str(tmp_path / "home"),
        "CATALOG_DIR": str(folder),
        "CATALOG_STORE": str(tmp_path / "store"),
        "CATALOG_CACHE": str(tmp_path / "cache"),
    }


def catalog(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "catalog", *args], capture_output=True, text=True, env=env)


CONFIG = b'{"model_type": "llama"}'
REASON = "allow_code: a legacy checkpoint reviewed in PR 1; scanned before use\n"


def test_a_pickle_without_a_reason_is_refused_by_validate_and_before_any_download(tmp_path: Path) -> None:
    env = _setup(tmp_path, {"config.json": CONFIG, "pytorch_model.bin": _clean_pickle()})
    done = catalog(env, "validate")
    assert done.returncode == 1 and "m.yaml:12: files[1].path" in done.stdout and "allow_code" in done.stdout
    done = catalog(env, "resolve", "m")
    assert done.returncode == 1 and "runs code when loaded" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "cache" / "blobs").exists() or not any((tmp_path / "cache" / "blobs").rglob("*"))


def test_a_malicious_pickle_is_refused_before_any_loader_sees_it(tmp_path: Path) -> None:
    witness = tmp_path / "ran"
    payload = pickle.dumps(_System(f"touch {witness}"))
    env = _setup(tmp_path, {"config.json": CONFIG, "pytorch_model.bin": payload}, extra=REASON)
    assert catalog(env, "validate").returncode == 0  # allowed in review ...
    done = catalog(env, "resolve", "m")
    assert done.returncode == 1 and done.stdout == "", done.stdout  # ... but no path is handed to any loader
    assert "refused by picklescan" in done.stderr and "posix.system (dangerous)" in done.stderr
    assert "before any loader sees it" in done.stderr and not witness.exists()


def test_one_scan_per_digest_for_runners_sharing_a_tier(tmp_path: Path) -> None:
    data = _clean_pickle()
    digest = hashlib.sha256(data).hexdigest()
    env = _setup(tmp_path, {"config.json": CONFIG, "pytorch_model.bin": data}, extra=REASON)
    tier = tmp_path / "tier"
    done = catalog(env, "-v", "publish", "m", "--to", str(tier))
    assert done.returncode == 0 and done.stderr.count("scanned") == 1, done.stderr  # the publisher scans once
    record = json.loads((tier / "scan-verdicts" / digest[:2] / f"{digest}.json").read_text())
    assert record["sha256"] == digest and record["scanner"] == "picklescan" and record["clean"] is True
    for runner in ("a", "b"):
        done = catalog(
            {**env, "CATALOG_CACHE": str(tmp_path / runner)}, "-v", "resolve", "m", "--shared-cache", str(tier)
        )
        assert done.returncode == 0 and "scanned" not in done.stderr, done.stderr
    # A runner without the tier scans for itself, and keeps no verdict in its own cache.
    done = catalog({**env, "CATALOG_CACHE": str(tmp_path / "c")}, "-v", "resolve", "m")
    assert done.returncode == 0 and done.stderr.count("scanned") == 1
    assert not list((tmp_path / "c").rglob("*scan-verdicts*"))


@pytest.mark.parametrize("planted", ["another-version", "another-digest"])
def test_a_tier_verdict_is_taken_only_for_its_digest_and_scanner_version(tmp_path: Path, planted: str) -> None:
    payload = pickle.dumps(_System("true"))
    digest = hashlib.sha256(payload).hexdigest()
    env = _setup(tmp_path, {"config.json": CONFIG, "pytorch_model.bin": payload}, extra=REASON)
    tier = tmp_path / "tier"
    from importlib.metadata import version

    record = {
        "sha256": digest if planted == "another-version" else "0" * 64,
        "scanner": "picklescan",
        "version": "0.0.1" if planted == "another-version" else version("picklescan"),
        "clean": True,
        "findings": [],
    }
    (tier / "scan-verdicts" / digest[:2]).mkdir(parents=True)
    (tier / "scan-verdicts" / digest[:2] / f"{digest}.json").write_text(json.dumps(record))
    done = catalog(env, "resolve", "m", "--shared-cache", str(tier))
    assert done.returncode == 1 and "refused by picklescan" in done.stderr


def test_auto_map_code_needs_a_reason_and_trust_remote_code_follows_it(tmp_path: Path) -> None:
    config = json.dumps({"model_type": "tiny", "auto_map": {"AutoModel": "modeling_tiny.TinyModel"}}).encode()
    env = _setup(tmp_path, {"config.json": config, "model.safetensors": b"x" * 16}, fmt="safetensors")
    assert catalog(env, "validate").returncode == 0  # validate decides from paths: no code is pinned
    done = catalog(env, "resolve", "m")
    assert done.returncode == 1 and "auto_map names code" in done.stderr and "modeling_tiny.py" in done.stderr
    allowed = _setup(
        tmp_path / "allowed",
        {"config.json": config, "model.safetensors": b"x" * 16, "modeling_tiny.py": b"class TinyModel: pass\n"},
        extra=REASON,
        fmt="safetensors",
    )
    done = catalog(allowed, "resolve", "m", "--format", "vllm-args")
    assert done.returncode == 0 and "--trust-remote-code" in done.stdout.split(), done.stderr
    plain = _setup(tmp_path / "plain", {"config.json": CONFIG, "model.safetensors": b"x" * 16}, fmt="safetensors")
    done = catalog(plain, "resolve", "m", "--format", "vllm-args")
    assert done.returncode == 0 and "--trust-remote-code" not in done.stdout, done.stderr
