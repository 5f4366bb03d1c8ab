"""Which filesystem holds a folder, from Linux's /proc/self/mountinfo (a pure parser and a thin reader), and
whether vLLM should be told to prefetch safetensors from it. Standard library only.

vLLM 0.32 (`vllm/model_executor/model_loader/weight_utils.py`, `safetensors_weights_iterator`) memory-maps
safetensors (`lazy`) unless told otherwise. Without `--safetensors-load-strategy` it prefetches the files into
the page cache by itself only when `_get_fs_type` (the longest mount point of /proc/mounts containing the first
file's real path) is exactly `nfs`, `nfs4` or `lustre` and the checkpoint fits 90% of the available RAM. On any
other network or virtual filesystem the memory-mapped reads become many small requests through a network
or a userspace daemon (one report: 170 s per shard on virtiofs, 12.5 s with prefetch). So the flag is added
for the types in `PREFETCH_TYPES` and every FUSE mount (`fuse.<daemon>`, or plain `fuse`), never for nfs,
nfs4 and lustre (vLLM decides, and keeps its RAM guard there) nor a local disk (ext4, xfs, btrfs, zfs,
overlay, tmpfs, ... and `fuseblk`, a FUSE driver of a local block device such as ntfs-3g).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")

# What vLLM 0.32 prefetches from by itself (weight_utils.py: `fs_type in ("nfs", "nfs4", "lustre")`).
ENGINE_PREFETCHES = frozenset({"nfs", "nfs4", "lustre"})
# Network and virtual filesystems vLLM does not recognize (FUSE mounts are matched by prefix).
PREFETCH_TYPES = frozenset(
    {
        "virtiofs",
        "9p",
        "drvfs",
        "vboxsf",
        "vmhgfs",  # a hypervisor's or WSL's shares
        "cifs",
        "smb3",
        "smbfs",  # SMB
        "ceph",
        "glusterfs",
        "gpfs",
        "beegfs",
        "wekafs",
        "panfs",
        "orangefs",
        "pvfs2",
        "afs",
        "ocfs2",
        "gfs2",  # cluster
        "fuse",  # a FUSE mount that names no daemon
    }
)

_OCTAL = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class Mount:
    mount_point: str
    fstype: str
    source: str


def parse_mountinfo(text: str) -> list[Mount]:
    """Every mount of a mountinfo text, in its order (a later mount on the same point hides an earlier one).

    A line is `id parent major:minor root mount-point options [optional fields...] - fstype source super-options`;
    paths escape space, tab, newline and backslash as octal (`\\040`). Lines that do not parse are skipped.
    """
    mounts = []
    for line in text.splitlines():
        before, sep, after = line.partition(" - ")
        fields, tail = before.split(" "), after.split(" ")
        if not sep or len(fields) < 6 or not tail[0]:
            continue
        mounts.append(Mount(_unescape(fields[4]), _unescape(tail[0]), _unescape(tail[1]) if len(tail) > 1 else ""))
    return mounts


def _unescape(field: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def mount_of(path: str, mounts: Sequence[Mount]) -> Mount | None:
    """The mount serving `path` (absolute, symlinks resolved): the longest mount point containing it, the last
    one listed when several share that point (the one on top)."""
    best: Mount | None = None
    for mount in mounts:
        point = mount.mount_point
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best.mount_point)):
            best = mount
    return best


def filesystem_type(folder: Path, mountinfo: Path = MOUNTINFO) -> str | None:
    """The type of the filesystem holding `folder` (its real path, as the engine resolves it); None where the
    mount table cannot be read (not Linux) or names no mount for it."""
    try:
        text = mountinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    mount = mount_of(os.path.realpath(folder), parse_mountinfo(text))
    return mount.fstype if mount is not None else None


def needs_prefetch(fstype: str | None) -> bool:
    """Whether vLLM loads safetensors from this filesystem faster with `--safetensors-load-strategy prefetch`
    and would not prefetch by itself."""
    if fstype is None or fstype in ENGINE_PREFETCHES:
        return False
    return fstype in PREFETCH_TYPES or fstype.startswith("fuse.")
