"""pytest plugin (entry point `pytest11: model_catalog`): tests ask for models by logical name.

    @pytest.mark.catalog_model("tiny-llama")
    def test_generate(catalog_resolution):          # resolved and verified before the test runs
        engine = load(catalog_resolution.model)

    def test_embed(catalog_model):                  # or resolve inside the test
        minilm = catalog_model("all-minilm-l6-v2", layout="hf-cache")

    def test_serve(catalog_ready):                  # resolve + engine start, held to the profile's ready-time budget
        with catalog_ready("tiny-llama") as r:
            engine = start(engine_args(r))

A marked test is skipped, before anything is downloaded, when its model's GPU class needs more memory per
device or more devices than this machine has ("tiny-x needs 1 x h200 (141 GiB); this machine is 1 x l4
(24 GiB)"). A Resolution carries the manifest's engine profile for this machine's class (`engine_args` adds it).

- `--catalog-preflight`: after collection, map each test to the models it uses (catalog_app/model_refs.py says
  how, and what it cannot see) and check from stats alone that this runner holds their pins; fail naming
  test -> manifest:line -> missing files before any test runs. `--catalog-prefetch` fetches what is missing instead.
- The Hub guard (catalog_app/hub_guard.py): on when CATALOG_MODE=ci is set, or with `--catalog-hub-guard`; every
  Hub request of the session and its processes is refused and fails the test that made it, naming the pin.
- The session report: the terminal summary, and `--catalog-report FILE` (`--catalog-report-format json|markdown`).

Settings come from the environment like the CLI's: CATALOG_DIR, CATALOG_STORE, CATALOG_CACHE, CATALOG_MODE
(ci|dev|offline); the machine from CATALOG_GPU_CLASS / CATALOG_GPU_COUNT, else torch.cuda (catalog_app/machine.py).

Importing this module (pytest does, in every session of an environment where model-catalog is installed)
imports neither boto3 nor torch; the resolver is imported on first use.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from catalog.errors import CatalogError, UsageError
from catalog_app import derived_plugin
from catalog_app.machine import CPU, Machine, detect_machine, match_gpu_class, probe_cuda

if TYPE_CHECKING:  # the catalog and resolver load on first use: every pytest session imports this module
    from catalog.lookup import Catalog
    from catalog.schema import ModelManifest
    from catalog.settings import Settings
    from catalog.yamlsource import LineMap, Loc
    from catalog_app.context import Invocation
    from catalog_app.hub_guard import HubAsk, HubGuard, Verdict
    from catalog_app.model_refs import Names, Ref
    from resolver.cache import Cache
    from resolver.resolution import Resolution
    from resolver.resolve import ResolveOptions
    from resolver.stores import Store

__all__ = ["CPU", "MARKER", "RESOLUTIONS", "Machine", "detect_machine", "match_gpu_class", "probe_cuda", "skip_reason"]

MARKER = "catalog_model"
RESOLUTIONS = pytest.StashKey[dict[str, "Resolution"]]()  # item.stash: marked name -> its Resolution
REFS = pytest.StashKey[list["Ref"]]()  # item.stash: the models the test uses, as found before it runs
USAGE = pytest.StashKey["Usage"]()  # item.stash: what the test used while it ran
PROPERTY = "catalog"  # the report's user_properties key: one test's record travels in its teardown report


def skip_reason(cat: Catalog, model: ModelManifest, machine: Callable[[], Machine]) -> str | None:
    """Why `model` cannot run here, or None. `machine` is called only for models that need an accelerator."""
    needed = cat.gpu_class(model)
    if needed == CPU:
        return None
    here = machine()
    memory = cat.settings.gpu_classes[needed].memory_gib
    if here.gpu_class == CPU or memory > here.memory_gib or model.gpu.count > here.count:
        return f"{model.name} needs {model.gpu.count} x {needed} ({memory:g} GiB); this machine is {here.describe()}"
    return None


@dataclass
class Usage:
    """What one test used while it ran: models (how it got them), resolve seconds, ready times, baselines."""

    models: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (via, as the test named it)
    resolve_seconds: dict[str, float] = field(default_factory=dict)
    ready: list[dict[str, Any]] = field(default_factory=list)
    baselines: list[dict[str, Any]] = field(default_factory=list)


def _usage(item: pytest.Item) -> Usage:
    if USAGE not in item.stash:
        item.stash[USAGE] = Usage()
    return item.stash[USAGE]


# ---------------------------------------------------------------------------------------------------------
# one per pytest session: the settings, catalog, store, cache, machine and Hub guard, built on first use


class _Session:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._invocation: Invocation | None = None
        self.options: ResolveOptions | None = None
        self.machine: Machine | None = None
        self.lines: dict[str, LineMap] = {}
        self.failed: dict[tuple[str, str], Exception] = {}  # prefetch failures, raised again by each test
        self.used: list[Resolution] = []  # every resolution handed to a test (or prefetched for one), in order
        self.guard: HubGuard | None = None
        self.records: dict[str, dict[str, Any]] = {}  # nodeid -> its record (from the teardown reports)
        self.preflight_failure: str | None = None  # an xdist worker's failed preflight, said by every test it runs
        self.outcomes: dict[str, str] = {}

    @property
    def invocation(self) -> Invocation:
        """The session's one invocation: Settings read from the environment once (this plugin's entry point), the
        catalog, store, cache and mirrors each built on first use (made on first use: a session that never asks
        imports none of it)."""
        with self.lock:
            if self._invocation is None:
                from catalog.settings import Settings
                from catalog_app.context import Invocation

                self._invocation = Invocation(Settings.from_process)
            return self._invocation

    @property
    def settings(self) -> Settings:
        return self.invocation.settings

    def current_settings(self) -> Settings:
        return self.invocation.settings

    def catalog(self) -> Catalog:
        """The catalog alone (no store opened): what the guard, the preflight and the report need."""
        return self.invocation.catalog

    def setup(self) -> tuple[Catalog, Store, Cache, ResolveOptions]:
        with self.lock:
            if self.options is None:
                self.options = self.invocation.options()
            inv = self.invocation
            return inv.catalog, inv.store, inv.cache, self.options

    def where(self, name: str, loc: Loc) -> str:
        """`manifests/x.yaml:LINE` of a key of model `name`'s manifest."""
        from catalog import yamlsource
        from catalog.loading import display_path

        path = self.catalog().sources[name]
        with self.lock:
            if name not in self.lines:
                try:
                    self.lines[name] = yamlsource.parse(path.read_text(encoding="utf-8")).lines
                except (OSError, UnicodeDecodeError, yamlsource.YamlProblem):
                    self.lines[name] = yamlsource.LineMap()
            return f"{display_path(path)}:{self.lines[name].line_of(loc)}"

    def judge(self, ask: HubAsk) -> Verdict:
        from catalog_app.hub_guard import judge

        try:
            cat: Catalog | None = self.catalog()
        except CatalogError:
            cat = None  # no catalog here: nothing pins anything
        return judge(ask, cat, self.where)

    def this_machine(self) -> Machine:
        cat = self.catalog()
        with self.lock:
            if self.machine is None:
                self.machine = detect_machine(cat.settings, self.current_settings())
            return self.machine

    def skip_reason(self, name: str) -> str | None:
        cat = self.catalog()
        return skip_reason(cat, cat.get(name), self.this_machine)

    def resolve(self, name: str, kwargs: Mapping[str, Any], usage: Usage | None = None, via: str = "") -> Resolution:
        """Resolved and verified, carrying the manifest's engine profile for this machine's class; the time it took
        counts toward the test's ready time (`usage`)."""
        from resolver.profiles import with_profile
        from resolver.resolve import resolve

        if (failure := self.failed.get(_key(name, kwargs))) is not None:
            raise failure
        cat, store, cache, options = self.setup()
        manifest = cat.get(name)
        started = time.monotonic()
        result = resolve(cat, name, cache=cache, store=store, options=_options(options, kwargs))
        result = with_profile(result, manifest, self.this_machine().gpu_class if manifest.profiles else None)
        with self.lock:
            self.used.append(result)  # for --catalog-bom
        if usage is not None:
            usage.resolve_seconds[name] = usage.resolve_seconds.get(name, 0.0) + time.monotonic() - started
            usage.models.setdefault(name, (via, name))
        return result


def _options(base: ResolveOptions, kwargs: Mapping[str, Any]) -> ResolveOptions:
    """resolve's options with the marker's / factory's keywords on top (layout="hf-cache", materialize_weights=True)."""
    from resolver.resolve import Source
    from resolver.views import Layout

    fields = {f.name for f in dataclasses.fields(base)}
    unknown = sorted(set(kwargs) - fields)
    if unknown:
        raise UsageError(f"unknown resolve option(s) {', '.join(unknown)}", hint=f"known: {', '.join(sorted(fields))}")
    values = dict(kwargs)
    for key, kind in (("layout", Layout), ("source", Source)):
        if isinstance(values.get(key), str):
            try:
                values[key] = kind(values[key])
            except ValueError:
                raise UsageError(f"{key}={values[key]!r} is not one of {', '.join(v.value for v in kind)}") from None
    return dataclasses.replace(base, **values)


def _key(name: str, kwargs: Mapping[str, Any]) -> tuple[str, str]:
    return name, json.dumps(kwargs, sort_keys=True, default=str)


SESSION = pytest.StashKey[_Session]()


def _session(config: pytest.Config) -> _Session:
    return config.stash[SESSION]


def _fail(what: str, exc: CatalogError) -> NoReturn:
    """A user error fails the test with one line and its hint, never a traceback into the resolver."""
    hint = f" (hint: {exc.hint})" if exc.hint else ""
    pytest.fail(f"{what}: {exc.message}{hint}", pytrace=False)


def _skip(reason: str) -> NoReturn:
    """Skip, reported at the test's location (as skipif does) rather than at this line."""
    raise pytest.skip.Exception(reason, _use_item_location=True)


def _marked(item: pytest.Item) -> list[tuple[str, dict[str, Any]]]:
    """The item's catalog_model markers, closest first: (name, resolve keywords)."""
    out = []
    for marker in item.iter_markers(MARKER):
        if len(marker.args) != 1 or not isinstance(marker.args[0], str):
            pytest.fail(f'{item.nodeid}: use @pytest.mark.{MARKER}("logical-name", **resolve_options)', pytrace=False)
        out.append((marker.args[0], dict(marker.kwargs)))
    return out


def _report(config: pytest.Config, line: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)


def _write_whole(target: str, text: str) -> Path:
    """A report file written whole: a temp file beside it, renamed into place."""
    path = Path(target)
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    staging.write_text(text)
    os.replace(staging, path)
    return path


# ---------------------------------------------------------------------------------------------------------
# options and the session's start and end


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("model-catalog")
    group.addoption(
        "--catalog-prefetch",
        action="store_true",
        default=False,
        help="Before the first test, resolve in parallel every model the collected tests use (markers, and "
        "names and repo ids in their code) that this runner does not hold yet.",
    )
    group.addoption(
        "--catalog-preflight",
        action="store_true",
        default=False,
        help="After collection, check from stats alone (no store read, nothing fetched) that this runner "
        "holds every pin the selected tests use; fail naming test -> manifest:line -> missing files "
        "before any test runs (with --catalog-prefetch: fetch them instead).",
    )
    group.addoption(
        "--catalog-hub-guard",
        action="store_true",
        default=None,
        dest="catalog_hub_guard",
        help="Refuse every Hugging Face Hub request of the session and its processes, failing the test "
        "that made it with the pin that would fix it (the default when CATALOG_MODE=ci is set).",
    )
    group.addoption(
        "--no-catalog-hub-guard",
        action="store_false",
        dest="catalog_hub_guard",
        help="No Hub guard, even when CATALOG_MODE=ci.",
    )
    group.addoption(
        "--catalog-report",
        metavar="FILE",
        default=None,
        help="At the end, write the session's model report (per test: the models used, any Hub request "
        "refused, ready times, baselines) to FILE.",
    )
    group.addoption(
        "--catalog-report-format",
        choices=("json", "markdown"),
        default=None,
        help="The --catalog-report format (default: markdown for a .md FILE, else json).",
    )
    group.addoption(
        "--catalog-bom",
        metavar="FILE",
        default=None,
        help="At the end, write a CycloneDX 1.6 bill of materials of every model this session's tests "
        "resolved (files, sha256, the signature's verdict) to FILE.",
    )

    derived_plugin.add_options(group)  # --catalog-compile-cache, --catalog-engine-args (catalog_app/derived_plugin.py)


def _guard_wanted(config: pytest.Config) -> bool:
    # Before the command line is parsed in full (the initial conftests' hook), only its known arguments are.
    chosen = getattr(config.known_args_namespace, "catalog_hub_guard", None)
    if chosen is not None:
        return bool(chosen)
    from catalog.settings import Settings

    try:  # read for this question alone: the session's settings are read when first used (conftests may set them)
        return Settings.from_process().mode == "ci"
    except CatalogError:
        return False  # bad settings: every test using the catalog says so; the guard stays out of the way


def _start_guard(config: pytest.Config) -> None:
    """Before anything imports huggingface_hub where possible (conftest files come after this): HF_ENDPOINT -> the
    guard, for this process and every process it starts."""
    state = config.stash.setdefault(SESSION, _Session())
    if state.guard is not None or not _guard_wanted(config):
        return
    from catalog_app.hub_guard import HubGuard

    state.guard = HubGuard(state.judge).start()
    state.guard.install()


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    _start_guard(early_config)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(name, **resolve_options): resolve the catalog model `name` (verified) before the test, available "
        "as the catalog_resolution fixture; skip when this machine's GPU class is too small for it.",
    )
    state = config.stash.setdefault(SESSION, _Session())
    derived_plugin.configure(config, state)
    config.pluginmanager.register(_Collector(state), "model-catalog-collector")
    _start_guard(config)  # a plugin registered after the initial conftests (-p, an in-process run)


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(SESSION, None)
    if state is not None and state.guard is not None:
        state.guard.close()  # HF_ENDPOINT as it was before the session


# ---------------------------------------------------------------------------------------------------------
# after collection: the models each test uses, the preflight, the prefetch


def _active(config: pytest.Config) -> bool:
    """Whether this session maps tests to models (reading the catalog): only when something here uses the map."""
    state = _session(config)
    return bool(
        state.guard
        or config.getoption("catalog_preflight")
        or config.getoption("catalog_prefetch")
        or config.getoption("catalog_report")
    )


def _refs(item: pytest.Item, names: Names) -> list[Ref]:
    """The models `item` uses: its markers (with their layout), then the names and repo ids in its code."""
    from catalog_app.model_refs import Ref, item_strings, named_refs

    refs: list[Ref] = []
    try:
        for name, kwargs in _marked(item):
            refs.append(Ref(name, "marker", name, str(kwargs.get("layout", "dir")), tuple(sorted(kwargs.items()))))
    except pytest.fail.Exception:
        pass  # a malformed marker: that test reports it
    found, _ = named_refs(item_strings(item), names)
    marked = {(r.name, r.layout) for r in refs}
    return refs + [r for r in found if (r.name, r.layout) not in marked]


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    if not session.items or not _active(config):
        return
    from catalog_app.model_refs import Names

    state = _session(config)
    try:
        names = Names.of(state.catalog())
    except CatalogError as exc:
        if config.getoption("catalog_preflight"):
            hint = f" (hint: {exc.hint})" if exc.hint else ""
            raise pytest.UsageError(f"catalog preflight: {exc.message}{hint}") from None
        return
    for item in session.items:
        item.stash[REFS] = _refs(item, names)
    if config.getoption("catalog_preflight") and not config.getoption("catalog_prefetch"):
        _preflight(session, state)


def _wanted(session: pytest.Session, state: _Session) -> dict[tuple[str, str], tuple[str, dict[str, Any], list[str]]]:
    """(name, options) -> (name, resolve options, the tests using it), for every model a collected test uses that
    this machine can run (a test whose model it cannot run is skipped: nothing is fetched for it)."""
    wanted: dict[tuple[str, str], tuple[str, dict[str, Any], list[str]]] = {}
    for item in session.items:
        for ref in item.stash.get(REFS, []):
            kwargs = dict(ref.options) if ref.options else ({"layout": ref.layout} if ref.layout != "dir" else {})
            try:
                if state.skip_reason(ref.name) is not None:
                    continue
            except CatalogError as exc:  # an unknown name, a bad setting: that test reports it
                state.failed[_key(ref.name, kwargs)] = exc
                continue
            wanted.setdefault(_key(ref.name, kwargs), (ref.name, kwargs, []))[2].append(item.nodeid)
    return wanted


def _missing(state: _Session, name: str, kwargs: Mapping[str, Any]) -> tuple[list[str], str]:
    """Stat-level: the files of `name` (in the layout `kwargs` asks) this runner lacks, and the manifest line of the
    first of them. Nothing is read from any store."""
    from resolver.preflight import readiness
    from resolver.views import Layout

    settings = state.current_settings()
    cat = state.catalog()
    found = readiness(
        cat,
        state.invocation.cache,
        settings.shared_caches,
        name,
        Layout(kwargs.get("layout", "dir")),
        bool(kwargs.get("materialize_weights")),
    )
    if found.ready:
        return [], ""
    first = found.missing[0]
    owner = next(
        m
        for m in (cat.get(name), *(cat.get(n) for n in [cat.get(name).tokenizer] if n and n in cat))
        if first in m.files
    )
    return [e.path for e in found.missing], state.where(owner.name, ("files", owner.files.index(first), "path"))


def _preflight(session: pytest.Session, state: _Session) -> None:
    """Fail the session before any test runs when a pin a test needs is not on this runner, naming each test."""
    started = time.monotonic()
    wanted = _wanted(session, state)
    lines: list[str] = []
    tests: set[str] = set()
    for name, kwargs, users in wanted.values():
        try:
            missing, where = _missing(state, name, kwargs)
        except CatalogError as exc:
            missing, where = [f"({exc.message})"], ""
        if missing:
            layout = kwargs.get("layout", "dir")
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            lines += [f"  {test} -> {where or name} ({name}, {layout}) -> missing {shown}" for test in users]
            tests.update(users)
    seconds = time.monotonic() - started
    if lines:
        text = (
            f"catalog preflight: {len(tests)} of {len(session.items)} test(s) need pins this runner lacks (checked in "
            f"{seconds:.2f} s, nothing read from any store; `pytest --catalog-prefetch` fetches them):\n"
            + "\n".join(lines)
        )
        if hasattr(session.config, "workerinput"):
            # An xdist worker may not end the session (its controller would call that a crash): each test it is given
            # fails at setup with the preflight's words instead, before any fixture or test body runs.
            state.preflight_failure = text
            return
        _report(session.config, text)
        pytest.exit(
            f"catalog preflight: {len(tests)} test(s) need pins this runner lacks; no test ran",
            returncode=pytest.ExitCode.TESTS_FAILED,
        )
    _report(
        session.config,
        f"catalog preflight: {len(session.items)} test(s), {len(wanted)} model view(s), every pin "
        f"present in {seconds:.2f} s (nothing read from any store)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """--catalog-prefetch: after collection, before the first test, what the tests use and this runner lacks."""
    config = session.config
    if not config.getoption("catalog_prefetch") or config.option.collectonly:
        return
    state = _session(config)
    wanted = {}
    for key, (name, kwargs, _) in _wanted(session, state).items():
        try:
            if _missing(state, name, kwargs)[0]:
                wanted[key] = (name, kwargs)
        except CatalogError as exc:
            state.failed[key] = exc
    if not wanted:
        return
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, min(4, len(wanted)))) as pool:
        futures = {key: pool.submit(state.resolve, name, kwargs) for key, (name, kwargs) in wanted.items()}
    for key, future in futures.items():
        if isinstance(error := future.exception(), Exception):
            state.failed[key] = error  # each test using the model fails with it, without trying again
    failed = sum(1 for key in wanted if key in state.failed)
    _report(
        config,
        f"catalog: prefetched {len(wanted) - failed} model(s) in {time.monotonic() - started:.1f}s"
        + (f", {failed} failed" if failed else ""),
    )


# ---------------------------------------------------------------------------------------------------------
# each test: its markers, the guard's verdicts, its record


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """The guard records what is asked while this test runs (setup, call and teardown) against it."""
    guard = _session(item.config).guard
    if guard is not None:
        guard.current = item.nodeid
    try:
        return (yield)
    finally:
        if guard is not None:
            from catalog_app.hub_guard import OUTSIDE

            guard.current = OUTSIDE


def _cache_gaps(item: pytest.Item, state: _Session, findings: list[Any]) -> list[str]:
    """For a failed test: the pinned files this runner's HF cache lacks, of every repo the test asked the Hub about or
    names by repo id (what a load by repo id missed, whether or not the library asked). Stats only."""
    from catalog_app.hub_guard import hf_cache_dir
    from resolver.preflight import hf_snapshot_gaps

    names = {f.verdict.model for f in findings if f.verdict.model} | {
        r.name for r in item.stash.get(REFS, []) if r.via == "repo id"
    }
    if not names:
        return []
    root, cat, out = hf_cache_dir(), state.catalog(), []
    for name in sorted(names):
        m = cat.get(name)
        gaps = hf_snapshot_gaps(root, m)
        at = f"{m.source.hf_repo}@{m.source.revision[:12]}"
        fix = f"`catalog resolve {name} --layout hf-cache --format env` lays it out (or `pytest --catalog-prefetch`)"
        if gaps and len(gaps) == len(m.files):
            pin = state.where(name, ("source", "revision"))
            out.append(f"{at}: this runner's HF cache ({root}) has no snapshot of it ({pin}); {fix}")
        elif gaps:
            files = ", ".join(f"{m.files[i].path} ({state.where(name, ('files', i, 'path'))})" for i in gaps[:5])
            out.append(f"{at}: this runner's HF cache ({root}) lacks {files}{' ...' if len(gaps) > 5 else ''}; {fix}")
    return out


def _guarded(item: pytest.Item) -> Generator[None, object, object]:
    """Around a phase of a test, with the guard on: a Hub request it made fails it, naming each request and the pin
    that would fix it; a test that failed anyway (the library's error, after a refusal or offline) gets the pinned
    files this runner's HF cache lacks named too, its own error kept as the cause."""
    state = _session(item.config)
    guard = state.guard
    try:
        result = yield
    except (pytest.skip.Exception, pytest.xfail.Exception, KeyboardInterrupt):
        raise
    except BaseException as exc:
        if guard is not None:
            from catalog_app.hub_guard import failure_text

            found = guard.take(item.nodeid)
            try:
                gaps = _cache_gaps(item, state, found)
            except CatalogError:
                gaps = []
            if found or gaps:
                raise pytest.fail.Exception(failure_text(item.nodeid, found, gaps), pytrace=False) from exc
        raise
    if guard is not None and (found := guard.take(item.nodeid)):
        from catalog_app.hub_guard import failure_text

        pytest.fail(failure_text(item.nodeid, found), pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    if (failure := _session(item.config).preflight_failure) is not None:
        pytest.fail(failure, pytrace=False)
    _resolve_markers(item)  # before any fixture: a test whose model cannot run here is skipped with nothing fetched
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded(item))


def _resolve_markers(item: pytest.Item) -> None:
    marked = _marked(item)
    if not marked:
        return
    state = _session(item.config)
    resolutions: dict[str, Resolution] = {}
    problem: CatalogError | None = None
    try:
        for name, _ in marked:  # every skip decision before any byte moves
            if (reason := state.skip_reason(name)) is not None:
                _skip(reason)
        for name, kwargs in marked:
            resolutions.setdefault(name, state.resolve(name, kwargs, _usage(item), "marker"))
    except CatalogError as exc:
        problem = exc  # failed outside the handler, so the report shows no chained traceback
    if problem is not None:
        _fail(f"{MARKER}({', '.join(repr(n) for n, _ in marked)})", problem)
    item.stash[RESOLUTIONS] = resolutions


def _record(item: pytest.Item, state: _Session) -> dict[str, Any]:
    """The test's part of the report: the models it used (resolved through the plugin, named in its code, asked of
    the Hub), the requests refused, its ready times and baselines."""
    usage = item.stash.get(USAGE, None) or Usage()
    models: dict[str, dict[str, str]] = {
        n: {"name": n, "via": via, "text": text} for n, (via, text) in usage.models.items()
    }
    for ref in item.stash.get(REFS, []):
        models.setdefault(ref.name, {"name": ref.name, "via": ref.via, "text": ref.text})
    guarded = [f.to_json() for f in state.guard.of(item.nodeid)] if state.guard is not None else []
    for g in guarded:
        if g["model"]:
            models.setdefault(g["model"], {"name": g["model"], "via": "asked the Hub", "text": g["repo"] or g["model"]})
    return {
        "test": item.nodeid,
        "models": list(models.values()),
        "guarded": guarded,
        "ready": usage.ready,
        "baselines": usage.baselines,
    }


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """The record rides on the teardown report (so it reaches an xdist controller too)."""
    report = yield
    state = _session(item.config)
    if call.when == "teardown" and (_active(item.config) or USAGE in item.stash):
        report.user_properties.append((PROPERTY, _record(item, state)))
    return report


class _Collector:
    """Where the session is reported (the only process, or the xdist controller): each test's record and outcome."""

    def __init__(self, state: _Session) -> None:
        self.state = state

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        outcomes = self.state.outcomes
        if report.failed:
            outcomes[report.nodeid] = "failed"
        elif report.skipped and outcomes.get(report.nodeid) != "failed":
            outcomes[report.nodeid] = "skipped"
        else:
            outcomes.setdefault(report.nodeid, "passed")
        for key, value in report.user_properties:
            if key == PROPERTY and isinstance(value, dict):
                self.state.records[report.nodeid] = value


# ---------------------------------------------------------------------------------------------------------
# the report


def _records(state: _Session) -> list[Any]:
    from catalog_app.session_report import TestRecord

    return [
        TestRecord.from_json({**value, "outcome": state.outcomes.get(nodeid, "passed")})
        for nodeid, value in state.records.items()
    ]


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state = config.stash.get(SESSION, None)
    if state is None or not (state.records or state.guard is not None):
        return
    from catalog_app.session_report import render_terminal

    outside = [f.to_json() for f in state.guard.outside()] if state.guard is not None else []
    terminalreporter.section("model-catalog")
    for line in render_terminal(_records(state), outside, state.guard.url if state.guard else None):
        terminalreporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The report file and the bill of materials, each written whole (temp + rename); a Hub request made outside any
    test fails the session (no test could carry it)."""
    config = session.config
    state = config.stash.get(SESSION, None)
    if state is None:
        return
    if state.guard is not None and state.guard.outside():
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if target := config.getoption("catalog_report", None):
        from catalog_app.session_report import RENDERERS

        fmt = config.getoption("catalog_report_format", None) or ("markdown" if target.endswith(".md") else "json")
        outside = [f.to_json() for f in state.guard.outside()] if state.guard is not None else []
        _write_whole(target, RENDERERS[fmt](_records(state), outside, state.guard.url if state.guard else None))
    if target := config.getoption("catalog_bom", None):
        from catalog_app import bom

        used = sorted(state.used, key=lambda r: r.name)
        models = (
            bom.facts(state.catalog(), used, state.current_settings()) if used and state.options is not None else []
        )
        path = _write_whole(target, bom.render("cyclonedx", models, {}))
        _report(config, f"catalog: bill of materials of {len({r.name for r in used})} model(s) in {path}")


# ---------------------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture
def catalog_model(request: pytest.FixtureRequest) -> Callable[..., Resolution]:
    """A factory: catalog_model(name, **resolve_options) -> Resolution, verified; skips the test when the
    model's GPU class does not fit this machine."""
    state = _session(request.config)

    def get(name: str, **resolve_options: Any) -> Resolution:
        problem: CatalogError
        try:
            if (reason := state.skip_reason(name)) is not None:
                pytest.skip(reason)
            return state.resolve(name, resolve_options, _usage(request.node), "fixture")
        except CatalogError as exc:
            problem = exc
        _fail(f"catalog_model({name!r})", problem)

    return get


@pytest.fixture
def catalog_resolution(request: pytest.FixtureRequest) -> Resolution:
    """The Resolution of the test's (closest) @pytest.mark.catalog_model."""
    resolutions: dict[str, Resolution] | None = request.node.stash.get(RESOLUTIONS, None)
    if not resolutions:
        pytest.fail(f"the catalog_resolution fixture needs @pytest.mark.{MARKER}(NAME) on the test", pytrace=False)
    return next(iter(resolutions.values()))


@pytest.fixture
def catalog_ready(request: pytest.FixtureRequest) -> Callable[..., contextlib.AbstractContextManager[Resolution]]:
    """`with catalog_ready(name, **resolve_options) as r:` resolves `name` (verified, with its profile), and the
    block starts the engine: the resolve time this test spent on the model plus the block's time is its ready time,
    reported, and held to the profile's `ready_budget_s` for this machine's class (over it, the test fails with
    both figures)."""
    state = _session(request.config)
    usage = _usage(request.node)

    @contextlib.contextmanager
    def ready(name: str, **resolve_options: Any) -> Iterator[Resolution]:
        problem: CatalogError | None = None
        try:
            if (reason := state.skip_reason(name)) is not None:
                pytest.skip(reason)
            resolution = state.resolve(name, resolve_options, usage, "fixture")
        except CatalogError as exc:
            problem = exc
        if problem is not None:
            _fail(f"catalog_ready({name!r})", problem)
        started = time.monotonic()
        yield resolution
        seconds = usage.resolve_seconds.get(name, 0.0) + time.monotonic() - started
        profile = resolution.profile
        budget = profile.ready_budget_s if profile is not None else None
        over = budget is not None and seconds > budget
        usage.ready.append(
            {
                "model": name,
                "seconds": round(seconds, 3),
                "budget_s": budget,
                "profile": profile.gpu_class if profile else None,
                "over": over,
            }
        )
        if over:
            assert profile is not None
            where = state.where(name, ("profiles", profile.gpu_class, "ready_budget_s"))
            pytest.fail(
                f"{name} was ready in {seconds:.1f} s, over its budget of {budget:g} s ({where}, the "
                f"{profile.gpu_class} profile): resolve plus engine start took longer than the manifest allows",
                pytrace=False,
            )

    return ready


@pytest.fixture
def catalog_baseline(request: pytest.FixtureRequest) -> Callable[..., None]:
    """`catalog_baseline(model, metric, measured, dataset=None, split=None)`: the measurement is within the tolerance
    of the manifest's baseline for that metric (on that dataset), else the test fails with both figures and the
    manifest line; reported either way."""
    state = _session(request.config)
    usage = _usage(request.node)

    def check(
        model: str, metric: str, measured: float, *, dataset: str | None = None, split: str | None = None
    ) -> None:
        problem: CatalogError | None = None
        try:
            manifest = state.catalog().get(model)
        except CatalogError as exc:
            problem = exc
        if problem is not None:
            _fail(f"catalog_baseline({model!r})", problem)
        matches = [
            (i, b)
            for i, b in enumerate(manifest.baselines)
            if b.metric == metric and dataset in (None, b.dataset) and split in (None, b.split)
        ]
        if len(matches) != 1:
            known = ", ".join(
                f"{b.metric} on {b.dataset}" + (f" ({b.split})" if b.split else "") for b in manifest.baselines
            )
            pytest.fail(
                f"catalog_baseline: {model} has {'no' if not matches else 'more than one'} baseline for {metric}"
                + (f" on {dataset}" if dataset else "")
                + f" ({state.where(model, ('baselines',))}; its baselines: "
                f"{known or 'none'})",
                pytrace=False,
            )
        index, baseline = matches[0]
        ok = abs(measured - baseline.value) <= baseline.tolerance
        usage.models.setdefault(model, ("baseline", model))
        usage.models.setdefault(baseline.dataset, ("baseline", baseline.dataset))
        usage.baselines.append(
            {
                "model": model,
                "metric": metric,
                "dataset": baseline.dataset,
                "split": baseline.split,
                "measured": measured,
                "value": baseline.value,
                "tolerance": baseline.tolerance,
                "ok": ok,
            }
        )
        if not ok:
            on = baseline.dataset + (f" ({baseline.split})" if baseline.split else "")
            pytest.fail(
                f"{model}: {metric} on {on} is {measured:g}, expected {baseline.value:g} +/- {baseline.tolerance:g} "
                f"({state.where(model, ('baselines', index))})",
                pytrace=False,
            )

    return check
