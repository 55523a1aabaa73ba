"""What every env pool is: `BaseEnvPool`, the interface the bench runner and the trainer's rollouts use, and
`WorkerError`, how a pool reports envs it lost; plus the helpers every place that hosts envs shares (this
process, a worker process, a Ray actor): `reply` runs one command on an env, `unpack` reads the replies.

A pool holds `num_envs` envs, addressed by index. Synchronous calls (`reset_many`, `step_many`, ...) wait
for every reply; asynchronous ones (`submit_steps`, `submit_resets`, then `receive`) return at once, and
each env's reply comes back on its own. An env takes one command at a time (`pending` names those with a
command unanswered), and the synchronous calls refuse to run while any is pending.

Failures: an exception raised by an env is re-raised by the pool (same type when picklable). A host that is
lost (a worker process or an actor that dies, or exceeds the pool's `timeout`) raises `WorkerError` naming
the env indices whose episodes were lost; the pool replaces the host, and those envs must be reset again.
"""

from __future__ import annotations

import traceback
from abc import ABC, abstractmethod
from typing import Any, Callable, Mapping, Sequence

import gymnasium as gym

from skillrise_gym.backends.base import SkillRiseError

EnvFn = Callable[[], gym.Env]

#: the longest one blocking wait of a pool lasts before the waiting thread runs Python again (a longer wait is
#: several). CPython runs a signal's Python handler (Ctrl-C's KeyboardInterrupt, the bench's SIGTERM) only in
#: the main thread, between bytecodes: a wait without a timeout stays blocked when the signal's C handler ran
#: on another thread (which the kernel may pick) or just before the wait began, until the wait ends. A wait
#: in slices acts on it within one.
WAIT_SLICE_S = 0.25


class WorkerError(SkillRiseError, RuntimeError):
    """A worker process died or timed out; `indices` are the envs whose episodes were lost. `replies` holds
    the raw replies of the envs on other workers that did answer the same call (their episodes went on):
    `unpack(replies)` (also `EnvPool.unpack`) reads them."""

    def __init__(self, message: str, indices: Sequence[int], replies: Mapping[int, Any] | None = None) -> None:
        super().__init__(message)
        self.indices = list(indices)
        self.replies = dict(replies or {})


def unpack(replies: Mapping[int, tuple[str, Any]]) -> dict[int, Any]:
    """The values of raw replies (also `WorkerError.replies`); an env's error is raised."""
    for status, value in replies.values():
        if status == "error":
            raise value
    return {i: value for i, (_status, value) in replies.items()}


def run_command(env: gym.Env, command: str, payload: Any) -> Any:
    """One command on an env: ("reset", (seed, options)), ("step", action) or ("call", (name, args, kwargs))."""
    if command == "reset":
        seed, options = payload
        return env.reset(seed=seed, options=options)
    if command == "step":
        return env.step(payload)
    if command == "call":
        name, args, kwargs = payload
        target = getattr(env.unwrapped, name)
        return target(*args, **kwargs) if callable(target) else target
    raise ValueError(f"unknown command {command!r}")


def reply(envs: dict[int, gym.Env], index: int, make: EnvFn, command: str, payload: Any,
          portable: bool = True) -> tuple[str, Any]:
    """One command on env `index` of `envs` (made with `make()` at its first command), as a raw reply:
    ("ok", value), or ("error", the exception; `portable_error` when it must cross a process), which
    `unpack` re-raises. Every place that hosts envs (this process, a worker, a Ray actor) answers with it."""
    try:
        if index not in envs:
            envs[index] = make()
        return "ok", run_command(envs[index], command, payload)
    except Exception as exc:
        return "error", portable_error(exc) if portable else exc


def portable_error(exc: Exception) -> Exception:
    """The exception itself when it survives pickling, else a RuntimeError carrying its text."""
    import pickle

    text = "".join(traceback.format_exception(exc))
    try:
        pickle.loads(pickle.dumps(exc))
        exc.args = exc.args or (str(exc),)
        exc.worker_traceback = text  # type: ignore[attr-defined]
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}\n{text}")


