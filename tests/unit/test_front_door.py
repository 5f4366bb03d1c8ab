"""The front door's one table (catalog/front_door.py): the full CLI's options, the settings' variables and the cache's
folders are the table's, both ways, and the warm paths read argv through it as click does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from catalog import front_door
from catalog.front_door import COUNT, MULTI, SWITCH, VALUE, Flag

ROOT = Path(__file__).resolve().parents[2]


def _commands() -> dict[str, tuple[click.Command, tuple[Flag, ...]]]:
    from catalog_app.cli import cli

    loaded = cli.load_all()
    return {
        "catalog": (cli, front_door.GROUP),
        "resolve": (loaded["resolve"], front_door.RESOLVE),
        "sync": (loaded["sync"], front_door.SYNC),
    }


def _declared(command: click.Command) -> dict[tuple[str, ...], tuple[str, str, object]]:
    """Each option click declares (its own --help and --version aside): names -> (dest, kind, default)."""
    found: dict[tuple[str, ...], tuple[str, str, object]] = {}
    for param in command.params:
        if not isinstance(param, click.Option) or param.name in ("help", "version"):
            continue
        kind = COUNT if param.count else SWITCH if param.is_flag else MULTI if param.multiple else VALUE
        # A default given (a string or a number); click's own marker for none, or a switch's or a count's, is none.
        default = (
            param.default if isinstance(param.default, (str, int)) and not param.is_flag and not param.count else None
        )
        found[tuple(param.opts)] = (str(param.name), kind, default)
    return found


@pytest.mark.parametrize("command", ["catalog", "resolve", "sync"])
def test_the_cli_declares_exactly_the_tables_options(command: str) -> None:
    """Both ways: an option added to the command by hand, or a row no command declares, fails here."""
    click_command, table = _commands()[command]
    assert _declared(click_command) == {f.names: (f.dest, f.kind, f.default) for f in table}


@pytest.mark.parametrize("command", ["resolve", "sync"])
def test_every_choice_the_cli_accepts_is_its_tables_or_its_codes(command: str) -> None:
    click_command, table = _commands()[command]
    by_name = {p.opts[-1]: p for p in click_command.params if isinstance(p, click.Option)}
    for flag in table:
        param_type = by_name[flag.names[-1]].type
        if flag.choices:
            assert isinstance(param_type, click.Choice) and tuple(param_type.choices) == flag.choices, flag
        elif flag.choices_from:
            assert isinstance(param_type, click.Choice) and param_type.choices, flag
        else:
            assert not isinstance(param_type, click.Choice), flag


def test_a_flag_overriding_a_variable_names_it_and_the_variable_is_declared() -> None:
    names = {v.name for v in front_door.VARIABLES}
    for flag in (*front_door.GROUP, *front_door.RESOLVE, *front_door.SYNC):
        if flag.var:
            assert flag.var in names and flag.var in flag.help, flag
    with pytest.raises(LookupError, match="CATALOG_NOT_DECLARED"):
        Flag(["--x"], "x", VALUE, var="CATALOG_NOT_DECLARED")


def test_the_settings_read_no_undeclared_variable() -> None:
    """A new read in Settings.build not declared in the table fails at once (it would not key the warm answers)."""
    from catalog.settings import Settings, _Declared

    env = _Declared({"HOME": "/h", "CATALOG_NOT_DECLARED": "1", "VLLM_X": "1"})
    assert env.get("HOME") == "/h" and env["HOME"] == "/h"
    with pytest.raises(LookupError, match="catalog/front_door.py"):
        env.get("CATALOG_NOT_DECLARED")
    with pytest.raises(LookupError):
        _ = env["CATALOG_NOT_DECLARED"]
    built = Settings.build({"HOME": "/h", "VLLM_X": "1", "TORCH_Y": "2"})
    assert dict(built.engine_env) == {"VLLM_X": "1", "TORCH_Y": "2"}  # the engine's own, read as they are


def test_one_variable_names_each_folder_the_warm_key_resolves() -> None:
    assert front_door.placing(front_door.CATALOG) == "CATALOG_DIR"
    assert front_door.placing(front_door.CACHE) == "CATALOG_CACHE"
    assert len({v.name for v in front_door.VARIABLES}) == len(front_door.VARIABLES)


# -- parse: argv as click reads it, for the flags the warm path answers ------------------------------------------------
def test_parse_reads_names_and_every_spelling_of_a_flag() -> None:
    parsed = front_door.parse(
        ["--catalog=c", "resolve", "a", "--mirror", "m1", "b", "--mirror=m2", "--offline", "--format", "json"],
        "resolve",
        front_door.RESOLVE,
    )
    assert parsed == (["a", "b"], {"catalog_dir": "c", "mirrors": ["m1", "m2"], "offline": True, "fmt": "json"})
    assert front_door.parse(["--catalog", "c", "resolve", "a"], "resolve", front_door.RESOLVE) == (
        ["a"],
        {"catalog_dir": "c"},
    )
    assert front_door.parse(["resolve", "--store", "--offline", "a"], "resolve", front_door.RESOLVE) == (
        ["a"],
        {"store": "--offline"},
    )  # a value flag takes the next argument, as click does


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["sync", "a"],
        ["--catalog"],
        ["--catalog", "c"],
        ["-v", "resolve", "a"],
        ["resolve", "a", "--help"],
        ["resolve", "a", "-h"],
        ["resolve", "a", "--offline=1"],
        ["resolve", "a", "--store"],
        ["resolve", "a", "--"],
        ["resolve", "a", "-"],
        ["resolve", "a", "--not-a-flag"],
        ["--version"],
    ],
)
def test_parse_leaves_to_the_full_cli_what_it_does_not_answer(argv: list[str]) -> None:
    assert front_door.parse(argv, "resolve", front_door.RESOLVE) is None


@pytest.mark.parametrize(("command", "table"), [("resolve", front_door.RESOLVE), ("sync", front_door.SYNC)])
def test_every_flag_is_parsed_warm_as_the_table_says(command: str, table: tuple[Flag, ...]) -> None:
    for flag in table:
        for name in flag.names:
            given = [name] if flag.kind in (SWITCH, COUNT) else [name, "v"]
            parsed = front_door.parse([command, "m", *given], command, table)
            if not flag.warm:
                assert parsed is None, flag
                continue
            assert parsed is not None, flag
            assert parsed[1] == {flag.dest: True if flag.kind == SWITCH else ["v"] if flag.kind == MULTI else "v"}


# -- what the warm path keys on ----------------------------------------------------------------------------------------
def test_a_relative_path_in_any_path_setting_puts_the_working_directory_in_the_warm_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from catalog_app import warm

    env = {"HOME": "/home/someone"}

    def keys(argv: list[str], given: dict[str, str]) -> set[str]:
        found = set()
        for where in (tmp_path / "one", tmp_path / "two"):
            where.mkdir(exist_ok=True)
            monkeypatch.chdir(where)
            request = warm.parse_argv(argv)
            assert request is not None
            found.add(warm.index_key(request, env | given, "/c", "/k"))
        return found

    for variable in front_door.VARIABLES:
        if variable.warm == front_door.KEYED:
            assert len(keys(["resolve", "m"], {variable.name: "relative/x"})) == (2 if variable.path else 1), variable
    for flag in front_door.RESOLVE:
        if flag.warm and flag.kind != SWITCH and flag.var != front_door.placing(front_door.CACHE):
            assert len(keys(["resolve", "m", flag.names[-1], "relative/x"], {})) == (2 if flag.path else 1), flag


# -- the cache's folders ------------------------------------------------------------------------------------------------
def test_the_cache_joins_exactly_the_tables_folders(tmp_path: Path) -> None:
    from resolver.cache import Cache

    cache = Cache(tmp_path)
    joined = {p.name for p in vars(cache).values() if isinstance(p, Path) and p.parent == cache.root}
    assert joined == {f.name for f in front_door.CACHE_FOLDERS}
    assert len(front_door.CACHE_FOLDERS) == len(joined)


def test_the_front_door_imports_nothing() -> None:
    """The warm path imports it before anything else: it must not pull typing, dataclasses or any module of ours."""
    probe = (
        "import sys; before = set(sys.modules); import catalog.front_door; "
        "import json; print(json.dumps(sorted(set(sys.modules) - before - {'json', 'json.decoder', "
        "'json.scanner', 'json.encoder', '_json'})))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    assert json.loads(done.stdout) == ["catalog", "catalog.front_door"]
