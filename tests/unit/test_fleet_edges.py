"""Pure decisions behind issue 19's fleet-edge guarantees: one strict settings parser, URL checks and redaction,
capped remote waits, the file identity (ctime included) of tier checks, a warm key that every setting enters,
and sync plans that cannot name sync's own records. Each test failed before its fix."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from catalog.errors import UsageError
from catalog.settings import Settings
from catalog.urls import check_endpoint, check_store_url, redact, same_endpoint


# -- settings: one strict parser ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"CATALOG_PART_SIZE": "\u00b9MiB"}, "CATALOG_PART_SIZE"),  # a superscript digit: isdigit() says yes, int() no
        ({"CATALOG_CONCURRENCY": "\u00b2"}, "CATALOG_CONCURRENCY"),
        ({"CATALOG_HUB_MAX_WAIT": "\u00b3"}, "CATALOG_HUB_MAX_WAIT"),
        ({"CATALOG_CACHE_MAX_SIZE": "9" * 400}, "CATALOG_CACHE_MAX_SIZE"),  # float() would make it infinity
        ({"CATALOG_PART_SIZE": "9" * 400 + "GiB"}, "CATALOG_PART_SIZE"),
        ({"CATALOG_S3_READ_TIMEOUT": "9" * 30}, "CATALOG_S3_READ_TIMEOUT"),  # a socket timeout would overflow
        ({"AWS_MAX_ATTEMPTS": "9" * 25}, "AWS_MAX_ATTEMPTS"),
        ({"CATALOG_GPU_COUNT": "\u0663"}, "CATALOG_GPU_COUNT"),  # an Arabic-Indic three
        ({"CATALOG_S3_UNSIGNED": "maybe"}, "CATALOG_S3_UNSIGNED"),  # never a silent false
        ({"CATALOG_DEBUG": "sometimes"}, "CATALOG_DEBUG"),
        ({"CATALOG_STREAM_PROOF_MAX_AGE": "-1"}, "CATALOG_STREAM_PROOF_MAX_AGE"),
        ({"AWS_ENDPOINT_URL": "http://127.0.0.1:99999"}, "endpoint"),
        ({"AWS_ENDPOINT_URL": "http://[::1"}, "endpoint"),
    ],
)
def test_every_bad_setting_is_one_usage_error_naming_it(env: dict[str, str], named: str) -> None:
    with pytest.raises(UsageError) as caught:
        Settings.build(env)
    assert named in str(caught.value) and "\n" not in str(caught.value)
    assert len(str(caught.value)) < 300  # a 400-digit value is cut short, not echoed whole


def test_flags_go_through_the_same_parser() -> None:
    with pytest.raises(UsageError, match="--part-size"):
        Settings.build({}, part_size="9" * 400)
    with pytest.raises(UsageError, match="--concurrency"):
        Settings.build({}, concurrency=10**30)


def test_sizes_and_flags_that_are_fine() -> None:
    built = Settings.build(
        {"CATALOG_PART_SIZE": "1.5GiB", "CATALOG_CACHE_MAX_SIZE": "200GiB", "CATALOG_S3_UNSIGNED": "TRUE"}
    )
    assert built.part_size == 3 << 29 and built.cache_max_size == 200 << 30 and built.s3.unsigned
    assert not Settings.build({"CATALOG_S3_UNSIGNED": "0"}).s3.unsigned
    assert Settings.build({}).stream_proof_max_age == 300


def test_an_empty_home_never_puts_the_cache_at_the_root(tmp_path: Path) -> None:
    import pwd

    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    assert Settings.build({"HOME": ""}).cache_dir == home / ".cache" / "model-catalog"  # the user database's home
    assert Settings.build({"HOME": "relative/dir"}).cache_dir == home / ".cache" / "model-catalog"
    assert Settings.build({"HOME": str(tmp_path)}).cache_dir == tmp_path / ".cache" / "model-catalog"


def test_a_relative_xdg_cache_home_is_ignored_and_said(tmp_path: Path) -> None:
    built = Settings.build({"HOME": str(tmp_path), "XDG_CACHE_HOME": "cache-here"})
    assert built.cache_dir == tmp_path / ".cache" / "model-catalog"
    assert any("XDG_CACHE_HOME" in why for why in built.ignored)
    assert (
        Settings.build({"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "x")}).cache_dir
        == tmp_path / "x" / "model-catalog"
    )


# -- the warm key: every input of the settings enters it ----------------------------------------------------
def _reads(env: dict[str, str]) -> set[str]:
    """The variables `Settings.build` looks up in this environment (up to its first usage error, if any)."""
    seen: set[str] = set()

    class Recording(dict[str, str]):
        def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
            seen.add(key)
            return super().get(key, default)

        def __getitem__(self, key: str) -> str:
            seen.add(key)
            return super().__getitem__(key)

        def __contains__(self, key: object) -> bool:
            seen.add(str(key))
            return super().__contains__(key)

    try:
        Settings.build(Recording(env))
    except UsageError:
        pass
    return seen


def test_every_variable_the_settings_read_enters_the_warm_key() -> None:
    from catalog import front_door
    from catalog.settings import ENV_NAMES
    from catalog_app import warm

    keyed = set(warm.KEY_VARIABLES) | {front_door.placing(front_door.CATALOG), front_door.placing(front_door.CACHE)}
    assert keyed == ENV_NAMES and "HOME" in keyed
    read = (
        _reads({})
        | _reads({"HOME": "/home/someone"})
        | _reads({"HOME": "", "XDG_CACHE_HOME": "rel"})
        | _reads(dict.fromkeys(ENV_NAMES, "x"))
        | _reads(
            {
                "AWS_ENDPOINT_URL": "http://h",
                "S3_ENDPOINT_URL": "http://s",
                "S3_ACCESS_KEY_ID": "a",
                "S3_SECRET_ACCESS_KEY": "b",
            }
        )
    )
    assert read <= keyed, read - keyed
    request = warm.parse_argv(["resolve", "m"])
    assert request is not None
    base = warm.index_key(request, {"HOME": "/home/someone"}, "/c", "/k")
    for name in warm.KEY_VARIABLES:
        assert warm.index_key(request, {"HOME": "/home/someone", name: "/changed"}, "/c", "/k") != base, name
    assert warm.index_key(request, {"HOME": "/home/someone"}, "/other", "/k") != base
    assert warm.index_key(request, {"HOME": "/home/someone"}, "/c", "/other") != base


def test_every_flag_of_the_warm_path_changes_its_key() -> None:
    from catalog import front_door
    from catalog_app import warm

    env = {"HOME": "/home/someone"}
    plain = warm.parse_argv(["resolve", "m"])
    assert plain is not None
    base = warm.index_key(plain, env, "/c", "/k")
    answered = [f for f in front_door.RESOLVE if f.warm]
    assert {f.kind for f in answered} == {front_door.VALUE, front_door.MULTI, front_door.SWITCH}
    for flag in answered:
        name = flag.names[-1]
        if name in ("--format", "--cache"):  # one entry answers every format; the cache enters resolved (below)
            continue
        given = [name] if flag.kind == front_door.SWITCH else [name, "hf-cache" if name == "--layout" else "/v"]
        request = warm.parse_argv(["resolve", "m", *given])
        assert request is not None and warm.index_key(request, env, "/c", "/k") != base, flag


def test_equal_settings_spelled_differently_share_a_warm_key(tmp_path: Path) -> None:
    from catalog_app import warm

    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "catalog.yaml").write_text("store: s3://b/\n")
    (tmp_path / "cache-folder").mkdir()
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "cache-folder", target_is_directory=True)

    def key(env: dict[str, str], *args: str, cwd: Path = tmp_path) -> str:
        request = warm.parse_argv(["--catalog", str(tmp_path / "manifests"), "resolve", "m", *args])
        assert request is not None
        here = os.getcwd()
        os.chdir(cwd)
        try:
            where = warm.place(request, env)
            assert where is not None
            return warm.index_key(request, env, *where)
        finally:
            os.chdir(here)

    env = {"HOME": "/home/someone", "CATALOG_SHARED_CACHE": "hf:/x"}
    cached = {**env, "CATALOG_CACHE": str(tmp_path / "cache-folder")}
    base = key(cached)
    assert key(env, "--cache", str(tmp_path / "cache-folder")) == base  # a flag or a variable
    assert key(env, "--cache", str(link)) == base  # resolved through symlinks
    assert key(cached, "--format", "json") == base  # one entry answers every format
    assert key(cached, cwd=Path("/")) == base  # nothing relative: the working directory does not matter
    relative = {**cached, "CATALOG_STORE": "store"}
    assert key(relative) != key(relative, cwd=Path("/"))  # a relative store: the working directory decides
    assert key({**cached, "HF_TOKEN": "hf_one"}) != key({**cached, "HF_TOKEN": "hf_two"})  # hashed, never stored


def test_a_warm_lookup_from_a_vanished_working_directory_goes_to_the_full_cli(tmp_path: Path) -> None:
    from catalog_app import warm

    gone = tmp_path / "gone"
    gone.mkdir()
    here = os.getcwd()
    os.chdir(gone)
    try:
        gone.rmdir()
        env = {"HOME": str(tmp_path), "CATALOG_DIR": str(tmp_path), "CATALOG_STORE": "relative/store"}
        assert warm.answer(["resolve", "m"], env) is None  # the full CLI then says what is wrong
        assert warm.answer(["resolve", "m"], {"HOME": str(tmp_path)}) is None
    finally:
        os.chdir(here)


def test_offline_enters_the_warm_key_and_a_streamed_answer_rests_on_a_young_proof() -> None:
    from catalog_app.warm import index_key, parse_argv, proof_holds

    env = {"HOME": "/home/someone"}
    online, offline = parse_argv(["resolve", "tiny-qwen2"]), parse_argv(["resolve", "tiny-qwen2", "--offline"])
    assert online is not None and offline is not None
    assert index_key(online, env, "/c", "/k") != index_key(offline, env, "/c", "/k")
    assert index_key(online, env, "/c", "/k") != index_key(online, {**env, "CATALOG_MODE": "offline"}, "/c", "/k")
    entry = {"proved_at": 1000.0, "valid_until": 1300.0}
    assert proof_holds(entry, 1000.0 + 299) and not proof_holds(entry, 1000.0 + 301)
    assert not proof_holds(entry, 999.0)  # a clock put back
    assert proof_holds({"proved_at": 0.0, "valid_until": None}, 1e9)  # nothing streams


# -- URLs -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("s3://user:hunter2@bucket/", "hunter2"),
        ("http://u:hunter2@host:9000/x/", "hunter2"),
        ("s3://b/?endpoint=http://h&token=hunter2", "hunter2"),
        ("https://h/p?X-Amz-Signature=hunter2&x=1", "hunter2"),
        ("http://h/?access_key=hunter2", "hunter2"),
        ("see 'https://a:b@c/?password=hunter2'", "hunter2"),
    ],
)
def test_credentials_in_urls_are_redacted(text: str, secret: str) -> None:
    assert secret not in redact(text) and "***" in redact(text)


def test_redaction_keeps_what_is_not_secret() -> None:
    assert (
        redact("s3://bucket/base/?endpoint=http://127.0.0.1:9000&addressing=path")
        == "s3://bucket/base/?endpoint=http://127.0.0.1:9000&addressing=path"
    )


@pytest.mark.parametrize(
    "url",
    [
        "http://mirror:99999/x/",
        "http://[::1/x/",
        "http://u:hunter2@mirror/x/",
        "http://mirror/x/?token=hunter2",
        "s3://u:hunter2@bucket/",
        "s3://bucket/?token=hunter2",
        "s3://bucket/?endpoint=http://h:70000",
        "s3://bucket/?endpoint=http://u:hunter2@h",
        "s3://bucket/?endpoint=ftp://h",
        "s3://Bad_Bucket/",
        "gopher://h/",
        "s3://bucket/?addressing=sideways",
        "s3://bucket/?unsigned=perhaps",
        "oci://u:hunter2@registry/ns/",
        "oci://registry:99999/ns/",
        "oci://registry/ns/?token=hunter2",
        # A refused value and a URL's query are never echoed, whatever they hold (issue 32: addressing=SECRET was).
        "s3://bucket/?addressing=hunter2",
        "s3://bucket/?unsigned=hunter2",
        "s3://bucket/?endpoint=http://h/?k=hunter2",
        "oci://[::1/ns/?k=hunter2",
        "http://[::1/x/?k=hunter2",
    ],
)
def test_bad_store_urls_are_named_without_their_secrets(url: str) -> None:
    problem = check_store_url(url)
    assert problem is not None and "hunter2" not in problem


def test_an_endpoint_with_a_query_is_refused_without_echoing_it() -> None:
    problem = check_endpoint("http://127.0.0.1:9000/?X-Custom=hunter2#hunter2", "the S3 endpoint (AWS_ENDPOINT_URL)")
    assert problem is not None and "hunter2" not in problem and "'http://127.0.0.1:9000/?...' has a query" in problem
    with pytest.raises(UsageError, match="AWS_ENDPOINT_URL") as refused:
        Settings.build({"AWS_ENDPOINT_URL": "http://127.0.0.1:9000/?k=hunter2"})
    assert "hunter2" not in str(refused.value)


@pytest.mark.parametrize("url", ["oci://[::1/ns/", "oci://h:99999/ns/", "s3://b/?addressing=hunter2"])
def test_a_store_url_python_cannot_parse_is_a_usage_error_not_a_crash(url: str) -> None:
    from resolver.stores import open_store

    with pytest.raises(UsageError, match="bad store URL") as refused:  # was ValueError: Invalid IPv6 URL (exit 3)
        open_store(url, Settings())
    assert "hunter2" not in str(refused.value)


def test_good_store_urls_pass() -> None:
    for url in (
        "s3://bucket/",
        "s3://bucket/base/?endpoint=http://127.0.0.1:9000&addressing=path&unsigned=1",
        "s3://bucket/?endpoint=https://h&profile=mirror-ro",
        "http://127.0.0.1:8080/buckets/b/",
        "file:///srv/m/",
        "/srv/m",
        "oci://127.0.0.1:5000/models/?plain-http=1",
    ):
        assert check_store_url(url) is None, url
    assert check_endpoint("http://127.0.0.1:9000") is None
    assert same_endpoint("http://H:80", "http://h") and not same_endpoint("http://h:9000", "http://h:9001")


# -- remote waits -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("5", 5.0),
        ("0", 0.0),
        ("100000", 100000.0),
        ("1e400", None),
        ("\u00b2", None),
        ("nan", None),
        ("inf", None),
        ("-5", None),
        ("9" * 400, "max"),
        ("Fri, 31 Dec 9999 23:59:59 GMT", "far"),
        ("Thu, 01 Jan 1970 00:00:00 GMT", 0.0),
        ("garbage", None),
        (None, None),
    ],
)
def test_retry_after_values_never_crash(value: str | None, expected: object) -> None:
    from resolver.waits import MAX_HINT, parse_retry_after

    got = parse_retry_after(value, now=1_000_000.0)
    if expected == "far":
        assert got is not None and math.isfinite(got) and 1e10 > got > 1e8 and got <= MAX_HINT
    elif expected == "max":
        assert got == MAX_HINT
    else:
        assert got == expected


@pytest.mark.parametrize(
    "headers",
    [
        {"Retry-After": "1e400"},
        {"Retry-After": "\u00b2"},
        {"RateLimit": '"api";r=0;t=' + "9" * 30},
        {"RateLimit": '"api";r=0;t=99999999999999999999'},
        {"Retry-After": "Fri, 31 Dec 9999 23:59:59 GMT"},
    ],
)
def test_the_hubs_absurd_rate_limits_fail_as_one_line_not_a_crash(headers: dict[str, str]) -> None:
    from resolver.hub import RateLimitedError, retry_delay

    try:
        delay = retry_delay("listing org/m", 429, headers, max_wait=60)
    except RateLimitedError as exc:  # a far reset: named, with a date that exists
        assert "resets in" in str(exc) and exc.hint is not None
    else:
        assert delay is None or 0 <= delay <= 60


def test_a_hint_beyond_the_cap_ends_the_source_and_is_named(caplog: pytest.LogCaptureFixture) -> None:
    from resolver.waits import WaitTooLongError, hinted_delay

    with pytest.raises(WaitTooLongError) as caught:
        hinted_delay(100000.0, 60.0, "http://mirror/ (m/model.safetensors)")
    assert "asked to retry in 100000s" in str(caught.value) and not caught.value.transient
    with caplog.at_level("WARNING"):
        assert hinted_delay(2.0, 60.0, "http://mirror/") == 2.0
    assert "asked to retry in 2s" in caplog.text  # said, never a silent sleep
    assert hinted_delay(None, 60.0, "x") is None


# -- the tier check's identity ------------------------------------------------------------------------------------
def _stat(base: os.stat_result, **changes: int) -> os.stat_result:
    """`base` with some st_* fields changed (a real stat_result, as os.stat builds them)."""
    fields = list(base)
    extra = {name: getattr(base, name) for name in ("st_atime_ns", "st_mtime_ns", "st_ctime_ns")}
    order = ["st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size"]
    for name, value in changes.items():
        if name in order:
            fields[order.index(name)] = value
        extra[name] = value
    values = fields[:10] + [None, None, None] + [extra["st_atime_ns"], extra["st_mtime_ns"], extra["st_ctime_ns"]]
    return os.stat_result(values)


def test_a_tier_file_is_trusted_only_while_every_part_of_its_identity_holds(tmp_path: Path) -> None:
    from resolver.cache import Cache
    from resolver.tiers import CheckRecord

    (tmp_path / "f").write_bytes(b"x")
    st = os.stat(tmp_path / "f")
    record = CheckRecord(Cache(tmp_path / "cache"))
    sha = "a" * 64
    record.remember(sha, st)
    assert record.verdict(sha, st) is True
    for field_name, value in (
        ("st_mtime_ns", st.st_mtime_ns + 1),
        ("st_ctime_ns", st.st_ctime_ns + 1),
        ("st_size", st.st_size + 1),
        ("st_ino", st.st_ino + 1),
        ("st_dev", st.st_dev + 1),
    ):
        assert record.verdict(sha, _stat(st, **{field_name: value})) is None, field_name
    record.remember(sha, _stat(st, st_ctime_ns=st.st_ctime_ns + 5), good=False)  # this one hashed wrong
    assert record.verdict(sha, _stat(st, st_ctime_ns=st.st_ctime_ns + 5)) is False
    assert record.verdict(sha, st) is True


# -- sync plans: never sync's own records ---------------------------------------------------------------------------
def test_an_edited_plan_naming_syncs_state_records_is_refused(bundled: object) -> None:
    from resolver.sync import Action, PlanItem, SyncPlan, check_items

    for action in (Action.ORPHAN, Action.EXTRA):
        item = PlanItem(
            action, ".model-catalog/state/tiny-llama.json", 10, model="tiny-llama" if action is Action.EXTRA else ""
        )
        plan = SyncPlan("s3://b/", (item,), "f", prune=True, delete_orphans=True)
        with pytest.raises(UsageError, match="sync's own state records"):
            check_items(plan, bundled)  # type: ignore[arg-type]


# -- the README's defaults ---------------------------------------------------------------------------------------------
def test_the_log_heartbeat_comes_every_ten_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from catalog_app import progress

    clock = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    bar = progress.LogProgress(1000, stream=out)
    clock[0] += 9.9
    bar("m/f", 10)
    assert out.getvalue() == ""
    clock[0] += 0.1
    bar("m/f", 10)
    assert out.getvalue().startswith("... 20 B of 1000 B")


def test_warm_entries_go_after_a_week_unused(tmp_path: Path) -> None:
    import time

    from resolver.cache import Cache
    from resolver.maintenance import _stale_warm_entries

    cache = Cache(tmp_path)
    cache.warm_index.mkdir(parents=True)
    now = time.time()
    for name, age in (("old", 7 * 24 * 3600 + 60), ("recent", 7 * 24 * 3600 - 60)):
        path = cache.warm_index / f"{name}.json"
        path.write_text('{"markers": []}')
        os.utime(path, (now - age, now - age))
    assert [p.stem for p in _stale_warm_entries(cache, now)] == ["old"]
