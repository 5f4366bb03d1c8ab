"""The standard-library ECDSA verifier (resolver/ecdsa.py) against `cryptography`: it accepts exactly the signatures
`cryptography` accepts, on random keys, messages and tampered signatures, and reads keys the way it writes them."""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa, utils
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resolver import ecdsa

CURVES = {
    "P-256": (ec.SECP256R1(), hashes.SHA256()),
    "P-384": (ec.SECP384R1(), hashes.SHA384()),
    "P-521": (ec.SECP521R1(), hashes.SHA512()),
}
KEYS = {name: ec.generate_private_key(curve) for name, (curve, _) in CURVES.items()}


def public_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def theirs(key: ec.EllipticCurvePrivateKey, algorithm: hashes.HashAlgorithm, signature: bytes, message: bytes) -> bool:
    try:
        key.public_key().verify(signature, message, ec.ECDSA(algorithm))
        return True
    except (InvalidSignature, ValueError):
        return False


@pytest.mark.parametrize("curve", sorted(CURVES))
def test_keys_read_as_cryptography_writes_them(curve: str) -> None:
    pem = public_pem(KEYS[curve])
    key = ecdsa.load_public_key(pem)
    assert key.curve.name == curve and key.pem() == pem
    assert key.hint == hashlib.sha256(pem).hexdigest()  # model-signing's key hint
    # the same key with its point compressed reads to the same key
    compressed = (
        KEYS[curve].public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint)
    )
    algorithm = ecdsa._tlv(0x30, ecdsa._tlv(0x06, ecdsa._EC_PUBLIC_KEY) + ecdsa._tlv(0x06, key.curve.oid))
    der = ecdsa._tlv(0x30, algorithm + ecdsa._tlv(0x03, b"\x00" + compressed))
    assert serialization.load_der_public_key(der).public_numbers() == KEYS[curve].public_key().public_numbers()  # type: ignore[union-attr]
    assert (
        ecdsa.load_public_key(b"-----BEGIN PUBLIC KEY-----\n" + base64.encodebytes(der) + b"-----END PUBLIC KEY-----\n")
        == key
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(curve=st.sampled_from(sorted(CURVES)), message=st.binary(max_size=300), flip=st.integers(min_value=0))
def test_accepts_exactly_what_cryptography_accepts(curve: str, message: bytes, flip: int) -> None:
    key, (_, algorithm) = KEYS[curve], CURVES[curve]
    ours = ecdsa.load_public_key(public_pem(key))
    signature = key.sign(message, ec.ECDSA(algorithm))
    assert ours.verify(signature, message) and theirs(key, algorithm, signature, message)
    assert not ours.verify(signature, message + b"\0")
    tampered = bytearray(signature)
    bit = flip % (len(tampered) * 8)
    tampered[bit // 8] ^= 1 << (bit % 8)
    assert ours.verify(bytes(tampered), message) == theirs(key, algorithm, bytes(tampered), message)


@pytest.mark.parametrize("curve", sorted(CURVES))
def test_out_of_range_and_malformed_signatures_are_refused(curve: str) -> None:
    key, (_, algorithm) = KEYS[curve], CURVES[curve]
    ours = ecdsa.load_public_key(public_pem(key))
    n = ours.curve.n
    message = b"pins"
    r, s = utils.decode_dss_signature(key.sign(message, ec.ECDSA(algorithm)))
    assert ours.verify(utils.encode_dss_signature(r, n - s), message)  # the other valid s, as cryptography accepts
    for bad_r, bad_s in ((0, 0), (0, s), (r, 0), (r + n, s), (r, s + n), (n, s)):
        assert not ours.verify(utils.encode_dss_signature(bad_r, bad_s), message)
    good = utils.encode_dss_signature(r, s)
    assert not ours.verify(good + b"\0", message)  # trailing bytes
    assert not ours.verify(b"", message)

    def der_int(value: int, pad: bool = False) -> bytes:
        body = (b"\x00" if pad else b"") + value.to_bytes(value.bit_length() // 8 + 1, "big")
        return ecdsa._tlv(0x02, body)

    assert ours.verify(ecdsa._tlv(0x30, der_int(r) + der_int(s)), message)
    assert not ours.verify(ecdsa._tlv(0x30, der_int(r, pad=True) + der_int(s)), message)  # a non-minimal integer
    if good[1] < 0x80:
        assert not ours.verify(b"\x30\x81" + good[1:], message)  # a long-form length where the short form fits


def test_only_ec_keys_on_supported_curves_are_read() -> None:
    rsa_pem = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(ecdsa.KeyFormatError, match="not an EC public key"):
        ecdsa.load_public_key(rsa_pem)
    k1 = public_pem(ec.generate_private_key(ec.SECP256K1()))
    with pytest.raises(ecdsa.KeyFormatError, match="unsupported curve"):
        ecdsa.load_public_key(k1)
    with pytest.raises(ecdsa.KeyFormatError, match="no '-----BEGIN PUBLIC KEY-----'"):
        ecdsa.load_public_key(b"-----BEGIN EC PRIVATE KEY-----\n...")


def test_a_point_off_the_curve_is_refused() -> None:
    pem = public_pem(KEYS["P-256"])
    key = ecdsa.load_public_key(pem)
    off = ecdsa.PublicKey(key.curve, key.x, (key.y + 1) % key.curve.p)
    with pytest.raises(ecdsa.KeyFormatError, match="not on P-256"):
        ecdsa.load_public_key(off.pem())


def test_the_curve_constants_are_right() -> None:
    for curve in ecdsa.CURVES:
        g = (curve.gx, curve.gy, 1)
        assert (curve.gy**2 - (curve.gx**3 + curve.a * curve.gx + curve.b)) % curve.p == 0
        assert ecdsa._twin_multiply(curve, curve.n, 0, g)[2] == 0  # n * G is the identity
