"""Bad manifests, fuzzed: whatever bytes a manifest file holds, loading never raises, never hangs, never
executes anything, and every broken file comes back as problems with a path and a line.

Two generators feed `load_dir` (in process, each example under a per-example alarm):
- hostile YAML texts: a valid manifest with one hostile edit (object/apply tags with a live payload,
  !!binary, custom !tags, alias bombs, duplicate keys, tabs, BOMs, NUL bytes, long lines, huge ints,
  deep nesting, random unicode, several documents, merge keys) or random text/bytes;
- manifest-shaped dicts: the valid manifest as data, with values swapped for random types (huge ints,
  floats, nan/inf, unicode text, nested lists/dicts) and at least one change that must be refused.
A sample of generated broken files also goes through `python -m catalog validate`.
"""

from __future__ import annotations

import faulthandler
import json
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from .support import ROOT, long_requested

try:  # the module was renamed (catalog/load.py -> catalog/loading.py) while this suite was written
    from catalog.loading import load_dir
except ImportError:  # pragma: no cover - depends on the checkout
    from catalog.load import load_dir  # type: ignore[no-redef]

sys.path.insert(0, str(ROOT / "tests"))
from helpers import manifest_text, write_catalog

NAME = "fuzzed"
MARKER = "@MARKER@"  # replaced by a real path: a payload that ran would create that file
EXAMPLE_SECONDS = 10
EXAMPLES = 2000 if long_requested() else 150

# Payloads that run code or touch files under PyYAML's unsafe loaders; each creates MARKER when live.
PAYLOADS = (
    f"!!python/object/apply:os.system ['touch {MARKER}']",
    f"!!python/object/apply:subprocess.call [['touch', '{MARKER}']]",
    f"!!python/object/new:os.system ['touch {MARKER}']",
    f"!!python/object/apply:builtins.open ['{MARKER}', 'w']",
    f"!!python/object/apply:os.makedirs ['{MARKER}']",
)
# Tags that are not plain values but run nothing.
OTHER_TAGS = (
    "!!python/name:os.system",
    "!!python/module:os",
    "!!python/tuple [1, 2]",
    "!!binary aGVsbG8gd29ybGQ=",
    "!custom value",
    "!<tag:evil.example,2026:x> value",
    "!!set {a, b}",
    "!!omap [a: 1, b: 2]",
    "!!pairs [a: 1]",
    "!!python/bytes aGVsbG8=",
    "!!python/complex 1+2j",
    "!!python/str x",
)


@dataclass(frozen=True)
class Doc:
    """One generated manifest file: its bytes, and whether it must be refused whatever else holds."""

    data: bytes
    broken: bool
    kind: str


def valid_text() -> str:
    return manifest_text(NAME, extra="tags: [fuzz]\nloader: {}\n")


