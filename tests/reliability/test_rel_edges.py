"""The edges of the sixth round's features, attacked (docs/reliability.md, "Abuse (new features' edges)"): every file the
catalog reads is bounded before it is read, JSON from outside is bounded in nesting, and user errors are one line.

Each test failed before its fix (a hang, a traceback, or the wrong verdict)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import manifest_text, write_catalog
from signing_keys import key_pair

from .support import ROOT, explain, run_catalog, write_generated_catalog  # (puts tests/ on the path: helpers, keys)

HANG_GUARD = 120  # seconds: a read that blocks or never ends fails the test instead of holding the suite


def env_for(tmp_path: Path, folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CATALOG_", "HF_", "AWS_"))}
    return env | {
        "HOME": str(tmp_path),
        "CATALOG_DIR": str(folder),
        "CATALOG_CACHE": str(tmp_path / "cache"),
        "PYTHONPATH": str(ROOT),
    }


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
    victim = {
        "manifest": folder / "x.yaml",
        "signature": folder / "tiny.sig",
        "tensor-tables": folder / "tiny.tensors.json",
        "trusted-key": keys.public,
    }[target]
    plant(victim, kind)
    done = run_catalog(["validate"], env_for(tmp_path, folder), timeout=HANG_GUARD)
    said = done.stdout + done.stderr
    assert done.returncode == 1, explain(done)
    what = (
        "leads outside"
        if kind == "dev-zero" and target != "trusted-key"
        else "is a character device"
        if kind == "dev-zero"
        else "is a FIFO"
    )
    lines = [line for line in said.splitlines() if victim.name in line and what in line and "refused unread" in line]
    assert len(lines) == 1, explain(done)
    assert "Traceback" not in said and "internal error" not in said


def safetensors(header: str, data: bytes) -> bytes:
    raw = header.encode()
    return len(raw).to_bytes(8, "little") + raw + data


def add_from_dir(tmp_path: Path, weights: bytes, *args: str) -> tuple[Path, object]:
    folder = write_catalog(tmp_path, {})
    source = tmp_path / "source"
    source.mkdir(exist_ok=True)
    (source / "config.json").write_text("{}")
    (source / "model.safetensors").write_bytes(weights)
    done = run_catalog(
        ["add", "org/tiny", "--revision", args[0] if args else "a" * 40, "--from-dir", str(source)],
        env_for(tmp_path, folder),
        timeout=HANG_GUARD,
    )
    return folder, done


@pytest.mark.parametrize(
    "header",
    [
        '{"w": {"dtype": "F32", "shape": [1%s], "data_offsets": [0, 4]}}' % ("0" * 400),  # 10**400: a float overflow
        '{"\\ud800": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}',  # a lone surrogate: no UTF-8 file holds it
        '{"w": %s}' % ("[" * 5000 + "]" * 5000),  # nesting: RecursionError
    ],
    ids=["shape-10**400", "lone-surrogate", "nested"],
)
def test_add_from_dir_refuses_a_hostile_header_in_one_line_and_writes_nothing(tmp_path: Path, header: str) -> None:
    """Before: exit 3 with a traceback's last line, and the scaffolded manifest left half-made."""
    folder, done = add_from_dir(tmp_path, safetensors(header, b"\0" * 4))
    assert done.returncode == 1, explain(done)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "tiny/model.safetensors" in errors[0] and "internal error" not in done.stderr, explain(
        done
    )
    assert sorted(p.name for p in folder.iterdir()) == ["catalog.yaml"]


def test_add_writes_a_revision_of_decimal_digits_as_text(tmp_path: Path) -> None:
    """Before: `revision: 1111...` (40 digits, a valid hex commit) was written bare, YAML read an int, validate refused."""
    weights = safetensors('{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', b"\0" * 4)
    folder, done = add_from_dir(tmp_path, weights, "1" * 40)
    assert done.returncode == 0, explain(done)
    assert f'revision: "{"1" * 40}"' in (folder / "tiny.yaml").read_text()
    assert run_catalog(["validate", str(folder / "tiny.yaml")], env_for(tmp_path, folder)).returncode == 0


