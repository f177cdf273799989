"""Fixtures for the SDK tests: they run against a real appliance that
e2e/sdk_test.go starts (AIRLOCK_SOCKET and the AIRLOCK_TEST_* variables)."""

import os
from typing import Iterator

import pytest

import airlock


def need(name: str) -> str:
    v = os.environ.get(name, "")
    if not v:
        pytest.skip(f"skipping: {name} is not set: run these tests through `go test ./e2e -run TestSDKs` (make test)")
    return v


@pytest.fixture(scope="session")
def socket_path() -> str:
    return need("AIRLOCK_SOCKET")


@pytest.fixture(scope="session")
def sbx(socket_path: str) -> Iterator[airlock.Sandbox]:
    with airlock.Sandbox.create(timeout=120) as s:
        yield s
