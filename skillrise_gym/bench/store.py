"""The run directory of `skillrise-bench`: manifest, transitions, per-sequence results; resumable.

Layout of ``DIR`` (one carry mode; `RunStore`)::

    manifest.json     what this run measures (env, split, mode, carry, prompt style, seed, agent identity...);
                      never secrets
    turns.jsonl       one `records.Turn` per agent call, whole sequences at a time
    results.jsonl     one line per finished sequence: its completion marker and per-task outcome
    summary.json, summary.md, success_by_position.png, success_vs_K.png   (rewritten at the end)

Several carry modes (`CarrySetDir`)::

    carry.json        what the modes share (the identity without the carry mode)
    carry-<mode>/     one RunStore per carry mode (manifest, turns, results, its own summary.json and .md)
    summary.json, summary.md, success_by_position.png, success_vs_K.png   (all modes side by side)

A single-mode run directory (the default carry "skill") that is later asked for more modes is adopted: its
manifest, turns and results move into ``carry-skill/`` (carry.json is written first, so an adoption cut
short by a kill is finished by the next start), and the finished sequences are kept.

Why this is safe to kill: a finished sequence is committed with one append of all its turns (fsynced),
then one append of its result line (fsynced). On open, turns without a result line (a sequence killed
between the two writes, or a torn write) are dropped and a torn last result line is discarded, so a
re-run plays exactly the sequences that have no result: none twice, none lost. Any other damage is refused,
naming file:line (`read_records`): a result line `check_result` refuses, a turn line `check_turn` refuses (the
rules `rescore` reads them by), a second result line for one sequence that contradicts its first. A lock file
keeps two runs from writing to one directory at once.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from skillrise_gym.backends.base import SkillRiseError
from skillrise_gym.paths import atomic_write
from skillrise_gym.prompts import CARRY_MODES
from skillrise_gym.records import Turn, json_line

TOOL = "skillrise-bench"
STORE_VERSION = 1
MANIFEST, TURNS, RESULTS, LOCK = "manifest.json", "turns.jsonl", "results.jsonl", ".lock"
CARRY_MANIFEST = "carry.json"
#: files a run directory may hold; anything else in a directory without a manifest makes it "foreign"
OUTPUTS = {MANIFEST, TURNS, RESULTS, LOCK, "summary.json", "summary.md", "rescored.json", "success_by_position.png",
           "success_vs_K.png", "documents.jsonl", "documents.jsonl.tmp", "tensorboard"}
#: identity keys added after run directories already existed, and the value they had before (a manifest
#: without the key was written by a run that used that value, so it still resumes)
LEGACY_IDENTITY = {"carry": "skill", "prompt_style": "full", "end_on_success": False, "episode_from": None,
                   "panel": None}


class RunDirError(SkillRiseError, ValueError):
    """The output directory cannot be used for this run; the message says why and what to do."""


class OutputError(SkillRiseError):
    """A record or summary could not be written mid-run (the disk is full, the folder became read-only):
    what was committed before is intact, and a rerun resumes from it."""


def _writing(path: Path, write: Any) -> None:
    try:
        write()
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None


def result_key(K: int, index: int) -> tuple[int, int]:
    return int(K), int(index)


def carry_dir_name(carry: str) -> str:
    return f"carry-{carry}"


def carry_run_dir(out: str | os.PathLike, carry: str) -> Path:
    """The folder holding carry mode `carry`'s run in a bench output `out`: its carry-<mode>/ folder when `out`
    ran several carry modes, else `out` itself (one carry mode, or a scripted row)."""
    out = Path(out)
    member = out / carry_dir_name(carry)
    return member if member.is_dir() else out


def is_carry_set(out: str | os.PathLike) -> bool:
    """Whether `out` is a several-carry-modes run directory (it holds carry.json)."""
    return (Path(out).expanduser() / CARRY_MANIFEST).exists()


def _comparable(identity: Mapping[str, Any]) -> Mapping[str, Any]:
    """The identity with the agent's endpoint normalized (manifests before normalization hold it as typed)."""
    agent = identity.get("agent")
    if isinstance(agent, Mapping) and isinstance(agent.get("base_url"), str):
        from skillrise_gym.agents.openai_agent import normalize_base_url

        return {**identity, "agent": {**agent, "base_url": normalize_base_url(agent["base_url"])}}
    return identity


