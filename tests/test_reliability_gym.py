"""Reliability faults an outside probe found in the gym and its Ray pool, each pinned by a test:

- a `--ray-address` where something other than a Ray cluster listens (Ray's dashboard, Ray's client server,
  a silent or closing service) is refused within seconds saying what answered, and a signal stops the probe
  at once (Ray's own client retries such an address for minutes, deaf to signals);
- the `ray` extra brings Ray's client, and a ``ray://`` address without it is a one-line error naming the
  extra;
- Ray actors that no node can ever place are refused up front, not after the worker timeout;
- a Java OutOfMemoryError while ScienceWorld loads a task is an engine error, not a ValueError;
- `gym.make` keyword and `reset(options=...)` validation;
- a WebShop catalog (or search index) cache of valid JSON with the wrong shape is rebuilt.
"""

from __future__ import annotations

import collections
import http.server
import json
import random
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import tomllib
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

import skillrise_gym  # noqa: F401  (registers the ids)
from skillrise_gym.pools import ray as ray_pool
from skillrise_gym.backends import ConfigurationError, EngineError, MissingDependencyError

ROOT = Path(__file__).resolve().parents[1]


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame (RFC 9113, section 4.1)."""
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def _hpack_string(text: str) -> bytes:
    """A short HPACK string literal without Huffman coding (RFC 7541, section 5.2)."""
    assert len(text) < 127
    return bytes([len(text)]) + text.encode()


# ------------------------------------------------------------------------------------------ wrong services


class FakeRay:
    """A `ray` module stand-in: never initialised; records `init` calls (a real one would hang on the
    addresses below) and answers `nodes()` with the given node resources."""

    def __init__(self, nodes: list[dict] | None = None) -> None:
        self.inits: list[dict] = []
        self._nodes = nodes or []

    def is_initialized(self) -> bool:
        return False

    def init(self, **kwargs) -> None:
        self.inits.append(kwargs)

    def nodes(self) -> list[dict]:
        return [{"Alive": True, "Resources": resources} for resources in self._nodes]

    def remote(self, cls):  # noqa: ANN001
        raise AssertionError("no actor may be created when none can be placed")


@pytest.fixture
def fake_ray(monkeypatch) -> FakeRay:
    fake = FakeRay()
    monkeypatch.setattr(ray_pool, "import_ray", lambda: fake)
    return fake


class Listener:
    """A local TCP service on a free port: `serve(conn)` runs for each connection, in a thread."""

    def __init__(self, serve) -> None:  # noqa: ANN001
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.serve = serve
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            try:
                self.serve(conn)
            except OSError:
                pass

    def close(self) -> None:
        self.sock.close()


def grpc_server(reply: bytes):  # noqa: ANN201
    """A minimal HTTP/2 server that answers any call on stream 1 with `reply` (frames after its SETTINGS)."""

    def serve(conn: socket.socket) -> None:
        conn.settimeout(10)
        conn.recv(65536)  # the client's preface and call
        conn.sendall(_frame(4, 0, 0) + reply)
        time.sleep(2)

    return serve


def trailers(status: int, message: str) -> bytes:
    """A trailers-only gRPC answer (HEADERS with END_STREAM | END_HEADERS), fields as plain HPACK literals,
    as gRPC's C core sends them."""
    block = b"\x88" + b"".join(b"\x00" + _hpack_string(n) + _hpack_string(v) for n, v in (
        ("content-type", "application/grpc"), ("grpc-status", str(status)), ("grpc-message", message)))
    return _frame(1, 0x5, 1, block)


@pytest.fixture
def http_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    server.RequestHandlerClass.log_message = lambda *args: None
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_an_http_server_at_the_ray_address_is_refused_within_seconds_as_probably_the_dashboard(fake_ray,
                                                                                                 http_server):
    started = time.monotonic()
    with pytest.raises(ConfigurationError, match=r"an HTTP server answered there.*dashboard \(port 8265") as err:
        ray_pool.connect(f"127.0.0.1:{http_server}")
    assert time.monotonic() - started < ray_pool.CONNECT_TIMEOUT + ray_pool.ANSWER_TIMEOUT
    assert "\n" not in str(err.value) and "ray start --head" in str(err.value)
    assert fake_ray.inits == []  # Ray's client, which would wait for minutes, never ran
    with pytest.raises(ConfigurationError, match="no Ray client server at ray://.*not Ray's client server"):
        ray_pool._probe(f"ray://127.0.0.1:{http_server}")


