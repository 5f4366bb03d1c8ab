"""The pure rules of the one HTTP transport and the OCI client: where a redirect goes and with which headers, strict
readings of a server's numbers, who may receive registry credentials, the minimum-rate check, referrer manifests."""

from __future__ import annotations

import email.utils
import json

import pytest

from catalog.errors import StoreUnavailableError
from resolver.stores.modelpack import (
    OCI_INDEX,
    OCI_MANIFEST,
    SIGNATURE_TYPE,
    TITLE,
    Descriptor,
    bounded_json,
    build_index,
    build_referrer,
    digest_of,
    fallback_tag,
    parse_index,
)
from resolver.stores.oci_client import RegistryClient, token_lifetime
from resolver.stores.transport import BadAnswer, RedirectRefused, next_hop, size_header
from resolver.waits import Bounds, RateGuard, parse_retry_after

AUTH = {"Authorization": "Basic c2VjcmV0", "Cookie": "s=1", "Accept": "*/*"}


@pytest.mark.parametrize(
    "current, location, target, keeps",
    [
        ("https://r.example/v2/a/blobs/x", "/v2/a/blobs/y", "https://r.example/v2/a/blobs/y", True),
        ("https://r.example/v2/a/blobs/x", "https://r.example:443/b", "https://r.example:443/b", True),
        ("https://r.example/v2/a/blobs/x", "https://R.EXAMPLE/b", "https://R.EXAMPLE/b", True),
        ("https://r.example/v2/a/blobs/x", "https://cdn.example/b?sig=1", "https://cdn.example/b?sig=1", False),
        ("https://r.example/v2/a/blobs/x", "https://r.example:8443/b", "https://r.example:8443/b", False),
        ("http://127.0.0.1:5000/v2/x", "http://localhost:5000/x", "http://localhost:5000/x", False),
        ("http://r.example/x", "https://r.example/x", "https://r.example/x", False),
    ],
)
def test_a_redirect_keeps_credentials_only_on_its_origin(current: str, location: str, target: str, keeps: bool) -> None:
    url, headers = next_hop(current, location, AUTH)
    assert url == target
    assert headers == (AUTH if keeps else {"Accept": "*/*"})


@pytest.mark.parametrize("location", ["http://r.example/x", "ftp://r.example/x", "file:///etc/passwd", "", None])
def test_a_redirect_to_plain_http_from_https_or_to_no_http_url_is_refused(location: str | None) -> None:
    with pytest.raises(RedirectRefused):
        next_hop("https://r.example/v2/x", location, AUTH)


@pytest.mark.parametrize("value", ["\u00b2", "9" * 400, "-1", "1e3", "12 34", "0x10", ""])
def test_a_size_header_that_is_no_number_is_a_one_line_error(value: str) -> None:
    with pytest.raises(BadAnswer) as bad:
        size_header(value, "the registry")
    assert "\n" not in str(bad.value) and len(str(bad.value)) < 200


def test_a_size_header_of_digits_is_read() -> None:
    assert size_header(" 1234 ", "x") == 1234 and size_header(None, "x") is None


@pytest.mark.parametrize("value, seconds", [(None, 60.0), (300, 300.0), (2.5, 2.5), (10**400, 86400.0)])
def test_a_token_lifetime_is_a_number_of_seconds_at_most_a_day(value: object, seconds: float) -> None:
    assert token_lifetime(value, "r") == seconds


@pytest.mark.parametrize("value", [float("inf"), float("nan"), True, "300", "\u00b2", -1, [300]])
def test_a_token_lifetime_that_is_no_number_of_seconds_is_refused(value: object) -> None:
    with pytest.raises(StoreUnavailableError) as bad:
        token_lifetime(value, "https://r.example")
    assert "expires_in" in str(bad.value) and not bad.value.transient