def identity_differences(existing: Mapping[str, Any], identity: Mapping[str, Any]) -> list[str]:
    """Human-readable differences between a stored identity and the current one (see `LEGACY_IDENTITY`)."""
    existing, identity = _comparable(existing), _comparable(identity)
    def value(data: Mapping[str, Any], key: str) -> Any:
        return data.get(key, LEGACY_IDENTITY.get(key))

    differences = [
        f"{key}: {value(existing, key)!r} in the directory, {value(identity, key)!r} now"
        for key in sorted((set(existing) | set(identity)) - {"data"})
        if value(existing, key) != value(identity, key)
    ]
    # the data: by fingerprint (the same files elsewhere are the same data); unknown in older manifests
    old, new = existing.get("data"), identity.get("data")
    if old is not None and not isinstance(old, dict):
        old = {"source": repr(old), "fingerprint": "damaged"}
    if old is not None and (old or {}).get("fingerprint") != (new or {}).get("fingerprint"):
        differences.append(
            f"data: {old.get('source')} ({old.get('fingerprint')}) in the directory, "
            f"{(new or {}).get('source', 'none')} ({(new or {}).get('fingerprint', 'none')}) now"
        )
    return differences


def trial_id(sequence_id: str, index: int) -> str:
    """One play-through of the `index`-th drawn sequence (the same sequence may be drawn twice)."""
    return f"{sequence_id}#{index}"


class _LockedDir:
    """A run directory held under its lock file while open: atomic text outputs, and the lock's release."""

    dir: Path
    _lock_handle: Any = None

    def write_text(self, name: str, text: str) -> Path:
        path = self.dir / name
        _writing(path, lambda: atomic_write(path, text, fsync=True))
        return path

    def close(self) -> None:
        if self._lock_handle is not None:
            fcntl.flock(self._lock_handle.fileno(), fcntl.LOCK_UN)
            self._lock_handle.close()
            self._lock_handle = None


class RunStore(_LockedDir):
    """Opens (creates or resumes) a run directory and commits finished sequences to it."""

    def __init__(self, out: str | os.PathLike, identity: Mapping[str, Any]) -> None:
        self.dir = Path(out).expanduser()
        self.identity = json.loads(json.dumps(dict(identity)))  # plain JSON types, for comparison
        self.results: dict[tuple[int, int], dict[str, Any]] = {}
        self.repaired: dict[str, int] = {"turns_dropped": 0, "results_dropped": 0}
        self._lock_handle = None

    # ----------------------------------------------------------------- opening
    def open(self) -> "RunStore":
        self._prepare_dir()
        self._lock()
        manifest_path = self.dir / MANIFEST
        if manifest_path.exists():
            self._check_manifest(manifest_path)
            self._load_results()
            self._repair_turns()
        else:
            atomic_write(manifest_path, json.dumps({"tool": TOOL, "store_version": STORE_VERSION,
                                                      "identity": self.identity}, indent=2) + "\n", fsync=True)
        return self

    def _prepare_dir(self) -> None:
        _prepare_dir(self.dir, MANIFEST, OUTPUTS)

    def _lock(self) -> None:
        self._lock_handle = _writable_lock(self.dir)

    def _check_manifest(self, path: Path) -> None:
        _check_manifest(path, self.dir, self.identity)

    def _load_results(self) -> None:
        path = self.dir / RESULTS
        if not path.exists():
            return
        numbered, dropped = read_records(path, check_result)
        first_line: dict[tuple[int, int], int] = {}
        for number, data in numbered:
            key = result_key(data["K"], data["index"])
            if key in self.results:  # a duplicate line (never written by us): the same one changes nothing
                if data != self.results[key]:
                    raise RunDirError(f"{path}:{number} records K={key[0]} index={key[1]} again, differently from "
                                      f"line {first_line[key]}; {RESUME_ADVICE}")
                continue
            self.results[key], first_line[key] = data, number
        if dropped:
            self.repaired["results_dropped"] = dropped
            atomic_write(path, "".join(json_line(d) for _number, d in numbered), fsync=True)

    def _repair_turns(self) -> None:
        path = self.dir / TURNS
        if not path.exists():
            return
        finished = {r["trial_id"] for r in self.results.values()}
        good, torn = _read_lines(path, check_turn)  # the rule `rescore` reads them by: a line it refuses is damage
        kept = [d for d in good if d.get("trial_id") in finished]
        dropped = torn + len(good) - len(kept)
        if dropped:
            self.repaired["turns_dropped"] = dropped
            atomic_write(path, "".join(json_line(d) for d in kept), fsync=True)

    # ----------------------------------------------------------------- writing
    def is_done(self, K: int, index: int) -> bool:
        return result_key(K, index) in self.results

    def commit(self, turns: Iterable[Turn], result: Mapping[str, Any]) -> None:
        """Record one finished sequence: all its turns in one append, then its result line."""
        key = result_key(result["K"], result["index"])
        if key in self.results:
            raise RuntimeError(f"sequence K={key[0]} index={key[1]} is already recorded")
        _append(self.dir / TURNS, "".join(json_line(t.to_dict()) for t in turns))
        _append(self.dir / RESULTS, json_line(dict(result)))
        self.results[key] = dict(result)

    def __enter__(self) -> "RunStore":
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