def lines_of(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def value_lines(text: str) -> list[int]:
    """Indexes of lines that hold `key: value` (not list markers or bare parents)."""
    return [i for i, line in enumerate(lines_of(text)) if re.match(r"^\s*(- )?[a-z_0-9]+: \S", line)]


def replace_value(text: str, index: int, value: str) -> str:
    out = lines_of(text)
    key, _, _ = out[index].partition(": ")
    out[index] = f"{key}: {value}\n"
    return "".join(out)


# -- hostile texts -------------------------------------------------------------------------------------
@st.composite
def tagged(draw: st.DrawFn) -> Doc:
    text = valid_text()
    tag = draw(st.sampled_from(PAYLOADS + OTHER_TAGS))
    where = draw(st.sampled_from(["value", "key", "document", "list-item"]))
    if where == "value":
        text = replace_value(text, draw(st.sampled_from(value_lines(text))), tag)
    elif where == "key":
        text += f"? {tag}\n: 1\n"
    elif where == "document":
        text = f"--- {tag}\n"
    else:
        text = text.replace("tags: [fuzz]", f"tags: [fuzz, {tag}]")
    return Doc(text.encode(), True, f"tag:{where}")


@st.composite
def alias_bomb(draw: st.DrawFn) -> Doc:
    width = draw(st.integers(2, 10))
    depth = draw(st.integers(2, 12))
    lines = [f"b0: &b0 [{', '.join(['lol'] * width)}]"]
    for level in range(1, depth + 1):
        lines.append(f"b{level}: &b{level} [{', '.join([f'*b{level - 1}'] * width)}]")
    bomb = "\n".join(lines) + "\n"
    where = draw(st.sampled_from(["unknown-keys", "loader", "name"]))
    text = valid_text()
    if where == "unknown-keys":  # unknown top-level keys: refused by the schema whatever the size
        return Doc((text + bomb).encode(), True, "bomb:keys")
    if where == "loader":  # the loader block is free-form: only the node budget can refuse it
        nested = "loader:\n" + "".join("  " + line + "\n" for line in lines)
        big = width ** (depth + 1) > 100_000
        return Doc(text.replace("loader: {}\n", nested).encode(), big, "bomb:loader")
    inner = "".join("  " + line + "\n" for line in lines)
    return Doc(text.replace(f"name: {NAME}\n", f"bombs:\n{inner}name: *b{depth}\n").encode(), True, "bomb:name")


@st.composite
def duplicate_key(draw: st.DrawFn) -> Doc:
    text = valid_text()
    index = draw(st.sampled_from(value_lines(text)))
    out = lines_of(text)
    line = out[index]
    copy = line.replace("- ", "  ", 1) if line.lstrip().startswith("- ") else line
    out.insert(index + 1, copy)
    return Doc("".join(out).encode(), True, "duplicate-key")


@st.composite
def tabs(draw: st.DrawFn) -> Doc:
    text = valid_text()
    indented = [i for i, line in enumerate(lines_of(text)) if line.startswith("  ")]
    out = lines_of(text)
    index = draw(st.sampled_from(indented))
    out[index] = "\t" + out[index].lstrip(" ")
    return Doc("".join(out).encode(), True, "tab-indent")


@st.composite
def bom(draw: st.DrawFn) -> Doc:
    text = valid_text()
    where = draw(st.sampled_from(["start", "inside"]))
    if where == "start":  # allowed by YAML: the file stays valid
        return Doc(("\ufeff" + text).encode(), False, "bom:start")
    at = draw(st.integers(1, len(text) - 1))
    return Doc((text[:at] + "\ufeff" + text[at:]).encode(), False, "bom:inside")


@st.composite
def nul(draw: st.DrawFn) -> Doc:
    text = valid_text()
    at = draw(st.integers(0, len(text)))
    return Doc((text[:at] + "\x00" + text[at:]).encode(), True, "nul")


@st.composite
def long_line(draw: st.DrawFn) -> Doc:
    size = draw(st.sampled_from([10_000, 100_000, 1_000_000, 3_000_000]))
    char = draw(st.sampled_from(["a", "é", "😀", "-"]))
    where = draw(st.sampled_from(["comment", "unknown-key", "name", "description"]))
    text = valid_text()
    if where == "comment":
        return Doc((f"# {char * size}\n" + text).encode(), False, "long:comment")
    if where == "unknown-key":
        return Doc((text + f"zz_long: {char * size}\n").encode(), True, "long:unknown")
    if where == "name":
        return Doc(text.replace(f"name: {NAME}\n", f"name: {NAME}{char * size}\n").encode(), True, "long:name")
    return Doc(text.replace("tags:", f"description: '{char * size}'\ntags:").encode(), False, "long:description")


@st.composite
def huge_int(draw: st.DrawFn) -> Doc:
    # Past 308 digits a float overflows, past 4,300 CPython refuses int-from-text: both once crashed
    # validation (regression tests below pin each).
    digits = draw(st.integers(19, 10_000))
    sign = draw(st.sampled_from(["", "-", "+"]))
    number = sign + "9" * digits
    text = valid_text()
    where = draw(st.sampled_from(["size", "count", "name", "unknown"]))
    if where == "size":
        return Doc(text.replace("size: 10\n", f"size: {number}\n", 1).encode(), sign == "-", "int:size")
    if where == "count":
        return Doc(
            text.replace("gpu: {class: cpu}", f"gpu: {{class: cpu, count: {number}}}").encode(), False, "int:count"
        )
    if where == "name":
        return Doc(text.replace(f"name: {NAME}", f"name: {number}").encode(), True, "int:name")
    return Doc((text + f"{number}: {number}\n").encode(), True, "int:key")


@st.composite
def deep_nesting(draw: st.DrawFn) -> Doc:
    depth = draw(st.integers(10, 3000))
    style = draw(st.sampled_from(["flow-seq", "flow-map", "block"]))
    if style == "flow-seq":
        value = "[" * depth + "]" * depth
    elif style == "flow-map":
        value = "{a: " * depth + "x" + "}" * depth
    else:
        depth = min(depth, 300)
        value = "\n" + "".join("  " * (i + 1) + "k:\n" for i in range(depth)) + "  " * (depth + 1) + "leaf"
    where = draw(st.sampled_from(["loader", "unknown"]))
    text = valid_text()
    if where == "loader":
        body = (
            text.replace("loader: {}\n", f"loader:\n  deep: {value}\n")
            if style != "block"
            else text.replace("loader: {}\n", f"loader:{value}\n")
        )
        return Doc(body.encode(), depth >= 70, f"deep:{style}:loader")
    return Doc((text + f"zz_deep: {value}\n").encode(), True, f"deep:{style}:unknown")


unicode_text = st.text(st.characters(blacklist_categories=("Cs",)), min_size=0, max_size=200)


@st.composite
def random_unicode(draw: st.DrawFn) -> Doc:
    text = valid_text()
    value = draw(unicode_text)
    quoting = draw(st.sampled_from(["json", "raw", "single"]))
    rendered = {
        "json": json.dumps(value, ensure_ascii=False),
        "raw": value,
        "single": "'" + value.replace("'", "''") + "'",
    }[quoting]
    index = draw(st.sampled_from(value_lines(text)))
    return Doc(replace_value(text, index, rendered).encode("utf-8", "surrogatepass"), False, f"unicode:{quoting}")


@st.composite
def multi_document(draw: st.DrawFn) -> Doc:
    text = valid_text()
    extra = draw(
        st.sampled_from(["---\n" + text, "---\na: 1\n", "...\n---\n", "--- !!python/object/apply:os.system ['x']\n"])
    )
    return Doc((text + extra).encode(), True, "multi-document")


@st.composite
def merge_key(draw: st.DrawFn) -> Doc:
    style = draw(st.sampled_from(["alias", "inline", "list"]))
    merged = {
        "alias": "base: &base {class: cpu}\ngpu:\n  <<: *base",
        "inline": "gpu:\n  <<: {class: cpu}",
        "list": "gpu:\n  <<: [{class: cpu}, {count: 1}]",
    }[style]
    return Doc(valid_text().replace("gpu: {class: cpu}", merged).encode(), True, f"merge-key:{style}")


@st.composite
def random_text(draw: st.DrawFn) -> Doc:
    return Doc(draw(unicode_text).encode("utf-8"), False, "random-text")


@st.composite
def random_bytes(draw: st.DrawFn) -> Doc:
    return Doc(draw(st.binary(max_size=400)), False, "random-bytes")


@st.composite
def spliced(draw: st.DrawFn) -> Doc:
    """A few random characters inserted into the valid text (structure characters, quotes, colons...)."""
    text = valid_text()
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        piece = draw(
            st.sampled_from(
                [
                    ":",
                    "- ",
                    "[",
                    "]",
                    "{",
                    "}",
                    "&a ",
                    "*a",
                    "!",
                    "|",
                    ">",
                    "'",
                    '"',
                    "%",
                    "@",
                    "`",
                    "#",
                    "\n",
                    "\t",
                    "  ",
                    "\r",
                    "\x85",
                    "\u2028",
                    "? ",
                ]
            )
        )
        text = text[:at] + piece + text[at:]
    return Doc(text.encode(), False, "spliced")


hostile_texts = st.one_of(
    tagged(),
    alias_bomb(),
    duplicate_key(),
    tabs(),
    bom(),
    nul(),
    long_line(),
    huge_int(),
    deep_nesting(),
    random_unicode(),
    multi_document(),
    merge_key(),
    random_text(),
    random_bytes(),
    spliced(),
)


# -- manifest-shaped dicts --------------------------------------------------------------------------------
def valid_dict() -> dict[str, Any]:
    data = yaml.safe_load(valid_text())
    assert isinstance(data, dict)
    return data


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**100), 10**100),
    st.floats(allow_nan=True, allow_infinity=True),
    unicode_text,
    st.sampled_from(["", "~", "null", "yes", "no", "0x10", "1_000", "12:30:00", "2026-11-30", ".inf", "-.nan"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(unicode_text, inner, max_size=4)),
    max_leaves=12,
)


