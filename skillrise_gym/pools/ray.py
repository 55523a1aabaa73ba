"""`RayEnvPool`: `EnvPool`'s interface and failure contract (`BaseEnvPool`), with each env in its own Ray actor.

For more envs than one machine holds: a process pool is bounded by this machine's cores and memory (a
ScienceWorld env is a JVM of about 1.2 GB), and Ray actors spread the envs over a cluster's nodes
(docs/design.md, "Layers", item 4: envs in this process, in worker processes, or in Ray actors). The bench
and the trainer take either pool (`pools.make_pool`); nothing above the pool changes:

    pool = RayEnvPool([env_fn("SkillRise-ScienceWorld-v0", K=3)] * 16, address="10.0.0.5:6379", memory=1.5e9)
    obs, info = pool.reset(0, seed=1)
    results = pool.step_many({0: "look around", 3: "open door to kitchen"})
    pool.close()

One actor per env: an engine is not thread-safe, and an actor runs one method at a time, so an actor is
what a worker process is to `EnvPool`, and losing one loses exactly one env's episode. The env is made in
its actor at its first command, from the same `env_fns` (picklable constructors: every node imports
`skillrise_gym`, so it must be installed there, as the engines' extras are).

Where: ``address=None`` or ``"local"`` starts a small Ray instance on this machine, unless this process is
connected to Ray already (then that connection is used, as Ray's own libraries do); any other address
(``"host:port"``, ``"ray://host:10001"``, ``"auto"``) is a running cluster. Ray itself keeps waiting for a
cluster that does not answer (for minutes, deaf to signals), so a ``host:port`` address is probed first and
refused within seconds, with what answered there: nothing, an HTTP server (Ray's dashboard port, 8265, given
by mistake), a gRPC service that is not the cluster's GCS (Ray's client server, port 10001, wants
``ray://``), or something else. ``"auto"`` is probed at the address Ray would take for it (`auto_address`:
``$RAY_ADDRESS``, else the cluster ``ray start`` last started on this machine), so a stale one is refused the
same way, naming where it came from. The probe asks the service for the cluster's id, as Ray's own client first
does; it is plain sockets with timeouts, so Ctrl-C or SIGTERM stops it at once. A ``ray://`` address needs
Ray's client (``ray[client]``, which the ``ray`` extra installs). Ray stays up for the life of the process
(pools of later K's reuse it); Ray shuts it down at exit. Ray's init would replace the process's own SIGTERM
handler (the bench's, which stops like Ctrl-C) with a `sys.exit`; `connect` keeps the process's.

Per-env resources: `num_cpus` (None: Ray's actor default, one CPU to be placed and none held while it
runs, so envs that mostly wait for the model do not need a core each; ``1`` reserves a core per env) and
`memory` in bytes (e.g. a ScienceWorld JVM's 1.2 GB, `Backend.env_memory`, so Ray places no more JVMs on a
node than its memory holds). Actors are spread over the cluster's nodes (Ray's SPREAD strategy). What one
actor asks for must fit on one node alive now, else `ConfigurationError` at once (a rerun would fail the
same way; a cluster that would only grow such a node on demand needs it started first).

Failures, as `EnvPool`'s: an env's exception is re-raised here (same type when picklable); an actor that
dies (killed, its node lost) or does not answer within `timeout` raises `WorkerError` naming the envs lost
(with the replies of the others in `replies`); the actor is replaced, and those envs must be reset again.
Every wait is bounded by `timeout`: a Ray pool never waits unbounded (None means `DEFAULT_TIMEOUT`).
"""

from __future__ import annotations

import importlib.util
import math
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from skillrise_gym.backends import require
from skillrise_gym.backends.base import ConfigurationError, MissingDependencyError
from skillrise_gym.pools.base import BaseEnvPool, EnvFn, WorkerError, reply

