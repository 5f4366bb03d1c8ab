"""The layers stay visible: imports point down (catalog <- resolver <- catalog_app), no import cycles, and
no module below the settings reads the environment. Checked by parsing every module's source."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = {"catalog": 0, "resolver": 1, "catalog_app": 2}
# Third-party packages each layer must not import: the core is pure, the I/O layer draws nothing.
FORBIDDEN = {"catalog": {"click", "boto3", "botocore", "huggingface_hub", "torch", "rich"}, "resolver": {"click", "rich"}}
# The only modules that touch os.environ: the settings (they read it, once) and the loaders' scoped overlay
# (runai's C++ core and tensorizer read endpoint settings from the process environment; it writes them there).
# Besides the settings: the loaders' overlay of the process environment for the C++ streamers, and the engine
# worker, an entry point of its own process that sets the environment vLLM reads.
# catalog_app/warm.py keys its answers by the variables the settings are built from, as they are (a test holds its
# list to catalog.settings.ENV): it runs before the settings module may be imported.
ENVIRON_ALLOWED = {"catalog/settings.py", "catalog_app/warm.py", "resolver/loaders/common.py", "resolver/loaders/vllm_worker.py",
                   "resolver/stores/aws_env.py", "catalog_app/warm_sync.py", "catalog_app/main.py", "catalog_app/hub_guard.py",
                   "catalog_app/derived_plugin.py"}
# resolver/stores/aws_env.py reads the AWS chain's first link where boto3 would read it; catalog_app/warm_sync.py keys a
# warm sync as warm.py keys a warm resolve; catalog_app/main.py owns the CLI's process (it turns pydantic's plugin
# scan off there). catalog_app/hub_guard.py points HF_ENDPOINT at the pytest session's guard (the variable every Hub
# library and child process reads) and finds the HF cache those libraries read, as huggingface_hub finds it.
# catalog_app/derived_plugin.py gives a pytest session the environment a restored compile cache needs
# (VLLM_CACHE_ROOT, ...), as the engine worker does for its process.


def modules() -> Iterator[tuple[str, Path]]:
    """Every library module. `__main__.py` is an entry script (`python -m catalog`), never imported: it may
    start the application layer."""
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "__main__.py":
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            yield name, path


def _type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports_of(path: Path, module: str) -> set[str]:
    """Every module imported anywhere in the file (deferred imports too), except under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    skip = {id(n) for block in ast.walk(tree) if _type_checking_block(block) for n in ast.walk(block)}
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def graph() -> dict[str, set[str]]:
    known = dict(modules())
    return {name: {i for i in imports_of(path, name) if i in known and i != name} for name, path in known.items()}


def test_imports_point_down() -> None:
    upward = []
    for name, path in modules():
        layer = LAYERS[name.split(".")[0]]
        for imported in imports_of(path, name):
            top = imported.split(".")[0]
            if top in LAYERS and LAYERS[top] > layer:
                upward.append(f"{name} imports {imported}")
            if top in FORBIDDEN.get(name.split(".")[0], ()):
                upward.append(f"{name} imports {imported}, which its layer must not use")
    assert not upward, "\n".join(upward)


def find_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 visiting, 2 done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return cycles


def test_no_import_cycles() -> None:
    cycles = find_cycles(graph())
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_the_checker_sees_a_cycle() -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import os\ndef f():\n    from catalog_app import cli\nif TYPE_CHECKING:\n    import resolver.cache\n")
    assert imports_of(bad, "catalog.bad") == {"os", "catalog_app", "catalog_app.cli"}


ENVIRON_NAMES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def environment_uses(source: str) -> list[int]:
    """The lines of `source` that touch the process environment, by its syntax tree: `os.environ`, `os.getenv`, ...,
    through any alias of os (`import os as o`) or a name imported from it (`from os import environ as e`)."""
    tree = ast.parse(source)
    modules = {"os", "posix"}
    aliases: set[str] = set()
    lines: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname or a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module in modules:
            if any(a.name in ENVIRON_NAMES for a in node.names):
                lines.append(node.lineno)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in ENVIRON_NAMES and isinstance(node.value, ast.Name)
                and node.value.id in aliases):
            lines.append(node.lineno)
    return sorted(set(lines))


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_nothing_below_the_settings_reads_the_environment(package: str) -> None:
    readers = []
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ENVIRON_ALLOWED:
            continue
        text = path.read_text()
        readers += [f"{rel}:{n}: {text.splitlines()[n - 1].strip()}" for n in environment_uses(text)]
    assert not readers, "read the environment through catalog.settings.Settings instead:\n" + "\n".join(readers)


@pytest.mark.parametrize("source", ["import os as o\nx = o.environ['A']\n", "from os import environ as e\n",
                                    "import os\nos.getenv('A')\n", "from os import getenv\n",
                                    "def f():\n    import os\n    return os.environ.get('A')\n"])
def test_the_environment_check_sees_every_spelling(source: str) -> None:
    assert environment_uses(source) != []


def test_the_environment_check_ignores_what_is_not_the_environment() -> None:
    assert environment_uses("import os\nos.path.join('a')\nenviron = {}\nsettings.environ\n") == []


def test_every_declared_variable_is_read_by_the_settings() -> None:
    from catalog.settings import ENV

    body = (ROOT / "catalog" / "settings.py").read_text() + (ROOT / "catalog" / "locations.py").read_text()
    unread = [v.name for v in ENV if f'"{v.name}"' not in body]
    assert not unread, f"declared but never read: {unread}"


CACHE_FOLDER = re.compile(r"""(\bcache\.root|\bcache_root|\bcache\.root\.resolve\(\)|\bself\.root)\s*/\s*["']""")


def test_the_cache_module_names_every_folder_of_the_cache() -> None:
    """catalog/front_door.py names the cache's folders (CACHE_FOLDERS) and resolver/cache.py joins them to its root:
    no module joins a literal folder name to a cache root (or a tier's, which has the cache's layout)."""
    offenders = []
    for package in ("catalog", "resolver", "catalog_app"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "catalog/front_door.py":
                continue
            offenders += [f"{rel}:{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
                          if CACHE_FOLDER.search(line)]
    assert not offenders, ("name the folder in catalog/front_door.py CACHE_FOLDERS and join it in resolver/cache.py "
                           "(a Cache attribute) instead:\n" + "\n".join(offenders))
