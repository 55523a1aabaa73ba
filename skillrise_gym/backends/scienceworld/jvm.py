"""One ScienceWorld JVM, launched by us rather than by `scienceworld.ScienceWorldEnv`.

Why not the stock wrapper: `ScienceWorldEnv.__init__` calls py4j's `launch_gateway` without `javaopts`, so
it cannot cap the heap (the JVM grows past 3 GB over many tasks) nor pass the flags that make worlds
reproducible (`-XX:hashCode=2`: the engine's object order follows identity hash codes, which otherwise
depend on everything the JVM hashed before). It also sets no socket timeout, so a hung JVM blocks forever.
This module starts the same jar and the same `PythonInterface` entry point with those options, and adds:

* a read timeout on every call (the watchdog): a call that does not answer in time kills the JVM;
* `die_on_exit` (the JVM exits when its stdin pipe breaks, i.e. when this Python process dies), plus a
  `weakref.finalize` so garbage collection and interpreter exit also end it;
* access to the simulator's global RNG (`scala.util.Random`), so calls that draw from it as a side effect
  (the valid-action list) can be made without changing the world's future;
* bulk transfer of string lists (py4j otherwise fetches a Java list element by element);
* a silenced engine stdout (the engine prints ~15 KB of debug text per step, which py4j would pipe through a
  Python thread);
* JVM faults told from bad input: a Java `VirtualMachineError` (OutOfMemoryError, StackOverflowError, ...)
  thrown by any call, task loads included, stops the JVM and raises `EngineError` (the task is lost; the
  next reset starts a fresh JVM), where other Java exceptions pass through for the caller to translate.

py4j is imported here only, when a JVM is started.
"""

from __future__ import annotations

import collections
import functools
import os
import re
import shutil
import subprocess
import tempfile
import weakref
from pathlib import Path
from typing import Any, Callable, Sequence

from skillrise_gym.backends.base import ConfigurationError, EngineError, MissingDependencyError

#: java.util.Random scrambles the seed given to setSeed with this multiplier; XOR-ing it back in lets us
#: restore an exact internal state through the public setSeed.
_JAVA_RANDOM_MULTIPLIER = 0x5DEECE66D

#: JVM flags that make worlds independent of load history (see module docstring).
DETERMINISM_FLAGS = ("-XX:+UnlockExperimentalVMOptions", "-XX:hashCode=2")

JAVA_INSTALL_HINT = (
    "install a Java runtime (8 or newer), e.g. `apt-get install openjdk-17-jre-headless` "
    "(macOS: `brew install openjdk@17`), or point JAVA_HOME (or SCIWORLD_JAVA_HOME) at an existing one"
)


#: Java errors that mean the JVM itself failed (`java.lang.VirtualMachineError` and its subclasses), not the input
_VM_ERROR = re.compile(r"java\.lang\.(?:OutOfMemoryError|StackOverflowError|InternalError|UnknownError|"
                       r"VirtualMachineError)\b[^\n]*")


def jvm_fault(exc: BaseException) -> str | None:
    """What a `Py4JJavaError` says when it is a JVM fault (e.g. "java.lang.OutOfMemoryError: Java heap space"),
    else None. A JVM that cannot even describe its exception is at fault too."""
    try:
        text = str(exc.java_exception)  # the Java exception's toString(), its causes' names often included
    except Exception as describe:  # noqa: BLE001 - any failure here means the JVM is not answering sanely
        return f"the JVM could not describe its exception ({type(describe).__name__})"
    found = _VM_ERROR.search(text)
    return found.group(0).strip() if found else None


class JavaNotFoundError(MissingDependencyError):
    """No `java` executable was found; the message says how to install one."""


def find_java(java: str | None = None) -> str:
    """The `java` executable to use: `java` if given, else $SCIWORLD_JAVA_HOME/bin/java, else
    $JAVA_HOME/bin/java, else `java` on PATH. Raises JavaNotFoundError naming the fix."""
    tried: list[str] = []
    if java:  # named explicitly: that one or an error, never a silent fallback to another java
        resolved = shutil.which(str(java))
        if resolved:
            return resolved
        raise JavaNotFoundError(
            f"The ScienceWorld backend was given java={java!r}, which is not an executable (nor a command on "
            "PATH). Name an existing java, or leave the option out to use $SCIWORLD_JAVA_HOME, $JAVA_HOME or "
            "`java` on PATH."
        )
    for var in ("SCIWORLD_JAVA_HOME", "JAVA_HOME"):
        home = os.environ.get(var)
        if home:
            candidate = Path(home) / "bin" / "java"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
            tried.append(f"${var}/bin/java = {candidate}")
    on_path = shutil.which("java")
    if on_path:
        return on_path
    tried.append("`java` on PATH")
    raise JavaNotFoundError(
        "The ScienceWorld backend needs Java, but no java executable was found (looked at: "
        + "; ".join(tried)
        + "). To fix: "
        + JAVA_INSTALL_HINT
        + "."
    )