#: seconds an env may take to answer one call when the caller gives no timeout (the bench's default)
DEFAULT_TIMEOUT = 600.0
#: seconds the probe of a cluster address waits for a TCP connection
CONNECT_TIMEOUT = 5.0
#: seconds the probe then waits for the service there to answer as a Ray cluster's GCS (or Ray's client server)
ANSWER_TIMEOUT = 5.0
#: the GCS method the probe calls: the first call of Ray's own client, answered without a cluster id
GCS_PROBE_METHOD = "/ray.rpc.NodeInfoGcsService/GetClusterId"
#: what to give instead of a wrong address
ADDRESS_HINT = ("give the address `ray start --head` printed on the head node (host:6379 by default), "
                "ray://host:10001 for Ray's client server, or --ray-address local for a Ray instance on this machine")
#: object store of a local instance started here: env replies are small texts (Ray's default is 30% of RAM)
LOCAL_OBJECT_STORE_BYTES = 200 * 1024**2
#: seconds `close` gives the envs to close their engines (a JVM to exit) before the actors are killed
CLOSE_TIMEOUT = 30.0


def check_settings(address: str | None, num_cpus: float | None = None, memory: float | None = None) -> None:
    """ValueError unless these are settings a Ray pool can take (the bench's and the trainer's flags are
    checked here before anything starts; Ray itself is not needed for it)."""
    if address is not None and (not isinstance(address, str) or not address.strip()):
        raise ValueError(f"--ray-address must be 'local' or a Ray cluster's address, got {address!r}")
    if address is None and (num_cpus is not None or memory is not None):
        raise ValueError("per-env Ray resources (--ray-num-cpus, --ray-memory) need --ray-address")
    if num_cpus is not None and not (isinstance(num_cpus, (int, float)) and math.isfinite(num_cpus) and num_cpus >= 0):
        raise ValueError(f"--ray-num-cpus (CPUs per env) must be a number >= 0, got {num_cpus!r}")
    if memory is not None and not (isinstance(memory, (int, float)) and math.isfinite(memory) and memory >= 1):
        raise ValueError(f"--ray-memory (bytes per env, e.g. 1.5e9) must be a number >= 1, got {memory!r}")


def import_ray() -> Any:
    """The `ray` module, or MissingDependencyError naming the extra that installs it."""
    require("ray", "ray", "Running envs on Ray (--ray-address)")
    import ray

    return ray


def connect(address: str | None = None) -> Any:
    """Connect this process to Ray (see the module docstring for the addresses); returns the `ray` module.
    An address where no cluster answers raises ConfigurationError within about `CONNECT_TIMEOUT` +
    `ANSWER_TIMEOUT` seconds, saying what answered instead; a ``ray://`` address without Ray's client
    installed raises MissingDependencyError naming the extra."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    if address in (None, "local"):
        _init(ray, address="local", object_store_memory=LOCAL_OBJECT_STORE_BYTES, include_dashboard=False)
        return ray
    target, source = auto_address() if address == "auto" else (address, "")
    client = (target or "").startswith("ray://")
    if client:
        require_client()
    if target is not None:  # "auto" that finds nothing: Ray looks for a GCS process here and fails at once
        try:
            _probe(target)
        except ConfigurationError as exc:
            if source:  # a stale $RAY_ADDRESS or address file: say where the address came from
                fix = "unset it" if "RAY_ADDRESS" in source else "delete it" if "ray start" in source else "stop it"
                raise ConfigurationError(f"{exc} (--ray-address auto took {target} from {source}: {fix}, or give "
                                         "the cluster's address)") from None
            raise
    try:
        _init(ray, address=address)
    except ConnectionError as exc:  # "auto" with no cluster running, a refused Ray Client
        raise ConfigurationError(f"cannot connect to Ray at {address!r}: {exc}") from None
    except ValueError as exc:  # Ray's own word on a missing client (had `require_client` missed it)
        if client and "ray[client]" in str(exc):
            require_client(force=True)
        raise
    return ray


def _init(ray: Any, **options: Any) -> None:
    """`ray.init(**options)`, keeping this process's own SIGTERM handler. Ray's init replaces it (in the main
    thread) with one that calls `sys.exit(15)`: a bench on Ray stopped by SIGTERM would end with status 15 and
    no summary, instead of stopping as Ctrl-C does. Where the process set none, Ray's stays."""
    own = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
    try:
        ray.init(**options)
    finally:
        if callable(own) and signal.getsignal(signal.SIGTERM) is not own:
            signal.signal(signal.SIGTERM, own)