def test_json_nested_past_the_parser_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="nested deeper than the parser follows"):
        bounded_json(b"[" * 100_000 + b"]" * 100_000, "the manifest")
    with pytest.raises(ValueError, match="not JSON"):
        bounded_json(b"\xff", "the manifest")
    assert bounded_json(b'{"a": [1]}', "x") == {"a": [1]}


def client(scheme: str, listed: tuple[str, ...] = ()) -> RegistryClient:
    return RegistryClient(scheme, "r.example", lambda: None, plain_http_ok=lambda where: where in listed)


def test_credentials_go_to_a_plain_http_token_server_only_where_said() -> None:
    from urllib.parse import urlsplit

    assert client("https").credentials_may_go_to(urlsplit("https://auth.example/token"))
    assert not client("https").credentials_may_go_to(urlsplit("http://auth.example/token"))
    assert not client("https").credentials_may_go_to(urlsplit("http://127.0.0.1:9000/token"))  # no downgrade from https
    assert client("http").credentials_may_go_to(urlsplit("http://127.0.0.1:9000/token"))  # a loopback registry's own
    assert not client("http").credentials_may_go_to(urlsplit("http://auth.example/token"))
    assert client("https", ("auth.example:80",)).credentials_may_go_to(urlsplit("http://auth.example:80/token"))


def test_the_rate_guard_abandons_only_after_a_whole_window_below_the_floor() -> None:
    now = [0.0]
    guard = RateGuard(min_rate=100, window=10.0, clock=lambda: now[0])
    now[0] = 9.0
    assert guard.add(1)  # slow, but the window is not over
    now[0] = 10.5
    assert guard.add(2000)  # 2001 bytes in 10.5 s: above 100 bytes/s; a new window starts
    now[0] = 21.0
    assert not guard.add(5)
    assert "below 100 bytes/s" in guard.describe()


def test_the_answer_deadline_grows_with_the_body_sent() -> None:
    bounds = Bounds(answer=60.0, min_rate=1024)
    assert bounds.request_deadline() == 60.0 and bounds.request_deadline(10 * 1024) == 70.0


def test_retry_after_is_read_in_both_forms() -> None:
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after(email.utils.formatdate(1000.0 + 30, usegmt=True), now=1000.0) == 30.0
    assert parse_retry_after("\u00b2") is None and parse_retry_after("9" * 400) == 1e9


def test_a_referrer_names_its_subject_and_the_same_payload_makes_the_same_manifest() -> None:
    subject = Descriptor(OCI_MANIFEST, "sha256:" + "a" * 64, 1234)
    body = build_referrer(subject, SIGNATURE_TYPE, b"bundle", "m.sig")
    assert body == build_referrer(subject, SIGNATURE_TYPE, b"bundle", "m.sig")
    data = json.loads(body)
    assert data["subject"] == {"mediaType": OCI_MANIFEST, "digest": subject.digest, "size": 1234}
    assert data["artifactType"] == SIGNATURE_TYPE
    assert data["layers"][0]["digest"] == digest_of(b"bundle") and data["layers"][0]["annotations"] == {TITLE: "m.sig"}
    assert fallback_tag(subject.digest) == "sha256-" + "a" * 64


def test_the_fallback_index_lists_each_referrer_once_and_reading_skips_what_is_no_descriptor() -> None:
    one = Descriptor(OCI_MANIFEST, "sha256:" + "1" * 64, 10, SIGNATURE_TYPE)
    two = Descriptor(OCI_MANIFEST, "sha256:" + "2" * 64, 20, "application/vnd.cyclonedx+json")
    index = build_index([one, two, one])
    assert json.loads(index)["mediaType"] == OCI_INDEX
    assert parse_index(index) == [one, two]
    odd = json.dumps(
        {"manifests": [1, {"digest": "sha256:x"}, {"digest": one.digest, "size": True}, one.as_json()]}
    ).encode()
    assert parse_index(odd) == [one]
    with pytest.raises(ValueError):
        parse_index(b'{"layers": []}')
