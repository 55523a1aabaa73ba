"""Where ALFWorld's game files are, and what is in them.

Data layout (what `alfworld-download` writes under `$ALFWORLD_DATA`)::

    json_2.1.1/<split folder>/<task_type>-<Object>-<MovableRecep>-<Receptacle>-<Scene>/<trial>/game.tw-pddl

`resolve_data_root` accepts that folder's parent, the `json_2.1.1` folder itself, a folder holding
`json_2.1.1.tar.xz`, or the archive path; an archive is extracted once into the project cache (never into
the data folder), under a name keyed by the archive's content, so worker processes share one copy.

`load_index` lists a split's games with what families and difficulty need (task type, object, walkthrough
length). Reading thousands of game files each time is slow, so the index is cached on disk, keyed by the
split folder and every game file's size and mtime. Nothing here imports the engine.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tarfile
import tempfile
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from skillrise_gym.backends.base import ConfigurationError, DataNotFoundError
from skillrise_gym.paths import atomic_write, cache_dir, sha256_file

DATA_VERSION = "json_2.1.1"
ARCHIVE_NAME = f"{DATA_VERSION}.tar.xz"
GAME_FILE = "game.tw-pddl"
INDEX_FORMAT = 1

#: our split name (ALFWorld's names for the evaluation splits) -> folder under json_2.1.1/
SPLIT_FOLDERS: dict[str, str] = {
    "train": "train",
    "eval_in_distribution": "valid_seen",
    "eval_out_of_distribution": "valid_unseen",
    "valid_train": "valid_train",
}

TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

HOW_TO_GET = (
    "Get ALFWorld's game files with `pip install alfworld` and `alfworld-download` (needs the internet; it "
    "writes $ALFWORLD_DATA/json_2.1.1/), or `skillrise-data alfworld --download`; or point the backend at "
    "a json_2.1.1.tar.xz archive of that tree: data_dir=/path/to/json_2.1.1.tar.xz, or "
    "ALFWORLD_DATA=/folder/holding/the/archive. `skillrise-data alfworld` shows where it looks."
)


def default_data_dir() -> Path:
    """`$ALFWORLD_DATA` (ALFWorld's own variable), else `~/.cache/alfworld` (ALFWorld's default)."""
    return Path(os.environ.get("ALFWORLD_DATA") or Path.home() / ".cache" / "alfworld").expanduser()


def _is_archive(path: Path) -> bool:
    return path.is_file() and path.name.endswith((".tar.xz", ".tar.gz", ".tgz", ".tar"))


def resolve_data_root(data_dir: str | os.PathLike | None = None, extract: bool = True) -> Path:
    """The `json_2.1.1` folder holding the split folders, extracting an archive once if given one.

    Raises DataNotFoundError with instructions when nothing usable is there.
    """
    given = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    candidates: list[Path] = []
    if given.is_dir():
        if (given / DATA_VERSION).is_dir():
            return (given / DATA_VERSION).resolve()
        if given.name == DATA_VERSION or any((given / f).is_dir() for f in SPLIT_FOLDERS.values()):
            return given.resolve()
        candidates = [given / ARCHIVE_NAME, *sorted(given.glob("*.tar.xz"))]
    elif _is_archive(given):
        candidates = [given]
    for archive in candidates:
        if _is_archive(archive):
            if not extract:
                return archive.resolve()
            return extract_archive(archive)
    where = "does not exist" if not given.exists() else "holds neither json_2.1.1/ nor json_2.1.1.tar.xz"
    raise DataNotFoundError(f"ALFWorld game files not found: {given} {where}. {HOW_TO_GET}")



@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock; the kernel releases it if the holder dies, so a killed worker never
    leaves it stuck."""
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def extracted_location(archive: str | os.PathLike) -> Path:
    """Where `extract_archive` puts (or has put) this archive's contents: keyed by its sha256."""
    return cache_dir("alfworld", "data") / sha256_file(archive)[:16]


#: the most bytes an archive may expand to (the official json_2.1.1 tree is 332 MB, 9592 entries);
#: `$SKILLRISE_MAX_EXTRACT_BYTES` raises or lowers it
DEFAULT_MAX_EXTRACT_BYTES = 1 << 30
MAX_ARCHIVE_MEMBERS = 200_000
NAME_MAX = 255  # bytes in one path component (ext4, xfs, apfs)


class ExtractCapError(ConfigurationError, ValueError):
    """`$SKILLRISE_MAX_EXTRACT_BYTES` is not a positive number of bytes (a bad setting: exit 2, one line)."""