def auto_address() -> tuple[str | None, str]:
    """The address Ray takes for ``address="auto"``, and where it found it: ``$RAY_ADDRESS`` when set (and not
    "auto" itself), else (Ray's own lookup) the cluster ``ray start`` last started on this machine (Ray's
    address file) or a GCS process running here; (None, "") when there is none (Ray's init then fails at once).
    Either of the first two may be stale, naming a cluster that is gone: `connect` probes it as any address."""
    variable = os.environ.get("RAY_ADDRESS")
    if variable and variable != "auto":
        return variable, "the environment variable RAY_ADDRESS"
    path = _address_file()
    try:
        recorded = path.read_text(encoding="utf-8").strip() if path is not None else ""
    except (OSError, UnicodeDecodeError):
        recorded = ""
    try:
        from ray._private.services import get_ray_address_from_environment

        found = get_ray_address_from_environment("auto", None)
    except ConnectionError:  # no cluster here at all: Ray's init says so at once
        return None, ""
    except Exception:  # noqa: BLE001 - a Ray without this lookup: its address file alone
        found = recorded or None
    if not found:
        return None, ""
    if found == recorded:
        return found, f"{path} (the cluster `ray start` last started on this machine)"
    return found, "a Ray GCS process running on this machine"


def _address_file() -> Path | None:
    """Ray's record of the cluster `ray start` last started here (None without Ray)."""
    try:
        from ray._private.utils import get_ray_address_file

        return Path(get_ray_address_file(None))
    except Exception:  # noqa: BLE001 - a Ray without it: $RAY_ADDRESS alone
        return None


def require_client(force: bool = False) -> None:
    """MissingDependencyError, in one line naming the extra, unless Ray's client (grpcio, `ray[client]`) is
    installed: a ``ray://`` address needs it."""
    if force or importlib.util.find_spec("grpc") is None:
        raise MissingDependencyError(
            "a ray:// address needs Ray's client (ray[client]: the grpcio package), which is not installed. "
            "Install it with: pip install 'skillrise-gym[ray]'")


def _probe(address: str) -> None:
    """Refuse at once a ``host:port`` (or ``ray://host:port``) where no Ray cluster answers: nothing accepts a
    connection, or the service that does is not the one the address needs (`identify`). Ray's own client
    retries such an address for minutes without a word."""
    target = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        return  # a bare name, "local": Ray resolves it (and fails fast when it finds no cluster)
    host = host.strip("[]") or "127.0.0.1"
    try:
        sock = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if isinstance(exc, socket.timeout):
            reason = f"no answer within {CONNECT_TIMEOUT:g} s"
        raise ConfigurationError(
            f"no Ray cluster at {address} ({reason}): start one there "
            "(`ray start --head` on that machine prints its address), or use --ray-address local for a Ray "
            "instance on this machine") from None
    with sock:
        kind, detail = identify(sock, f"{host}:{port}", ANSWER_TIMEOUT)
    client = address.startswith("ray://")
    if kind == "h2":
        return  # an HTTP/2 service whose answer could not be read: Ray's own client judges it
    if client:
        if kind == "gcs":
            raise ConfigurationError(
                f"{address} is a Ray cluster's GCS address, not Ray's client server: use --ray-address {target} "
                "(without ray://), or the client server's port (ray://host:10001 by default)")
        if kind == "grpc":
            return  # Ray's client server is a gRPC service: Ray's client takes it from here
    elif kind == "gcs":
        return
    what = {
        "http": f"an HTTP server answered there ({detail}), probably Ray's dashboard (port 8265 by default), "
                f"not {'Ray' if client else 'a cluster'}'s {'client server' if client else 'GCS'}",
        "grpc": "a gRPC service without the GCS's methods answered there, probably Ray's client server (port "
                f"10001 by default), which is reached as --ray-address ray://{target}",
        "closed": "the service there closed the connection without answering Ray's protocol",
        "silent": f"the service there accepted the connection but did not answer within {ANSWER_TIMEOUT:g} s",
        "other": f"the service there answered {detail}, which is not Ray's protocol",
    }[kind]
    raise ConfigurationError(f"no Ray {'client server' if client else 'cluster'} at "
                             f"{address}: {what}; {ADDRESS_HINT}")


