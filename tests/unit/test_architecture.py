"""The layers stay visible: imports point down (catalog <- resolver <- catalog_app), no import cycles, and only the
modules docs/architecture.md's "Who reads the environment" table lists read the environment, each only the variables
its row names. Checked by parsing every module's source and that table."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = {"catalog": 0, "resolver": 1, "catalog_app": 2}
# Third-party packages each layer must not import: the core is pure, the I/O layer draws nothing.
FORBIDDEN = {
    "catalog": {"click", "boto3", "botocore", "huggingface_hub", "torch", "rich"},
    "resolver": {"click", "rich"},
}
ARCHITECTURE = ROOT / "docs" / "architecture.md"


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
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
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
                cycles.append(stack[stack.index(nxt) :] + [nxt])
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
    bad.write_text(
        "import os\ndef f():\n    from catalog_app import cli\nif TYPE_CHECKING:\n    import resolver.cache\n"
    )
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
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ENVIRON_NAMES
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            lines.append(node.lineno)
    return sorted(set(lines))


@dataclass(frozen=True)
class Reader:
    """A row of architecture.md's environment table."""

    module: str
    reads: frozenset[str]  # "os.environ", "Settings.from_process"
    variables: str  # the cell as written: every variable a module names literally must be in it


def environment_table(text: str) -> dict[str, Reader]:
    """The rows of the "Who reads the environment" section's table, by module path."""
    section = text.split("## Who reads the environment", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, Reader] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`"):
            continue
        module, reads, variables, _why = cells
        rows[module.strip("`")] = Reader(module.strip("`"), frozenset(re.findall(r"`([^`]+)`", reads)), variables)
    return rows


def from_process_calls(source: str) -> list[int]:
    """The lines of `source` that call `Settings.from_process` (any spelling of the call: `X.from_process(...)`)."""
    return sorted(
        {
            node.lineno
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "from_process"
        }
        | {
            node.lineno
            for node in ast.walk(ast.parse(source))  # passed as a value: Invocation(Settings.from_process)
            if isinstance(node, ast.Attribute)
            and node.attr == "from_process"
            and isinstance(node.value, ast.Name)
            and node.value.id == "Settings"
        }
    )


def named_variables(source: str) -> set[str]:
    """The variables `source` names literally where it reads or writes the environment: `os.environ["X"]`,
    `os.environ.get("X")` (pop, setdefault), `os.getenv("X")`, `"X" in os.environ`."""
    tree = ast.parse(source)

    def environ(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Attribute)
            and node.attr in ENVIRON_NAMES
            and isinstance(node.value, ast.Name)
            and node.value.id in {"os", "posix"}
        )

    def literal(node: ast.AST | None) -> str | None:
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None

    found: set[str] = set()
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Subscript) and environ(node.value):
            name = literal(node.slice)
        elif (
            isinstance(node, ast.Call)
            and node.args
            and (
                (
                    isinstance(node.func, ast.Attribute)
                    and node.func.attr in {"get", "pop", "setdefault"}
                    and environ(node.func.value)
                )
                or environ(node.func)
            )
        ):
            name = literal(node.args[0])
        elif isinstance(node, ast.Compare) and any(environ(c) for c in node.comparators):
            name = literal(node.left)
        if name is not None:
            found.add(name)
    return found


def readers_in_code() -> dict[str, set[str]]:
    """Every module of the three packages that reads the environment, with how (as the table's `reads` names it)."""
    found: dict[str, set[str]] = {}
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel, text = path.relative_to(ROOT).as_posix(), path.read_text()
            how = ({"os.environ"} if environment_uses(text) else set()) | (
                {"Settings.from_process"} if from_process_calls(text) and rel != "catalog/settings.py" else set()
            )
            if how:
                found[rel] = how
    return found


def test_the_environment_table_is_what_the_code_does() -> None:
    """architecture.md names every module that reads the process environment, how, and which variables by name;
    a module it does not list reads nothing (read the environment through the invocation's Settings instead)."""
    table = environment_table(ARCHITECTURE.read_text())
    code = readers_in_code()
    unlisted = [f"{m} ({', '.join(sorted(how))})" for m, how in code.items() if m not in table]
    assert not unlisted, (
        "these read the environment below the entry points: take the value from the invocation's "
        "Settings instead, or add a row with why to docs/architecture.md:\n" + "\n".join(unlisted)
    )
    stale = [m for m in table if m not in code]
    assert not stale, f"docs/architecture.md lists modules that do not read the environment: {stale}"
    wrong = [
        f"{m}: the table says {sorted(table[m].reads)}, the code does {sorted(how)}"
        for m, how in code.items()
        if set(table[m].reads) != how
    ]
    assert not wrong, "\n".join(wrong)
    unnamed = [
        f"{m}: {v}"
        for m in code
        for v in sorted(named_variables((ROOT / m).read_text()))
        if f"`{v}`" not in table[m].variables
    ]
    assert not unnamed, "variables read but not in docs/architecture.md's row:\n" + "\n".join(unnamed)


def test_the_table_reader_sees_rows_and_the_checker_sees_variables() -> None:
    text = (
        "## Who reads the environment\n\n| module | reads | variables | why |\n|---|---|---|---|\n"
        "| `a/b.py` | `os.environ`, `Settings.from_process` | `X`, `Y` | because |\n\n## Next\n| `c.py` | x | y | z |\n"
    )
    assert environment_table(text) == {
        "a/b.py": Reader("a/b.py", frozenset({"os.environ", "Settings.from_process"}), "`X`, `Y`")
    }
    source = (
        "import os\nos.environ['A']\nos.environ.get('B')\nos.getenv('C')\n'D' in os.environ\n"
        "os.environ.setdefault('E', '1')\nx = {}.get('F')\n"
    )
    assert named_variables(source) == {"A", "B", "C", "D", "E"}
    assert from_process_calls("s = Settings.from_process(catalog_dir=x)\nf = Settings.from_process\n") == [1, 2]


def test_every_store_opened_by_our_code_gets_its_settings() -> None:
    """`open_store(url)` alone falls back to the process's settings (a tools' and tests' entry point, in the table);
    the three packages always pass the invocation's."""
    calls = []
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Call)
                    and getattr(node.func, "id", getattr(node.func, "attr", None)) == "open_store"
                    and len(node.args) + len(node.keywords) < 2
                ):
                    calls.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not calls, "open_store without settings (pass the invocation's):\n" + "\n".join(calls)


@pytest.mark.parametrize(
    "source",
    [
        "import os as o\nx = o.environ['A']\n",
        "from os import environ as e\n",
        "import os\nos.getenv('A')\n",
        "from os import getenv\n",
        "def f():\n    import os\n    return os.environ.get('A')\n",
    ],
)
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
            offenders += [
                f"{rel}:{n}: {line.strip()}"
                for n, line in enumerate(path.read_text().splitlines(), 1)
                if CACHE_FOLDER.search(line)
            ]
    assert not offenders, (
        "name the folder in catalog/front_door.py CACHE_FOLDERS and join it in resolver/cache.py "
        "(a Cache attribute) instead:\n" + "\n".join(offenders)
    )
