"""The S3 store against the real server: the client settings it builds, and what an upload guarantees
(ChecksumSHA256 on a single PUT, per part on multipart, provenance metadata, nothing visible on failure)."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

from botocore import UNSIGNED

from catalog.settings import S3Options, Settings
from resolver.stores import S3Store, make_s3_client, open_store

MiB = 1024 * 1024


def test_the_client_carries_the_settings() -> None:
    options = Settings.build(
        {
            "AWS_ENDPOINT_URL": "http://127.0.0.1:1",
            "AWS_RETRY_MODE": "adaptive",
            "AWS_MAX_ATTEMPTS": "7",
            "CATALOG_S3_READ_TIMEOUT": "9",
            "CATALOG_S3_UNSIGNED": "1",
        }
    ).s3
    config = make_s3_client(options).meta.config
    assert config.s3["addressing_style"] == "path"  # an endpoint is set: path-style unless told otherwise
    assert config.retries == {"mode": "adaptive", "total_max_attempts": 7}  # AWS_MAX_ATTEMPTS counts the first try
    assert config.read_timeout == 9 and config.signature_version is UNSIGNED
    virtual = make_s3_client(S3Options(endpoint_url="http://127.0.0.1:1", addressing_style="virtual")).meta.config
    assert virtual.s3["addressing_style"] == "virtual" and virtual.signature_version is not UNSIGNED


def test_single_put_and_multipart_carry_checksums_and_provenance(s3_server, bucket: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store = open_store(f"s3://{bucket}/base/")
    assert isinstance(store, S3Store)
    store.part_size = 5 * MiB  # S3's smallest part
    client = make_s3_client(S3Options(endpoint_url=s3_server.url, addressing_style="path"))
    for name, size in (("small.bin", 1000), ("large.bin", 12 * MiB)):
        data = os.urandom(size)
        source = tmp_path / name
        source.write_bytes(data)
        sha = hashlib.sha256(data).hexdigest()
        meta = {"sha256": sha, "hf-repo": "org/m", "revision": "0" * 40, "path": name}
        info = store.put(name, source, meta, sha256=sha)
        assert info.size == size
        head = client.head_object(Bucket=bucket, Key=f"base/{name}", ChecksumMode="ENABLED")
        assert head["Metadata"] == meta  # provenance travels with the object
        checksum = head.get("ChecksumSHA256")
        if size <= store.part_size:
            assert checksum == base64.b64encode(bytes.fromhex(sha)).decode()  # the whole object's sha256
        else:
            assert head["ETag"].strip('"').endswith("-3")  # three parts, each sent with its own ChecksumSHA256
        assert client.get_object(Bucket=bucket, Key=f"base/{name}")["Body"].read() == data


def test_a_put_whose_checksum_is_wrong_leaves_nothing_visible(s3_server, bucket: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store = open_store(f"s3://{bucket}/")
    source = tmp_path / "f.bin"
    source.write_bytes(b"the real bytes")
    try:
        store.put("f.bin", source, {}, sha256="0" * 64)
    except Exception:  # noqa: BLE001 - the server refuses the body; the point is what is visible after
        pass
    assert store.head("f.bin") is None


def test_gets_through_the_data_plane_read_what_botocore_reads(s3_server, bucket: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """GETs go through obstore (s3_gets.py) when the endpoint is known; the botocore path stays for the rest (AWS in
    a region not named). Both give the same bytes, sizes and ETags, ranges and the edges included."""
    import pytest

    from resolver.stores import ObjectNotFound

    data = os.urandom(3 * MiB + 7)
    source = tmp_path / "o.bin"
    source.write_bytes(data)
    fast = open_store(f"s3://{bucket}/planes/")
    assert isinstance(fast, S3Store)
    fast.put("o bin+1.json", source)  # a key with a space and a plus: the same object through both planes
    slow = S3Store(bucket, "planes/", fast.options, fast_gets=False)

    def read(store: S3Store, start: int = 0, end: int | None = None) -> tuple[bytes, int, str | None]:
        stream = store.open("o bin+1.json", start, end)
        out, buffer = bytearray(), memoryview(bytearray(64 * 1024))
        while count := stream.readinto(buffer):
            out += buffer[:count]
        stream.close()
        return bytes(out), stream.total, stream.etag

    for start, end in ((0, None), (5, 70_000), (3 * MiB, None), (len(data) + 10, None)):
        got_fast, got_slow = read(fast, start, end), read(slow, start, end)
        assert got_fast == got_slow, (start, end)
        assert got_fast[0] == data[start:end] and got_fast[1] == len(data)
    assert fast._plane is not None and slow._plane is None  # each took its own path
    assert fast.requests["GetObject"] == 4 and slow.requests["GetObject"] == 4
    for store in (fast, slow):
        with pytest.raises(ObjectNotFound):
            store.open("missing.bin")