def max_extract_bytes() -> int:
    """The expansion cap: `$SKILLRISE_MAX_EXTRACT_BYTES` (an integer number of bytes) or 1 GiB."""
    raw = os.environ.get("SKILLRISE_MAX_EXTRACT_BYTES", "").strip()
    if not raw:
        return DEFAULT_MAX_EXTRACT_BYTES
    try:
        value = int(raw.replace("_", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise ExtractCapError(f"SKILLRISE_MAX_EXTRACT_BYTES must be a positive number of bytes, got {raw!r}")
    return value


def _member_path(name: str) -> str:
    """A member's name without leading './' (so '.' and './' are the archive's root)."""
    while name.startswith("./"):
        name = name[2:]
    return "" if name in (".", "") else name.rstrip("/")


def _check_members(archive: Path, members: list[tarfile.TarInfo], max_bytes: int) -> list[tarfile.TarInfo]:
    """The members to extract (the root entry './' dropped), or DataNotFoundError: a member outside
    json_2.1.1/, a path component longer than the file system allows, more entries or bytes than the caps."""
    if len(members) > MAX_ARCHIVE_MEMBERS:
        raise DataNotFoundError(f"{archive} holds {len(members)} entries, more than the {MAX_ARCHIVE_MEMBERS} an "
                                f"ALFWorld archive can hold (the official one has 9592). {HOW_TO_GET}")
    kept, total = [], 0
    for member in members:
        path = _member_path(member.name)
        if not path:
            if not member.isdir():
                raise DataNotFoundError(f"{archive}: its root entry {member.name!r} is not a folder. {HOW_TO_GET}")
            continue
        if path != DATA_VERSION and not path.startswith(DATA_VERSION + "/"):
            raise DataNotFoundError(
                f"{archive} is not an ALFWorld {DATA_VERSION} archive (e.g. it holds {member.name[:200]!r}). "
                f"{HOW_TO_GET}"
            )
        long = next((part for part in path.split("/") if len(part.encode("utf-8", "surrogateescape")) > NAME_MAX), None)
        if long is not None:
            raise DataNotFoundError(
                f"{archive} holds a name of {len(long.encode('utf-8', 'surrogateescape'))} bytes "
                f"({long[:60]!r}...), longer than the {NAME_MAX} a file system allows: not an ALFWorld archive. "
                f"{HOW_TO_GET}"
            )
        total += max(0, member.size) if member.isfile() else 0
        if total > max_bytes:
            raise DataNotFoundError(
                f"{archive} expands to more than {max_bytes} bytes (the cap; the official {DATA_VERSION} tree is "
                f"about 332 MB), so it was not extracted. Set SKILLRISE_MAX_EXTRACT_BYTES to a larger number of "
                f"bytes if the archive is genuine."
            )
        member.name = path
        kept.append(member)
    if not kept:
        raise DataNotFoundError(f"{archive} holds no {DATA_VERSION}/ folder. {HOW_TO_GET}")
    return kept


def extract_archive(archive: str | os.PathLike, max_bytes: int | None = None) -> Path:
    """Extract a json_2.1.1 archive once into the cache and return its json_2.1.1 folder.

    Concurrent callers wait on a lock; extraction goes to a temporary folder that is renamed into place
    only when complete, so a killed extractor leaves no half-written tree that looks finished. Members are
    checked before anything is written (`_check_members`): at most `max_bytes` (default
    `max_extract_bytes()`), names a file system can hold, everything under json_2.1.1/ (a leading './' is
    fine); tarfile's "data" filter refuses links and paths that leave the folder.
    """
    archive = Path(archive).resolve()
    if not archive.is_file():
        raise DataNotFoundError(f"ALFWorld archive not found: {archive}. {HOW_TO_GET}")
    limit = max_extract_bytes() if max_bytes is None else int(max_bytes)
    target = extracted_location(archive)
    final = target / DATA_VERSION
    if final.is_dir():
        return final
    with _file_lock(target.with_name(target.name + ".lock")):
        if final.is_dir():
            return final
        target.mkdir(parents=True, exist_ok=True)
        for stale in target.glob(".extract-*"):  # left by an extractor that was killed
            shutil.rmtree(stale, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=".extract-", dir=target))
        try:
            with tarfile.open(archive) as tar:
                members = _check_members(archive, tar.getmembers(), limit)
                tar.extractall(staging, members=members, filter="data")
            os.replace(staging / DATA_VERSION, final)
        except tarfile.TarError as exc:
            raise DataNotFoundError(f"cannot read ALFWorld archive {archive}: {exc}. {HOW_TO_GET}") from exc
        except OSError as exc:  # a full disk or a read-only cache: say where, keep nothing half-written
            raise DataNotFoundError(
                f"cannot extract ALFWorld archive {archive} into {target}: {exc.strerror or exc}. Free space there "
                f"or point SKILLRISE_CACHE at a writable folder with room for about 350 MB."
            ) from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return final


def split_folder(root: Path, split: str) -> Path:
    """The folder of a split under a json_2.1.1 root; DataNotFoundError if it is not there."""
    folder = root / SPLIT_FOLDERS[split]
    if not folder.is_dir():
        raise DataNotFoundError(
            f"ALFWorld split {split!r} (folder {SPLIT_FOLDERS[split]}/) is not in {root}. "
            f"The official download has all four splits. {HOW_TO_GET}"
        )
    return folder


# --------------------------------------------------------------------------- folder names
@dataclass(frozen=True)
class TaskDirInfo:
    """What a task folder's name says: `<task_type>-<Object>-<MovableRecep>-<Receptacle|Lamp>-<Scene>`."""

    task_type: str
    object: str
    mrecep: str  # movable receptacle, or "None"
    receptacle: str  # the target receptacle, or the lamp for look_at_obj_in_light
    scene: int

    @classmethod
    def parse(cls, name: str) -> "TaskDirInfo":
        parts = name.split("-")
        if len(parts) != 5 or parts[0] not in TASK_TYPES or not parts[4].isdigit():
            raise ValueError(f"not an ALFWorld task folder name: {name!r}")
        return cls(parts[0], parts[1], parts[2], parts[3], int(parts[4]))

    def pddl_params(self) -> dict[str, Any]:
        """The `pddl_params` of ALFRED's traj_data.json, rebuilt from the name (ALFWorld's hand-coded
        expert needs them; the games ship without traj_data.json)."""
        look = self.task_type == "look_at_obj_in_light"
        sliced = self.object.endswith("Sliced")
        return {
            "object_target": self.object[: -len("Sliced")] if sliced else self.object,
            "parent_target": "" if look else self.receptacle,
            "toggle_target": self.receptacle if look else "",
            "mrecep_target": "" if self.mrecep == "None" else self.mrecep,
            "object_sliced": sliced,
        }


# --------------------------------------------------------------------------- task index
def _game_files(folder: Path) -> list[Path]:
    return sorted(folder.glob(f"*/*/{GAME_FILE}"))


def _fingerprint(folder: Path, files: list[Path]) -> str:
    digest = hashlib.sha256(f"{INDEX_FORMAT}\n{folder.resolve()}\n".encode())
    for path in files:
        stat = path.stat()
        digest.update(f"{path.relative_to(folder)}\t{stat.st_size}\t{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:24]


def _read_entry(folder: Path, path: Path) -> dict[str, Any]:
    """One game's index entry; raises ValueError with the reason a game is unusable."""
    task_id = str(path.parent.relative_to(folder))
    info = TaskDirInfo.parse(path.parent.parent.name)
    try:
        with open(path, encoding="utf-8") as f:
            game = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"unreadable game file ({exc.__class__.__name__}: {exc})") from None
    if not isinstance(game, dict):
        raise ValueError("game file is not a JSON object")
    missing = [k for k in ("pddl_domain", "grammar", "pddl_problem") if not isinstance(game.get(k), str)]
    if missing:
        raise ValueError(f"game file lacks {', '.join(missing)}")
    if game.get("solvable") is False:
        raise ValueError("marked unsolvable")
    walkthrough = game.get("walkthrough")
    if not isinstance(walkthrough, list) or not walkthrough or not all(isinstance(a, str) for a in walkthrough):
        raise ValueError("no walkthrough (expert plan)")
    return {
        "id": task_id,
        "task_type": info.task_type,
        "object": info.object,
        "mrecep": info.mrecep,
        "receptacle": info.receptacle,
        "scene": info.scene,
        "walkthrough_len": len(walkthrough),
    }


def build_index(folder: Path) -> dict[str, Any]:
    """Scan a split folder: usable games and skipped ones (with the reason), in path order."""
    entries, skipped = [], []
    for path in _game_files(folder):
        try:
            entries.append(_read_entry(folder, path))
        except ValueError as exc:
            skipped.append({"id": str(path.parent.relative_to(folder)), "reason": str(exc)})
    return {"format": INDEX_FORMAT, "folder": str(folder.resolve()), "games": entries, "skipped": skipped}



def load_index(folder: Path, use_cache: bool = True) -> dict[str, Any]:
    """The split's index, from the on-disk cache when no game file changed; warns about skipped games."""
    files = _game_files(folder)
    index = None
    cache_file = cache_dir("alfworld", "index") / f"{_fingerprint(folder, files)}.json"
    if use_cache and cache_file.is_file():
        try:
            index = json.loads(cache_file.read_text())
        except (OSError, ValueError):
            index = None  # corrupt cache entry: rebuild below
    if index is None:
        index = build_index(folder)
        if use_cache:
            atomic_write(cache_file, json.dumps(index))
    if index["skipped"]:
        examples = "; ".join(f"{s['id']}: {s['reason']}" for s in index["skipped"][:3])
        warnings.warn(
            f"ALFWorld: skipped {len(index['skipped'])} of {len(files)} game(s) in {folder}: {examples}",
            stacklevel=3,
        )
    return index
