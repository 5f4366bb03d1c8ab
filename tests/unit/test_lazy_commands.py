"""The command group loads a command's module only when that command runs; the table it loads from names every
command each module defines."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

from catalog_app.cli import COMMAND_MODULES, cli

ROOT = Path(__file__).resolve().parents[2]


def test_the_table_names_every_command_of_every_module_and_nothing_else() -> None:
    modules = sorted(p.stem for p in (ROOT / "catalog_app" / "commands").glob("*.py") if p.stem != "__init__")
    defined = {str(c.name): m for m in modules for c in importlib.import_module(f"catalog_app.commands.{m}").COMMANDS}
    assert defined == COMMAND_MODULES
    assert set(cli.load_all()) >= set(COMMAND_MODULES)


def test_a_command_imports_its_own_module_only(tmp_path: Path) -> None:
    probe = (
        "import sys; from catalog_app.main import run; code = run(['list']); "
        "print(sorted(m for m in sys.modules if m.startswith('catalog_app.commands.')), file=sys.stderr); sys.exit(code)"
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
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "['catalog_app.commands.catalog']"
    assert "tiny-llama" in done.stdout