def identify(sock: socket.socket, authority: str, timeout: float) -> tuple[str, str]:
    """What listens on a connected socket, asked the way Ray's client first asks a GCS (a gRPC call,
    GetClusterId, over HTTP/2). Returns (kind, detail), kind one of:

    - ``gcs``: a Ray cluster's GCS (it answered the call, or refused it for a reason of its own, such as a
      missing authentication token, which Ray's own client sends);
    - ``grpc``: a gRPC service without that method (UNIMPLEMENTED; detail: its message), e.g. Ray's client
      server or a raylet;
    - ``h2``: an HTTP/2 service whose answer could not be read (Ray is left to judge it);
    - ``http``: an HTTP/1 server (detail: its status line); ``other``: something else (detail: its first
      bytes); ``closed``: closed without a word; ``silent``: no answer within `timeout` seconds.
    """
    headers = [(":method", "POST"), (":scheme", "http"), (":path", GCS_PROBE_METHOD), (":authority", authority),
               ("content-type", "application/grpc"), ("te", "trailers"), *_auth_headers()]
    block = b"".join(b"\x00" + _hpack_string(name) + _hpack_string(value) for name, value in headers)
    request = (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _frame(4, 0, 0)  # preface, empty SETTINGS
               + _frame(1, 0x4, 1, block)  # HEADERS, END_HEADERS, stream 1
               + _frame(0, 0x1, 1, b"\x00\x00\x00\x00\x00"))  # DATA: an empty request message, END_STREAM
    deadline = time.monotonic() + timeout
    buffer, http2, offset = b"", False, 0
    try:
        sock.sendall(request)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout
            sock.settimeout(remaining)
            chunk = sock.recv(65536)
            if not chunk:
                return ("h2", "closed") if http2 else ("closed", "")
            buffer += chunk
            if not http2:
                if b"HTTP/".startswith(buffer[:5]):  # an HTTP/1 status line, or the start of one
                    if len(buffer) < 5 or (b"\n" not in buffer and len(buffer) < 200):
                        continue
                    return "http", buffer.split(b"\n", 1)[0].strip()[:80].decode("latin-1")
                if buffer.lstrip()[:14].lower().startswith((b"<!doctype html", b"<html")):
                    return "http", "an HTML page without a status line"  # how an HTTP/1 server answers "HTTP/2.0"
                if len(buffer) < 9:
                    continue
                if buffer[3] != 4 or buffer[5:9] != b"\x00\x00\x00\x00":  # a server's first frame: SETTINGS
                    return "other", repr(buffer[:40])
                http2 = True
            while len(buffer) - offset >= 9:
                length = int.from_bytes(buffer[offset:offset + 3], "big")
                kind, flags = buffer[offset + 3], buffer[offset + 4]
                stream = int.from_bytes(buffer[offset + 5:offset + 9], "big") & 0x7FFFFFFF
                if len(buffer) - offset < 9 + length:
                    break
                payload = buffer[offset + 9:offset + 9 + length]
                offset += 9 + length
                if kind == 4 and not flags & 0x1:
                    sock.sendall(_frame(4, 0x1, 0))  # acknowledge the server's settings
                elif stream == 1 and kind == 0 and length > 0:
                    return "gcs", ""  # a reply message: the call was answered
                elif stream == 1 and kind == 1 and flags & 0x1:  # trailers only: the call failed; why?
                    fields = _header_fields(_header_block(payload, flags))
                    status = fields.get(b"grpc-status")
                    message = (fields.get(b"grpc-message") or b"").decode("utf-8", "replace")[:120]
                    if status is None or not status.isdigit():
                        return "h2", message
                    return ("grpc" if int(status) == 12 else "gcs"), message  # 12: UNIMPLEMENTED
                elif (stream == 1 and kind == 3) or kind == 7:
                    return "h2", "stream reset" if kind == 3 else "GOAWAY"
    except socket.timeout:
        return ("h2", "no answer to the call") if http2 else ("silent", "")
    except OSError as exc:
        return ("h2", str(exc)) if http2 else ("closed", "")


def _header_block(payload: bytes, flags: int) -> bytes:
    """A HEADERS frame's header block, without its padding (flag 0x8) and priority fields (flag 0x20)."""
    pad = 0
    if flags & 0x8:
        pad, payload = payload[0], payload[1:]
    if flags & 0x20:
        payload = payload[5:]
    return payload[: len(payload) - pad]


def _header_fields(block: bytes) -> dict[bytes, bytes]:
    """The literal header fields of an HPACK block whose name and value are plain strings (how gRPC's C core
    sends grpc-status and grpc-message); indexed and Huffman-coded fields are skipped."""
    fields: dict[bytes, bytes] = {}
    i = 0
    try:
        while i < len(block):
            first = block[i]
            if first & 0x80:  # indexed field
                _, i = _hpack_int(block, i, 7)
                continue
            if first & 0xE0 == 0x20:  # dynamic table size update
                _, i = _hpack_int(block, i, 5)
                continue
            index, i = _hpack_int(block, i, 6 if first & 0x40 else 4)
            name = None
            if index == 0:
                name, i = _hpack_read_string(block, i)
            value, i = _hpack_read_string(block, i)
            if name is not None and value is not None:
                fields[name.lower()] = value
    except IndexError:  # a truncated block: what was read so far
        pass
    return fields


def _hpack_int(data: bytes, i: int, bits: int) -> tuple[int, int]:
    """An HPACK integer with a `bits`-bit prefix at data[i]: (value, index after it)."""
    limit = (1 << bits) - 1
    value, i = data[i] & limit, i + 1
    if value < limit:
        return value, i
    shift = 0
    while True:
        byte, i = data[i], i + 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def _hpack_read_string(data: bytes, i: int) -> tuple[bytes | None, int]:
    """An HPACK string at data[i]: (its bytes, or None when Huffman-coded; index after it)."""
    huffman = data[i] & 0x80
    size, i = _hpack_int(data, i, 7)
    if i + size > len(data):
        raise IndexError("truncated HPACK string")
    return (None if huffman else data[i:i + size]), i + size


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame."""
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def _hpack_string(text: str) -> bytes:
    """An HPACK string literal (no Huffman coding): its length as a 7-bit-prefix integer, then its bytes."""
    data = text.encode("utf-8")
    size, out = len(data), bytearray()
    if size < 127:
        out.append(size)
    else:
        out.append(127)
        size -= 127
        while size >= 128:
            out.append(size % 128 + 128)
            size //= 128
        out.append(size)
    return bytes(out) + data


def _auth_headers() -> list[tuple[str, str]]:
    """The token Ray's client would send (clusters with token authentication), if any."""
    try:
        from ray._raylet import AuthenticationTokenLoader

        loader = AuthenticationTokenLoader.instance()
        if not loader.has_token():
            return []
        return [(str(k).lower(), str(v)) for k, v in loader.get_token_for_http_header().items()]
    except Exception:  # noqa: BLE001 - a Ray without token authentication, or none configured
        return []


def check_placement(ray: Any, num_cpus: float | None, memory: float | None) -> None:
    """ConfigurationError unless one env's actor fits on some node alive now: Ray would keep it pending for
    good (and a rerun would fail the same way). An actor needs 1 CPU to be placed unless `num_cpus` says
    otherwise, and `memory` bytes of the node's memory resource."""
    need = {"CPU": 1.0 if num_cpus is None else float(num_cpus), "memory": float(memory or 0)}
    try:
        nodes = [node.get("Resources") or {} for node in ray.nodes() if node.get("Alive")]
    except Exception:  # noqa: BLE001 - a connection that cannot list nodes: the actors' start-up wait judges
        return
    if any(all(resources.get(name, 0.0) >= amount for name, amount in need.items() if amount > 0)
           for resources in nodes):
        return
    largest = {name: max((resources.get(name, 0.0) for resources in nodes), default=0.0) for name in need}
    asked = ", ".join(f"{name}={amount:g}" for name, amount in need.items() if amount > 0)
    has = ", ".join(f"{name}={largest[name]:g}" for name in need if need[name] > 0)
    raise ConfigurationError(
        f"no node of the Ray cluster can ever place one env's actor: it asks {asked}, and the largest node has "
        f"{has} ({len(nodes)} node(s) alive): lower --ray-num-cpus / --ray-memory, or add a larger node")