@pytest.mark.parametrize("kind, serve, said", [
    ("silent", lambda conn: time.sleep(5), "accepted the connection but did not answer within 1 s"),
    ("closing", lambda conn: None, "closed the connection without answering"),
    ("ssh", lambda conn: (conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n"), time.sleep(2)), "answered b'SSH-2.0"),
])
def test_a_silent_closing_or_foreign_service_is_refused(fake_ray, monkeypatch, kind, serve, said):
    monkeypatch.setattr(ray_pool, "ANSWER_TIMEOUT", 1.0)
    listener = Listener(serve)
    try:
        with pytest.raises(ConfigurationError, match=f"no Ray cluster at 127.0.0.1:{listener.port}: .*{said}"):
            ray_pool.connect(f"127.0.0.1:{listener.port}")
    finally:
        listener.close()
    assert fake_ray.inits == []


def test_a_grpc_service_without_the_gcs_is_refused_with_the_ray_client_hint(fake_ray):
    listener = Listener(grpc_server(trailers(12, "Method not found!")))  # UNIMPLEMENTED: e.g. Ray's client server
    try:
        with pytest.raises(ConfigurationError, match=rf"probably Ray's client server.*ray://127.0.0.1:{listener.port}"):
            ray_pool.connect(f"127.0.0.1:{listener.port}")
        # given as ray://, the same service is what the address asks for: Ray's client takes it from there
        if ray_pool.importlib.util.find_spec("grpc") is not None:
            ray_pool.connect(f"ray://127.0.0.1:{listener.port}")
            assert fake_ray.inits
    finally:
        listener.close()


@pytest.mark.parametrize("reply", [
    _frame(1, 0x4, 1, b"\x88") + _frame(0, 0, 1, b"\x00\x00\x00\x00\x02\x0a\x00"),  # the call answered
    trailers(16, "InvalidAuthToken: Authentication token is missing or incorrect"),  # a GCS with token auth
], ids=["answered", "token-auth"])
def test_a_gcs_is_let_through_to_ray(fake_ray, reply):
    listener = Listener(grpc_server(reply))
    try:
        ray_pool.connect(f"127.0.0.1:{listener.port}")
        assert fake_ray.inits == [{"address": f"127.0.0.1:{listener.port}"}]
        with pytest.raises(ConfigurationError, match="is a Ray cluster's GCS address, not Ray's client server"):
            ray_pool._probe(f"ray://127.0.0.1:{listener.port}")
    finally:
        listener.close()


SIGNALLED = textwrap.dedent("""
    import signal, sys
    from skillrise_gym.pools import ray as ray_pool

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)  # as skillrise-bench does
    ray_pool.ANSWER_TIMEOUT = 120.0
    ray_pool.import_ray()  # imported before the signal comes: what it must stop is the wait on the address
    print("probing", flush=True)
    try:
        ray_pool.connect(sys.argv[1])
    except KeyboardInterrupt:
        print("stopped", flush=True)
        sys.exit(130)
""")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_signal_stops_the_address_check_at_once():
    listener = Listener(lambda conn: time.sleep(30))  # accepts, never answers
    child = subprocess.Popen([sys.executable, "-c", SIGNALLED, f"127.0.0.1:{listener.port}"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    try:
        assert child.stdout.readline().strip() == "probing"
        time.sleep(1.5)  # well inside the wait for an answer
        child.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        assert child.wait(timeout=10) == 130
        assert time.monotonic() - sent < 3 and "stopped" in child.stdout.read()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        listener.close()


# ----------------------------------------------------------------- --ray-address auto (issue 46, item 5)
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_auto_with_a_stale_ray_address_is_refused_within_seconds_naming_it(fake_ray, monkeypatch):
    dead = f"127.0.0.1:{_free_port()}"  # a cluster that is gone: nothing listens there
    monkeypatch.setenv("RAY_ADDRESS", dead)
    started = time.monotonic()
    with pytest.raises(ConfigurationError) as err:
        ray_pool.connect("auto")  # before: no probe for "auto", and Ray waited on the dead address for minutes
    assert time.monotonic() - started < ray_pool.CONNECT_TIMEOUT + ray_pool.ANSWER_TIMEOUT
    message = str(err.value)
    assert f"no Ray cluster at {dead}" in message and "auto took" in message and "RAY_ADDRESS: unset it" in message
    assert "\n" not in message and fake_ray.inits == []


def test_auto_probes_the_address_ray_last_recorded_too(fake_ray, monkeypatch, tmp_path):
    pytest.importorskip("ray")
    from ray._private import services

    dead = f"127.0.0.1:{_free_port()}"
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text(dead + "\n")  # what `ray start` left behind
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    monkeypatch.setattr(services, "find_gcs_addresses", lambda: frozenset())  # no Ray running here (tests beside)
    assert ray_pool.auto_address() == (dead, f"{tmp_path / 'ray' / 'ray_current_cluster'} (the cluster `ray start` "
                                             "last started on this machine)")
    with pytest.raises(ConfigurationError, match=rf"no Ray cluster at {dead}.*ray_current_cluster.*delete it"):
        ray_pool.connect("auto")
    assert fake_ray.inits == []
    (tmp_path / "ray" / "ray_current_cluster").unlink()  # nothing recorded, nothing running: Ray says so itself
    assert ray_pool.auto_address() == (None, "")
    monkeypatch.setenv("RAY_ADDRESS", "local")  # not an address to probe: Ray starts one here
    assert ray_pool.auto_address() == ("local", "the environment variable RAY_ADDRESS")
    ray_pool.connect("auto")
    assert fake_ray.inits == [{"address": "auto"}]


BENCH_ON_RAY = ["--env", "toy", "--agent", "random", "--K", "1", "--num-sequences", "1", "--no-progress",
                "--no-plots", "--ray-address", "auto"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_the_bench_with_a_stale_ray_address_says_so_in_one_line_and_a_signal_stops_it_at_once(tmp_path):
    pytest.importorskip("ray")
    import os

    out = tmp_path / "run"
    env = {**os.environ, "RAY_ADDRESS": f"127.0.0.1:{_free_port()}"}
    command = [sys.executable, "-m", "skillrise_gym.bench.cli", *BENCH_ON_RAY, "--out", str(out)]
    started = time.monotonic()
    # before: Ray waited on the dead address (over 40 s here) and printed its own retries
    run = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=30)
    assert run.returncode == 2 and time.monotonic() - started < 20, run.stderr[-2000:]
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "no Ray cluster at 127.0.0.1:" in lines[0] and "RAY_ADDRESS" in lines[0], lines
    assert not out.exists()

    # a cluster address that accepts and never answers: SIGTERM while the bench checks it ends it at once
    connected = threading.Event()
    listener = Listener(lambda conn: (connected.set(), time.sleep(30)))
    env["RAY_ADDRESS"] = f"127.0.0.1:{listener.port}"
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        assert connected.wait(60), "the bench never reached the address"
        time.sleep(0.5)  # inside the check (which waits up to ANSWER_TIMEOUT s for an answer)
        child.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        _stdout, stderr = child.communicate(timeout=20)  # before: Ray, deaf to it, acted 22-29 s later
        assert child.returncode == 130 and time.monotonic() - sent < 3, stderr[-2000:]
        assert "Traceback" not in stderr and "interrupted before the run began" in stderr and not out.exists()
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
        listener.close()


GCS_HOST = textwrap.dedent("""
    import sys, ray
    ray.init(address="local", include_dashboard=False, num_cpus=1, object_store_memory=80 * 1024**2)
    print(ray.get_runtime_context().gcs_address, flush=True)
    sys.stdin.read()  # until the test closes it; exiting normally shuts this Ray instance down
""")


@pytest.mark.slow
def test_a_real_ray_gcs_passes_the_check(tmp_path):
    """The check must never refuse a real cluster: a Ray instance of its own, in a child process."""
    pytest.importorskip("ray")
    log = tmp_path / "ray-host.log"
    with open(log, "w") as stderr:
        host = subprocess.Popen([sys.executable, "-c", GCS_HOST], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=stderr, text=True, cwd=ROOT)
    try:
        address = host.stdout.readline().strip()
        assert address, f"the Ray instance did not start: {log.read_text()[-2000:]}"
        ray_pool._probe(address)  # no error: a GCS
        with pytest.raises(ConfigurationError, match="GCS address, not Ray's client server"):
            ray_pool._probe(f"ray://{address}")
    finally:
        host.stdin.close()
        try:
            host.wait(timeout=60)
        except subprocess.TimeoutExpired:
            host.kill()
            host.wait()


# ------------------------------------------------------------------------------------------ ray client


def test_the_ray_extra_brings_rays_client():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["ray"] == ["ray[client]>=2.60,<2.61"]


def test_a_ray_client_address_without_the_client_is_one_line_naming_the_extra(fake_ray, monkeypatch):
    real = ray_pool.importlib.util.find_spec
    monkeypatch.setattr(ray_pool.importlib.util, "find_spec",
                        lambda name, *args: None if name == "grpc" else real(name, *args))
    with pytest.raises(MissingDependencyError, match=r"ray\[client\].*pip install 'skillrise-gym\[ray\]'") as err:
        ray_pool.connect("ray://127.0.0.1:10001")
    assert "\n" not in str(err.value) and fake_ray.inits == []


# ------------------------------------------------------------------------------------------ placement


def test_actors_no_node_can_place_are_refused_before_any_is_made(monkeypatch):
    from skillrise_gym.pools import env_fn

    fake = FakeRay(nodes=[{"CPU": 2.0, "memory": 8e9}, {"CPU": 1.0, "memory": 3e10}])
    monkeypatch.setattr(ray_pool, "connect", lambda address=None: fake)
    started = time.monotonic()
    with pytest.raises(ConfigurationError, match=r"asks CPU=64, and the largest node has CPU=2 \(2 node\(s\)") as err:
        ray_pool.RayEnvPool([env_fn("toy", K=2)], address="local", timeout=600, num_cpus=64)
    assert time.monotonic() - started < 5 and "\n" not in str(err.value)
    # CPUs on one node and memory on another do not make one node that fits both
    with pytest.raises(ConfigurationError, match="asks CPU=2, memory=1e"):
        ray_pool.RayEnvPool([env_fn("toy", K=2)], address="local", timeout=600, num_cpus=2, memory=1e10)
    # what fits one node goes on to make the actors
    with pytest.raises(AssertionError, match="no actor may be created"):
        ray_pool.RayEnvPool([env_fn("toy", K=2)], address="local", timeout=600, num_cpus=1, memory=1e10)


@pytest.mark.slow
def test_the_bench_refuses_unplaceable_actors_at_once_and_not_as_resumable(tmp_path, capsys):
    """On a real local Ray instance: an error in seconds (not after --worker-timeout), exit 2, no 'resume'."""
    pytest.importorskip("ray")
    from skillrise_gym.bench.cli import main

    started = time.monotonic()
    code = main(["--env", "toy", "--agent", "expert", "--K", "2", "--num-sequences", "1", "--out",
                 str(tmp_path / "run"), "--ray-address", "local", "--ray-num-cpus", "100000",
                 "--env-timeout", "600", "--no-progress", "--no-plots"])
    err = capsys.readouterr().err
    assert code == 2 and "no node of the Ray cluster can ever place one env's actor" in err
    assert "resume" not in err and time.monotonic() - started < 120


# ------------------------------------------------------------------------------------------ ScienceWorld


class _JavaException:
    """What py4j hands over for a Java exception: its toString() is the class and message."""

    _target_id = "o99"

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


def _bare_jvm(server: object):
    """A `ScienceWorldJVM` around no process: what `call` needs, and a record of it being stopped."""
    from skillrise_gym.backends.scienceworld.jvm import ScienceWorldJVM

    jvm = object.__new__(ScienceWorldJVM)
    jvm.dead_reason = None
    jvm.process = SimpleNamespace(poll=lambda: None, pid=0)
    jvm.stderr_tail = collections.deque()
    jvm.stopped = []
    jvm._finalizer = lambda: jvm.stopped.append(True)
    jvm.server = server
    return jvm


def _loading_raises(text: str):
    from py4j.protocol import Py4JJavaError

    def load(*args):
        raise Py4JJavaError("An error occurred while calling o12.load.\n", _JavaException(text))

    return SimpleNamespace(load=load)


def test_a_java_out_of_memory_error_while_loading_a_task_is_an_engine_error():
    pytest.importorskip("py4j")
    pytest.importorskip("scienceworld")
    from skillrise_gym.backends.scienceworld import ScienceWorldBackend
    from skillrise_gym.tasks import Task

    backend = ScienceWorldBackend()
    jvm = backend._sim.jvm = _bare_jvm(_loading_raises("java.lang.OutOfMemoryError: Java heap space"))
    backend._task_args = lambda task: ("boil", 0, "easy")
    task = Task("scienceworld", "boil-0", "boil", 1.0, "train", {"task_name": "boil", "variation": 0})
    with pytest.raises(EngineError, match=r"during load: java.lang.OutOfMemoryError: Java heap space.*max_heap") as err:
        backend.reset(task)
    assert "\n" not in str(err.value)
    assert not jvm.alive and jvm.stopped  # stopped: the next reset starts a fresh JVM
    # a Java exception that is the engine refusing its input stays what it was
    backend._sim.jvm = _bare_jvm(_loading_raises("java.lang.IllegalArgumentException: no such task"))
    with pytest.raises(ValueError, match="refused to load boil variation 0"):
        backend.reset(task)


# ------------------------------------------------------------------------------------------ gym.make


@pytest.mark.parametrize("kwargs, said", [
    ({"K": 2**70}, "K must be a positive integer"),
    ({"K": True}, "K must be a positive integer"),
    ({"skill_char_limit": -1}, "skill_char_limit must be an integer >= 0"),
    ({"skill_char_limit": 10.5}, "skill_char_limit"),
    ({"max_action_chars": 0}, "max_action_chars must be a positive integer"),
    ({"max_action_chars": -3}, "max_action_chars"),
    ({"max_task_steps": True}, "max_task_steps must be a positive integer"),
    ({"max_task_steps": 2.0}, "max_task_steps"),
])
def test_gym_make_refuses_bad_numbers_in_one_line(kwargs, said):
    with pytest.raises(ValueError, match=said) as err:
        gym.make("SkillRise-Rulebook-v0", **kwargs)
    assert "\n" not in str(err.value)


def test_a_zero_skill_limit_keeps_observations_in_the_space():
    env = gym.make("SkillRise-Rulebook-v0", K=2, seed=0, skill_char_limit=0, max_task_steps=1)
    obs, _ = env.reset()
    obs, *_ = env.step("<action>x</action>")
    obs, *_ = env.step("<skill>a long document</skill>")
    assert obs["skill_document"] == "" and env.observation_space.contains(obs)
    assert np.int64(obs["num_tasks"]) == 2


@pytest.mark.parametrize("options", [[], (), "task_ids", 3])
def test_reset_options_must_be_a_dict(options):
    env = gym.make("SkillRise-Rulebook-v0", K=2)
    with pytest.raises(TypeError, match="reset options must be a dict or None"):
        env.reset(seed=0, options=options)
    env.reset(seed=0, options=None)
    env.reset(seed=0, options={})


# ------------------------------------------------------------------------------------------ WebShop caches


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("which, content", [
    ("products", "[1, 2]"),
    ("products", DEEP),
    ("products", '[{"asin": 5}]'),
    ("products", '{"not": "a list"}'),
    ("products", "[]"),
    ("attributes", '{"B000000001": 5}'),
    ("attributes", "{}"),
])
def test_a_webshop_catalog_cache_of_the_wrong_shape_is_rebuilt(tmp_path, monkeypatch, which, content):
    from skillrise_gym.backends.webshop import catalog as C

    monkeypatch.setenv("SKILLRISE_CACHE", str(tmp_path))
    good = C.load_catalog(None, 40, 3, False, random.Random(0))
    C.generated_paths(3, 40)[which].write_text(content)
    again = C.load_catalog(None, 40, 3, False, random.Random(0))
    assert again.products == good.products and again.prices == good.prices


def test_a_webshop_catalog_that_stays_damaged_is_a_clear_error(tmp_path, monkeypatch):
    from skillrise_gym.backends.webshop import catalog as C
    from skillrise_gym.backends.webshop import generator

    monkeypatch.setenv("SKILLRISE_CACHE", str(tmp_path))
    paths = C.generated_paths(3, 40)

    def broken(folder, seed=0, size=1000):  # noqa: ANN001
        for path in paths.values():
            path.write_text("[1, 2]" if path == paths["products"] else "{}")
        return paths

    monkeypatch.setattr(generator, "write_catalog", broken)
    paths["products"].write_text("[1, 2]")
    with pytest.raises(C.DataIntegrityError, match="do not have a catalog's shape") as err:
        C.load_catalog(None, 40, 3, False, random.Random(0))
    assert "\n" not in str(err.value)


def test_a_webshop_search_index_cache_of_the_wrong_shape_is_rebuilt(tmp_path):
    pytest.importorskip("bm25s")
    from skillrise_gym.backends.webshop.search import SearchEngine

    products = [{"asin": f"B{i:09d}", "Title": f"red shoe {i}", "Description": "", "BulletPoints": [],
                 "options": {}, "Attributes": [], "category": "fashion", "query": "shoe"} for i in range(5)]
    folder = tmp_path / "index"
    SearchEngine(products, cache_folder=folder)
    (folder / "done.json").write_text(json.dumps(["not", "a", "dict"]))
    engine = SearchEngine(products, cache_folder=folder)
    assert not engine.loaded_from_cache and engine.search("red shoe")
    assert SearchEngine(products, cache_folder=folder).loaded_from_cache  # rewritten whole
