"""The S3 data plane's GET failures (resolver/stores/s3_gets.py) as the transfer must see them, from a real HTTP
server answering each status (tests/reliability/hostile_http.py) through the real obstore binding: mapped by
obstore's exception types, the status read only from its catch-all GenericError."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from reliability.hostile_http import HostileHttp
from servers import free_port

from catalog.errors import StoreUnavailableError
from resolver.stores import s3_gets
from resolver.stores.s3_gets import DataPlane, GetFailed


@pytest.fixture
def endpoint() -> Iterator[HostileHttp]:
    server = HostileHttp(mode="status")
    yield server
    server.close()


def plane(url: str) -> DataPlane:
    return DataPlane("bucket", url, "path", "us-east-1", None, connect_timeout=2, read_timeout=5)


@pytest.mark.parametrize(
    "status, kind, transient",
    [
        (403, StoreUnavailableError, False),
        (401, StoreUnavailableError, False),
        (400, StoreUnavailableError, False),
        (503, GetFailed, True),
        (429, GetFailed, True),
        (500, GetFailed, True),
    ],
)
def test_a_failed_get_is_final_or_worth_a_retry_by_its_status(
    endpoint: HostileHttp, status: int, kind: type, transient: bool
) -> None:
    endpoint.status = status
    with pytest.raises(kind) as failed:
        plane(endpoint.url).open("k", 0, None, "the store")
    assert s3_gets.transient(failed.value) == transient if kind is GetFailed else failed.value.transient is transient
    assert "\n" not in str(failed.value) and str(failed.value).startswith("the store")
    assert f"({status})" in str(failed.value) or f"answered {status}" in str(failed.value)  # the status is named


def test_a_missing_object_a_short_one_and_no_server_at_all(endpoint: HostileHttp) -> None:
    endpoint.status = 404
    with pytest.raises(FileNotFoundError):
        plane(endpoint.url).open("k", 0, None, "the store")
    endpoint.status = 416
    assert plane(endpoint.url).open("k", 100, None, "the store") is None
    with pytest.raises(GetFailed) as nobody:
        plane(f"http://127.0.0.1:{free_port()}").open("k", 0, None, "the store")
    assert nobody.value.transient and "\n" not in str(nobody.value)