class CarrySetDir(_LockedDir):
    """A run directory holding several carry modes: carry.json, one `RunStore` per mode in carry-<mode>/, and
    the side-by-side summaries at the top (see the module docstring)."""

    def __init__(self, out: str | os.PathLike, identity: Mapping[str, Any],
                 member_identity: Callable[[str], Mapping[str, Any]], log: Callable[[str], None] | None = None) -> None:
        self.dir = Path(out).expanduser()
        self.identity = json.loads(json.dumps(dict(identity)))
        self.member_identity = member_identity
        self.log = log or (lambda message: None)
        self._lock_handle = None

    def open(self) -> "CarrySetDir":
        from skillrise_gym.memory import METHODS

        allowed = OUTPUTS | {CARRY_MANIFEST} | {carry_dir_name(mode) for mode in (*CARRY_MODES, *METHODS)}
        _prepare_dir(self.dir, MANIFEST, allowed, also_manifest=CARRY_MANIFEST)
        self._lock_handle = _writable_lock(self.dir)
        try:
            marker = self.dir / CARRY_MANIFEST
            flat = self.dir / MANIFEST
            if flat.exists():  # a single-mode run (carry skill): refused now if it measured something else
                _check_manifest(flat, self.dir, json.loads(json.dumps(dict(self.member_identity("skill")))))
            if marker.exists():
                _check_manifest(marker, self.dir, self.identity)
            else:
                atomic_write(marker, json.dumps({"tool": TOOL, "store_version": STORE_VERSION, "layout": "carry",
                                                 "identity": self.identity}, indent=2) + "\n", fsync=True)
            if flat.exists():
                self._adopt_single_mode_run()
        except BaseException:
            self.close()
            raise
        return self

    def _adopt_single_mode_run(self) -> None:
        """Move the single-mode run's records into carry-skill/ (manifest last: each rename is atomic, and a
        kill in between leaves the manifest at the top, so the next start finishes the move)."""
        target = self.dir / carry_dir_name("skill")
        if (target / MANIFEST).exists():
            raise RunDirError(f"{self.dir} holds a single-mode run and {target} as well; move one of them away")
        target.mkdir(exist_ok=True)
        for name in (TURNS, RESULTS, MANIFEST):
            if (self.dir / name).exists():
                os.replace(self.dir / name, target / name)
        _fsync_dir(target)
        _fsync_dir(self.dir)
        self.log(f"{self.dir}: the single-mode run (carry skill) moved into {target} to sit beside the other modes")

    def member(self, carry: str) -> RunStore:
        return RunStore(self.dir / carry_dir_name(carry), self.member_identity(carry))


