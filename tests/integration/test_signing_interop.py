"""Interoperability with OpenSSF model signing, both ways, through model-signing 1.1.1's own CLI: every bundled model's
resolved view verifies (`verify key`, `verify certificate`) with the signature `catalog sign` made from the manifest
alone (its predicate also carries the manifest's subject, which model-signing does not read); a signature
`model_signing sign key|certificate` made over a folder holding exactly the pinned files plus the subject file
`catalog sign NAME --subject-into DIR` writes verifies in the catalog, and one over the pinned files alone is refused
as covering the files only; a changed byte, a missing file and an extra file each fail on both sides."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from signing_keys import Chain, KeyPair, key_pair, model_signing, pinned_folder, pki

from catalog.lookup import Catalog
from resolver.stores import open_store
from resolver.upload import upload_from_dir

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class World:
    tmp: Path
    env: dict[str, str]
    key: KeyPair
    org: Chain
    views: dict[str, Path]  # every bundled model, resolved with all its files local

    def catalog_copy(self, name: str) -> Path:
        """A fresh copy of the bundled manifests, unsigned, trusting the key and the organisation's root."""
        folder = self.tmp / name / "manifests"
        shutil.copytree(ROOT / "manifests", folder)
        for stray in folder.glob("*.sig"):
            stray.unlink()
        with open(folder / "catalog.yaml", "a") as f:
            f.write(
                f"signatures: required\ntrusted_keys: [{self.key.public}]\ntrusted_roots: [{self.org.root}]\n"
                "trusted_identities: [{identity: CN=org signer, issuer: CN=org intermediate}]\n"
            )
        return folder

    def catalog(self, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "catalog", *args],
            capture_output=True,
            text=True,
            env={**self.env, "CATALOG_DIR": str(folder)},
        )


@pytest.fixture(scope="module")
def world(bundled: Catalog, sources: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> World:
    tmp = tmp_path_factory.mktemp("interop")
    store = tmp / "store"
    for name in sources:
        upload_from_dir(bundled, name, sources[name], open_store(str(store)))
    base = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
    env = {**base, "HOME": str(tmp / "home"), "CATALOG_STORE": str(store), "CATALOG_CACHE": str(tmp / "cache")}
    done = subprocess.run(
        [sys.executable, "-m", "catalog", "resolve", "--all", "--materialize-weights", "--format", "json"],
        capture_output=True,
        text=True,
        env={**env, "CATALOG_DIR": str(ROOT / "manifests")},
    )
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout)
    views = {a["name"]: Path(a["path"]) for a in (answers if isinstance(answers, list) else [answers])}
    assert set(views) == set(bundled.models) == set(sources)
    return World(tmp, env, key_pair(tmp / "keys"), pki(tmp / "pki", "org"), views)


def test_catalog_signatures_verify_with_model_signing_on_every_resolved_view(world: World) -> None:
    keyed, certified = world.catalog_copy("keyed"), world.catalog_copy("certified")
    assert world.catalog(keyed, "sign", "--all", "--private-key", str(world.key.private)).returncode == 0
    done = world.catalog(
        certified, "sign", "--all", "--private-key", str(world.org.key), "--certificate", str(world.org.chain)
    )
    assert done.returncode == 0, done.stderr
    names = sorted(world.views)
    results = model_signing(
        *[
            ["verify", "key", world.views[n], "--signature", keyed / f"{n}.sig", "--public_key", world.key.public]
            for n in names
        ],
        *[
            [
                "verify",
                "certificate",
                world.views[n],
                "--signature",
                certified / f"{n}.sig",
                "--certificate_chain",
                world.org.root,
            ]
            for n in names
        ],
        env=world.env,
    )
    assert all(code == 0 and "Verification succeeded" in output for code, output in results), list(
        zip(names * 2, results, strict=True)
    )
    # ... and the catalog itself accepts them for the same views (resolve re-checks before handing them out)
    for folder in (keyed, certified):
        done = world.catalog(folder, "resolve", *names, "--materialize-weights", "--format", "json")
        assert done.returncode == 0, done.stderr


def test_model_signing_signatures_over_the_pinned_files_verify_in_the_catalog(world: World) -> None:
    keyed, certified = world.catalog_copy("ms-keyed"), world.catalog_copy("ms-certified")
    names = sorted(world.views)
    folders = {n: pinned_folder(world.views[n], world.tmp / "ms-folders" / n) for n in names}
    for n in names:  # the fields that change what is loaded, as one more file model_signing signs
        done = world.catalog(keyed, "sign", n, "--subject-into", str(folders[n]))
        assert done.returncode == 0 and done.stdout.strip() == str(folders[n] / ".model-catalog-subject.json"), (
            done.stderr
        )
    results = model_signing(
        *[
            ["sign", "key", folders[n], "--signature", keyed / f"{n}.sig", "--private_key", world.key.private]
            for n in names
        ],
        *[
            [
                "sign",
                "certificate",
                folders[n],
                "--signature",
                certified / f"{n}.sig",
                "--private_key",
                world.org.key,
                "--signing_certificate",
                world.org.leaf,
                "--certificate_chain",
                world.org.intermediate,
            ]
            for n in names
        ],
        env=world.env,
    )
    assert all(code == 0 and "Signing succeeded" in output for code, output in results), results
    for folder in (keyed, certified):
        done = world.catalog(folder, "validate")
        assert done.returncode == 0, done.stdout + done.stderr
        done = world.catalog(folder, "resolve", *names, "--materialize-weights", "--format", "json")
        assert done.returncode == 0, done.stderr
        done = world.catalog(folder, "verify", "--signatures")
        assert done.returncode == 0, done.stdout + done.stderr


