"""Every Wycheproof ECDSA vector for the curve and hash pairs resolver/ecdsa.py verifies (tests/vectors/wycheproof/,
unmodified, with their source and license): a "valid" signature verifies, an "invalid" one is refused. "acceptable"
vectors (legacy encodings a verifier may take) are refused here: the verifier takes strict DER only, and the test
holds it to that."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from resolver import ecdsa

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "wycheproof"
FILES = {
    "P-256": "ecdsa_secp256r1_sha256_test.json",
    "P-384": "ecdsa_secp384r1_sha384_test.json",
    "P-521": "ecdsa_secp521r1_sha512_test.json",
}


def _groups(curve: str) -> list[dict[str, Any]]:
    data = json.loads((VECTORS / FILES[curve]).read_text())
    assert data["algorithm"] == "ECDSA" and data["numberOfTests"] == sum(len(g["tests"]) for g in data["testGroups"])
    return list(data["testGroups"])


@pytest.mark.parametrize("curve", sorted(FILES))
def test_every_wycheproof_vector_gives_its_expected_result(curve: str) -> None:
    wrong: list[str] = []
    counted = {"valid": 0, "invalid": 0, "acceptable": 0}
    for group in _groups(curve):
        assert group["publicKey"]["curve"] == {"P-256": "secp256r1", "P-384": "secp384r1", "P-521": "secp521r1"}[curve]
        key = ecdsa.load_public_key(group["publicKeyPem"].encode())
        assert key.curve.name == curve
        for case in group["tests"]:
            counted[case["result"]] += 1
            accepted = key.verify(bytes.fromhex(case["sig"]), bytes.fromhex(case["msg"]))
            if accepted != (case["result"] == "valid"):
                wrong.append(f"tcId {case['tcId']} ({case['result']}, {case['comment']}): accepted={accepted}")
    assert not wrong, "\n".join(wrong[:20])
    assert counted["valid"] > 50 and counted["invalid"] > 200  # the files were read, not skipped
