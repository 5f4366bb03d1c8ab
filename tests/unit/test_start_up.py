"""The console's process runs its start-up without the cyclic collector and turns it on once the catalog is loaded;
an in-process caller of `run` (tests, the pytest plugin) keeps its collector as it was."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

from catalog_app.main import run

ROOT = Path(__file__).resolve().parents[2]


def test_the_console_collects_nothing_until_the_catalog_is_loaded_then_collects_again(tmp_path: Path) -> None:
    probe = (
        "import gc, sys\n"
        "collections = []\n"
        "gc.callbacks.append(lambda phase, info: collections.append(info['generation']) if phase == 'start' else None)\n"
        "from catalog_app import main\n"
        "sys.argv = ['catalog', 'list']\n"
        "collections.clear()\n"
        "try:\n"
        "    main.main()\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "print(code, len(collections), gc.isenabled(), file=sys.stderr)\n"
    )
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "CATALOG_DIR": str(ROOT / "manifests"),
        "CATALOG_CACHE": str(tmp_path / "c"),
    }
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
    )
    code, collections, enabled = done.stderr.strip().splitlines()[-1].split()
    assert code == "0", done.stderr
    assert "tiny-llama" in done.stdout
    # Importing click, pydantic and our modules and loading the bundled catalog ran about 150 collections before.
    assert int(collections) == 0
    assert enabled == "True"


def test_an_in_process_caller_keeps_its_collector(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CATALOG_CACHE", str(tmp_path / "c"))
    frozen = gc.get_freeze_count()
    assert gc.isenabled()
    assert run(["--catalog", str(ROOT / "manifests"), "list"]) == 0
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen
