"""Shared test helpers.

Tests that need benchmark data call `need_data(path, what)`: locally they skip with a reason when the data
is absent; under `SKILLRISE_REQUIRE_DATA=1` (set by .ci/run) they fail instead, so CI can never pass by
skipping.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

try:
    import psutil
except ImportError:  # only the ScienceWorld extra brings it; without it no JVM can have been started
    psutil = None

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


def alfworld_data() -> Path:
    """$ALFWORLD_DATA when it holds game files (CI), else ../shared/data/alfworld. (Importing alfworld sets
    $ALFWORLD_DATA to ~/.cache/alfworld, usually empty, so an unusable value falls back.)"""
    fallback = SHARED_DATA / "alfworld"
    env = os.environ.get("ALFWORLD_DATA")
    if env:
        path = Path(env)
        if path.is_file() or (path / "json_2.1.1").is_dir() or any(path.glob("*.tar.xz")) or not fallback.exists():
            return path
    return fallback


@pytest.fixture(scope="module")
def alfworld_cache_root() -> Path:
    """The session's cache root (set before any module fixture runs), once ALFWorld's game files are found."""
    need_data(alfworld_data(), "ALFWorld game files ($ALFWORLD_DATA)")
    return Path(os.environ["SKILLRISE_CACHE"])


def java_children() -> list:
    """JVMs started by this process or its workers."""
    if psutil is None:
        return []
    return [p for p in psutil.Process().children(recursive=True) if "java" in p.name().lower()]


@pytest.fixture(scope="module", autouse=True)
def no_jvm_left_after_module():
    """Every test module must end the JVMs it started (ScienceWorld envs, bench and trainer workers)."""
    yield
    if psutil is not None:
        _gone, alive = psutil.wait_procs(java_children(), timeout=10)
        assert not alive, f"JVMs left running: {[p.pid for p in alive]}"


# ----------------------------------------------------------------- a loopback chat endpoint (agent and bench tests)
@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> str:
    from skillrise_gym.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="module")
def chat_server(tiny_model_dir):
    from chat_server import ChatServer

    server = ChatServer(tiny_model_dir).start()
    yield server
    server.stop()


@pytest.fixture
def server(chat_server):
    """The module's chat server with its faults cleared before and after the test."""
    chat_server.reset()
    yield chat_server
    chat_server.reset()


# ----------------------------------------------------------------- benchmarks/experiments/transfer_experiment.py
@pytest.fixture
def transfer_experiment(monkeypatch):
    """benchmarks.experiments.transfer_experiment, imported as any module; its `main` rebinds the module's
    RESULTS to --results-dir, which is put back after the test so that no test sees another's folder."""
    from benchmarks.experiments import transfer_experiment as module

    monkeypatch.setattr(module, "RESULTS", module.RESULTS)
    return module
