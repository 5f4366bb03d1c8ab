"""The documentation's tables that mirror code are the code's: rules, settings (all, oci://, signing), load formats,
outputs, commands.

Each lives between `<!-- generated: NAME -->` and `<!-- /generated -->` (rendered by `python -m catalog_app.doc_tables`);
a rule, setting, format, output or flag that exists in code but not in the docs, or the reverse, fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from catalog_app.doc_tables import BLOCK, DOCUMENTS, ROOT, TABLES, render


@pytest.mark.parametrize("document", DOCUMENTS)
def test_generated_tables_equal_what_the_code_says(document: str) -> None:
    text = (ROOT / document).read_text()
    assert BLOCK.search(text), f"{document} holds no generated table"
    assert render(text) == text, f"{document} is stale: run `python -m catalog_app.doc_tables`"


def test_every_table_is_in_some_document() -> None:
    found = {m.group("name") for doc in DOCUMENTS for m in BLOCK.finditer((ROOT / doc).read_text())}
    assert found == set(TABLES)


def test_a_stale_table_is_caught(tmp_path: Path) -> None:
    from catalog.settings import ENV

    text = (ROOT / "README.md").read_text()
    dropped = text.replace(f"| `{ENV[-1].name}` |", "| `CATALOG_NOT_A_SETTING` |")
    assert dropped != text and render(dropped) == text


def rule_ids_in_code() -> dict[str, set[str]]:
    """Every rule id a module passes as a literal to a Problem or to a reporter, by module."""
    found: dict[str, set[str]] = {}
    for package in ("catalog", "resolver", "catalog_app"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Call):
                    continue
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                literal = None
                if name == "report" and node.args and isinstance(node.args[0], ast.Constant):
                    literal = node.args[0].value
                elif name == "Problem" and len(node.args) >= 5 and isinstance(node.args[4], ast.Constant):
                    literal = node.args[4].value
                elif name == "at" and len(node.args) >= 4 and isinstance(node.args[3], ast.Constant):
                    literal = node.args[3].value
                literal = next(
                    (k.value.value for k in node.keywords if k.arg == "rule" and isinstance(k.value, ast.Constant)),
                    literal,
                )
                if isinstance(literal, str):
                    found.setdefault(literal, set()).add(path.relative_to(ROOT).as_posix())
    return found


def test_every_rule_reported_anywhere_is_in_the_one_table_and_the_reverse() -> None:
    from catalog.rules import BY_ID

    used = rule_ids_in_code()
    assert sorted(set(used) - set(BY_ID)) == [], {r: used[r] for r in set(used) - set(BY_ID)}
    assert sorted(set(BY_ID) - set(used)) == []


def test_the_pages_variable_tables_are_caught_stale_and_name_only_real_variables() -> None:
    from catalog_app.doc_tables import _variables

    for page, variable in (("docs/oci.md", "CATALOG_OCI_PLAIN_HTTP"), ("docs/signing.md", "CATALOG_LOG_ENTRIES")):
        text = (ROOT / page).read_text()
        dropped = text.replace(f"| `{variable}` |", "| `CATALOG_NOT_A_SETTING` |")
        assert dropped != text and render(dropped) == text
    with pytest.raises(KeyError, match="CATALOG_NOT_A_SETTING"):
        _variables(lambda name: False, "CATALOG_NOT_A_SETTING")


def test_every_catalog_variable_the_docs_name_is_a_setting_or_one_the_code_writes() -> None:
    """A `CATALOG_*` name in README.md or docs/*.md is read by the settings (ENV) or written by the code (an `export`
    line, a matrix job's environment): a renamed or removed variable cannot stay documented."""
    from catalog.settings import ENV_NAMES

    code = "".join(
        p.read_text()
        for package in ("catalog", "resolver", "catalog_app")
        for p in sorted((ROOT / package).rglob("*.py"))
    )
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    named = {
        (d.relative_to(ROOT).as_posix(), n)
        for d in documents
        for n in re.findall(r"\bCATALOG_[A-Z0-9_]*[A-Z0-9]\b", d.read_text())
    }
    assert sorted((d, n) for d, n in named if n not in ENV_NAMES and f'"{n}"' not in code) == []