def paths_in(data: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(data, dict):
        for key, value in data.items():
            yield from paths_in(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from paths_in(value, (*prefix, index))


def set_at(data: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    data[head] = set_at(data[head], rest, value)
    return data


@st.composite
def shaped_dict(draw: st.DrawFn) -> Doc:
    data = valid_dict()
    for _ in range(draw(st.integers(0, 4))):  # random values at random places: maybe fine, maybe not
        path = draw(st.sampled_from(list(paths_in(data))[1:]))
        data = set_at(data, path, draw(values))
    breaking = draw(
        st.sampled_from(
            ["drop-required", "unknown-key", "files-scalar", "name-container", "source-list", "bad-file-entry"]
        )
    )
    if breaking == "drop-required":
        data.pop(draw(st.sampled_from(["name", "source", "s3_prefix", "load_format"])), None)
    elif breaking == "unknown-key":
        data[
            draw(
                unicode_text.filter(
                    lambda k: (
                        k not in data
                        and k.strip() != ""
                        and k
                        not in {
                            "name",
                            "description",
                            "source",
                            "s3_prefix",
                            "load_format",
                            "loader",
                            "gpu",
                            "tags",
                            "tokenizer",
                            "allow_pickle",
                            "files",
                        }
                    )
                )
            )
        ] = draw(values)
    elif breaking == "files-scalar":
        data["files"] = draw(scalars)
    elif breaking == "name-container":
        data["name"] = draw(
            st.one_of(st.lists(scalars, max_size=3), st.dictionaries(unicode_text, scalars, max_size=3))
        )
    elif breaking == "source-list":
        data["source"] = draw(st.lists(scalars, max_size=3))
    else:
        data["files"] = [{"path": draw(unicode_text), "size": draw(values), "sha256": draw(scalars)}]
        data["files"][0].pop(draw(st.sampled_from(["path", "size", "sha256"])))
    dumper = draw(st.sampled_from(["block", "flow", "json"]))
    if dumper == "json":
        text = json.dumps(data, ensure_ascii=draw(st.booleans()), allow_nan=True)
    else:
        text = yaml.safe_dump(data, default_flow_style=dumper == "flow", allow_unicode=True, sort_keys=False, width=80)
    return Doc(text.encode("utf-8", "surrogatepass"), True, f"dict:{breaking}:{dumper}")


# -- the harness ----------------------------------------------------------------------------------------
class Hang(Exception):
    pass


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail (not block) on a hang: SIGALRM raises in Python code; a hang inside C code is killed by
    faulthandler's watchdog, with every thread's traceback, a little later."""

    def on_alarm(signum: int, frame: object) -> None:
        raise Hang(f"load_dir did not return within {seconds}s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    faulthandler.dump_traceback_later(seconds * 6, exit=True)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        faulthandler.cancel_dump_traceback_later()


def check_loads_cleanly(doc: Doc) -> None:
    with tempfile.TemporaryDirectory(prefix="fuzz-") as work:
        root = Path(work)
        marker = root / "payload-ran"
        folder = write_catalog(root, {})
        path = folder / f"{NAME}.yaml"
        path.write_bytes(doc.data.replace(MARKER.encode(), str(marker).encode()))
        with deadline(EXAMPLE_SECONDS):
            result = load_dir(folder)
        assert not marker.exists(), f"a YAML payload was executed ({doc.kind})"
        manifest_doc = next((d for d in result.docs if d.path == path.resolve()), None)
        assert manifest_doc is not None, "the manifest was not even looked at"
        decoded = doc.data.decode("utf-8", "replace")
        line_count = sum(decoded.count(c) for c in ("\n", "\r", "\x85", "\u2028", "\u2029")) + 2
        for problem in result.problems:
            assert isinstance(problem.path, str) and problem.path, problem
            assert problem.path.endswith(f"{NAME}.yaml"), f"a problem blamed another file: {problem}"
            assert isinstance(problem.line, int) and 0 <= problem.line <= line_count, problem
            text = str(problem)
            assert text.startswith(problem.path + (f":{problem.line}" if problem.line else "")), text
        mine = [p for p in result.problems if p.path == manifest_doc.display]
        if doc.broken or manifest_doc.manifest is None:
            assert mine, f"a broken file ({doc.kind}) produced no problem"


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


# A payload that runs opens its marker file and leaves it open (that is the code it runs): not ours to close.
@pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")
def test_payloads_are_live_under_an_unsafe_loader(tmp_path: Path) -> None:
    """The payloads used below really run code under PyYAML's unsafe loader, so their absence of effect
    in load_dir is meaningful."""
    for index, payload in enumerate(PAYLOADS):
        marker = tmp_path / f"ran-{index}"
        try:
            yaml.unsafe_load(f"x: {payload}".replace(MARKER, str(marker)))
        except Exception:  # noqa: BLE001 - some constructors fail after the side effect happened
            pass
        assert marker.exists(), payload


@FUZZ
@given(hostile_texts)
@example(Doc(valid_text().encode(), False, "valid"))
@example(Doc(("x" * (17 * 1024 * 1024)).encode(), True, "over-16MiB"))
@example(Doc(b"\xff\xfe" + valid_text().encode("utf-16-le"), True, "utf-16"))
@example(Doc(b"name: \xc3\x28\n", True, "bad-utf8"))
@example(Doc(b"", True, "empty"))
@example(Doc(b"- a\n- b\n", True, "a-list"))
@example(Doc(b"'just a string'\n", True, "a-scalar"))
def test_hostile_yaml_texts_never_raise_hang_or_execute(doc: Doc) -> None:
    check_loads_cleanly(doc)


@FUZZ
@given(shaped_dict())
def test_manifest_shaped_dicts_with_random_types_are_refused_with_lines(doc: Doc) -> None:
    check_loads_cleanly(doc)


@pytest.mark.parametrize("digits", [4301, 50_000])
def test_more_than_4300_digits_is_a_problem_not_a_crash(tmp_path: Path, digits: int) -> None:
    """CPython refuses to turn more than 4,300 decimal digits into an int (ValueError); a manifest
    holding such a number must still be reported as a problem of that file, line included."""
    folder = write_catalog(tmp_path, {f"{NAME}.yaml": valid_text().replace("size: 10\n", f"size: {'9' * digits}\n", 1)})
    with deadline(EXAMPLE_SECONDS):
        result = load_dir(folder)
    mine = [p for p in result.problems if p.path.endswith(f"{NAME}.yaml")]
    assert mine and all(p.line >= 1 for p in mine)


@pytest.mark.parametrize("style", ["flow-seq", "flow-map"])
def test_three_thousand_levels_of_nesting_are_a_problem_at_their_line(tmp_path: Path, style: str) -> None:
    """The deepest nesting the fuzzer may draw, generated for sure (the random draws rarely reach it)."""
    value = "[" * 3000 + "]" * 3000 if style == "flow-seq" else "{a: " * 3000 + "x" + "}" * 3000
    text = valid_text().replace("loader: {}\n", f"loader:\n  deep: {value}\n")
    folder = write_catalog(tmp_path, {f"{NAME}.yaml": text})
    with deadline(EXAMPLE_SECONDS):
        result = load_dir(folder)
    deep_line = next(i for i, line in enumerate(text.splitlines(), 1) if "deep:" in line)
    mine = [p for p in result.problems if p.path.endswith(f"{NAME}.yaml")]
    assert mine and all(p.line == deep_line for p in mine), (mine, deep_line)


@pytest.mark.parametrize("field", ["gpu-count", "weights-size"])
def test_huge_gpu_count_or_size_is_a_problem_not_a_crash(tmp_path: Path, field: str) -> None:
    """A 400-digit `gpu.count` or weight `size` once reached the gpu-memory rule, which turned it into a
    float (OverflowError). load_dir must not raise, and the file must be reported at that key's line."""
    huge = "9" * 400
    text = valid_text()
    if field == "gpu-count":
        text = text.replace("gpu: {class: cpu}", f"gpu: {{class: cpu, count: {huge}}}")
    else:
        text = text.replace("size: 1000\n", f"size: {huge}\n")
    folder = write_catalog(tmp_path, {f"{NAME}.yaml": text})
    with deadline(EXAMPLE_SECONDS):
        result = load_dir(folder)
    assert all(p.path.endswith(f"{NAME}.yaml") for p in result.problems)
    wanted = "gpu.count" if field == "gpu-count" else "files[1].size"
    key_line = next(i for i, line in enumerate(text.splitlines(), 1) if huge in line)
    found = [
        p for p in result.problems if p.field == wanted and p.rule == "schema" and "less than or equal" in p.message
    ]
    assert found and all(p.line == key_line for p in found), (found, key_line)  # the key's own line


# -- the CLI on a sample --------------------------------------------------------------------------------
CLI_SAMPLE = st.one_of(
    tagged(),
    alias_bomb().filter(lambda d: d.broken),
    duplicate_key(),
    tabs(),
    long_line().filter(lambda d: d.broken),
    deep_nesting().filter(lambda d: d.broken),
    multi_document(),
    merge_key(),
    shaped_dict(),
)


@settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(CLI_SAMPLE)
def test_cli_validate_reports_broken_files_as_file_line_and_exits_1(doc: Doc) -> None:
    with tempfile.TemporaryDirectory(prefix="fuzz-cli-") as work:
        root = Path(work)
        marker = root / "payload-ran"
        folder = write_catalog(root, {})
        path = folder / f"{NAME}.yaml"
        path.write_bytes(doc.data.replace(MARKER.encode(), str(marker).encode()))
        done = subprocess.run(
            [sys.executable, "-m", "catalog", "validate", f"manifests/{NAME}.yaml"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1, (doc.kind, done.stdout[-2000:], done.stderr[-2000:])
        assert "Traceback" not in done.stdout + done.stderr, (doc.kind, done.stderr[-3000:])
        first = done.stdout.splitlines()[0] if done.stdout else ""
        assert re.match(rf"^manifests/{NAME}\.yaml:\d+: ", first), (doc.kind, first[:300])
        assert not marker.exists()


@pytest.mark.parametrize(
    ("kind", "data", "line"),
    [
        ("nul-byte", b"name: fuzzed\nsource:\n  hf_repo: org/x\x00y\n", 3),
        ("invalid-utf8", b"name: fuzzed\nsource:\n  hf_repo: org/\xc3\x28\n", 3),
    ],
    ids=["nul-byte", "invalid-utf8"],
)
def test_cli_validate_names_the_line_of_a_nul_byte_or_invalid_utf8(
    tmp_path: Path, kind: str, data: bytes, line: int
) -> None:
    """`catalog validate` promises `path:line: ...` for every problem. A NUL byte or a byte sequence that
    is not UTF-8 sits on a known line; the report should name it rather than the file alone."""
    folder = write_catalog(tmp_path, {})
    (folder / f"{NAME}.yaml").write_bytes(data)
    done = subprocess.run(
        [sys.executable, "-m", "catalog", "validate", f"manifests/{NAME}.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith(f"manifests/{NAME}.yaml:{line}: "), first


def test_cli_validate_reports_a_huge_int_without_a_traceback(tmp_path: Path) -> None:
    folder = write_catalog(tmp_path, {})
    (folder / f"{NAME}.yaml").write_text(valid_text().replace("size: 10\n", f"size: {'9' * 5000}\n", 1))
    done = subprocess.run(
        [sys.executable, "-m", "catalog", "validate", f"manifests/{NAME}.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in done.stderr, done.stderr[-1500:]
    assert done.returncode == 1
    assert re.match(rf"^manifests/{NAME}\.yaml:\d+: ", done.stdout.splitlines()[0])


def test_valid_base_document_is_valid() -> None:
    """The fuzzers start from this text: it must load without problems, or 'broken' means nothing."""
    with tempfile.TemporaryDirectory() as work:
        folder = write_catalog(Path(work), {f"{NAME}.yaml": valid_text()})
        result = load_dir(folder)
        assert result.problems == [] and result.docs[0].manifest is not None
