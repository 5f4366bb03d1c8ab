"""The README's main job on the embedded default: validate and list the bundled catalog, show a model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CATALOG = [sys.executable, "-m", "catalog", "--catalog", str(ROOT / "manifests")]


def step(title: str, *args: str) -> None:
    print(f"\n$ catalog {' '.join(args)}    # {title}", flush=True)
    done = subprocess.run([*CATALOG, *args], cwd=ROOT)
    if done.returncode != 0:
        sys.exit(done.returncode)


def main() -> None:
    step("every manifest, every rule", "validate")
    step("the bundled models", "list")
    step("one model by its logical name", "show", "tiny-llama")


if __name__ == "__main__":
    main()
