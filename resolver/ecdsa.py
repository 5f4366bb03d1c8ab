"""ECDSA verification over NIST P-256, P-384 and P-521 in the standard library, and EC public keys in PEM.

Why not `cryptography` on this path: loading its native module takes 50-100 ms, more than a resolve's whole
budget for the signature check, and every resolve that requires signatures pays it. Verification handles
public values only (no secret, so no timing side channel to guard), and it makes every check a verifier must:
r and s in [1, n-1], the public point on the curve, strict DER. Signing and certificate chains use
`cryptography` (resolver/signatures.py); tests compare this module with it on random keys, messages and
tampered signatures.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Callable
from typing import NamedTuple

_Point = tuple[int, int, int]  # Jacobian coordinates (X, Y, Z): x = X / Z^2, y = Y / Z^3; Z = 0 is the identity
_INFINITY: _Point = (0, 1, 0)


class Curve(NamedTuple):
    name: str
    oid: bytes  # DER value of the named curve's object identifier
    p: int
    a: int
    b: int
    gx: int
    gy: int
    n: int
    hash: Callable[[bytes], hashlib._Hash]  # what model-signing pairs with the curve (Sigstore's choice)

    @property
    def size(self) -> int:
        return (self.p.bit_length() + 7) // 8


P256 = Curve(
    "P-256",
    bytes.fromhex("2a8648ce3d030107"),
    p=0xFFFFFFFF00000001000000000000000000000000FFFFFFFFFFFFFFFFFFFFFFFF,
    a=-3,
    b=0x5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B,
    gx=0x6B17D1F2E12C4247F8BCE6E563A440F277037D812DEB33A0F4A13945D898C296,
    gy=0x4FE342E2FE1A7F9B8EE7EB4A7C0F9E162BCE33576B315ECECBB6406837BF51F5,
    n=0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551,
    hash=hashlib.sha256,
)
P384 = Curve(
    "P-384",
    bytes.fromhex("2b81040022"),
    p=2**384 - 2**128 - 2**96 + 2**32 - 1,
    a=-3,
    b=0xB3312FA7E23EE7E4988E056BE3F82D19181D9C6EFE8141120314088F5013875AC656398D8A2ED19D2A85C8EDD3EC2AEF,
    gx=0xAA87CA22BE8B05378EB1C71EF320AD746E1D3B628BA79B9859F741E082542A385502F25DBF55296C3A545E3872760AB7,
    gy=0x3617DE4A96262C6F5D9E98BF9292DC29F8F41DBD289A147CE9DA3113B5F0B8C00A60B1CE1D7E819D7A431D7C90EA0E5F,
    n=0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFC7634D81F4372DDF581A0DB248B0A77AECEC196ACCC52973,
    hash=hashlib.sha384,
)
P521 = Curve(
    "P-521",
    bytes.fromhex("2b81040023"),
    p=2**521 - 1,
    a=-3,
    b=int(
        "0051953eb9618e1c9a1f929a21a0b68540eea2da725b99b315f3b8b489918ef109e156193951ec7e937b1652c0bd3bb1bf0735"
        "73df883d2c34f1ef451fd46b503f00",
        16,
    ),
    gx=int(
        "00c6858e06b70404e9cd9e3ecb662395b4429c648139053fb521f828af606b4d3dbaa14b5e77efe75928fe1dc127a2ffa8de3348"
        "b3c1856a429bf97e7e31c2e5bd66",
        16,
    ),
    gy=int(
        "011839296a789a3bc0045c8a5fb42c7d1bd998f54449579b446817afbd17273e662c97ee72995ef42640c550b9013fad0761353c"
        "7086a272c24088be94769fd16650",
        16,
    ),
    n=int(
        "01fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffa51868783bf2f966b7fcc0148f709a5d03bb5c9"
        "b8899c47aebb6fb71e91386409",
        16,
    ),
    hash=hashlib.sha512,
)
CURVES = (P256, P384, P521)
_EC_PUBLIC_KEY = bytes.fromhex("2a8648ce3d0201")  # 1.2.840.10045.2.1
_PEM = re.compile(rb"-----BEGIN PUBLIC KEY-----(.*?)-----END PUBLIC KEY-----", re.DOTALL)


class KeyFormatError(ValueError):
    """Not a PEM EC public key on a supported curve; the message says what it is instead."""


class PublicKey(NamedTuple):
    curve: Curve
    x: int
    y: int

    def der(self) -> bytes:
        """SubjectPublicKeyInfo, uncompressed point: what `cryptography` writes for this key."""
        point = b"\x04" + self.x.to_bytes(self.curve.size, "big") + self.y.to_bytes(self.curve.size, "big")
        algorithm = _tlv(0x30, _tlv(0x06, _EC_PUBLIC_KEY) + _tlv(0x06, self.curve.oid))
        return _tlv(0x30, algorithm + _tlv(0x03, b"\x00" + point))

    def pem(self) -> bytes:
        text = base64.b64encode(self.der()).decode()
        lines = "\n".join(text[i : i + 64] for i in range(0, len(text), 64))
        return f"-----BEGIN PUBLIC KEY-----\n{lines}\n-----END PUBLIC KEY-----\n".encode()

    @property
    def hint(self) -> str:
        """model-signing's key hint: sha256 hex of the key's PEM as `cryptography` writes it."""
        return hashlib.sha256(self.pem()).hexdigest()

    def verify(self, signature: bytes, message: bytes) -> bool:
        """True when `signature` (DER) is this key's ECDSA signature of `message` with the curve's hash."""
        try:
            r, s = _signature(signature)
        except ValueError:
            return False
        c = self.curve
        if not (1 <= r < c.n and 1 <= s < c.n):
            return False
        digest = c.hash(message).digest()
        e = int.from_bytes(digest, "big") >> max(0, 8 * len(digest) - c.n.bit_length())
        w = pow(s, -1, c.n)
        X, _, Z = _twin_multiply(c, e * w % c.n, r * w % c.n, (self.x, self.y, 1))
        if Z == 0:
            return False
        return X * pow(Z * Z, -1, c.p) % c.p % c.n == r


def load_public_key(pem: bytes) -> PublicKey:
    """The first `PUBLIC KEY` block of a PEM file (SubjectPublicKeyInfo of an EC key on P-256/384/521)."""
    return load_public_keys(pem)[0]


def load_public_keys(pem: bytes) -> tuple[PublicKey, ...]:
    """Every `PUBLIC KEY` block of a PEM file, in order (a key file may hold the old and the new key while a
    signing key rotates: each is trusted). KeyFormatError when there is none or one cannot be read."""
    blocks = _PEM.findall(pem)
    if not blocks:
        raise KeyFormatError(
            "no '-----BEGIN PUBLIC KEY-----' block (a public key in PEM is expected; "
            "`openssl ec -in KEY -pubout` writes one)"
        )
    keys = []
    for number, block in enumerate(blocks, 1):
        try:
            keys.append(_spki_key(block))
        except KeyFormatError as exc:
            raise KeyFormatError(f"key {number} of {len(blocks)}: {exc}" if len(blocks) > 1 else str(exc)) from None
    return tuple(keys)


def _spki_key(block: bytes) -> PublicKey:
    try:
        der = base64.b64decode(b"".join(block.split()), validate=True)
        spki, rest = _read(der, 0x30)
        algorithm, bits = _read(spki, 0x30)
        kind, params = _read(algorithm, 0x06)
        if kind != _EC_PUBLIC_KEY:
            raise KeyFormatError("not an EC public key (EC P-256, P-384 or P-521 keys are supported)")
        curve_oid, tail = _read(params, 0x06)
        bitstring, trailing = _read(bits, 0x03)
    except (binascii.Error, ValueError) as exc:
        if isinstance(exc, KeyFormatError):
            raise
        raise KeyFormatError(f"not a DER public key ({exc})") from None
    if rest or tail or trailing:
        raise KeyFormatError("trailing bytes after the public key")
    curve = next((c for c in CURVES if c.oid == curve_oid), None)
    if curve is None:
        raise KeyFormatError("an EC key on an unsupported curve (P-256, P-384 or P-521 are)")
    if not bitstring or bitstring[0] != 0:
        raise KeyFormatError("a malformed key bit string")
    x, y = _point(curve, bitstring[1:])
    return PublicKey(curve, x, y)


def _point(c: Curve, data: bytes) -> tuple[int, int]:
    """An encoded point (uncompressed 04||x||y or compressed 02/03||x), proven to lie on the curve."""
    if len(data) == 1 + 2 * c.size and data[0] == 4:
        x, y = int.from_bytes(data[1 : 1 + c.size], "big"), int.from_bytes(data[1 + c.size :], "big")
    elif len(data) == 1 + c.size and data[0] in (2, 3):
        x = int.from_bytes(data[1:], "big")
        y = pow((x * x * x + c.a * x + c.b) % c.p, (c.p + 1) // 4, c.p)  # p = 3 (mod 4) on all three curves
        if y % 2 != data[0] % 2:
            y = c.p - y
    else:
        raise KeyFormatError(f"a point that is not {c.name}-sized")
    if not (0 <= x < c.p and 0 <= y < c.p) or (y * y - (x * x * x + c.a * x + c.b)) % c.p != 0:
        raise KeyFormatError(f"a point that is not on {c.name}")
    return x, y


def _signature(der: bytes) -> tuple[int, int]:
    body, rest = _read(der, 0x30)
    r_bytes, tail = _read(body, 0x02)
    s_bytes, trailing = _read(tail, 0x02)
    if rest or trailing:
        raise ValueError("trailing bytes")
    return _integer(r_bytes), _integer(s_bytes)


def _integer(data: bytes) -> int:
    """A DER INTEGER's content: non-empty, minimal, non-negative."""
    if not data or data[0] & 0x80 or (len(data) > 1 and data[0] == 0 and not data[1] & 0x80):
        raise ValueError("not a minimal positive integer")
    return int.from_bytes(data, "big")


