"""Small filesystem helpers with one job each: atomic writes, links, and swapping two names. Standard library only."""

from __future__ import annotations

import errno
import functools
import os
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from catalog import naming
from catalog.errors import UnsafePathError
from resolver.view_stamps import replace_atomically

STAGING = re.compile(
    r"^\..+~catalog\.(\d+)-[0-9a-f]+$"
)  # validation refuses it in pinned paths: catalog.naming.CACHE_STAGING
_LEGACY_STAGING = re.compile(r"^\..+\.(\d+)-[0-9a-f]+$")  # what versions before the mark wrote


def staging_owner(name: str) -> int | None:
    """The pid in a staging name (the marked form, or the unmarked one older versions left), None for any
    other name."""
    match = STAGING.match(name) or _LEGACY_STAGING.match(name)
    return int(match.group(1)) if match else None


def pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so a reader sees the old content or the new, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_atomically(str(path), data)


def exchange(a: Path, b: Path) -> bool:
    """Swap what the names `a` and `b` point at in one step (Linux's renameat2 RENAME_EXCHANGE): no moment where
    either name is absent. False, with nothing changed, where the kernel, the C library or the filesystem lacks it
    (NFS, FUSE filesystems that do not implement it, kernels before 3.15, macOS); OSError for anything else (one of
    them missing, say)."""
    call = _renameat2()
    if call is None:
        return False
    import ctypes

    if call(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
        return False  # not supported here (EPERM: a seccomp filter of an older container runtime)
    raise OSError(err, os.strerror(err), str(a), None, str(b))


_AT_FDCWD, _RENAME_EXCHANGE = -100, 2  # <fcntl.h>, <linux/fs.h>


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    """glibc's (2.28 and later) renameat2, loaded once and only by the first exchange: ctypes costs milliseconds
    to import and a warm resolve never swaps a folder."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        call = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    call.restype = ctypes.c_int
    return call


def remove_tree(path: Path) -> None:
    """Remove `path` whatever it is (a folder's tree, a file, a symlink: never what a symlink points at); best effort."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


def link_or_copy(source: Path, target: Path) -> None:
    """Hard link (no extra space, same inode as the blob), falling back to a read-only copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
        os.chmod(target, 0o444)


def safe_join(root: Path, relative: str) -> Path:
    """root/relative, proven to stay inside root (no '..', no absolute path, no symlinked parent)."""
    if (message := naming.check_relative_path(relative)) is not None:
        raise UnsafePathError(f"refusing to write {relative!r}: {message}")
    target = root / relative
    parent = target.parent
    real_root = root.resolve()
    if not parent.resolve().is_relative_to(real_root):
        raise UnsafePathError(f"refusing to write {relative!r}: {parent} leads outside {root}")
    return target


def prepared_target(root: Path, relative: str, made: set[Path]) -> Path:
    """`safe_join(root, relative)` with the target's folder created. `made`: the caller's folders already proven and
    created under `root` (one set per tree it writes), so a tree of many files in few folders resolves and creates
    each folder once: resolving a path walks every part from / (about 40 stats a file for a dataset's shards)."""
    target = root / relative
    if target.parent in made and naming.check_relative_path(relative) is None:
        return target
    target = safe_join(root, relative)
    target.parent.mkdir(parents=True, exist_ok=True)
    made.add(target.parent)
    return target


def lock_free(path: Path, exclusive: bool) -> bool | None:
    """Whether this process could take a flock on `path` now without waiting (shared or exclusive): True, False
    while another holds a conflicting one, None where it cannot be told (no flock on that filesystem, not POSIX).
    Only probes: the lock is released at once. OSError when `path` cannot be opened."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return None
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        return False if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES) else None
    finally:
        os.close(fd)
