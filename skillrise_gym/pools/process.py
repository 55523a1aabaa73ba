"""`EnvPool`: many SequenceEnvs stepped together, spread over worker processes.

Engines are not thread-safe (TextWorld, the ScienceWorld JVM bridge), so parallelism is by process. Env i
lives in worker ``i % workers``; ``workers=0`` keeps every env in this process (debugging, tests).

    pool = EnvPool([env_fn(\"SkillRise-WebShop-v0\", K=3)] * 8, workers=2)
    obs, info = pool.reset(0, seed=1)
    results = pool.step_many({0: \"search[red shoes]\", 3: \"click[buy now]\"})  # {i: (obs, r, term, trunc, info)}
    pool.close()

Gymnasium's own vector envs were not used: they auto-reset, step every env in lock-step, and batch
observations into arrays, none of which fits episodes of different lengths with text observations.

Asynchronous use, to step envs while the model generates (the trainer's overlapped rollouts):

    pool.submit_steps({0: "search[red shoes]", 3: "click[buy now]"})  # returns at once
    ...                                                                  # generate for other trials
    replies = pool.receive(timeout=0.05)  # {i: (obs, r, term, trunc, info)} of whatever has answered

An env takes one command at a time (`pending` names those with a command unanswered), and the synchronous
calls refuse to run while any is pending. In this process (``workers=0``) a submitted command runs at once,
so nothing overlaps there; in workers, each env's reply comes back on its own as soon as it is ready.

Failures: an exception raised by an env is re-raised here (same type when picklable). A worker that dies
(killed, segfault) or exceeds `timeout` raises `WorkerError` naming the env indices that were lost; the
worker is restarted and those envs must be reset again. Asynchronously, `timeout` bounds the time a worker
may work on one command without answering. A worker's own start (spawning it and its imports, seconds on a
loaded machine) is not a command: each worker says it is ready before any command is timed, and one that does
not start within `START_TIMEOUT_S` is an error naming it.

Beyond one machine: `pools.ray.RayEnvPool`, the same interface and contract with each env in a Ray actor;
`pools.make_pool` picks one of the two.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import multiprocessing.connection
import time
from collections import deque
from typing import Any, Mapping, Sequence

import gymnasium as gym

from skillrise_gym.pools.base import WAIT_SLICE_S, BaseEnvPool, EnvFn, WorkerError, reply

#: what a worker sends once it has started (its imports done), before any command
READY = "skillrise-env-worker-ready"
#: how long a worker may take to start: spawning it and importing its modules (not a command, so not under
#: `timeout`; on a loaded machine a short `timeout` would otherwise declare a worker that is still importing hung)
START_TIMEOUT_S = 300.0


def env_fn(env_id: str, **kwargs: Any) -> EnvFn:
    """A picklable constructor for a pool: a registered gym id, or a backend name for `SequenceEnv`."""
    if env_id.startswith("SkillRise-"):
        return functools.partial(_make_registered, env_id, **kwargs)
    return functools.partial(_make_sequence_env, env_id, **kwargs)


def _make_registered(env_id: str, **kwargs: Any) -> gym.Env:
    import skillrise_gym  # noqa: F401  (registers the ids in a fresh worker)

    return gym.make(env_id, **kwargs)


def _make_sequence_env(backend: str, **kwargs: Any) -> gym.Env:
    from skillrise_gym.env import SequenceEnv

    return SequenceEnv(backend=backend, **kwargs)


def _worker_main(conn, env_fns: dict[int, EnvFn]) -> None:
    envs: dict[int, gym.Env] = {}
    try:
        conn.send(READY)
        while True:
            message = conn.recv()
            if message is None:
                break
            conn.send({index: reply(envs, index, env_fns[index], command, payload)
                       for index, (command, payload) in message.items()})
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        for env in envs.values():
            try:
                env.close()
            except Exception:
                pass


def _poll(conn: Any, timeout: float | None) -> bool:
    """`conn.poll(timeout)` (None: no limit), waited for in slices of `WAIT_SLICE_S` (see `pools.base`)."""
    end = None if timeout is None else time.monotonic() + timeout
    while True:
        left = WAIT_SLICE_S if end is None else min(WAIT_SLICE_S, end - time.monotonic())
        if conn.poll(max(0.0, left)):
            return True
        if end is not None and time.monotonic() >= end:
            return False


class EnvPool(BaseEnvPool):
    """`len(env_fns)` envs in `workers` processes (0: in this process)."""

    def __init__(self, env_fns: Sequence[EnvFn], workers: int = 0, timeout: float | None = None,
                 start_method: str = "spawn") -> None:
        if workers < 0:
            raise ValueError("workers must be >= 0")
        env_fns = list(env_fns)
        super().__init__(env_fns, workers=min(workers, len(env_fns)), timeout=timeout)
        self._ctx = mp.get_context(start_method)
        self._local: dict[int, gym.Env] = {}
        self._procs: list[Any] = [None] * self.workers
        self._conns: list[Any] = [None] * self.workers
        # asynchronous commands: per worker, the envs of its unanswered messages (one env each, oldest first)
        # and since when it has been working on the oldest; in this process, the replies not yet received
        self._inflight: list[deque[int]] = [deque() for _ in range(self.workers)]
        self._busy_since: list[float] = [0.0] * self.workers
        self._answered: dict[int, tuple[str, Any]] = {}
        for w in range(self.workers):
            self._start_worker(w)
        try:
            for w in range(self.workers):  # started together, awaited in turn
                self._await_ready(w)
        except BaseException:
            for w in range(self.workers):
                self._stop_worker(w, kill=True)
            raise
        self.closed = False

    # ------------------------------------------------------------------ asynchronous API
    @property
    def pending(self) -> set[int]:
        """The envs with a submitted command whose reply has not been received."""
        return {i for messages in self._inflight for i in messages} | set(self._answered)

    def submit(self, commands: Mapping[int, tuple[str, Any]]) -> None:
        """Send (command, payload) pairs ("step", action), ("reset", (seed, options)), ("call", (name, args,
        kwargs)) to envs without waiting. One message per env, so each reply comes back on its own."""
        self._check(commands)
        self._refuse_pending(commands)
        for index, (command, payload) in commands.items():
            if self.workers == 0:
                self._answered[index] = self._reply_here(index, command, payload)
                continue
            w = index % self.workers
            if not self._inflight[w]:
                self._busy_since[w] = time.monotonic()
            self._inflight[w].append(index)
            try:
                self._conns[w].send({index: (command, payload)})
            except (BrokenPipeError, OSError):
                pass  # noticed by `receive`

    def receive(self, timeout: float | None = None) -> dict[int, Any]:
        """The replies of submitted commands, {index: what `step`/`reset`/`call` return}: waits until at least
        one has come (at most `timeout` seconds, then returns {}; 0 only looks) and returns every one there is
        by then. Nothing pending: {} at once. An env's exception is raised; a lost worker raises
        `WorkerError` as the synchronous calls do (`replies`: the other replies of this call)."""
        if self.closed:
            raise RuntimeError("EnvPool is closed")
        raw, self._answered = self._answered, {}
        end = None if timeout is None else time.monotonic() + max(0.0, timeout)
        failure: WorkerError | None = None
        while any(self._inflight):
            busy = {self._conns[w]: w for w in range(self.workers) if self._inflight[w]}
            now = time.monotonic()
            wait = 0.0 if raw or failure else None if end is None else max(0.0, end - now)
            if self.timeout is not None:  # wake up in time to declare a silent worker hung
                first = min(self._busy_since[w] for w in busy.values()) + self.timeout - now
                wait = max(0.0, first) if wait is None else min(wait, max(0.0, first))
            # in slices (`WAIT_SLICE_S`): a signal whose handler ran on another thread, or just before the wait
            # began, acts within one (the loop goes on until its own condition ends it)
            ready = multiprocessing.connection.wait(list(busy), timeout=WAIT_SLICE_S if wait is None
                                                    else min(wait, WAIT_SLICE_S))
            for conn in ready:
                w = busy[conn]
                try:
                    raw.update(conn.recv())
                except (EOFError, OSError):
                    failure = self._lose(w, "died", failure)
                    continue
                self._inflight[w].popleft()
                self._busy_since[w] = time.monotonic()
            if self.timeout is not None:
                now = time.monotonic()
                for w in list(busy.values()):
                    if self._inflight[w] and now - self._busy_since[w] > self.timeout:
                        failure = self._lose(w, "timed out", failure)
            if not ready and (raw or failure or (end is not None and time.monotonic() >= end)):
                break
        if failure is not None:
            failure.replies = {i: r for i, r in raw.items() if i not in failure.indices}
            raise failure
        return self.unpack(raw)

    def _lose(self, w: int, reason: str, failure: WorkerError | None) -> WorkerError:
        """Restart worker `w` (dead or hung): every env it held is lost, named in the (new or given) error."""
        lost = [i for i in range(self.num_envs) if i % self.workers == w]
        code = self._procs[w].exitcode
        self._inflight[w].clear()
        self._stop_worker(w, kill=True)
        self._start_worker(w)
        self._await_ready(w)
        if reason == "timed out":
            reason = f"timed out (no answer within {self.timeout} s)"
        if failure is None:
            return WorkerError(
                f"worker {w} {reason} (exit code {code}); the episodes of envs {lost} were lost: reset them", lost)
        failure.indices.extend(lost)  # several workers lost in one call: every lost env is named
        return failure

    def close(self) -> None:
        if getattr(self, "closed", True):
            return
        self.closed = True
        self._answered.clear()
        for env in self._local.values():
            env.close()
        for w in range(self.workers):
            self._drain(w)
            self._stop_worker(w)

    def _drain(self, w: int) -> None:
        """Read worker `w`'s unanswered replies (bounded by `timeout`), so it can stop and close its envs."""
        limit = time.monotonic() + (self.timeout if self.timeout is not None else 30.0)
        while self._inflight[w] and self._procs[w] is not None:
            if not _poll(self._conns[w], max(0.0, limit - time.monotonic())):
                self._stop_worker(w, kill=True)
                break
            try:
                self._conns[w].recv()
            except (EOFError, OSError):
                break
            self._inflight[w].popleft()
        self._inflight[w].clear()

    # ------------------------------------------------------------------ plumbing
    def _reply_here(self, index: int, command: str, payload: Any) -> tuple[str, Any]:
        """The raw reply of env `index` in this process (``workers=0``); a failing constructor raises at once."""
        if index not in self._local:
            self._local[index] = self.env_fns[index]()
        return reply(self._local, index, self.env_fns[index], command, payload, portable=False)

    def _many(self, commands: Mapping[int, tuple[str, Any]]) -> dict[int, Any]:
        self._check(commands)
        self._refuse_pending()
        if self.workers == 0:
            return self.unpack({index: self._reply_here(index, command, payload)
                                for index, (command, payload) in commands.items()})

        by_worker: dict[int, dict[int, tuple[str, Any]]] = {}
        for index, item in commands.items():
            by_worker.setdefault(index % self.workers, {})[index] = item
        for w, batch in by_worker.items():
            try:
                self._conns[w].send(batch)
            except (BrokenPipeError, OSError):
                pass  # noticed when receiving
        replies: dict[int, Any] = {}
        failure: WorkerError | None = None
        for w, batch in by_worker.items():
            try:
                if not _poll(self._conns[w], self.timeout):
                    raise TimeoutError(f"no answer within {self.timeout} s")
                replies.update(self._conns[w].recv())
            except (EOFError, OSError, TimeoutError) as exc:
                failure = self._lose(w, "timed out" if isinstance(exc, TimeoutError) else "died", failure)
        if failure is not None:
            failure.replies = {i: r for i, r in replies.items() if i not in failure.indices}
            raise failure
        return self.unpack(replies)

    def _start_worker(self, w: int) -> None:
        parent, child = self._ctx.Pipe()
        fns = {i: fn for i, fn in enumerate(self.env_fns) if i % self.workers == w}
        proc = self._ctx.Process(target=_worker_main, args=(child, fns), daemon=True, name=f"skillrise-env-{w}")
        proc.start()
        child.close()
        self._procs[w], self._conns[w] = proc, parent

    def _await_ready(self, w: int) -> None:
        """Wait for worker `w` to say it has started (`READY`), up to `START_TIMEOUT_S`; one that dies or stays
        silent that long is stopped and a RuntimeError names it."""
        problem = None
        try:
            if not _poll(self._conns[w], START_TIMEOUT_S):
                problem = f"did not start within {START_TIMEOUT_S:g} s"
            elif self._conns[w].recv() != READY:
                problem = "sent something else before it was ready"
        except (EOFError, OSError):
            problem = f"died while starting (exit code {self._procs[w].exitcode})"
        if problem is not None:
            self._stop_worker(w, kill=True)
            raise RuntimeError(f"env worker {w} {problem}")

    def _stop_worker(self, w: int, kill: bool = False) -> None:
        proc, conn = self._procs[w], self._conns[w]
        if proc is None:
            return
        if kill:  # a dead or hung worker: do not wait for it
            proc.kill()
        else:
            try:
                conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5)
        conn.close()
        self._procs[w] = self._conns[w] = None
