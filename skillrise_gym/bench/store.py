"""The run directory of `skillrise-bench`: manifest, transitions, per-sequence results; resumable.

Layout of ``DIR``::

    manifest.json     what this run measures (env, split, mode, seed, agent identity...); never secrets
    turns.jsonl       one `records.Turn` per agent call, whole sequences at a time
    results.jsonl     one line per finished sequence: its completion marker and per-task outcome
    summary.json, summary.md, success_by_position.png, success_vs_K.png   (rewritten at the end)

Why this is safe to kill: a finished sequence is committed with one append of all its turns (fsynced),
then one append of its result line (fsynced). On open, turns without a result line (a sequence killed
between the two writes, or a torn write) are dropped and a torn last result line is discarded, so a
re-run plays exactly the sequences that have no result: none twice, none lost. A lock file keeps two
runs from writing to one directory at once.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from skillrise_gym.backends.base import SkillRiseError
from skillrise_gym.paths import atomic_write
from skillrise_gym.records import Turn

TOOL = "skillrise-bench"
STORE_VERSION = 1
MANIFEST, TURNS, RESULTS, LOCK = "manifest.json", "turns.jsonl", "results.jsonl", ".lock"
#: files a run directory may hold; anything else in a directory without a manifest makes it "foreign"
OUTPUTS = {MANIFEST, TURNS, RESULTS, LOCK, "summary.json", "summary.md", "success_by_position.png",
           "success_vs_K.png"}


class RunDirError(SkillRiseError, ValueError):
    """The output directory cannot be used for this run; the message says why and what to do."""


def result_key(K: int, index: int) -> tuple[int, int]:
    return int(K), int(index)


def trial_id(sequence_id: str, index: int) -> str:
    """One play-through of the `index`-th drawn sequence (the same sequence may be drawn twice)."""
    return f"{sequence_id}#{index}"


class RunStore:
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
        path = self.dir
        if path.exists() and not path.is_dir():
            raise RunDirError(f"--out {path} exists and is not a directory")
        try:
            path.mkdir(parents=True, exist_ok=True)
            entries = {p.name for p in path.iterdir()}
        except PermissionError as exc:
            raise RunDirError(f"--out {path} cannot be read or created: {exc.strerror}") from None
        if not os.access(path, os.W_OK | os.X_OK):
            raise RunDirError(f"--out {path} is not writable")
        if MANIFEST not in entries:
            foreign = sorted(entries - OUTPUTS)
            if foreign or (entries & {TURNS, RESULTS}):
                shown = ", ".join(foreign[:5] or sorted(entries)[:5])
                raise RunDirError(
                    f"--out {path} is not empty and is not a {TOOL} run directory (no {MANIFEST}; it holds "
                    f"{shown}). Choose a new or empty directory."
                )

    def _lock(self) -> None:
        handle = open(self.dir / LOCK, "a+")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise RunDirError(f"another {TOOL} process is writing to {self.dir}; wait for it or choose another --out") from None
        self._lock_handle = handle

    def _check_manifest(self, path: Path) -> None:
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RunDirError(f"{path} is unreadable ({exc}); this directory cannot be resumed, choose another --out") from None
        if not isinstance(manifest, dict) or manifest.get("tool") != TOOL:
            raise RunDirError(f"{path} was not written by {TOOL}; choose another --out")
        if manifest.get("store_version", 0) > STORE_VERSION:
            raise RunDirError(f"{path} was written by a newer {TOOL}; upgrade or choose another --out")
        existing = manifest.get("identity", {})
        differences = [
            f"{key}: {existing.get(key)!r} in the directory, {self.identity.get(key)!r} now"
            for key in sorted(set(existing) | set(self.identity))
            if existing.get(key) != self.identity.get(key)
        ]
        if differences:
            raise RunDirError(
                f"{self.dir} holds a run with different arguments:\n  " + "\n  ".join(differences)
                + "\nRe-run with the directory's arguments to resume it, or choose another --out."
            )

    def _load_results(self) -> None:
        path = self.dir / RESULTS
        if not path.exists():
            return
        good, dropped = _read_lines(path)
        for data in good:
            key = result_key(data["K"], data["index"])
            self.results.setdefault(key, data)  # a duplicate line (never written by us) is ignored
        if dropped:
            self.repaired["results_dropped"] = dropped
            atomic_write(path, "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in good), fsync=True)

    def _repair_turns(self) -> None:
        path = self.dir / TURNS
        if not path.exists():
            return
        finished = {r["trial_id"] for r in self.results.values()}
        good, torn = _read_lines(path)
        kept = [d for d in good if d.get("trial_id") in finished]
        dropped = torn + len(good) - len(kept)
        if dropped:
            self.repaired["turns_dropped"] = dropped
            atomic_write(path, "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in kept), fsync=True)

    # ----------------------------------------------------------------- writing
    def is_done(self, K: int, index: int) -> bool:
        return result_key(K, index) in self.results

    def commit(self, turns: Iterable[Turn], result: Mapping[str, Any]) -> None:
        """Record one finished sequence: all its turns in one append, then its result line."""
        key = result_key(result["K"], result["index"])
        if key in self.results:
            raise RuntimeError(f"sequence K={key[0]} index={key[1]} is already recorded")
        _append(self.dir / TURNS, "".join(json.dumps(t.to_dict(), ensure_ascii=False) + "\n" for t in turns))
        _append(self.dir / RESULTS, json.dumps(dict(result), ensure_ascii=False) + "\n")
        self.results[key] = dict(result)

    def write_text(self, name: str, text: str) -> Path:
        path = self.dir / name
        atomic_write(path, text, fsync=True)
        return path

    def close(self) -> None:
        if self._lock_handle is not None:
            fcntl.flock(self._lock_handle.fileno(), fcntl.LOCK_UN)
            self._lock_handle.close()
            self._lock_handle = None

    def __enter__(self) -> "RunStore":
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_lines(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Parsed JSON lines and how many were dropped: only a torn *last* line may be dropped; a bad line in
    the middle means the file was edited or corrupted, which resuming must not paper over."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RunDirError(f"{path} is unreadable: {exc.strerror}") from None
    lines = raw.split(b"\n")
    tail = lines.pop()  # bytes after the last newline: empty, or a torn write
    good: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            if not isinstance(data, dict):
                raise ValueError("not an object")
        except ValueError:
            raise RunDirError(
                f"{path}:{number} is not a JSON record; the file was modified or corrupted, so this run cannot "
                f"be resumed safely. Choose another --out (or restore the file)."
            ) from None
        good.append(data)
    return good, int(bool(tail.strip()))


def _append(path: Path, text: str) -> None:
    data = text.encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)