def _prepare_dir(path: Path, manifest: str, allowed: set[str], also_manifest: str | None = None) -> None:
    """Create `path` or check that it is a run directory (it has `manifest` or `also_manifest`, or holds only
    files a run writes), writable."""
    if path.exists() and not path.is_dir():
        raise RunDirError(f"--out {path} exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        entries = {p.name for p in path.iterdir()}
    except (NotADirectoryError, FileExistsError):
        raise RunDirError(f"--out {path} cannot be created: a part of its path is a file, not a folder") from None
    except OSError as exc:
        raise RunDirError(f"--out {path} cannot be read or created: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise RunDirError(f"--out {path} is not writable")
    if manifest not in entries and (also_manifest is None or also_manifest not in entries):
        foreign = sorted(entries - allowed)
        if foreign or (entries & {TURNS, RESULTS}):
            if LOCK in entries:  # a process that started at the same moment is creating it (its files in flight)
                _lock(path).close()  # raises the "another process is writing" message while it holds the lock
            shown = ", ".join(foreign[:5] or sorted(entries)[:5])
            raise RunDirError(
                f"--out {path} is not empty and is not a {TOOL} run directory (no {manifest}; it holds "
                f"{shown}). Choose a new or empty directory."
            )


class LockHeld(RunDirError):
    """Another process holds the folder's lock file."""


def _lock(path: Path) -> Any:
    """Hold `path`'s lock file (LOCK, made when missing) until the returned handle is closed: `LockHeld` when
    another process holds it; a lock file that cannot be one (a folder, a link leading nowhere, not
    openable, on a file system without locks) is a RunDirError naming it. A full or read-only disk stays an
    OSError (the callers' "cannot write" path)."""
    lock = path / LOCK
    if lock.exists() and not lock.is_file():
        raise RunDirError(f"{lock} is not a plain file, so it cannot serve as the folder's lock file; remove it "
                          "(nothing uses a lock file that is not a plain file)")
    try:
        handle = open(lock, "a+")
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EROFS, errno.EDQUOT) or (
                exc.errno in (errno.EACCES, errno.EPERM) and not lock.is_symlink() and not lock.exists()):
            raise  # the folder itself cannot be written
        raise RunDirError(f"{lock} cannot be opened as the folder's lock file ({exc.strerror or exc}); remove it or "
                          "make it writable") from None
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        handle.close()
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise RunDirError(f"{lock} cannot be locked ({exc.strerror or exc}): the folder's file system does not "
                              "support locks; choose a folder on another one") from None
        raise LockHeld(f"another {TOOL} process is writing to {path}; wait for it or choose another --out") from None
    return handle


def _writable_lock(path: Path) -> Any:
    """`_lock` for a run directory: a lock file that cannot be created for want of room is an OutputError."""
    try:
        return _lock(path)
    except OSError as exc:
        raise OutputError(f"cannot write {path / LOCK}: {exc.strerror or exc}") from None


def read_manifest(path: Path, advice: str) -> dict[str, Any]:
    """A run's manifest (or carry.json): a JSON object written by this tool, with an object as its identity;
    anything else raises RunDirError, one line naming the file, ending with `advice`."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise RunDirError(f"{path} is unreadable (JSON nested too deeply); {advice}") from None
    except (OSError, ValueError) as exc:
        raise RunDirError(f"{path} is unreadable ({exc}); {advice}") from None
    if not isinstance(manifest, dict) or manifest.get("tool") != TOOL:
        raise RunDirError(f"{path} was not written by {TOOL}; {advice}")
    version = manifest.get("store_version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise RunDirError(f"{path}: store_version is {version!r}, not a number; {advice}")
    if version > STORE_VERSION:
        raise RunDirError(f"{path} was written by a newer {TOOL}; upgrade or choose another --out")
    if not isinstance(manifest.get("identity", {}), dict):
        raise RunDirError(f"{path}: identity is a {type(manifest['identity']).__name__}, not an object; {advice}")
    return manifest


def _check_manifest(path: Path, run_dir: Path, identity: Mapping[str, Any]) -> None:
    manifest = read_manifest(path, "this directory cannot be resumed, choose another --out")
    differences = identity_differences(manifest.get("identity", {}), identity)
    if differences:
        raise RunDirError(
            f"{run_dir} holds a run with different arguments:\n  " + "\n  ".join(differences)
            + "\nRe-run with the directory's arguments to resume it, or choose another --out."
        )


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


RESUME_ADVICE = ("the file was modified or corrupted, so this run cannot be resumed safely. Choose another --out "
                 "(or restore the file).")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_result(data: Mapping[str, Any]) -> None:
    """Raise ValueError (saying which field) unless `data` is a result line the runner and the metrics can
    use: K >= 1, index >= 0, trial and sequence ids, per-task lists of length K, counts and seconds."""
    K, index = data.get("K"), data.get("index")
    if not _is_int(K) or K < 1:
        raise ValueError(f"K is {K!r}, not a positive integer")
    if not _is_int(index) or index < 0:
        raise ValueError(f"index is {index!r}, not an integer >= 0")
    for name in ("trial_id", "sequence_id", "family"):
        if not isinstance(data.get(name), str):
            raise ValueError(f"{name} is {data.get(name)!r}, not a string")
    per_task = {"success": lambda v: isinstance(v, bool), "score": _is_number, "steps": _is_int,
                "engine_errors": lambda v: v is None or isinstance(v, str)}
    for name, good in per_task.items():
        values = data.get(name)
        if not isinstance(values, list) or len(values) != K or not all(good(v) for v in values):
            raise ValueError(f"{name} is not a list of K={K} valid entries")
    for name in ("calls", "invalid_format", "prompt_tokens", "completion_tokens", "solve_calls", "curate_calls",
                 "invalid_format_solve"):
        if (name in data or name in ("calls", "invalid_format", "prompt_tokens", "completion_tokens")) \
                and not _is_int(data.get(name)):
            raise ValueError(f"{name} is {data.get(name)!r}, not an integer")
    for name in ("agent_s", "wall_s"):
        if not _is_number(data.get(name)):
            raise ValueError(f"{name} is {data.get(name)!r}, not a number")
    if "task_ids" in data and not isinstance(data["task_ids"], list):
        raise ValueError("task_ids is not a list")


def check_turn(data: Mapping[str, Any]) -> None:
    """Raise ValueError (saying which field) unless `data` is a turn record rescoring can use (and so resuming
    keeps): a role, the texts, integer positions inside K, flags, numbers, K and the draw index in ``extra``."""
    from skillrise_gym.prompts import ROLES
    from skillrise_gym.records import SCHEMA_VERSION

    if data.get("role") not in ROLES:
        raise ValueError(f"role is {data.get('role')!r}, not one of {', '.join(ROLES)}")
    for name in _TURN_TEXT:
        if not isinstance(data.get(name), str):
            raise ValueError(f"{name} is {type(data.get(name)).__name__}, not a string")
    for name in ("position", "step_index"):
        if not _is_int(data.get(name)):
            raise ValueError(f"{name} is {data.get(name)!r}, not an integer")
    for name in ("format_valid", "success"):
        if not isinstance(data.get(name), bool):
            raise ValueError(f"{name} is {data.get(name)!r}, not true or false")
    for name in ("reward", "score"):
        if not _is_number(data.get(name)):
            raise ValueError(f"{name} is {data.get(name)!r}, not a number")
    for name in ("prompt_tokens", "completion_tokens", "schema"):
        if name in data and not _is_int(data[name]):
            raise ValueError(f"{name} is {data[name]!r}, not an integer")
    if data.get("schema", SCHEMA_VERSION) > SCHEMA_VERSION:
        raise ValueError(f"schema {data['schema']} is newer than this library's {SCHEMA_VERSION}")
    if data.get("engine_error") is not None and not isinstance(data["engine_error"], str):
        raise ValueError("engine_error is not a string")
    extra = data.get("extra")
    if not isinstance(extra, dict):
        raise ValueError(f"extra is {type(extra).__name__}, not an object")
    if not _is_int(extra.get("K")) or extra["K"] < 1:
        raise ValueError(f"extra.K is {extra.get('K')!r}, not a positive integer")
    if not _is_int(extra.get("index")) or extra["index"] < 0:
        raise ValueError(f"extra.index is {extra.get('index')!r}, not an integer >= 0")
    if not 0 <= data["position"] < extra["K"]:
        raise ValueError(f"position {data['position']} is outside 0..K-1 (K={extra['K']})")
    if "latency_s" in extra and not _is_number(extra["latency_s"]):
        raise ValueError(f"extra.latency_s is {extra['latency_s']!r}, not a number")


_TURN_TEXT = ("sequence_id", "trial_id", "task_id", "family", "benchmark", "prompt", "response", "action")


def read_records(path: Path, check: Callable[[Mapping[str, Any]], None] | None = None,
                 advice: str = RESUME_ADVICE) -> tuple[list[tuple[int, dict[str, Any]]], int]:
    """The JSON objects of a record file with their line numbers, and how many lines were dropped: only a
    torn *last* line (no newline after it) may be dropped; any other line that is not a JSON object (also
    one nested too deeply to parse), or that `check` refuses (ValueError), raises RunDirError naming
    path:line, then `advice`."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RunDirError(f"{path} is unreadable: {exc.strerror}") from None
    lines = raw.split(b"\n")
    tail = lines.pop()  # bytes after the last newline: empty, or a torn write
    good: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except RecursionError:
            reason = "is not a JSON record (nested too deeply)"
        except ValueError:
            reason = "is not a JSON record"
        else:
            reason = "" if isinstance(data, dict) else f"is not a JSON record (a {type(data).__name__}, not an object)"
            if not reason and check is not None:
                try:
                    check(data)
                except ValueError as exc:
                    reason = f"is not a valid record ({exc})"
        if reason:
            raise RunDirError(f"{path}:{number} {reason}; {advice}")
        good.append((number, data))
    return good, int(bool(tail.strip()))


def _read_lines(path: Path, check: Callable[[Mapping[str, Any]], None] | None = None
                ) -> tuple[list[dict[str, Any]], int]:
    """Parsed JSON lines and how many were dropped (`read_records` without line numbers): a bad line in the
    middle means the file was edited or corrupted, which resuming must not paper over."""
    good, dropped = read_records(path, check)
    return [data for _number, data in good], dropped


def _append(path: Path, text: str) -> None:
    _writing(path, lambda: _append_bytes(path, text.encode("utf-8")))


def _append_bytes(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)