class BaseEnvPool(ABC):
    """`len(env_fns)` envs stepped together (see the module docstring). Subclasses say where the envs run:
    they implement `_many` (a synchronous batch of commands), `submit`, `receive`, `pending` and `close`,
    set `workers` (the processes or actors hosting the envs; 0: this process) and, once every host is up,
    ``closed = False``. The public calls are this class's."""

    #: True until a subclass has started every host, and after `close`: a pool whose constructor failed
    #: half-way is closed, so `close` and `__del__` do nothing
    closed: bool = True

    def __init__(self, env_fns: Sequence[EnvFn], workers: int, timeout: float | None = None) -> None:
        self.env_fns = list(env_fns)
        self.num_envs = len(self.env_fns)
        #: processes or actors hosting the envs (0: every env in this process)
        self.workers = workers
        #: seconds a host may take to answer before it is declared lost (None: no limit)
        self.timeout = timeout

    # ------------------------------------------------------------------ public API
    def reset(self, index: int, seed: int | None = None, options: Mapping[str, Any] | None = None):
        return self._one(index, "reset", (seed, dict(options) if options else None))

    def reset_many(self, requests: Mapping[int, tuple[int | None, Mapping[str, Any] | None]]) -> dict[int, Any]:
        return self._many({i: ("reset", (s, dict(o) if o else None)) for i, (s, o) in requests.items()})

    def step(self, index: int, action: str):
        return self._one(index, "step", action)

    def step_many(self, actions: Mapping[int, str]) -> dict[int, Any]:
        return self._many({i: ("step", a) for i, a in actions.items()})

    def call(self, index: int, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call a method (or read an attribute) of env `index`'s unwrapped env."""
        return self._one(index, "call", (name, args, kwargs))

    # ------------------------------------------------------------------ asynchronous API
    def submit_steps(self, actions: Mapping[int, str]) -> None:
        """Send one action to each of these envs without waiting; `receive` collects the replies."""
        self.submit({i: ("step", a) for i, a in actions.items()})

    def submit_resets(self, requests: Mapping[int, tuple[int | None, Mapping[str, Any] | None]]) -> None:
        """Reset these envs (seed, options) without waiting; `receive` collects the replies."""
        self.submit({i: ("reset", (s, dict(o) if o else None)) for i, (s, o) in requests.items()})

    @property
    @abstractmethod
    def pending(self) -> set[int]:
        """The envs with a submitted command whose reply has not been received."""

    @abstractmethod
    def submit(self, commands: Mapping[int, tuple[str, Any]]) -> None:
        """Send (command, payload) pairs ("step", action), ("reset", (seed, options)), ("call", (name, args,
        kwargs)) to envs without waiting. One message per env, so each reply comes back on its own."""

    @abstractmethod
    def receive(self, timeout: float | None = None) -> dict[int, Any]:
        """The replies of submitted commands, {index: what `step`/`reset`/`call` return}: waits until at least
        one has come (at most `timeout` seconds, then returns {}; 0 only looks) and returns every one there is
        by then. Nothing pending: {} at once. An env's exception is raised; a lost host raises `WorkerError`
        as the synchronous calls do (`replies`: the other replies of this call)."""

    @abstractmethod
    def close(self) -> None:
        """Close every env and stop the hosts; a second call does nothing."""

    unpack = staticmethod(unpack)

    def __enter__(self) -> "BaseEnvPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------------------ plumbing
    @abstractmethod
    def _many(self, commands: Mapping[int, tuple[str, Any]]) -> dict[int, Any]:
        """Run these commands (one per env) and wait for every reply: {index: value}; starts with `_check`
        and `_refuse_pending`."""

    def _one(self, index: int, command: str, payload: Any) -> Any:
        return self._many({index: (command, payload)})[index]

    def _check(self, commands: Mapping[int, Any]) -> None:
        """Refuse commands to a closed pool or to envs it does not have (every pool's `_many` starts here)."""
        if self.closed:
            raise RuntimeError("EnvPool is closed")
        for index in commands:
            if not 0 <= index < self.num_envs:
                raise IndexError(f"env index {index} out of range (pool has {self.num_envs} envs)")

    def _refuse_pending(self, commands: Mapping[int, Any] | None = None) -> None:
        """RuntimeError for a command to an env whose last one is unanswered (`submit`), or, with no
        commands, for a synchronous call while any is (its replies would mix with theirs)."""
        if commands is not None:
            busy = self.pending & set(commands)
            if busy:
                raise RuntimeError(f"envs {sorted(busy)} have a command pending: receive its reply first")
        elif self.pending:
            raise RuntimeError(f"envs {sorted(self.pending)} have commands pending: receive their replies first")
