"""Where the catalog and the cache are, from the environment and the working directory alone.

Shared by `catalog.settings` and the warm resolve (catalog_app/warm.py), which must find both before anything
heavier than `os` is imported; strings in, strings out. None means "not found": the callers word the error.
"""

from __future__ import annotations

import os

from catalog import front_door

TYPE_CHECKING = False  # typing's import is a measurable share of a warm resolve; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Mapping

MANIFESTS_DIR = "manifests"
CATALOG_FILE = "catalog.yaml"
CACHE_FOLDER = "model-catalog"
_HOME, _XDG_CACHE_HOME = front_door.declared("HOME"), front_door.declared("XDG_CACHE_HOME")  # keyed by the warm answers


def user_home(env: Mapping[str, str]) -> str | None:
    """$HOME when it is an absolute path, else the user database's home; an empty or relative one is none."""
    home = env.get(_HOME) or ""
    if os.path.isabs(home):
        return home
    try:
        import pwd

        home = pwd.getpwuid(os.getuid()).pw_dir
    except (ImportError, KeyError):
        home = ""
    return home if os.path.isabs(home) else None


def default_cache_dir(env: Mapping[str, str]) -> str | None:
    """$XDG_CACHE_HOME/model-catalog, else ~/.cache/model-catalog. A relative XDG_CACHE_HOME is ignored, as the XDG
    spec says; without a home there is no default (never `/.cache`)."""
    xdg = env.get(_XDG_CACHE_HOME) or ""
    if os.path.isabs(xdg):
        return os.path.join(xdg, CACHE_FOLDER)
    home = user_home(env)
    return None if home is None else os.path.join(home, ".cache", CACHE_FOLDER)


def find_catalog_dir(start: str) -> str | None:
    """The nearest `manifests/` holding a catalog.yaml, from `start` (resolved through symlinks) upward."""
    here = os.path.realpath(start)
    while True:
        if os.path.basename(here) == MANIFESTS_DIR and os.path.isfile(os.path.join(here, CATALOG_FILE)):
            return here
        candidate = os.path.join(here, MANIFESTS_DIR)
        if os.path.isfile(os.path.join(candidate, CATALOG_FILE)):
            return candidate
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent
