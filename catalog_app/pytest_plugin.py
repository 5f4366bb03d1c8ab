"""pytest plugin (entry point `pytest11: model_catalog`): tests ask for models by logical name.

    @pytest.mark.catalog_model("tiny-llama")
    def test_generate(catalog_resolution):          # resolved and verified before the test runs
        engine = load(catalog_resolution.model)

    def test_embed(catalog_model):                  # or resolve inside the test
        minilm = catalog_model("all-minilm-l6-v2", layout="hf-cache")

A marked test is skipped, before anything is downloaded, when its model's GPU class needs more memory per
device or more devices than this machine has ("tiny-x needs 1 x h200 (141 GiB); this machine is 1 x l4
(24 GiB)"). `--catalog-prefetch` resolves every model the collected tests mark, in parallel, before the first
test runs. Settings come from the environment like the CLI's: CATALOG_DIR, CATALOG_STORE, CATALOG_CACHE,
CATALOG_MODE (ci|dev|offline); the machine from CATALOG_GPU_CLASS / CATALOG_GPU_COUNT, else torch.cuda.

Importing this module (pytest does, in every session of an environment where model-catalog is installed)
imports neither boto3 nor torch; the resolver is imported on first use.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from catalog.errors import CatalogError, UsageError
from catalog_app import derived_plugin

if TYPE_CHECKING:  # the catalog and resolver load on first use: every pytest session imports this module
    from catalog.lookup import Catalog
    from catalog.schema import CatalogSettings, GpuClass, ModelManifest
    from catalog.settings import Settings
    from resolver.cache import Cache
    from resolver.resolution import Resolution
    from resolver.resolve import ResolveOptions
    from resolver.stores import Store

MARKER = "catalog_model"
CPU = "cpu"  # the catalog's class for models that need no accelerator: they run on any machine

RESOLUTIONS = pytest.StashKey[dict[str, "Resolution"]]()  # item.stash: marked name -> its Resolution


# ---------------------------------------------------------------------------------------------------------
# the machine


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
        return any(w == base or (w.startswith(base) and w[len(base):].isalpha()) for w in words)

    candidates = [key for key in classes if key != CPU and named(key)]
    if not candidates:
        return None
    return min(candidates, key=lambda key: abs(classes[key].memory_gib - memory_gib))


def detect_machine(settings: CatalogSettings, declared: Settings,
                   probe: Callable[[], tuple[str, int, float] | None] | None = None) -> Machine:
    """CATALOG_GPU_CLASS (+ CATALOG_GPU_COUNT) when declared, else torch.cuda's first device, else a CPU machine.

    A declaration wins over detection so that a runner (and a test) can state exactly what it is, e.g. a MIG
    slice that reports its parent's name.
    """
    if declared.gpu_class:
        if declared.gpu_class not in settings.gpu_classes:
            raise UsageError(f"CATALOG_GPU_CLASS={declared.gpu_class!r} is not a GPU class of the catalog",
                             hint=f"known: {', '.join(sorted(settings.gpu_classes))}")
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


def probe_cuda() -> tuple[str, int, float] | None:
    """torch.cuda's view of the devices, asked in a child process: initializing CUDA in the test process
    would break every test that later forks a CUDA worker."""
    if importlib.util.find_spec("torch") is None:
        return None
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True)
        data = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    if not isinstance(data, list):
        return None
    return str(data[0]), int(data[1]), float(data[2])


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


# ---------------------------------------------------------------------------------------------------------
# one per pytest session: the catalog, store, cache and machine, built on first use


class _Session:
    def __init__(self) -> None:
        self.settings: Settings | None = None
        self.lock = threading.Lock()
        self.ready: tuple[Catalog, Store, Cache, ResolveOptions] | None = None
        self.machine: Machine | None = None
        self.failed: dict[tuple[str, str], Exception] = {}  # prefetch failures, raised again by each test

    def setup(self) -> tuple[Catalog, Store, Cache, ResolveOptions]:
        with self.lock:
            if self.ready is None:
                import catalog
                from catalog.settings import Settings
                from resolver.cache import Cache
                from resolver.resolve import ResolveOptions
                from resolver.stores import open_catalog_store

                self.settings = settings = Settings.from_process()  # this plugin's entry point: read once
                cat = catalog.load(settings.find_catalog_dir())
                self.ready = (cat, open_catalog_store(cat, settings), Cache(settings.cache_dir),
                              ResolveOptions.from_settings(settings, cat))
            return self.ready

    def this_machine(self) -> Machine:
        cat = self.setup()[0]
        with self.lock:
            if self.machine is None:
                assert self.settings is not None
                self.machine = detect_machine(cat.settings, self.settings)
            return self.machine

    def skip_reason(self, name: str) -> str | None:
        cat = self.setup()[0]
        return skip_reason(cat, cat.get(name), self.this_machine)

    def resolve(self, name: str, kwargs: Mapping[str, Any]) -> Resolution:
        from resolver.resolve import resolve

        if (failure := self.failed.get(_key(name, kwargs))) is not None:
            raise failure
        cat, store, cache, options = self.setup()
        return resolve(cat, name, cache=cache, store=store, options=_options(options, kwargs))


def _options(base: ResolveOptions, kwargs: Mapping[str, Any]) -> ResolveOptions:
    """resolve's options with the marker's / factory's keywords on top (layout="hf-cache", materialize_weights=True)."""
    from resolver.views import Layout
    from resolver.resolve import Source

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
            pytest.fail(f"{item.nodeid}: use @pytest.mark.{MARKER}(\"logical-name\", **resolve_options)", pytrace=False)
        out.append((marker.args[0], dict(marker.kwargs)))
    return out


# ---------------------------------------------------------------------------------------------------------
# hooks and fixtures


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("model-catalog")
    group.addoption("--catalog-prefetch", action="store_true", default=False,
                    help="Resolve every model the collected tests mark with catalog_model, in parallel, before "
                         "the first test runs.")
    derived_plugin.add_options(group)  # --catalog-compile-cache, --catalog-engine-args (catalog_app/derived_plugin.py)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(name, **resolve_options): resolve the catalog model `name` (verified) before the test, available "
        "as the catalog_resolution fixture; skip when this machine's GPU class is too small for it.",
    )
    config.stash[SESSION] = _Session()
    derived_plugin.configure(config, config.stash[SESSION])


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
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
            resolutions.setdefault(name, state.resolve(name, kwargs))
    except CatalogError as exc:
        problem = exc  # failed outside the handler, so the report shows no chained traceback
    if problem is not None:
        _fail(f"{MARKER}({', '.join(repr(n) for n, _ in marked)})", problem)
    item.stash[RESOLUTIONS] = resolutions


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """--catalog-prefetch: after collection, before the first test."""
    config = session.config
    if not config.getoption("catalog_prefetch") or config.option.collectonly:
        return
    wanted: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
    state = _session(config)
    for item in session.items:
        try:
            marked = _marked(item)
        except pytest.fail.Exception:
            continue  # a malformed marker: that test reports it
        for name, kwargs in marked:
            try:
                if state.skip_reason(name) is None:  # never download what a skipped test would use
                    wanted.setdefault(_key(name, kwargs), (name, kwargs))
            except CatalogError as exc:  # an unknown name, a bad setting: that test reports it
                state.failed[_key(name, kwargs)] = exc
    if not wanted:
        return
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, min(4, len(wanted)))) as pool:
        futures = {key: pool.submit(state.resolve, name, kwargs) for key, (name, kwargs) in wanted.items()}
    for key, future in futures.items():
        if isinstance(error := future.exception(), Exception):
            state.failed[key] = error  # each test using the model fails with it, without trying again
    failed = sum(1 for key in wanted if key in state.failed)
    _report(config, f"catalog: prefetched {len(wanted) - failed} model(s) in {time.monotonic() - started:.1f}s"
                    + (f", {failed} failed" if failed else ""))


def _report(config: pytest.Config, line: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)


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
            return state.resolve(name, resolve_options)
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