class JVMStartError(ConfigurationError):
    """The JVM refuses to start with these options or this java: a configuration error, not a task's
    engine failure, so it stops the run (the message carries the JVM's own words)."""


@functools.lru_cache(maxsize=16)
def check_jvm_options(java: str, options: tuple[str, ...]) -> None:
    """Start `java <options> -version` once per (java, options) and raise JVMStartError with the JVM's
    stderr if it fails: options the JVM rejects (`-Xmxabc`, `-Xfoo`) or a java that does not run. The
    probe exits by itself (or is killed at its timeout), so nothing is left running."""
    try:
        out = subprocess.run([java, *options, "-version"], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise JVMStartError(f"the ScienceWorld JVM ({java} {' '.join(options)}) did not start in 60 s") from None
    except OSError as exc:
        raise JVMStartError(f"cannot run the ScienceWorld JVM {java}: {exc.strerror or exc}") from None
    if out.returncode != 0:
        said = (out.stderr.strip() or out.stdout.strip() or f"exit status {out.returncode}")[-1500:]
        raise JVMStartError(
            f"the ScienceWorld JVM does not start with these options ({java} {' '.join(options)}): {said}. "
            "Check the backend options max_heap, jvm_options and java."
        )


@functools.lru_cache(maxsize=8)
def java_major_version(java: str) -> int:
    """Major version of a java executable (8 for "1.8.0_x", 17 for "17.0.15"); 0 if it cannot be read."""
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return 0
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        return 0
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


_SCRATCH_PREFIX = "skillrise-sciworld-"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists but belongs to someone else
        return True
    return True


def _sweep_stale_scratch(folder: str) -> None:
    """Remove transfer files left by processes that were killed (their finalizers never ran)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if not name.startswith(_SCRATCH_PREFIX):
            continue
        pid = name[len(_SCRATCH_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not _pid_alive(int(pid)):
            try:
                os.remove(os.path.join(folder, name))
            except OSError:
                pass


def _terminate(process: subprocess.Popen, gateway: Any, scratch: str, owner_pid: int) -> None:
    """End a JVM: close the py4j connection, break its stdin pipe (py4j's die-on-broken-pipe), then kill.

    Module-level (not a method) so `weakref.finalize` can call it without keeping the owner alive. A forked
    child that inherited the object does nothing: the JVM belongs to the process that started it.
    """
    if os.getpid() != owner_pid:
        return
    try:
        gateway.close(keep_callback_server=False, close_callback_server_connections=True)
    except Exception:
        pass
    client = getattr(gateway, "_gateway_client", None)
    if client is not None:
        # Proxies of Java objects collected later would otherwise try to reach the dead JVM (and log errors).
        client.is_connected = False
    if process.poll() is None:
        try:
            process.stdin.close()
        except Exception:
            pass
        try:
            process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            process.kill()
    try:
        process.wait(timeout=5)  # reap: no zombie left behind
    except subprocess.TimeoutExpired:
        pass
    try:
        os.remove(scratch)
    except OSError:
        pass


class ScienceWorldJVM:
    """A running ScienceWorld simulator (`PythonInterface`) in its own JVM.

    Every engine call should go through `call`, which turns a dead, hung or unreachable JVM into an
    `EngineError` (and kills the JVM, so no half-alive process remains).
    """

    def __init__(
        self,
        *,
        java: str | None = None,
        max_heap: str | None = "1g",
        deterministic: bool = True,
        extra_jvm_options: Sequence[str] = (),
        call_timeout: float | None = 300.0,
    ) -> None:
        from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
        from scienceworld.constants import BASEPATH, JAR_PATH

        self.java = find_java(java)
        options: list[str] = []
        if max_heap:
            options.append(f"-Xmx{max_heap}")
        if deterministic:
            options.extend(DETERMINISM_FLAGS)
        if java_major_version(self.java) >= 9:
            # Reading java.util.Random's private seed needs reflection, which Java 9+ modules forbid unless opened.
            options.extend(["--add-opens", "java.base/java.util=ALL-UNNAMED"])
        options.extend(extra_jvm_options)
        self.options = tuple(options)
        check_jvm_options(self.java, self.options)  # a bad option is a configuration error, said once
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=40)
        self.stdout_tail: collections.deque[str] = collections.deque(maxlen=40)
        try:
            port, process = launch_gateway(
                classpath=JAR_PATH,
                javaopts=list(options),
                die_on_exit=True,
                cwd=BASEPATH,
                java_path=self.java,
                redirect_stderr=self.stderr_tail,
                redirect_stdout=self.stdout_tail,
                return_proc=True,
            )
        except (OSError, ValueError) as exc:  # ValueError: the JVM refused the options and printed no port
            raise EngineError(f"could not start the ScienceWorld JVM ({self.java} {' '.join(options)}): {exc}") from exc
        self.process: subprocess.Popen = process
        self.gateway = JavaGateway(
            gateway_parameters=GatewayParameters(port=port, auto_field=True, read_timeout=call_timeout),
            java_process=process,
        )
        scratch_dir = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        _sweep_stale_scratch(scratch_dir)
        fd, self._scratch = tempfile.mkstemp(prefix=f"{_SCRATCH_PREFIX}{os.getpid()}-", suffix=".txt", dir=scratch_dir)
        os.close(fd)
        self._finalizer = weakref.finalize(self, _terminate, process, self.gateway, self._scratch, os.getpid())
        self.dead_reason: str | None = None
        try:
            jvm = self.gateway.jvm
            # The engine prints kilobytes of debug text per step (possible referents, scores) to stdout, which
            # a py4j thread in *this* process reads line by line: it is silenced at the source, so steps do not
            # wait on that reader (docs/scienceworld.md, "Speed"). Scala's Console captures System.out when
            # first used, so this must come before any engine call.
            jvm.java.lang.System.setOut(jvm.java.io.PrintStream(jvm.java.io.FileOutputStream(os.devnull)))
            self.server = jvm.scienceworld.runtime.pythonapi.PythonInterface()
            self._rng = jvm.java.lang.Class.forName("scala.util.Random$").getField("MODULE$").get(None).self()
            self._seed_field = jvm.java.lang.Class.forName("java.util.Random").getDeclaredField("seed")
            self._seed_field.setAccessible(True)
            # The transfer file's Path and the Files.write method are looked up once: py4j resolves each
            # package level of `jvm.java.nio.file.Files.write` with its own round trip (eight per transfer).
            no_strings = self.gateway.new_array(jvm.java.lang.String, 0)
            self._transfer_path = jvm.java.nio.file.Paths.get(self._scratch, no_strings)
            self._files_write = jvm.java.nio.file.Files.write
            self._no_open_options = self.gateway.new_array(jvm.java.nio.file.OpenOption, 0)
            self._utf8 = jvm.java.nio.charset.StandardCharsets.UTF_8
        except Exception as exc:
            self.close()
            raise EngineError(f"the ScienceWorld JVM started but did not answer: {exc}; stderr: {self.stderr()}") from exc

    # ------------------------------------------------------------------ lifecycle
    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.dead_reason is None and self.process.poll() is None

    def stderr(self) -> str:
        # py4j's output consumer appends to a deque with appendleft: newest line first.
        return "".join(reversed(self.stderr_tail)).strip()[-2000:]

    def close(self) -> None:
        """End the JVM (idempotent)."""
        if self.dead_reason is None:
            self.dead_reason = "closed"
        self._finalizer()

    def call(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run one engine call; a dead, hung (timeout) or unreachable JVM becomes EngineError and is killed.

        Java exceptions raised by the engine itself (`Py4JJavaError`) pass through for the caller to
        translate: they mean bad input, not a dead JVM. Those that are JVM faults (`jvm_fault`: out of
        memory, stack overflow) do not: the JVM is stopped and EngineError says what happened.
        """
        from py4j.protocol import Py4JError, Py4JJavaError

        if not self.alive:
            raise EngineError(f"ScienceWorld JVM is not running ({self.dead_reason or 'exited'}); reset to restart it")
        try:
            return fn(*args)
        except Py4JJavaError as exc:
            fault = jvm_fault(exc)
            if fault is None:
                raise
            self.close()
            self.dead_reason = f"JVM fault: {fault}"
            hint = "; a larger max_heap (backend option) may help" if "OutOfMemoryError" in fault else ""
            raise EngineError(f"ScienceWorld engine failed during {what}: {fault} (the JVM was stopped; the next "
                              f"reset starts a new one{hint})") from None
        except (Py4JError, OSError) as exc:
            code = self.process.poll()
            self.dead_reason = (
                f"JVM exited with code {code}" if code is not None else f"no answer from the JVM ({type(exc).__name__})"
            )
            self.close()
            tail = self.stderr()
            raise EngineError(
                f"ScienceWorld engine failed during {what}: {self.dead_reason}: {exc}" + (f"; JVM stderr: {tail}" if tail else "")
            ) from exc

    # ------------------------------------------------------------------ helpers
    def rng_state(self) -> int:
        """The simulator's global RNG state (java.util.Random's 48-bit seed)."""
        return int(self._seed_field.get(self._rng))

    def set_rng_state(self, state: int) -> None:
        self._rng.setSeed(state ^ _JAVA_RANDOM_MULTIPLIER)

    def strings(self, java_list: Any) -> list[str]:
        """A Java List<String> as a Python list in one transfer (a file in /dev/shm; py4j would fetch
        each element with its own round trip)."""
        self._files_write(self._transfer_path, java_list, self._utf8, self._no_open_options)
        with open(self._scratch, encoding="utf-8") as handle:
            text = handle.read()
        return text.split("\n")[:-1] if text else []
