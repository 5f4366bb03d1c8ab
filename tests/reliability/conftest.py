"""Options and fixtures of the reliability suite (tests/reliability/).

The suite is part of the normal `python -m pytest` run and is sized to finish in about three
minutes on a 2-core machine. `--reliability-long` turns every loop up (more fuzz examples, more kill
rounds, a 10,000-key listing, more concurrency rounds) for a soak run.

pytest registers a conftest's options only when the conftest is an "initial" one, i.e. when this
folder (or a file in it) is on the command line:

    python -m pytest tests/reliability --reliability-long

`RELIABILITY_LONG=1` does the same from any command line (e.g. plain `python -m pytest`).
"""

from __future__ import annotations

import os
import random

import pytest

from .support import long_requested


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("reliability", "model-catalog reliability suite")
    group.addoption(
        "--reliability-long",
        action="store_true",
        default=False,
        help="run the reliability suite's long variants (more rounds, examples and keys)",
    )
    group.addoption(
        "--reliability-seed",
        type=int,
        default=None,
        help="seed for the reliability suite's random choices (default: fixed, or $RELIABILITY_SEED)",
    )


@pytest.fixture(scope="session")
def long_run(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--reliability-long", default=False)) or long_requested()


@pytest.fixture(scope="session")
def seed(request: pytest.FixtureRequest) -> int:
    chosen = request.config.getoption("--reliability-seed", default=None)
    if chosen is None:
        chosen = int(os.environ.get("RELIABILITY_SEED", "20261130"))
    return int(chosen)


@pytest.fixture
def rng(seed: int, request: pytest.FixtureRequest) -> random.Random:
    """A per-test random source: the same seed and test name give the same choices."""
    return random.Random(f"{seed}:{request.node.nodeid}")


def pytest_report_header(config: pytest.Config) -> str | None:
    if config.getoption("--reliability-long", default=False):
        return "reliability: long variants on"
    return None
