"""Shared test helpers.

Tests that need benchmark data call `need_data(path, what)`: locally they skip with a reason when the data
is absent; under `SKILLRISE_REQUIRE_DATA=1` (set by .ci/run) they fail instead, so CI can never pass by
skipping.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def need_data(path: str | os.PathLike | None, what: str) -> Path:
    if path is not None and Path(path).exists():
        return Path(path)
    message = f"{what} not found at {path!s}"
    if os.environ.get("SKILLRISE_REQUIRE_DATA") == "1":
        pytest.fail(message + " (SKILLRISE_REQUIRE_DATA=1: CI must not skip data tests)")
    pytest.skip(message)


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    """The whole session shares one fresh cache root (set before any module fixture runs), unless the caller
    pinned SKILLRISE_CACHE (scripts/test.sh does, so repeated runs start warm)."""
    if os.environ.get("SKILLRISE_CACHE_PINNED"):
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SKILLRISE_CACHE", str(tmp_path_factory.getbasetemp() / "skillrise-cache"))
        yield