def _damage(folder: Path, how: str) -> str:
    """Change one byte of the weights, remove the config, or add a file; returns the file named by a verifier."""
    if how == "changed-byte":
        weights = folder / "model.safetensors"
        data = bytearray(weights.read_bytes())
        data[-1] ^= 1
        weights.write_bytes(bytes(data))
        return "model.safetensors"
    if how == "missing-file":
        (folder / "config.json").unlink()
        return "config.json"
    (folder / "extra.json").write_text("{}")
    return "extra.json"


CASES = ("changed-byte", "missing-file", "extra-file")


def test_a_changed_byte_a_missing_file_and_an_extra_file_fail_on_both_sides(world: World) -> None:
    name = "tiny-llama"
    ours = world.catalog_copy("negative-ours")
    assert world.catalog(ours, "sign", name, "--private-key", str(world.key.private)).returncode == 0
    folders = {how: pinned_folder(world.views[name], world.tmp / "negative" / how) for how in CASES}
    named = {how: _damage(folders[how], how) for how in CASES}
    theirs = {how: world.catalog_copy(f"negative-{how}") for how in CASES}
    results = model_signing(
        # model_signing refuses the damaged folders against the catalog's signature ...
        *[
            ["verify", "key", folders[how], "--signature", ours / f"{name}.sig", "--public_key", world.key.public]
            for how in CASES
        ],
        # ... and signs them, for the catalog to refuse
        *[
            [
                "sign",
                "key",
                folders[how],
                "--signature",
                theirs[how] / f"{name}.sig",
                "--private_key",
                world.key.private,
            ]
            for how in CASES
        ],
        env=world.env,
    )
    for how, (code, output) in zip(CASES, results[:3], strict=True):
        assert code == 1 and "Verification failed" in output and named[how] in output, (how, output)
    assert [code for code, _ in results[3:]] == [0, 0, 0]
    expected = {
        "changed-byte": "'model.safetensors' is pinned as sha256",
        "missing-file": "'config.json' is pinned but not signed",
        "extra-file": "'extra.json' is signed but not pinned",
    }
    for how in CASES:
        done = world.catalog(theirs[how], "validate", str(theirs[how] / f"{name}.yaml"))
        assert done.returncode == 1 and expected[how] in done.stdout and f"{name}.yaml:" in done.stdout, done.stdout
        done = world.catalog(theirs[how], "resolve", name)
        assert done.returncode == 1 and expected[how] in done.stderr and "refused before any download" in done.stderr
    # model_signing over the pinned files alone: valid, but it does not cover tokenizer, loader, load_format ...
    files_only = world.catalog_copy("negative-files-only")
    assert (
        model_signing(
            [
                "sign",
                "key",
                pinned_folder(world.views[name], world.tmp / "negative" / "files-only"),
                "--signature",
                files_only / f"{name}.sig",
                "--private_key",
                world.key.private,
            ],
            env=world.env,
        )[0][0]
        == 0
    )
    done = world.catalog(files_only, "validate", str(files_only / f"{name}.yaml"))
    assert done.returncode == 1 and "signs the files only" in done.stdout and "--subject-into" not in done.stdout
    done = world.catalog(files_only, "resolve", name)
    assert done.returncode == 1 and "signs the files only" in done.stderr and "--subject-into DIR" in done.stderr
    # A file pinned after model_signing signed exactly the pinned files: the catalog refuses the signature.
    exact = world.catalog_copy("negative-extra-pin")
    assert (
        model_signing(
            [
                "sign",
                "key",
                pinned_folder(world.views[name], world.tmp / "negative" / "exact"),
                "--signature",
                exact / f"{name}.sig",
                "--private_key",
                world.key.private,
            ],
            env=world.env,
        )[0][0]
        == 0
    )
    manifest = exact / f"{name}.yaml"
    manifest.write_text(manifest.read_text() + "  - path: added.json\n    size: 2\n    sha256: " + "ab" * 32 + "\n")
    done = world.catalog(exact, "validate", str(manifest))
    assert done.returncode == 1 and "'added.json' is pinned but not signed" in done.stdout