def _read(data: bytes, tag: int) -> tuple[bytes, bytes]:
    """One DER element of type `tag` at the start of `data`: (its content, what follows). Definite, minimal
    lengths only."""
    if len(data) < 2 or data[0] != tag:
        raise ValueError(f"expected DER tag {tag:#x}")
    length, start = data[1], 2
    if length & 0x80:
        count = length & 0x7F
        if not 1 <= count <= 4 or len(data) < 2 + count or data[2] == 0:
            raise ValueError("a malformed DER length")
        length, start = int.from_bytes(data[2 : 2 + count], "big"), 2 + count
        if length < 0x80:
            raise ValueError("a non-minimal DER length")
    if len(data) < start + length:
        raise ValueError("a DER element longer than its data")
    return data[start : start + length], data[start + length :]


def _tlv(tag: int, content: bytes) -> bytes:
    n = len(content)
    if n < 0x80:
        return bytes((tag, n)) + content
    size = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes((tag, 0x80 | len(size))) + size + content


def _double(c: Curve, P: _Point) -> _Point:
    X, Y, Z = P
    if Z == 0 or Y == 0:
        return _INFINITY
    p = c.p
    YY = Y * Y % p
    S = 4 * X * YY % p
    ZZ = Z * Z % p
    M = (3 * X * X + c.a * ZZ * ZZ) % p
    X3 = (M * M - 2 * S) % p
    return X3, (M * (S - X3) - 8 * YY * YY) % p, 2 * Y * Z % p