class _EnvActor:
    """One env in a Ray actor: what a worker process is to `EnvPool`, for a single env."""

    def __init__(self, fn: EnvFn) -> None:
        self.fn = fn
        self.envs: dict[int, Any] = {}  # its one env, under index 0, once made

    def ready(self) -> bool:
        return True

    def run(self, command: str, payload: Any) -> tuple[str, Any]:
        return reply(self.envs, 0, self.fn, command, payload)  # an error is sent back and re-raised by the pool

    def close(self) -> None:
        for env in self.envs.values():
            env.close()
        self.envs.clear()


class RayEnvPool(BaseEnvPool):
    """`len(env_fns)` envs, one Ray actor each. The public methods are `BaseEnvPool`'s, as `EnvPool`'s; only
    the way commands reach the envs differs. `workers` is the number of actors (one per env)."""

    def __init__(self, env_fns: Sequence[EnvFn], address: str | None = None, timeout: float | None = None,
                 num_cpus: float | None = None, memory: float | None = None) -> None:
        # `closed` stays True (BaseEnvPool's) until every actor is up: close() and __del__ then do nothing
        if not env_fns:
            raise ValueError("a Ray env pool needs at least one env")
        timeout = DEFAULT_TIMEOUT if timeout is None else timeout
        if not (math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")
        check_settings(address or "local", num_cpus, memory)
        env_fns = list(env_fns)
        super().__init__(env_fns, workers=len(env_fns), timeout=float(timeout))
        self.address = address
        self._ray = connect(address)
        check_placement(self._ray, num_cpus, memory)
        options: dict[str, Any] = {"scheduling_strategy": "SPREAD", "max_restarts": 0}
        if num_cpus is not None:
            options["num_cpus"] = num_cpus
        if memory is not None:
            options["memory"] = int(memory)
        self.resources = {k: options[k] for k in ("num_cpus", "memory") if k in options}
        self._actor_class = self._ray.remote(_EnvActor).options(**options)
        self._actors = [self._actor_class.remote(fn) for fn in self.env_fns]
        self._submitted: dict[int, tuple[Any, float]] = {}  # env -> (its unanswered call's ref, sent at)
        self._await_actors()
        self.closed = False

    # ------------------------------------------------------------------ asynchronous API
    @property
    def pending(self) -> set[int]:
        return set(self._submitted)

    def submit(self, commands: Mapping[int, tuple[str, Any]]) -> None:
        self._check(commands)
        self._refuse_pending(commands)
        for index, (command, payload) in commands.items():
            self._submitted[index] = (self._actors[index].run.remote(command, payload), time.monotonic())

    def receive(self, timeout: float | None = None) -> dict[int, Any]:
        """As `BaseEnvPool.receive`; an actor that has not answered its call within the pool's `timeout` is lost."""
        if self.closed:
            raise RuntimeError("EnvPool is closed")
        ray = self._ray
        end = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while self._submitted:
            refs = {ref: index for index, (ref, _sent) in self._submitted.items()}
            now = time.monotonic()
            wait = min(sent for _ref, sent in self._submitted.values()) + self.timeout - now
            if end is not None:
                wait = min(wait, end - now)
            ready, _ = ray.wait(list(refs), num_returns=1, timeout=max(0.0, wait))
            if ready:  # and whatever else has answered by now
                ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
            now = time.monotonic()
            expired = [i for i, (ref, sent) in self._submitted.items() if now - sent > self.timeout]
            if ready or expired or (end is not None and now >= end):
                return self._collect({refs[ref]: ref for ref in ready}, expired)
        return {}

    # ------------------------------------------------------------------ plumbing
    def _many(self, commands: Mapping[int, tuple[str, Any]]) -> dict[int, Any]:
        ray = self._ray
        self._check(commands)
        self._refuse_pending()
        refs = {index: self._actors[index].run.remote(command, payload)
                for index, (command, payload) in commands.items()}
        _ready, pending = ray.wait(list(refs.values()), num_returns=len(refs), timeout=self.timeout)
        pending = set(pending)
        return self._collect({i: ref for i, ref in refs.items() if ref not in pending},
                             [i for i, ref in refs.items() if ref in pending])

    def _collect(self, answered: Mapping[int, Any], expired: Sequence[int]) -> dict[int, Any]:
        """The values of the answered calls ({env: ref}); the actors of `expired` envs (no answer within the
        timeout) and of calls that failed with their actor are replaced, and `WorkerError` names them."""
        ray = self._ray
        replies: dict[int, Any] = {}
        lost: dict[int, str] = {i: f"timed out (no answer within {self.timeout:g} s)" for i in expired}
        for index, ref in answered.items():
            self._submitted.pop(index, None)
            try:
                replies[index] = ray.get(ref, timeout=self.timeout)
            except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError,
                    ray.exceptions.GetTimeoutError) as exc:
                lost[index] = f"died ({_reason(exc)})"
        if lost:
            for index in lost:
                self._submitted.pop(index, None)
                self._replace(index)
            indices = sorted(lost)
            reasons = "; ".join(f"the actor of env {i} {lost[i]}" for i in indices)
            raise WorkerError(f"Ray: {reasons}; the episodes of envs {indices} were lost: reset them", indices, replies)
        return self.unpack(replies)

    def _replace(self, index: int) -> None:
        """A new actor for env `index` (its env is made again at its next command)."""
        self._ray.kill(self._actors[index], no_restart=True)
        self._actors[index] = self._actor_class.remote(self.env_fns[index])

    def _await_actors(self) -> None:
        """Wait (at most `timeout`) until every actor is placed and started, so a cluster without the
        resources asked per env, or a node that cannot import skillrise_gym, is an error now, not a timeout
        at the first call."""
        ray = self._ray
        refs = {self._actors[i].ready.remote(): i for i in range(self.num_envs)}
        _ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=self.timeout)
        problem = None
        for ref in set(refs) - set(pending):
            try:
                ray.get(ref, timeout=self.timeout)
            except ray.exceptions.RayError as exc:
                problem = WorkerError(f"the Ray actor of env {refs[ref]} failed to start: {exc}", [refs[ref]])
        if pending and problem is None:
            failed = sorted(refs[ref] for ref in pending)
            asked = ", ".join(f"{k}={v}" for k, v in self.resources.items()) or "Ray's defaults"
            problem = WorkerError(
                f"the Ray actors of envs {failed} did not start within {self.timeout:g} s: the cluster may lack "
                f"the resources asked per env ({asked}; the cluster has {ray.cluster_resources()}): ask less per "
                "env (--ray-num-cpus, --ray-memory), use fewer envs, or add nodes", failed)
        if problem is not None:
            for actor in self._actors:
                ray.kill(actor, no_restart=True)
            raise problem

    def close(self) -> None:
        """Close every env (a JVM exits), waiting at most `CLOSE_TIMEOUT` s, then end the actors."""
        if getattr(self, "closed", True):
            return
        self.closed = True
        self._submitted.clear()
        ray = self._ray
        if not ray.is_initialized():  # Ray shut down first: its actors went with it
            return
        refs = [actor.close.remote() for actor in self._actors]
        ray.wait(refs, num_returns=len(refs), timeout=min(self.timeout, CLOSE_TIMEOUT))
        for actor in self._actors:
            ray.kill(actor, no_restart=True)
        self._actors = []


def _reason(exc: BaseException) -> str:
    """Ray's error text names the cause on its last line ("... killed by `ray.kill`"); its first line says
    what failed. Both, shortened, for a one-line WorkerError."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    return lines[0] if len(lines) == 1 else f"{lines[0]} {lines[-1]}"
