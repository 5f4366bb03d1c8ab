"""The tensor tables' file: written one tensor a line, read back equal (odd names included), each entry found at
its line, digests that change with any row, and unreadable files refused with a line."""

from __future__ import annotations

import json

import pytest

from catalog.tensor_tables import TableError, parse, render, table_sha256, weight_map_sha256

ODD = 'quote"back\\slash \u00e9t\u00e9 \U0001f600'
HEADERS = {"b.safetensors": (("z.weight", "BF16", (2, 3)), (ODD, "F32", ()), ("a.bias", "U8", (0,)))}
MAPS = {"b.safetensors.index.json": {"z.weight": "b.safetensors", ODD: "b.safetensors", "a.bias": "b.safetensors"}}


def test_render_and_parse_round_trip_keeping_offset_order() -> None:
    text = render("m", HEADERS, MAPS)
    tables = parse(text)
    assert tables.model == "m" and tables.headers == HEADERS and tables.weight_maps == MAPS
    assert list(tables.weight_maps["b.safetensors.index.json"]) == sorted(MAPS["b.safetensors.index.json"])
    assert render("m", tables.headers, tables.weight_maps) == text  # the same bytes again


def test_every_entry_is_found_at_its_line() -> None:
    text = render("m", HEADERS, MAPS)
    tables = parse(text)
    lines = text.splitlines()
    for path, rows in HEADERS.items():
        assert lines[tables.line_of(path) - 1].strip().startswith(f'"{path}": {{')
        for name, _, _ in rows:
            found = lines[tables.line_of(path, name) - 1].strip().rstrip(",")
            assert next(iter(json.loads("{" + found + "}"))) == name
    assert tables.line_of("b.safetensors", "no such tensor") == tables.line_of("b.safetensors")
    assert tables.line_of("no such file") == 1


def test_digests_pin_names_dtypes_shapes_and_order() -> None:
    rows = HEADERS["b.safetensors"]
    base = table_sha256(rows)
    assert table_sha256(rows[::-1]) != base
    assert table_sha256((("z.weight", "F16", (2, 3)), *rows[1:])) != base
    assert table_sha256((("z.weight", "BF16", (3, 2)), *rows[1:])) != base
    mapping = MAPS["b.safetensors.index.json"]
    assert weight_map_sha256(dict(reversed(list(mapping.items())))) == weight_map_sha256(mapping)  # a map has no order
    assert weight_map_sha256({**mapping, "z.weight": "c.safetensors"}) != weight_map_sha256(mapping)


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ('{"model": "m", "files": {\n', 2, "not JSON"),
        ('{"files": {}}', 1, 'expected an object with "model" and "files"'),
        (
            '{\n  "model": "m",\n  "files": {\n    "a.safetensors": {\n      "w": ["F32", "2x2"]\n    }\n  }\n}\n',
            5,
            "'a.safetensors': tensor 'w' is ['F32', '2x2'], expected [dtype, shape]",
        ),
        (
            '{\n  "model": "m",\n  "files": {\n    "a.safetensors.index.json": {\n      "w": 3\n    }\n  }\n}\n',
            5,
            "tensor 'w' maps to 3, expected a file name",
        ),
    ],
)
def test_unreadable_tables_are_refused_with_a_line(text: str, line: int, says: str) -> None:
    with pytest.raises(TableError) as caught:
        parse(text)
    assert says in caught.value.message and caught.value.line == line


def test_digests_and_offsets_round_trip_and_are_pinned_with_the_rows() -> None:
    rows = HEADERS["b.safetensors"]
    digests = {"b.safetensors": {name: f"{i:064x}" for i, (name, _, _) in enumerate(rows)}}
    offsets = {"b.safetensors": {name: 100 * i for i, (name, _, _) in enumerate(rows)}}
    text = render("m", HEADERS, MAPS, digests, offsets)
    tables = parse(text)
    assert tables.digests == digests and tables.offsets == offsets and tables.headers == HEADERS
    assert render("m", tables.headers, tables.weight_maps, tables.digests, tables.offsets) == text
    plain = table_sha256(rows)
    with_digests = table_sha256(rows, digests["b.safetensors"])
    assert len({plain, with_digests, table_sha256(rows, digests["b.safetensors"], offsets["b.safetensors"])}) == 3
    changed = {**digests["b.safetensors"], "z.weight": "f" * 64}
    assert table_sha256(rows, changed) != with_digests
    assert parse(render("m", HEADERS, MAPS)).section_sha256("b.safetensors") == plain  # tables locked before digests


@pytest.mark.parametrize("value", ['["F32", [2], "ABC"]', '["F32", [2], "' + "a" * 64 + '", -1]', '["F32", [2], 3]'])
def test_a_digest_or_offset_of_the_wrong_shape_is_refused(value: str) -> None:
    with pytest.raises(TableError, match="expected \\[dtype, shape\\]"):
        parse('{"model": "m", "files": {"a.safetensors": {"w": ' + value + "}}}")
