"""Where the project keeps its caches, and the file helpers every cache writer shares. Data folders are only
ever read, never written."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """`$SKILLRISE_CACHE` (default `~/.cache/skillrise`) joined with `parts`, created on demand."""
    root = Path(os.environ.get("SKILLRISE_CACHE") or Path.home() / ".cache" / "skillrise").expanduser()
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def atomic_write(path: str | os.PathLike, data: bytes | str, fsync: bool = False) -> None:
    """Write `data` to a temporary file beside `path`, then rename it into place: readers in other processes
    see the old file or the whole new one, never a partial write. `fsync` also survives a power cut."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sha256_file(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
