"""The documentation's tables that mirror code, rendered from it: lint rules, settings (all, and those of oci://
registries and of signatures), load formats, resolve outputs, the command synopsis and the cache layout. Each lives in
README.md or docs/*.md between `<!-- generated: NAME -->` and `<!-- /generated -->`; tests/unit/test_doc_tables.py
fails when one differs from what the code says.

    python -m catalog_app.doc_tables          # rewrite every generated block in place
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = ("README.md", "docs/manifests.md", "docs/resolve.md", "docs/oci.md", "docs/signing.md")
BLOCK = re.compile(r"(<!-- generated: (?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- /generated -->)", re.S)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def rules() -> str:
    from catalog.rules import RULES

    rows = [f"| {r.id} | {_cell(r.refuses)} | {'yes' if r.pins else ''} |" for r in RULES]
    return "| rule | what it refuses | `lock` rewrites it |\n|---|---|---|\n" + "\n".join(rows) + "\n"


def settings() -> str:
    return _variables(lambda name: True)


def oci_settings() -> str:
    """The variables an oci:// registry is reached with (docs/oci.md)."""
    return _variables(lambda name: name.startswith("CATALOG_OCI_"), "DOCKER_CONFIG")


def signing_settings() -> str:
    """The variables of the signature gate and its trust (docs/signing.md)."""
    return _variables(
        lambda name: name.startswith("CATALOG_TRUSTED_"), "CATALOG_REQUIRE_SIGNATURE", "CATALOG_LOG_ENTRIES"
    )


def _variables(prefixed: Callable[[str], bool], *named: str) -> str:
    """The rows of catalog.settings.ENV that `prefixed` takes or `named` names, in ENV's order; a name ENV lacks is an
    error, so a renamed variable cannot drop out of its page unseen."""
    from catalog.settings import ENV, ENV_NAMES

    if missing := sorted(set(named) - ENV_NAMES):
        raise KeyError(f"not in catalog.settings.ENV: {', '.join(missing)}")
    rows = [
        f"| `{v.name}` | {_cell(v.help)}{' (secret: never shown)' if v.secret else ''} |"
        for v in ENV
        if prefixed(v.name) or v.name in named
    ]
    return "| variable | meaning |\n|---|---|\n" + "\n".join(rows) + "\n"


def cache_layout() -> str:
    from catalog.front_door import CACHE_FOLDERS

    rows = [f"| `{f.name}/{f.below}` | {_cell(f.holds)} |" for f in CACHE_FOLDERS]
    return "| under the cache | holds |\n|---|---|\n" + "\n".join(rows) + "\n"


def formats() -> str:
    from catalog.formats import FORMATS, EngineTarget

    target = {
        EngineTarget.MODEL: "`--model` folder or stream URI",
        EngineTarget.LOADER_URI: "`--model` folder; weights file in the loader config",
        EngineTarget.FILE: "`--model` the weights file",
    }
    rows = []
    for fmt, spec in FORMATS.items():
        needs = "; ".join(n.what for n in spec.needs) or "-"
        streamed = "; ".join(n.what for n in spec.streamed_needs)
        engine = target[spec.engine_target] if spec.engine else "no engine arguments"
        rows.append(
            f"| {fmt.value} | {'yes' if spec.streams_weights else ''} | {_cell(needs)}"
            f"{_cell(' (streamed: ' + streamed + ')') if streamed else ''} | {', '.join(f'`{p}`' for p in spec.weight_patterns) or '-'}"
            f" | {spec.loader or '-'} | {engine} |"
        )
    header = "| load format | streams weights | the pinned files must hold | weights | check-load loader | the engine gets |\n"
    return header + "|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"


def outputs() -> str:
    from catalog_app.outputs import BOM_OUTPUTS, OUTPUTS

    rows = [f"| `{name}` | {_cell(' '.join((fn.__doc__ or '').split()))} |" for name, fn in OUTPUTS.items()]
    rows += [f"| `{name}` | {_cell(text)} |" for name, text in BOM_OUTPUTS.items()]
    return "| `--format` | what it prints |\n|---|---|\n" + "\n".join(rows) + "\n"


def synopsis() -> str:
    """Every command with its arguments and options, as click declares them."""
    from catalog_app.cli import cli

    lines = ["catalog [--catalog DIR] [-v] COMMAND"]
    groups = {name: [_usage(p) for p in params] for name, params in OPTION_GROUPS.items()}
    commands = cli.load_all()
    for name in sorted(commands):
        command = commands[name]  # a group (`derived`) is listed by its subcommands
        for full, sub in (
            [(f"{name} {n}", c) for n, c in sorted(command.commands.items())]
            if isinstance(command, click.Group)
            else [(name, command)]
        ):
            parts = [full, *(_usage(param) for param in sub.params if param.name != "help")]
            for group, usages in groups.items():  # a group of options several commands share, named once below
                if all(u in parts for u in usages):
                    parts = [p for p in parts if p not in usages] + [f"[{group}]"]
            lines.extend(_wrap([p for p in parts if p]))
    lines += [f"{group}: {' '.join(usages)}" for group, usages in groups.items()]
    return "```\n" + "\n".join(lines) + "\n```\n"


def _store_and_trust_options() -> dict[str, list[click.Parameter]]:
    from catalog_app.context import store_options
    from catalog_app.trust import trust_options

    def params(decorator: Callable[[Callable[..., None]], Callable[..., None]]) -> list[click.Parameter]:
        return click.command()(decorator(lambda **_: None)).params

    return {"STORE OPTIONS": params(store_options), "TRUST OPTIONS": params(trust_options)}


def _usage(param: click.Parameter) -> str:
    name = (param.name or "").upper()
    if isinstance(param, click.Argument):
        if param.nargs == -1 and isinstance(param.type, click.types.UnprocessedParamType):
            return f"[-- {name.removesuffix('S')}...]"  # passed through as given (an engine's own arguments)
        return f"{name.removesuffix('S')}..." if param.nargs == -1 else name
    if not isinstance(param, click.Option):
        return ""
    flag = max(param.opts, key=len)
    if param.is_flag:
        return f"[{flag}]"
    if isinstance(param.type, click.Choice) and len("|".join(map(str, param.type.choices))) <= 40:
        value = "|".join(str(c) for c in param.type.choices)
    elif param.metavar:
        value = param.metavar
    elif isinstance(param.type, click.Path):
        value = "DIR" if not param.type.file_okay else "FILE"
    elif isinstance(param.type, click.types.IntParamType):
        value = "N"
    else:
        value = name.split("_")[-1]
    return f"[{flag} {value}]" + ("..." if param.multiple else "")


def _wrap(parts: list[str], width: int = 116) -> list[str]:
    """Two spaces in, continuation lines six; each part kept whole."""
    out, current = [], "  " + parts[0]
    for part in parts[1:]:
        if len(current) + 1 + len(part) > width:
            out.append(current)
            current = "     "
        current += " " + part
    return [*out, current]


OPTION_GROUPS = _store_and_trust_options()

TABLES: dict[str, Callable[[], str]] = {
    "rules": rules,
    "settings": settings,
    "formats": formats,
    "outputs": outputs,
    "commands": synopsis,
    "cache-layout": cache_layout,
    "oci-settings": oci_settings,
    "signing-settings": signing_settings,
}


def render(text: str) -> str:
    """`text` with every generated block rendered anew (an unknown block name is an error)."""
    return BLOCK.sub(lambda m: m.group(1) + TABLES[m.group("name")]() + m.group(4), text)


def main() -> int:
    for name in DOCUMENTS:
        path = ROOT / name
        path.write_text(render(path.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
