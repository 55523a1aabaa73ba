"""What a result was measured with: the software, the engine, the data and the model, recorded in every bench
summary (``summary["fingerprint"]``) so a figure can be traced and two runs compared.

    software   this package's version and git commit (None outside a checkout), Python, and the versions of
               the libraries that decide behaviour (torch, transformers, gymnasium, trl, peft)
    engine     the env's engine packages (alfworld and textworld; scienceworld and its jar's sha256; WebShop's
               and the probes' are this package's own code) and the data fingerprint the backend reports
    model      a local model's weights digest (sha256 of its weight files, 16 hex digits)
The panel (sequence ids and task ids) is each summary block's ``panel`` (`skillrise_gym.panels`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import platform
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LIBRARIES = ("torch", "transformers", "gymnasium", "trl", "peft", "numpy")
#: the engine packages of each benchmark (the rest are this package's own code)
ENGINES = {"alfworld": ("alfworld", "textworld"), "scienceworld": ("scienceworld",)}


def version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def software() -> dict[str, Any]:
    from skillrise_gym import __version__

    commit = dirty = None
    if (ROOT / ".git").exists():
        try:
            commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                    timeout=10).stdout.strip()[:12] or None
            dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "skillrise_gym", "skillrise_train"],
                                        cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    return {"skillrise_gym": __version__, "commit": commit, "dirty": dirty, "python": platform.python_version(),
            "libraries": {name: version(name) for name in LIBRARIES}}


@functools.lru_cache(maxsize=8)
def engine(benchmark: str) -> dict[str, Any]:
    found: dict[str, Any] = {name: version(name) for name in ENGINES.get(benchmark, ())}
    if benchmark == "scienceworld":
        try:
            import scienceworld

            jars = sorted(Path(scienceworld.__file__).parent.glob("*.jar"))
            found["jar"] = {jar.name: file_digest([jar]) for jar in jars}
        except ImportError:
            pass
    return found


def file_digest(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=16)
def weights_digest(folder: str) -> str | None:
    """sha256 of a model folder's weight files (*.safetensors, *.bin, by name), or None without any."""
    path = Path(folder)
    files = sorted(p for p in path.glob("*") if p.is_file() and p.suffix in (".safetensors", ".bin")) if path.is_dir() else []
    return file_digest(files) if files else None


def fingerprint(benchmark: str, data: dict[str, Any], agent: Any) -> dict[str, Any]:
    """A bench run's fingerprint (see the module docstring); `agent` may report its weights (`model_folders`)."""
    models = {}
    for role, folder in (getattr(agent, "model_folders", lambda: {})() or {}).items():
        models[role] = {"folder": folder, "weights": weights_digest(folder)}
    return {"software": software(), "engine": {**engine(benchmark), **({"data": data} if data else {})},
            **({"models": models} if models else {})}