@pytest.mark.parametrize("edited", ["someone", "nobody/ghost.bin"], ids=["a-folder", "a-key-that-never-existed"])
def test_an_edited_plan_whose_orphan_names_no_object_is_refused(tmp_path: Path, edited: str) -> None:
    """Before: a folder of the folder store was IsADirectoryError (exit 3); a key that never existed reported
    "deleted 1"."""
    manifests, data, names = write_generated_catalog(tmp_path, "edges-bucket", 1)
    store = tmp_path / "store"
    env = env_for(tmp_path, manifests) | {"CATALOG_STORE": str(store), "HF_ENDPOINT": "http://127.0.0.1:9"}
    assert run_catalog(["sync", "--from-dir", str(data)], env).returncode == 0
    (store / "someone" / "else").mkdir(parents=True)
    (store / "someone" / "else" / "w.bin").write_bytes(b"an orphan")
    plan = tmp_path / "plan.json"
    assert run_catalog(["sync", "--prune", "--delete-orphans", "--out", str(plan)], env).returncode == 0
    saved = json.loads(plan.read_text())
    (orphan,) = [i for i in saved["items"] if i["action"] == "orphan"]
    orphan["key"] = edited
    plan.write_text(json.dumps(saved))
    done = run_catalog(["sync", "--apply", str(plan), "--format", "json"], env)
    assert done.returncode == 2, explain(done)
    assert f"(orphan {edited}) names no object in the store" in done.stderr and "nothing was done" in done.stderr
    assert (store / "someone" / "else" / "w.bin").is_file() and "internal error" not in done.stderr


def test_a_faithful_copy_of_a_folder_store_keeps_its_sync_records_and_a_rewrite_does_not(tmp_path: Path) -> None:
    """Before: the ETag was the file identity, which a `cp -a` copy cannot keep (another inode and ctime): every record
    was invalid and the copy's first sync re-verified everything, as if each object had been rewritten."""
    import subprocess

    manifests, data, names = write_generated_catalog(tmp_path, "edges-bucket", 2)
    store, copy = tmp_path / "store", tmp_path / "copy"
    env = env_for(tmp_path, manifests) | {"CATALOG_STORE": str(store), "HF_ENDPOINT": "http://127.0.0.1:9"}
    assert run_catalog(["sync", "--from-dir", str(data)], env).returncode == 0
    subprocess.run(["cp", "-a", str(store), str(copy)], check=True)
    at_copy = env | {"CATALOG_STORE": str(copy)}
    check = run_catalog(["sync", "--check", "--format", "json"], at_copy)
    assert check.returncode == 0, explain(check)  # the copy is hashed once by this listing, its records hold
    again = run_catalog(["sync", "--check"], at_copy)
    assert again.returncode == 0, explain(again)

    in_place = copy / names[0] / "config.json"  # same size, other bytes, mtime put back: the touch -r attack
    before = in_place.stat()
    in_place.write_bytes(in_place.read_bytes().replace(b"llama", b"LLAMA"))
    os.utime(in_place, ns=(before.st_atime_ns, before.st_mtime_ns))
    replaced = copy / names[1] / "config.json"  # a new file renamed over it, same size and mtime: looks like a copy
    before = replaced.stat()
    twin = replaced.with_name("twin")
    twin.write_bytes(replaced.read_bytes().replace(b"llama", b"LLAMA"))
    os.utime(twin, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(twin, replaced)
    drift = run_catalog(["sync", "--check", "--format", "json"], at_copy)
    assert drift.returncode == 1, explain(drift)
    verify = {i["key"] for i in json.loads(drift.stdout)["plan"]["items"] if i["action"] == "verify"}
    assert verify == {f"{names[0]}/config.json", f"{names[1]}/config.json"}, explain(drift)


def test_gc_takes_a_fifo_in_the_warm_index_for_a_stale_entry(tmp_path: Path) -> None:
    """Before: gc opened it to read its markers and blocked forever."""
    folder = write_catalog(tmp_path, {"tiny.yaml": manifest_text("tiny")})
    index = tmp_path / "cache" / "warm-index"
    index.mkdir(parents=True)
    os.mkfifo(index / "planted.json")
    done = run_catalog(["gc"], env_for(tmp_path, folder), timeout=HANG_GUARD)
    assert done.returncode == 0, explain(done)
    assert not (index / "planted.json").exists()
