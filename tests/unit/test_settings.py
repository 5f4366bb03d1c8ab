"""Settings precedence (flags over CATALOG_* over defaults), modes, validation naming the variable, and secrets kept out
of what the settings show."""

from __future__ import annotations

from pathlib import Path

import pytest

from catalog.errors import UsageError
from catalog.settings import Settings


def test_flags_beat_the_environment_which_beats_the_defaults(tmp_path: Path) -> None:
    env = {
        "CATALOG_CACHE": str(tmp_path / "env-cache"),
        "CATALOG_STORE": "s3://env-bucket/",
        "CATALOG_PART_SIZE": "8MiB",
        "CATALOG_CONCURRENCY": "3",
    }
    assert Settings.build({"HOME": str(tmp_path)}).cache_dir == tmp_path / ".cache" / "model-catalog"  # HOME of `env`
    assert Settings.build({"XDG_CACHE_HOME": str(tmp_path)}).cache_dir == tmp_path / "model-catalog"
    from_env = Settings.build(env)
    assert (from_env.cache_dir, from_env.store, from_env.part_size, from_env.concurrency) == (
        tmp_path / "env-cache",
        "s3://env-bucket/",
        8 << 20,
        3,
    )
    flagged = Settings.build(
        env, cache_dir=str(tmp_path / "flag"), store="/srv/store", part_size="16MiB", concurrency=5
    )
    assert (flagged.cache_dir, flagged.store, flagged.part_size, flagged.concurrency) == (
        tmp_path / "flag",
        "/srv/store",
        16 << 20,
        5,
    )


@pytest.mark.parametrize(
    ("mode", "source", "offline"),
    [(None, "store", False), ("ci", "store", False), ("dev", "fallback", False), ("offline", "store", True)],
)
def test_modes(mode: str | None, source: str, offline: bool) -> None:
    settings = Settings.build({"CATALOG_MODE": mode} if mode else {})
    assert (settings.source, settings.offline) == (source, offline)
    assert Settings.build({"CATALOG_MODE": mode} if mode else {}, source="hf").source == "hf"  # the flag wins


def test_a_source_flag_wins_over_the_offline_mode_and_offline_names_what_set_it() -> None:
    offline = {"CATALOG_MODE": "offline"}
    assert (Settings.build(offline).offline, Settings.build(offline).offline_by) == (True, "CATALOG_MODE=offline")
    assert (Settings.build(offline, source="store").offline, Settings.build(offline, source="store").source) == (
        False,
        "store",
    )
    assert Settings.build(offline, source="store", offline=True).offline_by == "--offline"
    assert Settings.build({}, offline=True).offline_by == "--offline" and Settings.build({}).offline_by == ""


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"CATALOG_MODE": "prod"}, "CATALOG_MODE"),
        ({"CATALOG_S3_ADDRESSING": "vhost"}, "CATALOG_S3_ADDRESSING"),
        ({"AWS_RETRY_MODE": "fast"}, "AWS_RETRY_MODE"),
        ({"AWS_MAX_ATTEMPTS": "many"}, "AWS_MAX_ATTEMPTS"),
        ({"CATALOG_CONCURRENCY": "0"}, "CATALOG_CONCURRENCY"),
        ({"CATALOG_PART_SIZE": "lots"}, "CATALOG_PART_SIZE"),
        ({"CATALOG_GPU_COUNT": "-1"}, "CATALOG_GPU_COUNT"),
    ],
)
def test_a_bad_value_is_a_usage_error_naming_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(UsageError, match=named):
        Settings.build(env)


def test_s3_endpoint_addressing_and_the_s3cmd_spelling() -> None:
    assert Settings.build({}).s3.addressing_style == "auto"
    aws = Settings.build({"AWS_ENDPOINT_URL": "http://127.0.0.1:1"}).s3
    assert (aws.endpoint_url, aws.addressing_style) == ("http://127.0.0.1:1", "path")
    assert (
        Settings.build({"AWS_ENDPOINT_URL": "http://a", "CATALOG_S3_ADDRESSING": "virtual"}).s3.addressing_style
        == "virtual"
    )
    assert Settings.build({"S3_ENDPOINT_URL": "http://s3cmd"}).s3.endpoint_url == "http://s3cmd"
    both = Settings.build({"AWS_ENDPOINT_URL": "http://aws", "S3_ENDPOINT_URL": "http://s3cmd"})
    assert both.s3.endpoint_url == "http://aws" and both.ignored  # the ignored one is said, not silently dropped
    assert Settings.build({"CATALOG_S3_UNSIGNED": "1", "AWS_PROFILE": "ci", "CATALOG_S3_READ_TIMEOUT": "5"}).s3.unsigned


def test_secrets_never_show_in_the_settings(tmp_path: Path) -> None:
    secret = Settings.build({"HF_TOKEN": "hf_marker_secret"})
    assert "hf_marker_secret" not in repr(secret)
    assert Settings.build({"CATALOG_GPU_CLASS": " L4 "}).gpu_class == "l4"  # case-folded
