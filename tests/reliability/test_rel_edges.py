"""The edges of the sixth round's features, attacked (docs/reliability.md, "Abuse (new features' edges)"): every file the
catalog reads is bounded before it is read, JSON from outside is bounded in nesting, and user errors are one line.

Each test failed before its fix (a hang, a traceback, or the wrong verdict)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from .support import ROOT, TESTS, explain, run_catalog

sys.path.insert(0, str(TESTS))
from helpers import manifest_text, write_catalog  # noqa: E402
from signing_keys import key_pair  # noqa: E402

HANG_GUARD = 120  # seconds: a read that blocks or never ends fails the test instead of holding the suite


def env_for(tmp_path: Path, folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CATALOG_", "HF_", "AWS_"))}
    return env | {"HOME": str(tmp_path), "CATALOG_DIR": str(folder), "CATALOG_CACHE": str(tmp_path / "cache"),
                  "PYTHONPATH": str(ROOT)}


def plant(path: Path, kind: str) -> None:
    """A committed symlink to /dev/zero, or a FIFO nobody writes: what a hostile PR or a broken checkout holds."""
    path.unlink(missing_ok=True)
    if kind == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        os.mkfifo(path)


@pytest.mark.parametrize("kind", ["dev-zero", "fifo"])
@pytest.mark.parametrize("target", ["manifest", "signature", "tensor-tables", "trusted-key"])
def test_validate_refuses_a_device_or_fifo_in_the_catalog_in_one_line(tmp_path: Path, target: str, kind: str) -> None:
    """Before: a link to /dev/zero made `validate` (the pre-commit hook) grow without bound (7.4 GB in 15 s); a FIFO
    blocked it forever (sizes were checked after reading)."""
    keys = key_pair(tmp_path / "keys")
    settings = (ROOT / "manifests" / "catalog.yaml").read_text() + "trusted_keys: [../keys/signer.pub]\n"
    folder = write_catalog(tmp_path, {"tiny.yaml": manifest_text("tiny")}, settings=settings)
    (folder / "tiny.sig").write_text("{}")  # any signature: validate then reads the trusted key and the signature
    victim = {"manifest": folder / "x.yaml", "signature": folder / "tiny.sig", "tensor-tables": folder / "tiny.tensors.json",
              "trusted-key": keys.public}[target]
    plant(victim, kind)
    done = run_catalog(["validate"], env_for(tmp_path, folder), timeout=HANG_GUARD)
    said = done.stdout + done.stderr
    assert done.returncode == 1, explain(done)
    what = "leads outside" if kind == "dev-zero" and target != "trusted-key" else \
        "is a character device" if kind == "dev-zero" else "is a FIFO"
    lines = [line for line in said.splitlines() if victim.name in line and what in line and "refused unread" in line]
    assert len(lines) == 1, explain(done)
    assert "Traceback" not in said and "internal error" not in said
