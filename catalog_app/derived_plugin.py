"""The pytest plugin's compile cache (`--catalog-compile-cache DIR`): before the first test, every model the collected
tests mark is restored into the engine cache folder DIR (`catalog derived restore`, kind vllm-compile, keyed with
`--catalog-engine-args`), and this process's environment gets what the engine is to run with (VLLM_CACHE_ROOT=DIR,
...), so an engine the tests start finds it; after the session, what the engine left in DIR is published for each of
them (`catalog derived publish`). One folder serves the whole session: each model's entry holds what the folder holds,
so a session of one model (and one set of engine arguments) makes the leanest entries.

Registered by catalog_app/pytest_plugin.py only when the option is given; imports the resolver on first use.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pytest

from catalog.errors import CatalogError

if TYPE_CHECKING:
    from catalog.lookup import Catalog
    from catalog.settings import Settings
    from resolver.cache import Cache
    from resolver.derived import RestoreReport
    from resolver.resolve import ResolveOptions
    from resolver.stores import Store

MARKER = "catalog_model"


class Session(Protocol):
    """The catalog plugin's session (catalog_app/pytest_plugin.py): its catalog, store, cache and settings."""

    @property
    def settings(self) -> Settings | None: ...

    def setup(self) -> tuple[Catalog, Store, Cache, ResolveOptions]: ...


def add_options(group: pytest.OptionGroup) -> None:
    group.addoption(
        "--catalog-compile-cache",
        metavar="DIR",
        default=None,
        help="Restore the vLLM compile cache of every model the collected tests mark into the engine cache "
        "folder DIR before the first test (and set VLLM_CACHE_ROOT and the rest for this session); "
        "publish what the engine left there after the session.",
    )
    group.addoption(
        "--catalog-engine-args",
        metavar="ARGS",
        default="",
        help="The engine arguments the tests give vLLM (shell-quoted, e.g. '--dtype float32 --max-model-len "
        "64'): the compile cache's key keeps those that change compilation.",
    )


def configure(config: pytest.Config, session: Session) -> None:
    folder = config.getoption("catalog_compile_cache")
    if folder:
        plugin = CompileCache(Path(folder), shlex.split(config.getoption("catalog_engine_args")), session)
        config.pluginmanager.register(plugin, "model_catalog_compile_cache")


def _report(config: pytest.Config, line: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)


class CompileCache:
    def __init__(self, folder: Path, args: list[str], session: Session) -> None:
        self.folder = folder
        self.args = args
        self.session = session
        self.restored: list[RestoreReport] = []

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        from catalog.derived import VLLM_COMPILE
        from resolver.derived import Probe, restore

        if session.config.option.collectonly:
            return
        names = {
            m.args[0]
            for item in session.items
            for m in item.iter_markers(MARKER)
            if len(m.args) == 1 and isinstance(m.args[0], str)
        }  # a malformed marker: that test reports it
        if not names:
            return
        state = self.session
        cat, store, cache, options = state.setup()
        assert state.settings is not None
        probe = Probe.here(VLLM_COMPILE)
        for name in sorted(names):
            try:
                report = restore(
                    cat,
                    name,
                    VLLM_COMPILE,
                    self.args,
                    self.folder,
                    cache=cache,
                    store=store,
                    options=options,
                    env=state.settings.engine_env,
                    probe=probe,
                )
            except CatalogError as exc:
                _report(session.config, f"catalog: compile cache of {name} not restored: {exc.message}")
                continue
            self.restored.append(report)
            os.environ.update(
                report.env
            )  # the engine the tests start reads them (one folder: the same for every model)
            _report(
                session.config,
                f"catalog: compile cache of {name}: "
                + (
                    f"restored {report.restored} file(s) into {self.folder}"
                    if report.hit
                    else f"none ({report.reason}); the engine compiles"
                ),
            )

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from catalog.derived import VLLM_COMPILE
        from resolver.derived import Probe, publish

        if not self.restored:
            return
        state = self.session
        cat, store, cache, _ = state.setup()
        assert state.settings is not None
        probe = Probe.here(VLLM_COMPILE)
        for report in self.restored:
            try:
                done = publish(
                    cat,
                    report.name,
                    VLLM_COMPILE,
                    self.folder,
                    cache=cache,
                    store=store,
                    env=state.settings.engine_env,
                    probe=probe,
                )
            except CatalogError as exc:
                _report(session.config, f"catalog: compile cache of {report.name} not published: {exc.message}")
                continue
            _report(
                session.config,
                f"catalog: compile cache of {report.name}: "
                + (f"published {done.files} file(s)" if done.published else done.reason),
            )