def _add(c: Curve, P: _Point, Q: _Point) -> _Point:
    if P[2] == 0:
        return Q
    if Q[2] == 0:
        return P
    p = c.p
    X1, Y1, Z1 = P
    X2, Y2, Z2 = Q
    Z1Z1, Z2Z2 = Z1 * Z1 % p, Z2 * Z2 % p
    U1, U2 = X1 * Z2Z2 % p, X2 * Z1Z1 % p
    S1, S2 = Y1 * Z2 * Z2Z2 % p, Y2 * Z1 * Z1Z1 % p
    if U1 == U2:
        return _double(c, P) if S1 == S2 else _INFINITY
    H, R = (U2 - U1) % p, (S2 - S1) % p
    HH = H * H % p
    HHH, V = H * HH % p, U1 * HH % p
    X3 = (R * R - HHH - 2 * V) % p
    return X3, (R * (V - X3) - S1 * HHH) % p, H * Z1 * Z2 % p


def _twin_multiply(c: Curve, u1: int, u2: int, Q: _Point) -> _Point:
    """u1*G + u2*Q in one pass over the bits (Shamir's trick)."""
    G: _Point = (c.gx, c.gy, 1)
    table = {(1, 0): G, (0, 1): Q, (1, 1): _add(c, G, Q)}
    R = _INFINITY
    for i in range(max(u1.bit_length(), u2.bit_length()) - 1, -1, -1):
        R = _double(c, R)
        bits = ((u1 >> i) & 1, (u2 >> i) & 1)
        if bits != (0, 0):
            R = _add(c, R, table[bits])
    return R
