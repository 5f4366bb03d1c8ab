"""The environment's AWS keys, read as botocore reads them, and when to leave the rest to boto3."""

from __future__ import annotations

from pathlib import Path

from resolver.stores.aws_env import ca_bundle_known, environment_keys


def test_both_keys_are_needed_and_the_session_token_comes_along() -> None:
    assert environment_keys({"AWS_ACCESS_KEY_ID": "id"}) is None  # half a pair: botocore says what is missing
    assert environment_keys({"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "s"}) is None
    keys = environment_keys({"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "s", "AWS_SESSION_TOKEN": "t"})
    assert keys is not None and (keys.access_key_id, keys.secret_access_key, keys.token) == ("id", "s", "t")
    old_name = environment_keys({"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "s", "AWS_SECURITY_TOKEN": "t2"})
    assert old_name is not None and old_name.token == "t2"
    hidden = environment_keys(
        {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "the-secret", "AWS_SESSION_TOKEN": "the-token"}
    )
    assert "the-secret" not in repr(hidden) and "the-token" not in repr(hidden)


def test_expiring_keys_are_left_to_botocore() -> None:
    assert (
        environment_keys(
            {
                "AWS_ACCESS_KEY_ID": "id",
                "AWS_SECRET_ACCESS_KEY": "s",
                "AWS_CREDENTIAL_EXPIRATION": "2999-01-01T00:00:00Z",
            }
        )
        is None
    )


def test_a_ca_bundle_is_known_from_the_environment_or_from_there_being_no_config_file(tmp_path: Path) -> None:
    assert ca_bundle_known({"AWS_CA_BUNDLE": "/x/ca.pem"}) == (True, "/x/ca.pem")
    config = tmp_path / "config"
    assert ca_bundle_known({"AWS_CONFIG_FILE": str(config)}) == (True, None)  # no file: nothing can name one
    config.write_text("[default]\nca_bundle = /y/ca.pem\n")
    assert ca_bundle_known({"AWS_CONFIG_FILE": str(config)}) == (False, None)  # a file: boto3 reads it
