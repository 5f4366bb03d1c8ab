"""This machine's GPU class: what the pytest plugin skips by, and whose engine profile `catalog resolve` hands out.

CATALOG_GPU_CLASS (+ CATALOG_GPU_COUNT) when declared, else torch.cuda's view of the devices (asked in a child
process), matched to the catalog's classes by name and memory, else the `cpu` class. A machine with no accelerator
device node at all is a CPU machine without asking torch (a second or more of start-up, paid by every full resolve
of a model with profiles otherwise).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from catalog.errors import UsageError

if TYPE_CHECKING:
    from catalog.schema import CatalogSettings, GpuClass
    from catalog.settings import Settings

CPU = "cpu"  # the catalog's class for models that need no accelerator: they run on any machine
# What an NVIDIA (CUDA), AMD (ROCm) or WSL GPU driver creates: without any of them torch sees no device either.
DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")


@dataclass(frozen=True)
class Machine:
    gpu_class: str  # a catalog class, or the device's own name when no class matches
    count: int
    memory_gib: float  # per device

    def describe(self) -> str:
        return f"{self.count} x {self.gpu_class} ({self.memory_gib:g} GiB)"


def match_gpu_class(device: str, memory_gib: float, classes: Mapping[str, GpuClass]) -> str | None:
    """The catalog class for a device name ("NVIDIA H200", "AMD Instinct MI300X"): classes whose base name
    (h200 of h200_18gb) is a word of the device name, the one closest in memory (MIG slices share a name)."""
    words = re.findall(r"[a-z0-9]+", device.lower())

    def named(key: str) -> bool:
        base = key.split("_")[0]
        # "mi300x" is an mi300; "l40s" is not an l4.
        return any(w == base or (w.startswith(base) and w[len(base) :].isalpha()) for w in words)

    candidates = [key for key in classes if key != CPU and named(key)]
    if not candidates:
        return None
    return min(candidates, key=lambda key: abs(classes[key].memory_gib - memory_gib))


def detect_machine(
    settings: CatalogSettings, declared: Settings, probe: Callable[[], tuple[str, int, float] | None] | None = None
) -> Machine:
    """CATALOG_GPU_CLASS (+ CATALOG_GPU_COUNT) when declared, else torch.cuda's first device, else a CPU machine.

    A declaration wins over detection so that a runner (and a test) can state exactly what it is, e.g. a MIG
    slice that reports its parent's name.
    """
    if declared.gpu_class:
        if declared.gpu_class not in settings.gpu_classes:
            raise UsageError(
                f"CATALOG_GPU_CLASS={declared.gpu_class!r} is not a GPU class of the catalog",
                hint=f"known: {', '.join(sorted(settings.gpu_classes))}",
            )
        return Machine(declared.gpu_class, declared.gpu_count, settings.gpu_classes[declared.gpu_class].memory_gib)
    found = (probe or probe_cuda)()
    if found is None:
        cpu = settings.gpu_classes.get(CPU)
        return Machine(CPU, 1, cpu.memory_gib if cpu else 0.0)
    name, count, memory = found
    matched = match_gpu_class(name, memory, settings.gpu_classes)
    if matched is None:
        return Machine(name, count, round(memory, 1))
    # The catalog's figure, not the measured one: an H200 reports 140.4 GiB and must still fit an h200 model.
    return Machine(matched, count, settings.gpu_classes[matched].memory_gib)


_PROBE = """\
import json, torch
if torch.cuda.is_available() and torch.cuda.device_count():
    p = torch.cuda.get_device_properties(0)
    print(json.dumps([p.name, torch.cuda.device_count(), p.total_memory / 2**30]))
else:
    print("null")
"""


def probe_cuda(nodes: Sequence[str] = DEVICE_NODES) -> tuple[str, int, float] | None:
    """torch.cuda's view of the devices, asked in a child process: initializing CUDA in the test process
    would break every test that later forks a CUDA worker. None at once where no device node exists."""
    if not any(os.path.exists(node) for node in nodes) or importlib.util.find_spec("torch") is None:
        return None
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True)
        data = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    if not isinstance(data, list):
        return None
    return str(data[0]), int(data[1]), float(data[2])
