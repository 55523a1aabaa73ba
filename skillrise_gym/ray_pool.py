"""`RayEnvPool`: `EnvPool`'s interface and failure contract, with each env in its own Ray actor.

For envs beyond one machine (DESIGN.md, "Scale": Ray actors for environment workers). The bench and the
trainer take either pool (`vector.make_pool`); nothing above the pool changes:

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
cluster that does not answer, so a ``host:port`` address is probed first and refused within seconds. Ray
stays up for the life of the process (pools of later K's reuse it); Ray shuts it down at exit.

Per-env resources: `num_cpus` (None: Ray's actor default, one CPU to be placed and none held while it
runs, so envs that mostly wait for the model do not need a core each; ``1`` reserves a core per env) and
`memory` in bytes (e.g. a ScienceWorld JVM's 1.2 GB, `Backend.env_memory`, so Ray places no more JVMs on a
node than its memory holds). Actors are spread over the cluster's nodes (Ray's SPREAD strategy).

Failures, as `EnvPool`'s: an env's exception is re-raised here (same type when picklable); an actor that
dies (killed, its node lost) or does not answer within `timeout` raises `WorkerError` naming the envs lost
(with the replies of the others in `replies`); the actor is replaced, and those envs must be reset again.
Every wait is bounded by `timeout`: a Ray pool never waits unbounded (None means `DEFAULT_TIMEOUT`).
"""

from __future__ import annotations

import math
import socket
import time
from typing import Any, Mapping, Sequence

from skillrise_gym.backends import require
from skillrise_gym.backends.base import ConfigurationError
from skillrise_gym.vector import EnvFn, EnvPool, WorkerError, _reply

#: seconds an env may take to answer one call when the caller gives no timeout (the bench's default)
DEFAULT_TIMEOUT = 600.0
#: seconds the probe of a cluster address waits for a TCP connection
CONNECT_TIMEOUT = 5.0
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
    An address where no cluster listens raises ConfigurationError within `CONNECT_TIMEOUT` seconds."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    if address in (None, "local"):
        ray.init(address="local", object_store_memory=LOCAL_OBJECT_STORE_BYTES, include_dashboard=False)
        return ray
    _probe(address)
    try:
        ray.init(address=address)
    except ConnectionError as exc:  # "auto" with no cluster running, a refused Ray Client
        raise ConfigurationError(f"cannot connect to Ray at {address!r}: {exc}") from None
    return ray


def _probe(address: str) -> None:
    """Refuse at once a ``host:port`` (or ``ray://host:port``) where nothing accepts a connection: Ray's
    own client retries such an address for minutes without a word."""
    target = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto", a bare name: Ray resolves it (and fails fast when it finds no cluster)
    host = host.strip("[]") or "127.0.0.1"
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT).close()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if isinstance(exc, socket.timeout):
            reason = f"no answer within {CONNECT_TIMEOUT:g} s"
        raise ConfigurationError(
            f"no Ray cluster at {address} ({reason}): start one there "
            "(`ray start --head` on that machine prints its address), or use --ray-address local for a Ray "
            "instance on this machine") from None


class _EnvActor:
    """One env in a Ray actor: what a worker process is to `EnvPool`, for a single env."""

    def __init__(self, fn: EnvFn) -> None:
        self.fn = fn
        self.envs: dict[int, Any] = {}  # its one env, under index 0, once made

    def ready(self) -> bool:
        return True

    def run(self, command: str, payload: Any) -> tuple[str, Any]:
        return _reply(self.envs, 0, self.fn, command, payload)  # an error is sent back and re-raised by the pool

    def close(self) -> None:
        for env in self.envs.values():
            env.close()
        self.envs.clear()


class RayEnvPool(EnvPool):
    """`len(env_fns)` envs, one Ray actor each. The public methods are `EnvPool`'s; only the way commands
    reach the envs differs. `workers` is the number of actors (one per env)."""

    def __init__(self, env_fns: Sequence[EnvFn], address: str | None = None, timeout: float | None = None,
                 num_cpus: float | None = None, memory: float | None = None) -> None:
        self.closed = True  # until every actor is up (close() and __del__ then do nothing)
        if not env_fns:
            raise ValueError("a Ray env pool needs at least one env")
        timeout = DEFAULT_TIMEOUT if timeout is None else timeout
        if not (math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")
        check_settings(address or "local", num_cpus, memory)
        self.env_fns = list(env_fns)
        self.num_envs = self.workers = len(self.env_fns)
        self.timeout = float(timeout)
        self.address = address
        self._ray = connect(address)
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
        """As `EnvPool.receive`; an actor that has not answered its call within the pool's `timeout` is lost."""
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
